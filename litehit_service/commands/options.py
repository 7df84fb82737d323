"""The one vocabulary of the ``litehit`` command line, and the options every command shares.

One concept, one option name, one metavar, in every subcommand (:data:`CONCEPTS`): the
trace format is ``--trace-format NAME`` (detected when not given), a capacity is in GiB
(``--capacity-gib GiB``), parallelism is ``--max-workers N``, the instance is
``--instance ID``, one output file is ``-o FILE, --output FILE`` and an output folder
``-o DIR, --output-dir DIR``, a configuration is positional or ``-c CONFIG.json``, a server
is ``--server HOST:PORT`` with ``--timeout SECONDS`` and ``--tls-ca FILE``. Older spellings
stay accepted as hidden aliases (:func:`add_option` ``aliases``: parsed, never shown in
help), so scripts keep working; the README's "Renamed options" note lists them.

``tests/test_cli_vocabulary.py`` walks the real parsers: an option string that spells a
concept of :data:`CONCEPTS` another way (and is not one of its hidden aliases), help text
with reST markup or ``%%``, an option without its own metavar or whose default goes
unsaid, a required option outside the "required options" group fails it.

Everything here is cheap to import (argparse only): building a parser imports no command's
work.
"""

from __future__ import annotations

import argparse
import copy
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from litehit_core import DEFAULT_MAX_LINE_BYTES
from litehit_service.commands import UsageError

__all__ = [
    "CONCEPTS",
    "CommandParser",
    "Concept",
    "HelpFormatter",
    "REQUIRED_TITLE",
    "add_capacity_gib",
    "add_config",
    "add_instance",
    "add_max_line_bytes",
    "add_max_workers",
    "add_option",
    "add_output_dir",
    "add_sample_options",
    "add_output_file",
    "add_server_options",
    "add_touch_order",
    "add_trace_format",
    "add_trace_options",
    "reorder_window_ns",
    "config_path",
    "hidden_aliases",
    "non_negative_int",
    "positive_int",
    "required_options",
    "sample_rate",
    "sample_seeds",
    "trace_format",
]

REQUIRED_TITLE = "required options"
"""The help section of every required option (argparse lists them among the optional ones
otherwise)."""


@dataclass(frozen=True)
class Concept:
    """One concept of the command line: ``spelled`` matches every option string that names
    it (the right spelling or another), ``options`` maps each right spelling to its metavar
    (None for a flag or a choice list), ``aliases`` are the older spellings still accepted
    (hidden)."""

    name: str
    spelled: re.Pattern[str]
    options: dict[str, str | None]
    aliases: tuple[str, ...] = ()


CONCEPTS: tuple[Concept, ...] = (
    Concept(
        "trace format",
        re.compile(r"^--((trace|input|in)-)?(format|from|fmt)$"),
        {"--trace-format": "NAME"},
        ("--format", "--from"),
    ),
    Concept(
        "capacity",
        re.compile(r"^--(.+-)?capacity(-.+)?$"),
        {
            "--capacity-gib": "GiB",
            "--min-capacity-gib": "GiB",
            "--max-capacity-gib": "GiB",
            "--min-capacity-ratio": "R",
        },
        ("--capacity-gb", "--cache-capacity-gib"),
    ),
    Concept(
        "parallelism",
        re.compile(r"^--(max-)?(workers|jobs|procs|processes|threads|parallelism|cores)$"),
        {"--max-workers": "N"},
        ("--workers",),
    ),
    Concept(
        "instance",
        re.compile(r"^--(instance|instance-id|instance-name|model|model-name)$"),
        {"--instance": "ID"},
        ("--instance-id", "--model"),
    ),
    Concept(
        "output",
        re.compile(r"^(-o|--(out|output|outdir|out-dir|output-dir|output-file|output-path))$"),
        {"-o": None, "--output": "FILE", "--output-dir": "DIR"},
    ),
    Concept(
        "configuration",
        re.compile(r"^(-c|--(config|config-file|configuration|cfg))$"),
        {"-c": None, "--config": "CONFIG.json"},
    ),
    Concept(
        "server",
        re.compile(r"^--(server|address|addr|target|endpoint|host)$"),
        {"--server": "HOST:PORT"},
    ),
    Concept(
        "timeout",
        re.compile(r"^--(timeout|deadline)(-s|-secs|-seconds)?$"),
        {"--timeout": "SECONDS"},
    ),
    Concept(
        "TLS CA",
        re.compile(r"^--(tls-)?(ca|ca-cert|cacert|ca-file|root-cert)$"),
        {"--tls-ca": "FILE"},
    ),
    Concept(
        "block size",
        re.compile(r"^--(block|chunk)-?size(-tokens)?$"),
        {"--block-size": "TOKENS"},
    ),
    Concept(
        "KV bytes per block",
        re.compile(r"^--kv-bytes(-per-(chunk|block))?$"),
        {"--kv-bytes-per-chunk": "BYTES"},
    ),
    Concept(
        "sample limit",
        re.compile(r"^(-n|--(max-)?(samples|requests|records))$"),
        {"-n": None, "--max-samples": "N"},
    ),
)
"""Every concept the command line names, with its one spelling (the walk's table)."""


