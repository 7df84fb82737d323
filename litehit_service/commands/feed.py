"""``litehit feed``: stream a trace file's requests into a running server, as a gateway would.

``litehit feed --server HOST:PORT TRACE [--instance ID] [--register-from CONFIG]
[--rate Q/S]`` reads TRACE (standard, Mooncake or LMCache, detected from its first line
unless ``--trace-format`` says), registers the config's groups and instances
first with ``--register-from`` (a ``litehit replay`` config; only ``--instance`` when
given), and sends every request over one packed stream in batches per instance
(:mod:`litehit_service.litehit.feed`). Routing is the replay's: ``--instance`` (or the
config's ``override_instance_id``) takes every request, the config's
``fanout_all_instances`` sends each to all its instances, else each goes to its own
``instance_id``. Keys are coarsened from the trace's block size (``--block-size``, else
the config's, else the format's: Mooncake 512, LMCache its ``chunk_size``) to each
instance's. There is no ``--tokens``: every reader gives each request's prompt length.

A progress bar of queries answered is shown on stderr when it is a terminal; at the end,
one line per fed instance with the hit rates the server reports per capacity slot
(ListInstances) on stdout and ``feed: N queries, ..., Q queries/s -> SERVER`` on stderr.
Tokens: ``--admin-token`` (registration; also accepted for queries) and ``--query-token``
(the stream), or their ``-file`` forms, or ``LITEHIT_ADMIN_TOKEN`` / ``LITEHIT_QUERY_TOKEN``.
Exit codes: 2 for bad input (a bad value, a bad trace line ``path:line: reason``, an
instance that is not registered without ``--register-from``), 1 for a server that cannot
be reached.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Any

from litehit_service.commands import CommandFailed, UsageError, rpc_detail
from litehit_service.commands.options import (
    add_instance,
    add_max_line_bytes,
    add_server_options,
    add_trace_format,
    positive_int,
)


def register(subparsers: Any) -> None:
    """Add the ``feed`` subcommand to ``subparsers``."""
    p = subparsers.add_parser(
        "feed",
        help="stream a trace's requests into a running server (packed stream, as a gateway)",
        description="Read TRACE (standard, Mooncake or LMCache; detected from its first line "
        "unless --trace-format says) and send every request to a running server over one packed "
        "stream, in batches per instance, as a gateway would. --register-from CONFIG.json "
        "registers a litehit replay configuration's groups and instances first (only "
        "--instance's when given). Routing is the replay's: --instance (or the configuration's "
        "override_instance_id) takes every request, its fanout_all_instances sends each to all "
        "its instances, else each goes to its own instance_id. Keys are coarsened from the "
        "trace's block size (--block-size, else the configuration's, else the format's: "
        "Mooncake 512, LMCache its chunk_size) to each instance's.",
    )
    p.add_argument("trace", metavar="TRACE", help="trace file (standard, Mooncake or LMCache)")
    add_server_options(p, 30.0, "seconds per unary call")
    add_instance(p, "send every request to this instance (default: routed as the replay routes)")
    p.add_argument(
        "--register-from",
        metavar="CONFIG.json",
        help="register the groups and instances of this replay configuration first (only "
        "--instance when given); it also gives the trace block size and the routing (default: "
        "register nothing)",
    )
    p.add_argument(
        "--rate",
        type=_rate,
        metavar="Q/S",
        help="at most this many queries per second (default: as fast as the server answers)",
    )
    add_trace_format(p, aliases=("--format",))
    p.add_argument(
        "--block-size",
        type=positive_int,
        metavar="TOKENS",
        help="tokens per trace key (default: the config's block_size, else the format's)",
    )
    p.add_argument(
        "--batch",
        type=positive_int,
        default=1024,
        metavar="N",
        help="queries per batch (default 1024)",
    )
    for kind in ("admin", "query"):
        env = f"LITEHIT_{kind.upper()}_TOKEN"
        p.add_argument(f"--{kind}-token", default=None, metavar="TOKEN",
                       help=f"{kind} token (default ${env})")  # fmt: skip
        p.add_argument(f"--{kind}-token-file", default=None, metavar="FILE",
                       help=f"read the {kind} token from this file's first line "
                       "(default: none)")  # fmt: skip
    p.add_argument("--quiet", action="store_true", help="no progress bar, no per-instance lines")
    add_max_line_bytes(p, "trace")
    p.set_defaults(func=run)


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a number of queries/s > 0, got {text!r}")
    return value


def _tokens(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """(admin token, query token) from the flags, else the environment."""
    from litehit_service.access import read_token

    found = []
    for kind in ("admin", "query"):
        value = getattr(args, f"{kind}_token")
        file = getattr(args, f"{kind}_token_file")
        if not value and not file:
            value = os.environ.get(f"LITEHIT_{kind.upper()}_TOKEN") or None
        try:
            found.append(read_token(value, file, f"--{kind}-token"))
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    return found[0], found[1]


def _trace_block_size(args: argparse.Namespace, config: Any, reader: Any) -> int:
    """Tokens per trace key: the flag, the config's, the format's default, or the one
    chunk size an LMCache trace states."""
    if args.block_size is not None:
        return int(args.block_size)
    if config is not None and not reader.sizes_in_trace:
        return int(config.block_size)
    if reader.default_block_size is not None:
        return int(reader.default_block_size)
    _, models = reader.read_sized(args.trace, max_line_bytes=args.max_line_bytes)
    sizes = sorted({info[0] for info in models.values()})
    if len(sizes) != 1:
        raise UsageError(f"the trace's models have chunk sizes {sizes}: pass --block-size N")
    return sizes[0]


def _route(args: argparse.Namespace, config: Any, reader: Any) -> Any:
    from litehit_service.litehit.feed import FeedRoute

    ids: tuple[str, ...] = ()
    if args.instance:
        ids = (args.instance,)
    elif config is not None and config.override_instance_id:
        ids = (config.override_instance_id,)
    elif config is not None and config.fanout_all_instances:
        ids = tuple(r.instance_id for r in config.instances)
    elif not reader.names_instances:
        if config is None:
            raise UsageError(f"a {reader.name} trace names no instance: pass --instance ID")
        ids = (config.instances[0].instance_id,)  # the config's one instance (checked)
    return FeedRoute(ids, ids[0] if ids else "")


def run(args: argparse.Namespace) -> int:
    """Register (with ``--register-from``), feed, print the summary (errors raise)."""
    import grpc

    from litehit_service.client import OptimizerClient
    from litehit_service.litehit.config import load_config
    from litehit_service.litehit.feed import register_from_config, run_feed
    from litehit_service.traces.readers import detect_format, get_reader

    if args.instance is not None and not args.instance:
        raise UsageError("--instance must not be empty")
    if not args.timeout > 0:
        raise UsageError(f"--timeout must be > 0, got {args.timeout}")
    admin_token, query_token = _tokens(args)
    config = load_config(args.register_from) if args.register_from else None
    if args.trace_format is not None:
        reader = get_reader(args.trace_format)
    else:  # TRACE need not be the config's trace file: its own first line decides
        reader = detect_format(args.trace, max_line_bytes=args.max_line_bytes)
    block_size = _trace_block_size(args, config, reader)
    route = _route(args, config, reader)
    hint = "" if config is not None else " (pass --register-from CONFIG to register it)"
    connect = {"timeout": args.timeout, "tls_ca": args.tls_ca}
    try:
        if config is not None:
            with OptimizerClient(args.server, admin_token=admin_token, **connect) as admin:
                register_from_config(admin, config, args.instance or "")
        with OptimizerClient(
            args.server, admin_token=query_token or admin_token, **connect
        ) as client:
            summary = run_feed(
                client,
                args.trace,
                reader.name,
                block_size,
                route,
                rate=args.rate,
                batch_queries=args.batch,
                progress=not args.quiet and sys.stderr.isatty(),
                max_line_bytes=args.max_line_bytes,
                hint=hint,
            )
    except grpc.RpcError as exc:
        code = exc.code() if isinstance(exc, grpc.Call) else None
        down = code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
        what = "unreachable: " if down else ""
        raise CommandFailed(f"{args.server} {what}{rpc_detail(exc)}") from None
    if not args.quiet:
        for line in summary.instance_lines():
            print(line)
    print(summary.summary_line(), file=sys.stderr)
    return 0
