"""The gRPC server: OptimizerService plus health checking and reflection, and ``serve``.

:func:`create_server` builds a ready-to-start :class:`grpc.Server` around a manager (used by
tests and embedders); :func:`serve` runs the whole service process: SQLite registry under the
data dir, restore, an optional groups file applied idempotently, Prometheus ``/metrics``, the
gRPC server, and a graceful stop on SIGTERM/SIGINT.
"""

from __future__ import annotations

import hmac
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from litehit_service import messages as pb2
from litehit_service.addresses import format_address, parse_address
from litehit_service.entries import load_groups_file
from litehit_service.errors import InstanceNotExist
from litehit_service.manager import OnlineOptimizerManager, validated_group
from litehit_service.metrics import ServiceMetrics
from litehit_service.model import InstanceGroup, InstanceRegistration
from litehit_service.policy import DEFAULT_MAX_BLOCK_KEYS, QueryPolicy
from litehit_service.registry import Registry
from litehit_service.servicer import OptimizerServicer

log = logging.getLogger(__name__)

SERVICE_NAME: str = pb2.SERVICE_NAME
"""Fully qualified service name, ``kv_cache_manager.proto.optimizer.OptimizerService``."""

MUTATING_METHODS: frozenset[str] = frozenset(
    f"/{SERVICE_NAME}/{m}"
    for m in (
        "CreateInstanceGroup",
        "UpdateInstanceGroup",
        "RemoveInstanceGroup",
        "RegisterInstance",
        "RemoveInstance",
        "ResetStats",
    )
)
"""RPC paths that need the admin token when one is configured (reads and queries stay open)."""

DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_WORKERS = 64
DEFAULT_GRACE_SECONDS = 10.0
REGISTRY_FILE = "litehit.sqlite3"


# --------------------------------------------------------------------------------------------
# Admin token
# --------------------------------------------------------------------------------------------


class AdminTokenInterceptor(grpc.ServerInterceptor):
    """Rejects mutating RPCs whose ``authorization`` metadata is not ``Bearer <token>``.

    The rejection is gRPC status UNAUTHENTICATED; the servicer never runs. O(metadata).
    """

    def __init__(self, token: str) -> None:
        if not token:
            raise ValueError("admin token must not be empty")
        self._expected = f"Bearer {token}".encode()

        def deny(request: object, context: grpc.ServicerContext) -> None:
            context.abort(
                grpc.StatusCode.UNAUTHENTICATED,
                "this RPC changes state and needs metadata 'authorization: Bearer <admin token>'",
            )

        self._deny = grpc.unary_unary_rpc_method_handler(deny)

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        """Pass reads through; let a mutating RPC through only with the right token."""
        if handler_call_details.method not in MUTATING_METHODS:
            return continuation(handler_call_details)
        for key, value in handler_call_details.invocation_metadata or ():
            if key == "authorization":
                given = value.encode() if isinstance(value, str) else value
                if hmac.compare_digest(given, self._expected):
                    return continuation(handler_call_details)
        return self._deny


# --------------------------------------------------------------------------------------------
# Server construction
# --------------------------------------------------------------------------------------------


@dataclass
class BuiltServer:
    """A created (not yet started) server, its bound port and its health servicer."""

    server: grpc.Server
    port: int
    health: health.HealthServicer


