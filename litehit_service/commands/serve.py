"""``litehit serve``: run the gRPC online optimizer with metrics and a persistent registry.

Every flag has a ``LITEHIT_*`` environment variable; a flag given on the command line wins
over the variable, which wins over the default.

Admin RPCs are protected by default: listening on anything but loopback without
``--admin-token``/``--admin-token-file``, the server uses (and on its first start creates)
the token in ``DATA_DIR/admin-token``; ``--open-admin`` leaves them open instead (a WARNING at
every start) and together with an admin token is a usage error.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from litehit_core.engine import LRU_ENGINES
from litehit_service.access import read_token
from litehit_service.addresses import parse_address
from litehit_service.commands import UsageError


@dataclass(frozen=True)
class _Option:
    flag: str
    env: str
    default: Any
    parse: Callable[[str], Any]
    help: str
    metavar: str
    switch: bool = False
    """A flag without a value (``--open-admin``); its variable takes true/false."""


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise ValueError("must be > 0")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise ValueError("must be > 0")
    return value


def _log_format(text: str) -> str:
    if text not in ("text", "json"):
        raise ValueError("must be text or json")
    return text


def _engine(text: str) -> str:
    if text not in LRU_ENGINES:
        raise ValueError(f"must be one of {', '.join(LRU_ENGINES)}")
    return text


def _boolean(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError("must be true or false")


def _address(text: str) -> str:
    parse_address(text)  # ValueError names the problem
    return text


def _grid_points(text: str) -> int:
    from litehit_service.metrics import MAX_CURVE_GRID_POINTS

    value = int(text)
    if not 0 <= value <= MAX_CURVE_GRID_POINTS:
        raise ValueError(f"must be in 0..{MAX_CURVE_GRID_POINTS}")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise ValueError("must be >= 0")
    return value


_OPTIONS = (
    _Option("--listen", "LITEHIT_LISTEN", "127.0.0.1:50051", _address,
            "gRPC HOST:PORT (port 0 = any)", "ADDR"),
    _Option("--metrics-listen", "LITEHIT_METRICS_LISTEN", "127.0.0.1:9464", _address,
            "Prometheus /metrics HOST:PORT (port 0 = any)", "ADDR"),
    _Option("--data-dir", "LITEHIT_DATA_DIR", "./litehit-data", str,
            "directory of the SQLite registry and of state/ snapshots; created if missing "
            "(and removed again, with the files this start made, if the start fails)",
            "DIR"),
    _Option("--groups", "LITEHIT_GROUPS", None, str,
            'JSON/YAML file {"instance_groups": [...], "instances": [...]} (proto field names) '
            "ensured at start, idempotently", "FILE"),
    _Option("--tls-cert", "LITEHIT_TLS_CERT", None, str, "PEM certificate chain (enables TLS)",
            "FILE"),
    _Option("--tls-key", "LITEHIT_TLS_KEY", None, str, "PEM private key (with --tls-cert)",
            "FILE"),
    _Option("--admin-token", "LITEHIT_ADMIN_TOKEN", None, str,
            "require 'authorization: Bearer TOKEN' on every RPC that is neither a read nor a "
            "query (prefer --admin-token-file: a command line is visible to other users)",
            "TOKEN"),
    _Option("--admin-token-file", "LITEHIT_ADMIN_TOKEN_FILE", None, str,
            "read the admin token from this file's first line (without an admin token, a "
            "server listening beyond loopback uses DATA_DIR/admin-token, made at its first "
            "start, mode 0600)", "FILE"),
    _Option("--open-admin", "LITEHIT_OPEN_ADMIN", False, _boolean,
            "leave admin RPCs open without a token even when listening beyond loopback "
            "(logged at WARNING at every start; a usage error with an admin token)", "",
            switch=True),
    _Option("--query-token", "LITEHIT_QUERY_TOKEN", None, str,
            "require 'authorization: Bearer TOKEN' on TraceQuery, TraceQueryStream and "
            "TraceQueryPackedStream (the admin token is accepted too)", "TOKEN"),
    _Option("--query-token-file", "LITEHIT_QUERY_TOKEN_FILE", None, str,
            "read the query token from this file's first line", "FILE"),
    _Option("--max-message-bytes", "LITEHIT_MAX_MESSAGE_BYTES", 64 * 1024 * 1024, _positive_int,
            "largest gRPC message accepted or sent, bytes", "BYTES"),
    _Option("--max-block-keys", "LITEHIT_MAX_BLOCK_KEYS", 1_000_000, _positive_int,
            "most block_keys one TraceQuery may carry", "N"),
    _Option("--max-streams", "LITEHIT_MAX_STREAMS", 1024, _positive_int,
            "most concurrent stream calls, TraceQueryStream and TraceQueryPackedStream together "
            "(one more: RESOURCE_EXHAUSTED)", "N"),
    _Option("--stream-idle-seconds", "LITEHIT_STREAM_IDLE_SECONDS", 600.0, _positive_float,
            "end a stream that sends nothing for this long", "SECONDS"),
    _Option("--max-instances", "LITEHIT_MAX_INSTANCES", 1024, _positive_int,
            "most registered instances (one more: REACH_MAX_ENTITY_CAPACITY)", "N"),
    _Option("--max-tracked-blocks", "LITEHIT_MAX_TRACKED_BLOCKS", 8_388_608, _positive_int,
            "most blocks one instance tracks; past it the least recent are dropped (slots "
            "stay exact, the theoretical maximum becomes an LRU of this size)", "N"),
    _Option("--max-clock-skew-seconds", "LITEHIT_MAX_CLOCK_SKEW_SECONDS", 300.0,
            _non_negative_float,
            "refuse a timestamp_ns further ahead of the server's clock (INVALID_ARGUMENT)",
            "SECONDS"),
    _Option("--snapshot-interval-seconds", "LITEHIT_SNAPSHOT_INTERVAL_SECONDS", 60.0,
            _non_negative_float,
            "write every instance's state to DATA_DIR/state this often (0 = only at stop)",
            "SECONDS"),
    _Option("--curve-grid-points", "LITEHIT_CURVE_GRID_POINTS", 16, _grid_points,
            "capacities per instance of litehit_curve_hit_tokens_total, log-spaced from one "
            "block to --max-tracked-blocks (0 = no such series)", "N"),
    _Option("--grace-seconds", "LITEHIT_GRACE_SECONDS", 10.0, _non_negative_float,
            "on SIGTERM/SIGINT, time streams and calls get to finish; the process exits "
            "within this + 5 s", "SECONDS"),
    _Option("--engine", "LITEHIT_ENGINE", "compact", _engine,
            "full-attention engine: compact (compiled arrays, ~25 bytes per tracked block, "
            "batches of TraceQueryPackedStream in one call) or python (the interpreter "
            "engine, ~95 bytes per block); the same answers and snapshots", "NAME"),
    _Option("--log-format", "LITEHIT_LOG_FORMAT", "text", _log_format,
            "text, or json (one object per line, for log shippers)", "FORMAT"),
)  # fmt: skip


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``serve`` subcommand."""
    parser = subparsers.add_parser(
        "serve",
        help="run the gRPC online optimizer",
        description="Run the gRPC online optimizer with Prometheus metrics and a SQLite "
        "registry. Every flag has a LITEHIT_* environment variable; the flag wins over the "
        "variable, which wins over the default.",
    )
    for option in _OPTIONS:
        shown = "none" if option.default is None else option.default
        if option.switch:
            parser.add_argument(
                option.flag,
                action="store_const",
                const="true",
                default=None,
                help=f"{option.help} (env {option.env}=true; default off)",
            )
            continue
        parser.add_argument(
            option.flag,
            default=None,
            metavar=option.metavar,
            help=f"{option.help} (env {option.env}; default {shown})",
        )
    parser.set_defaults(func=run)


