"""Subcommands of the ``litehit`` console script, one module each.

Every module exposes ``register(subparsers) -> None`` which adds its parser and sets
``func`` (``Callable[[argparse.Namespace], int]``) as a default. A command is thin: it
parses, calls one function and prints; it returns 0 (or 1 for a negative answer such as
"not SERVING") and *raises* on failure. The exit code of a failure is decided in one place,
:func:`litehit_service.cli.exit_code`: 2 for bad input or usage, 1 for a runtime failure.
Heavy imports (grpc, matplotlib, numpy) happen inside ``func`` so ``litehit --help`` is fast.
"""

from __future__ import annotations

import argparse

from litehit_core import DEFAULT_MAX_LINE_BYTES

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
)


class UsageError(Exception):
    """The command line itself is wrong (contradicting options, a bad value): exit code 2."""


class CommandFailed(Exception):
    """The command ran but could not do its job (server unreachable, ...): exit code 1."""


def add_trace_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--trace-format NAME`` and ``--instance ID`` and ``--max-line-bytes`` to a
    command that replays an ``optimize`` configuration's trace."""
    parser.add_argument(
        "--trace-format",
        metavar="NAME",
        default=None,
        type=trace_format,
        help="the trace's format (standard, mooncake, lmcache; default: detected)",
    )
    parser.add_argument(
        "--instance",
        metavar="ID",
        default=None,
        help="send every record to this instance (for traces that name none, "
        "e.g. Mooncake, when the configuration has several)",
    )
    add_max_line_bytes(parser, "trace")


def trace_format(name: str) -> str:
    """An argparse type: a registered trace format (the readers load only when the option
    is given); a usage error naming the value and the known names otherwise."""
    from litehit_service.traces.readers.registry import get_reader

    try:
        get_reader(name)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return name


def config_path(args: argparse.Namespace) -> str:
    """The configuration named by the positional ``config`` or ``-c`` (``config_option``);
    UsageError when neither, or two different ones, are given."""
    given = [p for p in (args.config, args.config_option) if p is not None]
    if not given:
        raise UsageError("give the configuration: CONFIG.json (or -c CONFIG.json)")
    if len(set(given)) > 1:
        raise UsageError(f"two configurations given: {given[0]!r} and -c {given[1]!r}; give one")
    return given[0]


def add_max_line_bytes(parser: argparse.ArgumentParser, what: str) -> None:
    """Add ``--max-line-bytes N`` (``args.max_line_bytes``) to a command reading ``what``:
    the longest line accepted, in bytes; an integer > 0 or a usage error (exit code 2)."""
    parser.add_argument(
        "--max-line-bytes",
        type=_max_line_bytes,
        default=DEFAULT_MAX_LINE_BYTES,
        metavar="N",
        help=f"refuse a line of the {what} longer than N bytes, newline excluded, with "
        f"'path:line: line is longer than N bytes' (default {DEFAULT_MAX_LINE_BYTES} = 64 MiB)",
    )


def _max_line_bytes(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be an integer > 0, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1 (the message names the value otherwise)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


def add_touch_order(parser: argparse.ArgumentParser) -> None:
    """Add ``--touch-order {tail-first,head-first}`` (``args.touch_order``, None when not
    given): the order a request's blocks are touched after its read, overriding every
    group's ``touch_order`` for the run (head-first is LMCache's order)."""
    from litehit_core.model import TOUCH_ORDERS

    parser.add_argument(
        "--touch-order",
        choices=TOUCH_ORDERS,
        default=None,
        help="touch a request's blocks tail first (default; the head ends most recent, as "
        "vLLM and SGLang evict) or head first (as LMCache does), for every group of the run",
    )


def rpc_detail(exc: BaseException) -> str:
    """The status details of a ``grpc.RpcError`` (its text for anything else)."""
    details = getattr(exc, "details", None)
    return str(details()) if callable(details) else str(exc)