class CommandParser(argparse.ArgumentParser):
    """``litehit``'s parsers: argparse's, with :class:`HelpFormatter` (subparsers are made
    of the same class)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> Any:
        """argparse's usage error (exit 2), naming an option by its shown spellings only
        (argparse joins every option string: ``--capacity-gib/--capacity-gb``)."""
        for action in self._actions:
            hidden = hidden_aliases(action)
            if hidden:
                shown = [s for s in action.option_strings if s not in hidden]
                message = message.replace("/".join(action.option_strings), "/".join(shown))
        return super().error(message)


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, leaving each option's hidden aliases (:func:`add_option`) out
    of the help; the usage line names an option by its first (right) spelling already."""

    def _format_action_invocation(self, action: argparse.Action) -> str:
        hidden = hidden_aliases(action)
        if hidden:
            action = copy.copy(action)
            action.option_strings = [s for s in action.option_strings if s not in hidden]
        return super()._format_action_invocation(action)


def hidden_aliases(action: argparse.Action) -> frozenset[str]:
    """The option strings of ``action`` accepted but not shown (older spellings)."""
    return getattr(action, "litehit_hidden_aliases", frozenset())


def add_option(
    parser: Any, *names: str, aliases: Sequence[str] = (), **kwargs: Any
) -> argparse.Action:
    """``parser.add_argument(*names, **kwargs)`` that also accepts ``aliases`` (older
    spellings: parsed as the same option, left out of the help by :class:`HelpFormatter`).
    ``parser`` may be an argument group."""
    action = parser.add_argument(*names, *aliases, **kwargs)
    action.litehit_hidden_aliases = frozenset(aliases)  # type: ignore[attr-defined]
    return action


def required_options(parser: argparse.ArgumentParser) -> Any:
    """The parser's "required options" group (made on first use), where every required
    option is listed so the help does not show it among the optional ones."""
    group = getattr(parser, "litehit_required_options", None)
    if group is None:
        group = parser.add_argument_group(REQUIRED_TITLE)
        parser.litehit_required_options = group  # type: ignore[attr-defined]
    return group


def trace_format(name: str) -> str:
    """An argparse type: a registered trace format (the readers load only when the option
    is given); a usage error naming the value and the known names otherwise."""
    from litehit_service.traces.readers.registry import get_reader

    try:
        get_reader(name)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return name


def add_trace_format(parser: Any, what: str = "trace", aliases: Sequence[str] = ()) -> None:
    """``--trace-format NAME`` (``args.trace_format``; None: detected from the input's first
    line), with ``aliases`` (older spellings) accepted."""
    add_option(
        parser,
        "--trace-format",
        aliases=aliases,
        metavar="NAME",
        default=None,
        type=trace_format,
        help=f"the {what}'s format: standard, mooncake or lmcache (default: detected from "
        "its first line)",
    )


DEFAULT_REORDER_WINDOW_MS = 1000
"""How far out of time order a streamed trace's records may be by default (ms), as the
log converters'."""


def add_trace_options(parser: argparse.ArgumentParser, *, streamed: bool = True) -> None:
    """``--trace-format``, ``--instance``, ``--max-line-bytes`` and (``streamed``: the
    trace is read as a stream, :func:`reorder_window_ns`) ``--reorder-window-ms`` of a
    command that replays an optimizer configuration's trace."""
    add_trace_format(parser)
    add_instance(
        parser,
        "send every record to this instance (for traces that name none, e.g. Mooncake, when "
        "the configuration has several; default: each record's own)",
    )
    add_max_line_bytes(parser, "trace")
    if not streamed:
        return
    parser.add_argument(
        "--reorder-window-ms",
        type=non_negative_int,
        default=DEFAULT_REORDER_WINDOW_MS,
        metavar="MS",
        help="how far out of time order the trace's records may be: they are replayed in "
        f"time order (ties in file order) while held that long (default "
        f"{DEFAULT_REORDER_WINDOW_MS} ms; 0: sorted); a record later than that is an error "
        "naming it",
    )


def reorder_window_ns(args: argparse.Namespace) -> int:
    """``--reorder-window-ms`` in ns."""
    return int(args.reorder_window_ms) * 1_000_000


def add_capacity_gib(parser: Any, help: str, aliases: Sequence[str] = (), **kwargs: Any) -> None:
    """``--capacity-gib GiB`` (``args.capacity_gib``): capacity in GiB (1024^3 bytes)."""
    add_option(parser, "--capacity-gib", aliases=aliases, metavar="GiB", help=help, **kwargs)