def create_server(
    manager: OnlineOptimizerManager,
    metrics: ServiceMetrics | None,
    listen: str = "127.0.0.1:0",
    *,
    admin_token: str | None = None,
    tls_cert: str | os.PathLike[str] | None = None,
    tls_key: str | os.PathLike[str] | None = None,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    max_workers: int = DEFAULT_MAX_WORKERS,
) -> BuiltServer:
    """A bound, not yet started server serving ``manager``; returns it with the bound port and
    the health servicer (flipped to NOT_SERVING on shutdown).

    Registers OptimizerService, gRPC health (``""`` and the service name SERVING) and server
    reflection. ``listen`` is ``HOST:PORT`` (port 0 = ephemeral). With ``admin_token``,
    mutating RPCs need metadata ``authorization: Bearer <token>``. ``tls_cert``/``tls_key``
    (PEM files, both or neither) enable TLS. ``max_message_bytes`` bounds every message in
    both directions (larger ones fail with RESOURCE_EXHAUSTED). Raises OSError when the
    address cannot be bound.
    """
    if max_message_bytes <= 0:
        raise ValueError(f"max_message_bytes must be > 0, got {max_message_bytes}")
    if max_workers <= 0:
        raise ValueError(f"max_workers must be > 0, got {max_workers}")
    if (tls_cert is None) != (tls_key is None):
        raise ValueError(
            f"TLS needs both a certificate and a key, got tls_cert={tls_cert!r} tls_key={tls_key!r}"
        )
    host, port = parse_address(listen, "listen")
    interceptors = [AdminTokenInterceptor(admin_token)] if admin_token else []
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="litehit-rpc"),
        interceptors=interceptors,
        options=[
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
            # without this a second server silently shares a busy port (SO_REUSEPORT)
            ("grpc.so_reuseport", 0),
        ],
    )
    pb2.add_OptimizerServiceServicer_to_server(OptimizerServicer(manager, metrics), server)
    health_servicer = health.HealthServicer(experimental_non_blocking=True)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    for name in ("", SERVICE_NAME):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    address = format_address(host, port)
    try:
        if tls_cert is not None and tls_key is not None:
            credentials = grpc.ssl_server_credentials(
                [(Path(tls_key).read_bytes(), Path(tls_cert).read_bytes())]
            )
            bound = server.add_secure_port(address, credentials)
        else:
            bound = server.add_insecure_port(address)
    except RuntimeError as exc:  # grpcio raises RuntimeError when it cannot bind
        raise OSError(f"cannot listen on {address}: {exc}") from None
    if bound == 0:
        raise OSError(f"cannot listen on {address}")
    return BuiltServer(server, bound, health_servicer)


# --------------------------------------------------------------------------------------------
# Groups file
# --------------------------------------------------------------------------------------------


def apply_groups(
    manager: OnlineOptimizerManager,
    groups: Sequence[InstanceGroup],
    registrations: Sequence[InstanceRegistration],
) -> list[str]:
    """Ensure ``groups`` and ``registrations`` exist as given; idempotent. Returns actions.

    A missing group is created, a different one updated (its instances are removed and
    re-registered around the update; meant for start-up, when LRU state is fresh anyway);
    an equal one is left alone. A registration is (re)registered only when it differs from
    the stored one. Everything is first rehearsed on a scratch in-memory manager holding a
    copy of the configuration, so an invalid entry raises (OptimizerError naming it) before
    anything changes. O(groups + instances).
    """
    scratch = OnlineOptimizerManager(None)
    for group in manager.list_groups():
        scratch.create_group(group)
    for info in manager.instance_infos():
        scratch.register_instance(info.registration)
    _apply_groups(scratch, groups, registrations)
    return _apply_groups(manager, groups, registrations)


def _apply_groups(
    manager: OnlineOptimizerManager,
    groups: Sequence[InstanceGroup],
    registrations: Sequence[InstanceRegistration],
) -> list[str]:
    actions: list[str] = []
    existing = {g.name: g for g in manager.list_groups()}
    for group in groups:
        current = existing.get(group.name)
        if current is None:
            manager.create_group(group)
            existing[group.name] = manager.get_group(group.name)
            actions.append(f"created group {group.name}")
            continue
        if current == validated_group(group):
            continue
        members = [
            i.registration for i in manager.instance_infos() if i.instance_group == group.name
        ]
        for reg in members:
            manager.remove_instance(reg.instance_id)
        try:
            manager.update_group(group)
        finally:
            for reg in members:
                manager.register_instance(reg)
        existing[group.name] = manager.get_group(group.name)
        actions.append(f"updated group {group.name}")
    for reg in registrations:
        try:
            if manager.get_instance(reg.instance_id) == reg:
                continue
        except InstanceNotExist:
            pass
        manager.register_instance(reg)
        actions.append(f"registered instance {reg.instance_id}")
    return actions


