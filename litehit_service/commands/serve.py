"""``litehit serve``: run the gRPC online optimizer with metrics and a persistent registry.

Every flag has a ``LITEHIT_*`` environment variable; a flag given on the command line wins
over the variable, which wins over the default.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise ValueError("must be > 0")
    return value


def _address(text: str) -> str:
    parse_address(text)  # ValueError names the problem
    return text


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise ValueError("must be >= 0")
    return value


_OPTIONS = (
    _Option(
        "--listen",
        "LITEHIT_LISTEN",
        "127.0.0.1:50051",
        _address,
        "gRPC HOST:PORT (port 0 = any)",
        "ADDR",
    ),
    _Option(
        "--metrics-listen",
        "LITEHIT_METRICS_LISTEN",
        "127.0.0.1:9464",
        _address,
        "Prometheus /metrics HOST:PORT (port 0 = any)",
        "ADDR",
    ),
    _Option(
        "--data-dir",
        "LITEHIT_DATA_DIR",
        "./litehit-data",
        str,
        "directory of the SQLite registry (litehit.sqlite3); created if missing",
        "DIR",
    ),
    _Option(
        "--groups",
        "LITEHIT_GROUPS",
        None,
        str,
        'JSON/YAML file {"instance_groups": [...], "instances": [...]} (proto field names) '
        "ensured at start, idempotently",
        "FILE",
    ),
    _Option(
        "--tls-cert", "LITEHIT_TLS_CERT", None, str, "PEM certificate chain (enables TLS)", "FILE"
    ),
    _Option("--tls-key", "LITEHIT_TLS_KEY", None, str, "PEM private key (with --tls-cert)", "FILE"),
    _Option(
        "--admin-token",
        "LITEHIT_ADMIN_TOKEN",
        None,
        str,
        "require 'authorization: Bearer TOKEN' metadata on mutating RPCs",
        "TOKEN",
    ),
    _Option(
        "--max-message-bytes",
        "LITEHIT_MAX_MESSAGE_BYTES",
        64 * 1024 * 1024,
        _positive_int,
        "largest gRPC message accepted or sent, bytes",
        "BYTES",
    ),
    _Option(
        "--max-block-keys",
        "LITEHIT_MAX_BLOCK_KEYS",
        1_000_000,
        _positive_int,
        "most block_keys one TraceQuery may carry",
        "N",
    ),
    _Option(
        "--grace-seconds",
        "LITEHIT_GRACE_SECONDS",
        10.0,
        _non_negative_float,
        "on SIGTERM/SIGINT, seconds in-flight RPCs and streams get to finish",
        "SECONDS",
    ),
)


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
    """Start the service and block until SIGTERM/SIGINT; 0 on a clean stop (raises on errors)."""
    values = resolve(args)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )

    from litehit_service.server import ServerConfig, serve

    config = ServerConfig(
        listen=values["listen"],
        metrics_listen=values["metrics_listen"],
        data_dir=values["data_dir"],
        groups_file=values["groups"],
        tls_cert=values["tls_cert"],
        tls_key=values["tls_key"],
        admin_token=values["admin_token"],
        max_message_bytes=values["max_message_bytes"],
        max_block_keys=values["max_block_keys"],
        grace_seconds=values["grace_seconds"],
    )
    return serve(config)
