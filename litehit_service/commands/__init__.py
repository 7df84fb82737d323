"""Subcommands of the ``litehit`` console script, one module each.

Every module exposes ``register(subparsers) -> None`` which adds its parser and sets
``func`` (``Callable[[argparse.Namespace], int]``) as a default. A command is thin: it
parses, calls one function and prints; it returns 0 (or 1 for a negative answer such as
"not SERVING") and *raises* on failure. The exit code of a failure is decided in one place,
:func:`litehit_service.cli.exit_code`: 2 for bad input or usage, 1 for a runtime failure.
Heavy imports (grpc, matplotlib, numpy) happen inside ``func`` so ``litehit --help`` is fast.
The options every command shares, and the one vocabulary they are spelled in, are
:mod:`.options`'s.
"""

from __future__ import annotations

COMMAND_MODULES = (
    "serve",
    "instances",
    "health",
    "replay",
    "query",
    "curve",
    "feed",
    "convert",
    "simulate",
    "sweep",
    "gen_dataset",
    "optimize",
    "tradeoff",
    "export_tree",
    "lifecycle",
    "warm_up",
)


class UsageError(Exception):
    """The command line itself is wrong (contradicting options, a bad value): exit code 2."""


class CommandFailed(Exception):
    """The command ran but could not do its job (server unreachable, ...): exit code 1."""


def rpc_detail(exc: BaseException) -> str:
    """The status details of a ``grpc.RpcError`` (its text for anything else)."""
    details = getattr(exc, "details", None)
    return str(details()) if callable(details) else str(exc)


def say_plan(command: str, path: str, mb_per_s: float, destination: str) -> None:
    """Print a long run's plan on stderr before it starts (the trace's size, the time
    expected at ``mb_per_s`` MB/s of JSONL, where the output goes:
    :func:`~litehit_service.offline.outputs.plan_line`); nothing for a small trace."""
    import sys

    from litehit_service.offline.outputs import plan_line
    from litehit_service.traces.readers.compressed import trace_sizes

    line = plan_line(command, path, *trace_sizes(path), mb_per_s, destination)
    if line is not None:
        print(line, file=sys.stderr, flush=True)


def say_warnings(lines: list[str]) -> None:
    """Print a configuration's warnings on stderr, one line each, before a run."""
    import sys

    for line in lines:
        print(line, file=sys.stderr, flush=True)