def add_max_workers(parser: Any, help: str, aliases: Sequence[str] = (), **kwargs: Any) -> None:
    """``--max-workers N`` (``args.max_workers``): how many processes or tasks at once."""
    add_option(parser, "--max-workers", aliases=aliases, metavar="N", help=help, **kwargs)


def add_instance(parser: Any, help: str, aliases: Sequence[str] = ()) -> None:
    """``--instance ID`` (``args.instance``, None when not given)."""
    add_option(parser, "--instance", aliases=aliases, metavar="ID", default=None, help=help)


def add_output_file(parser: Any, help: str, **kwargs: Any) -> None:
    """``-o FILE, --output FILE`` (``args.output``): the one file a command writes."""
    parser.add_argument("-o", "--output", metavar="FILE", help=help, **kwargs)


def add_output_dir(parser: Any) -> None:
    """``-o DIR, --output-dir DIR`` (``args.output_dir``, None: the configuration's
    ``output_result_path``): the folder a configuration's command writes into."""
    parser.add_argument(
        "-o",
        "--output-dir",
        metavar="DIR",
        default=None,
        help="write the outputs into DIR instead of the configuration's output_result_path",
    )


def add_config(parser: argparse.ArgumentParser, kind: str) -> None:
    """The configuration of a command, positional or ``-c CONFIG.json`` (read with
    :func:`config_path`); ``kind`` is a key of
    :data:`~litehit_service.config_kinds.KINDS`."""
    from litehit_service.config_kinds import KINDS

    parser.add_argument(
        "config", metavar="CONFIG.json", nargs="?", help=f"{KINDS[kind].label} (JSON)"
    )
    parser.add_argument(
        "-c",
        "--config",
        dest="config_option",
        metavar="CONFIG.json",
        default=None,
        help="the configuration (instead of the positional one)",
    )


def config_path(args: argparse.Namespace) -> str:
    """The configuration named by the positional ``config`` or ``-c`` (:func:`add_config`);
    UsageError when neither, or two different ones, are given."""
    given = [p for p in (args.config, args.config_option) if p is not None]
    if not given:
        raise UsageError("give the configuration: CONFIG.json (or -c CONFIG.json)")
    if len(set(given)) > 1:
        raise UsageError(f"two configurations given: {given[0]!r} and -c {given[1]!r}; give one")
    return given[0]


def add_server_options(parser: Any, timeout: float, timeout_help: str, what: str = "") -> None:
    """``--server HOST:PORT``, ``--timeout SECONDS`` and ``--tls-ca FILE`` of a command that
    calls a server (``what``: a prefix for their help, e.g. ``"--server: "``)."""
    parser.add_argument(
        "--server",
        metavar="HOST:PORT",
        default="127.0.0.1:50051",
        help=f"{what}the server's gRPC address (default 127.0.0.1:50051)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        default=timeout,
        help=f"{what}{timeout_help} (default {timeout:g})",
    )
    parser.add_argument(
        "--tls-ca",
        metavar="FILE",
        default=None,
        help=f"{what}PEM CA certificate; enables TLS (default: plaintext)",
    )


def add_max_line_bytes(parser: Any, what: str) -> None:
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


def add_sample_options(parser: Any) -> None:
    """``--sample-rate R`` (``args.sample_rate``, None: the exact replay) and
    ``--sample-seeds K`` (``args.sample_seeds``, default 1) of a command whose replays
    can run on a spatial sample of the trace (issue 37)."""
    parser.add_argument(
        "--sample-rate",
        type=sample_rate,
        default=None,
        metavar="R",
        help="replay a sample of the trace instead of all of it: the requests below the "
        "shared trunk kept by a hash of their first non-trunk block at rate R (0 < R <= 1), "
        "capacities scaled to match; the hit rates are estimates, marked as such (default: "
        "none, the exact replay; 1: every record, the exact numbers through the sampled path)",
    )
    parser.add_argument(
        "--sample-seeds",
        type=sample_seeds,
        default=1,
        metavar="K",
        help="with --sample-rate, replay K independent samples (hash salts 0..K-1) in "
        "parallel processes; the estimate combines them and its band is a 90%% interval "
        "(1 to 64; default 1)",
    )


def sample_rate(text: str) -> float:
    """An argparse type: a number in (0, 1] (the message names the value otherwise)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= 1:  # False for NaN
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1], got {text!r}")
    return value


def sample_seeds(text: str) -> int:
    """An argparse type: an integer in [1, 64] (the message names the value otherwise)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 64:
        raise argparse.ArgumentTypeError(f"must be an integer from 1 to 64, got {text!r}")
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


def non_negative_int(text: str) -> int:
    """An argparse type: an integer >= 0 (the message names the value otherwise)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}")
    return value


def add_touch_order(parser: Any) -> None:
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