# --------------------------------------------------------------------------------------------
# The service process
# --------------------------------------------------------------------------------------------


@dataclass
class ServerConfig:
    """Everything ``litehit serve`` needs; field defaults equal the CLI defaults."""

    listen: str = "127.0.0.1:50051"
    metrics_listen: str = "127.0.0.1:9464"
    data_dir: str = "./litehit-data"
    groups_file: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    admin_token: str | None = None
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    max_block_keys: int = DEFAULT_MAX_BLOCK_KEYS
    grace_seconds: float = DEFAULT_GRACE_SECONDS
    max_workers: int = DEFAULT_MAX_WORKERS


def serve(
    config: ServerConfig,
    stop: threading.Event | None = None,
    out: TextIO | None = None,
) -> int:
    """Run the service until SIGTERM/SIGINT (or ``stop`` is set); returns the exit code.

    Start-up: registry ``<data_dir>/litehit.sqlite3`` (created), restore groups and
    instances, apply ``groups_file``, start ``/metrics`` and the gRPC server, then print one
    line ``litehit serving grpc=HOST:PORT metrics=HOST:PORT data_dir=DIR`` to ``out``
    (stdout). Shutdown: health NOT_SERVING, no new RPCs, in-flight RPCs and streams get
    ``grace_seconds``, then the registry is closed; returns 0. Start-up errors raise.
    """
    out = out if out is not None else sys.stdout
    stop = stop if stop is not None else threading.Event()
    grpc_host, _ = parse_address(config.listen, "listen")
    metrics_host, metrics_port = parse_address(config.metrics_listen, "metrics listen")
    if config.grace_seconds < 0:
        raise ValueError(f"grace seconds must be >= 0, got {config.grace_seconds}")
    data_dir = Path(config.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    registry = Registry(data_dir / REGISTRY_FILE)
    metrics_server = None
    built: BuiltServer | None = None
    try:
        manager = OnlineOptimizerManager(
            registry, QueryPolicy.online(max_block_keys=config.max_block_keys)
        )
        manager.restore()
        if config.groups_file:
            groups, regs = load_groups_file(config.groups_file)
            for action in apply_groups(manager, groups, regs):
                log.info("groups file: %s", action)
        metrics = ServiceMetrics(manager)
        built = create_server(
            manager,
            metrics,
            config.listen,
            admin_token=config.admin_token,
            tls_cert=config.tls_cert,
            tls_key=config.tls_key,
            max_message_bytes=config.max_message_bytes,
            max_workers=config.max_workers,
        )
        metrics_server, bound_metrics = metrics.start_http_server(metrics_host, metrics_port)
        built.server.start()
        previous = _install_signal_handlers(stop)
        try:
            print(
                f"litehit serving grpc={format_address(grpc_host, built.port)} "
                f"metrics={format_address(metrics_host, bound_metrics)} "
                f"data_dir={data_dir.resolve()}",
                file=out,
                flush=True,
            )
            stop.wait()
            built.health.enter_graceful_shutdown()
            built.server.stop(config.grace_seconds).wait()
        finally:
            _restore_signal_handlers(previous)
    finally:
        if built is not None:
            built.server.stop(None)  # no-op after a clean stop; frees the port on errors
        if metrics_server is not None:
            metrics_server.shutdown()
            metrics_server.server_close()
        registry.close()
    print("litehit stopped", file=out, flush=True)
    return 0


_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _install_signal_handlers(stop: threading.Event) -> dict[int, Any]:
    """Make SIGTERM/SIGINT set ``stop`` (main thread only); returns the previous handlers."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def handler(signum: int, frame: object) -> None:
        stop.set()

    return {sig: signal.signal(sig, handler) for sig in _SIGNALS}


def _restore_signal_handlers(previous: dict[int, Any]) -> None:
    for sig, old in previous.items():
        signal.signal(sig, old)