def resolve(args: argparse.Namespace, environ: dict[str, str] | None = None) -> dict[str, Any]:
    """Flag > environment > default for every option; UsageError names the flag or variable."""
    environ = dict(os.environ) if environ is None else environ
    values: dict[str, Any] = {}
    for option in _OPTIONS:
        dest = option.flag[2:].replace("-", "_")
        raw = getattr(args, dest)
        source = option.flag
        if raw is None and environ.get(option.env):
            raw, source = environ[option.env], option.env
        if raw is None:
            values[dest] = option.default
            continue
        try:
            values[dest] = option.parse(raw)
        except ValueError as exc:
            raise UsageError(f"{source}: invalid value {raw!r} ({exc})") from None
    return values


def run(args: argparse.Namespace) -> int:
    """Start the service and block until SIGTERM/SIGINT; 0 after a clean drain, 1 when
    calls had to be abandoned (raises on start-up errors)."""
    values = resolve(args)
    given = [f for f in ("admin_token", "admin_token_file") if values[f]]
    if values["open_admin"] and given:
        flag = "--" + given[0].replace("_", "-")
        raise UsageError(
            f"--open-admin contradicts {flag}: --open-admin leaves admin RPCs open, a token "
            "closes them; give one or the other"
        )
    try:
        admin_token = read_token(values["admin_token"], values["admin_token_file"], "--admin-token")
        query_token = read_token(values["query_token"], values["query_token_file"], "--query-token")
    except ValueError as exc:
        raise UsageError(str(exc)) from None

    from litehit_service.logs import configure_logging
    from litehit_service.server import ServerOptions
    from litehit_service.service import ServerConfig, serve

    configure_logging(values["log_format"])
    try:
        options = ServerOptions(
            max_message_bytes=values["max_message_bytes"],
            max_streams=values["max_streams"],
            stream_idle_seconds=values["stream_idle_seconds"],
            admin_token=admin_token,
            query_token=query_token,
            tls_cert=values["tls_cert"],
            tls_key=values["tls_key"],
        )
    except ValueError as exc:  # e.g. a certificate without its key
        raise UsageError(str(exc)) from None
    config = ServerConfig(
        listen=values["listen"],
        metrics_listen=values["metrics_listen"],
        data_dir=values["data_dir"],
        groups_file=values["groups"],
        server=options,
        max_block_keys=values["max_block_keys"],
        max_clock_skew_seconds=values["max_clock_skew_seconds"],
        max_instances=values["max_instances"],
        max_tracked_blocks=values["max_tracked_blocks"],
        snapshot_interval_seconds=values["snapshot_interval_seconds"],
        grace_seconds=values["grace_seconds"],
        curve_grid_points=values["curve_grid_points"],
        engine=values["engine"],
        open_admin=values["open_admin"],
    )
    return serve(config)
