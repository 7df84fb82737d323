"""The ``litehit`` console script: dispatches to :mod:`litehit_service.commands`.

Exit codes are decided here and only here (:func:`exit_code`), the same for every command:
0 success; 2 bad input or usage (argparse errors, :class:`~litehit_service.commands.UsageError`,
:class:`~litehit_core.LocatedError` and every other input error); 1 a runtime failure (a
server that cannot be reached, a file that cannot be written, a bug: the latter with its
traceback); 130 interrupted (SIGINT); 143 terminated (SIGTERM).

Signals: SIGINT raises ``KeyboardInterrupt`` (Python's default) and, while a command runs,
SIGTERM raises :class:`Terminated` (both ``BaseException``), so the cleanup of every writer
(``finally`` / ``except BaseException``: the facts ledger's and ``atomic_outputs``'
temporaries) runs before the process exits. ``litehit serve`` installs its own handlers
(graceful drain) while it serves.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from litehit_core import InvalidRequestError, LocatedError
from litehit_service.commands import COMMAND_MODULES, CommandFailed, UsageError, rpc_detail
from litehit_service.commands.options import CommandParser
from litehit_service.offline.kernels import single_threaded_refcounts, watch_compiles

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 128 + signal.SIGTERM  # 143


class Terminated(BaseException):
    """SIGTERM arrived while a command ran (a ``BaseException``, like KeyboardInterrupt, so
    no ``except Exception`` swallows it and every cleanup on the way out runs)."""


QUIET_COMPILES = frozenset({"serve"})
"""Commands that report their own kernel loading (``serve`` logs it, in its log format)
instead of the compile notices of :func:`~litehit_service.offline.kernels.watch_compiles`."""
SINGLE_THREADED_KERNELS = frozenset(
    {"convert", "curve", "export-tree", "gen-dataset", "lifecycle", "optimize", "query",
     "replay", "simulate", "sweep", "tradeoff", "warm-up"}
)  # fmt: skip
"""Commands whose compiled kernels all run on one thread of their process (parallel work
goes to processes): run as a process's own command line, their numba reference counts are
plain increments (:func:`~litehit_service.offline.kernels.single_threaded_refcounts`).
Deny by default: ``serve`` (its kernels run on several threads at once) and every command
not named here keep atomic counts."""

_BAD_INPUT_KINDS = frozenset({"INVALID_ARGUMENT", "UNSUPPORTED", "INSTANCE_NOT_EXIST"})
"""Service error kinds that mean the caller's input was wrong (see litehit_service.errors)."""


def version_text(distribution: str = "litehit") -> str:
    """``litehit <version>``: the installed distribution's version from its metadata, or
    ``litehit unknown (not installed)`` when it is not installed (a bare source checkout)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"litehit {version(distribution)}"
    except PackageNotFoundError:
        return "litehit unknown (not installed)"


class _VersionAction(argparse.Action):
    """``--version``: prints :func:`version_text` (read from the metadata only when asked)
    on stdout and exits 0."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="show the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        print(version_text())
        parser.exit()


def command_module(name: str) -> str | None:
    """The module of :data:`COMMAND_MODULES` that registers the subcommand ``name``
    (``gen-dataset`` -> ``gen_dataset``), or None for no subcommand."""
    module = name.replace("-", "_")
    return module if module in COMMAND_MODULES and "_" not in name else None


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The top-level parser with every subcommand of :data:`COMMAND_MODULES` registered,
    or only the one of module ``only`` (what :func:`main` builds for a command line that
    names its subcommand first: a command imports nothing of the others). ``--version``
    prints :func:`version_text` on stdout and exits 0. Every parser is a
    :class:`~litehit_service.commands.options.CommandParser` (the one vocabulary's help)."""
    parser = CommandParser(
        prog="litehit",
        description="Exact prefix KV-cache hit rates for an LRU of every capacity.",
    )
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES if only is None else (only,):
        importlib.import_module(f"litehit_service.commands.{name}").register(sub)
    return parser


def exit_code(exc: BaseException) -> int:
    """The exit code of a command that raised ``exc`` (the one table of exit codes)."""
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    if isinstance(exc, Terminated):
        return EXIT_TERMINATED
    if isinstance(exc, (UsageError, InvalidRequestError)):
        return EXIT_BAD_INPUT
    if isinstance(exc, (NotADirectoryError, IsADirectoryError)):  # a path of the wrong kind
        return EXIT_BAD_INPUT
    if getattr(exc, "kind", None) in _BAD_INPUT_KINDS:  # an OptimizerError of bad input
        return EXIT_BAD_INPUT
    return EXIT_FAILURE


def error_text(command: str, exc: BaseException) -> str:
    """The one stderr line for ``exc``: a located error as ``path:line: reason``, anything
    else as ``litehit COMMAND: error: ...`` (``internal error`` with its type for a bug)."""
    if isinstance(exc, LocatedError) and exc.path:
        return str(exc)
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    if isinstance(exc, Terminated):
        return "terminated"
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"litehit {command}: error: {exc.filename}: {exc.strerror or exc}"
    if _expected(exc):
        return f"litehit {command}: error: {rpc_detail(exc)}"
    return f"litehit {command}: internal error: {type(exc).__name__}: {exc}"


def _expected(exc: BaseException) -> bool:
    """Errors with a message meant for the user (no traceback)."""
    if isinstance(exc, (UsageError, CommandFailed, InvalidRequestError, OSError)):
        return True
    if getattr(exc, "kind", None) is not None:  # litehit_service.errors.OptimizerError
        return True
    grpc = sys.modules.get("grpc")  # only a command that imported grpc can see its errors
    return grpc is not None and isinstance(exc, grpc.RpcError)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (the process's command line when None: the console script and
    ``python -m litehit_service``) and run the chosen subcommand; returns the process
    exit code."""
    own_process = argv is None
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(command_module(argv[0]) if argv else None).parse_args(argv)
    if args.command not in QUIET_COMPILES:
        watch_compiles()  # a compile after an install is said on stderr as it starts
    if own_process and args.command in SINGLE_THREADED_KERNELS:
        single_threaded_refcounts()  # not when called in a process that may run threads
    try:
        with _sigterm_raises():
            return int(args.func(args) or EXIT_OK)
    except (Exception, KeyboardInterrupt, Terminated) as exc:
        if isinstance(exc, BrokenPipeError):
            _silence_stdout()
            return EXIT_FAILURE
        if not _expected(exc) and not isinstance(exc, (KeyboardInterrupt, Terminated)):
            traceback.print_exc(file=sys.stderr)
        print(error_text(args.command, exc), file=sys.stderr)
        return exit_code(exc)


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated(f"signal {signum}")


@contextmanager
def _sigterm_raises() -> Iterator[None]:
    """While the block runs, SIGTERM raises :class:`Terminated` in the main thread (the
    previous handler comes back afterwards). Left alone off the main thread (signals go to
    it only) and when SIGTERM is not at its default (ignored, or someone else's handler)."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _silence_stdout() -> None:
    """After a closed pipe, point stdout at devnull so the interpreter's flush is quiet."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
