"""The gRPC server: OptimizerService, health checking and reflection on ``grpc.aio``.

:func:`create_server` builds a :class:`LiteHitServer` around a manager (used by tests,
embedders and :func:`litehit_service.service.serve`); it runs its own event loop on a
background thread, so callers stay synchronous. The transport (access, decoding, stream
limits, drain) is :mod:`litehit_service.transport`.

Why ``grpc.aio`` (measured, see bench/README.md): with 1,000 idle TraceQueryStream calls
open, a synchronous server needs a thread per stream (1,009 threads) to keep answering,
while one event loop holds them with 9 threads; streamed throughput was 54.8k–63.6k queries/s
on aio against 44.5k–50.3k on a 1,056-thread pool, with the same unary and health latency
(2026-12-03, 2 cores, issue 10).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from litehit_service import messages as pb2
from litehit_service.access import TokenCheck
from litehit_service.addresses import format_address, parse_address
from litehit_service.log_limits import DEFAULT_INTERVAL_SECONDS, LogLimiter
from litehit_service.manager import OnlineOptimizerManager
from litehit_service.metrics import ServiceMetrics
from litehit_service.servicer import OptimizerServicer
from litehit_service.servicer import log as servicer_log
from litehit_service.transport import Transport

log = logging.getLogger(__name__)

_T = TypeVar("_T")

SERVICE_NAME: str = pb2.SERVICE_NAME
"""Fully qualified service name, ``kv_cache_manager.proto.optimizer.OptimizerService``."""

DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_STREAMS = 1024
DEFAULT_STREAM_IDLE_SECONDS = 600.0
DEFAULT_WORKER_THREADS = 8
LINGER_SECONDS = 0.3
"""After the drain, connections stay open this long so final statuses are delivered."""
LOG_FLUSH_SECONDS = 1.0
"""How often the server writes the due summaries of repeated log events (at most this
long after their interval ended, whether or not another event comes)."""


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask; ``os.cpu_count()`` where the
    platform has none)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True, slots=True)
class ServerOptions:
    """Transport limits and security of one server.

    ``max_message_bytes`` bounds every message both ways (larger: RESOURCE_EXHAUSTED);
    ``max_streams`` concurrent stream calls (TraceQueryStream, TraceQueryPackedStream);
    ``stream_idle_seconds`` before a
    silent stream is ended; ``admin_token`` / ``query_token`` guard admin and query RPCs
    (:mod:`litehit_service.access`); ``tls_cert`` / ``tls_key`` (PEM files, both or
    neither) enable TLS; ``worker_threads`` run the servicer's work and
    ``parallel_batches`` threads the batches of streams (default: the usable CPUs; more
    batches at once than cores only contend for them and for the GIL: bench/README.md,
    issue 38);
    ``log_summary_seconds`` is the interval over which repeated log events (rejected
    queries, refused tokens) are summarised (:mod:`litehit_service.log_limits`).
    """

    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    max_streams: int = DEFAULT_MAX_STREAMS
    stream_idle_seconds: float = DEFAULT_STREAM_IDLE_SECONDS
    admin_token: str | None = None
    query_token: str | None = None
    tls_cert: str | os.PathLike[str] | None = None
    tls_key: str | os.PathLike[str] | None = None
    worker_threads: int = DEFAULT_WORKER_THREADS
    parallel_batches: int = field(default_factory=usable_cpus)
    log_summary_seconds: float = DEFAULT_INTERVAL_SECONDS

    def __post_init__(self) -> None:
        for name in ("max_message_bytes", "max_streams", "worker_threads", "parallel_batches"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if not self.stream_idle_seconds > 0:
            raise ValueError(f"stream_idle_seconds must be > 0, got {self.stream_idle_seconds}")
        if not self.log_summary_seconds > 0:
            raise ValueError(f"log_summary_seconds must be > 0, got {self.log_summary_seconds}")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError(
                "TLS needs both a certificate and a key, got "
                f"tls_cert={self.tls_cert!r} tls_key={self.tls_key!r}"
            )


@dataclass(frozen=True, slots=True)
class DrainReport:
    """How a drain ended: ``clean`` when every call finished within the grace period;
    otherwise ``abandoned`` describes the calls that were cut off."""

    clean: bool
    abandoned: tuple[str, ...] = ()


class LiteHitServer:
    """A gRPC server (OptimizerService, health, reflection) on its own event-loop thread.

    :meth:`start` binds and serves; :meth:`drain` is the graceful stop (health NOT_SERVING,
    new calls refused, streams end after their current batch, everything given ``grace``
    seconds); :meth:`stop` ends at once. Usable as a context manager (stop on exit).
    """

    def __init__(
        self,
        manager: OnlineOptimizerManager,
        metrics: ServiceMetrics | None,
        listen: str = "127.0.0.1:0",
        options: ServerOptions | None = None,
    ) -> None:
        self.manager = manager
        self.metrics = metrics
        self.options = options if options is not None else ServerOptions()
        self.listen = listen
        self._host, self._port = parse_address(listen, "listen")
        self.port = 0
        self.executor = ThreadPoolExecutor(
            max_workers=self.options.worker_threads, thread_name_prefix="litehit-work"
        )
        self.batch_executor = ThreadPoolExecutor(
            max_workers=self.options.parallel_batches, thread_name_prefix="litehit-batch"
        )
        interval = self.options.log_summary_seconds
        self.transport = Transport(
            OptimizerServicer(
                manager, metrics, log_limits=LogLimiter(servicer_log, interval=interval)
            ),
            self.executor,
            manager.has_instance,
            tokens=TokenCheck(self.options.admin_token, self.options.query_token),
            max_streams=self.options.max_streams,
            batch_executor=self.batch_executor,
            stream_idle_seconds=self.options.stream_idle_seconds,
            log_interval=interval,
        )
        if metrics is not None:
            metrics.attach_transport(self.transport)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: grpc.aio.Server | None = None
        self._health: Any = None
        self._flusher: asyncio.TimerHandle | None = None

    # -------------------------------------------------------------- the loop

    @property
    def address(self) -> str:
        """``HOST:PORT`` the server listens on (after :meth:`start`)."""
        return format_address(self._host, self.port)

    def call(self, make: Callable[[], Awaitable[_T]], timeout: float | None = None) -> _T:
        """Run the coroutine ``make()`` on the server's loop and wait for its result."""
        if self._loop is None:
            raise RuntimeError("the server is not started")
        return asyncio.run_coroutine_threadsafe(_awaited(make), self._loop).result(timeout)

    def start(self) -> LiteHitServer:
        """Bind and start serving; raises OSError when the address cannot be bound."""
        if self._loop is not None:
            raise RuntimeError("the server is already started")
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._run_loop, args=(loop, ready), name="litehit-grpc", daemon=True
        )
        self._thread.start()
        ready.wait()
        self._loop = loop
        try:
            self.port = self.call(self._start)
        except BaseException:
            self._close_loop()
            raise
        return self

    @staticmethod
    def _run_loop(loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set)
        loop.run_forever()

    async def _start(self) -> int:
        limit = self.options.max_message_bytes
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", limit),
                ("grpc.max_send_message_length", limit),
                # without this a second server silently shares a busy port (SO_REUSEPORT)
                ("grpc.so_reuseport", 0),
            ],
            maximum_concurrent_rpcs=None,
        )
        server.add_generic_rpc_handlers((self.transport.generic_handler(),))
        self._health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        for name in ("", SERVICE_NAME):
            await self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        reflection.enable_server_reflection(
            (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server
        )
        address = format_address(self._host, self._port)
        probe_port(self._host, self._port, address)
        try:
            if self.options.tls_cert is not None and self.options.tls_key is not None:
                credentials = grpc.ssl_server_credentials(
                    [
                        (
                            Path(self.options.tls_key).read_bytes(),
                            Path(self.options.tls_cert).read_bytes(),
                        )
                    ]
                )
                bound = server.add_secure_port(address, credentials)
            else:
                bound = server.add_insecure_port(address)
        except RuntimeError as exc:  # grpcio raises RuntimeError when it cannot bind
            raise OSError(f"cannot listen on {address}: {exc}") from None
        if bound == 0:
            raise OSError(f"cannot listen on {address}")
        await server.start()
        self._server = server
        self._schedule_log_flush()
        return bound

    def _schedule_log_flush(self) -> None:
        """Every :data:`LOG_FLUSH_SECONDS` (on the loop): the due log summaries."""

        def flush() -> None:
            self.transport.flush_logs()
            self._schedule_log_flush()

        self._flusher = asyncio.get_running_loop().call_later(LOG_FLUSH_SECONDS, flush)

    # -------------------------------------------------------------- stopping

    def drain(self, grace: float) -> DrainReport:
        """The graceful stop: health NOT_SERVING at once, new calls UNAVAILABLE, every open
        stream answers the batch it is applying and ends with UNAVAILABLE, and every call
        gets ``grace`` seconds; what is still open then is cancelled and reported. Then the
        work threads finish what they run. Returns within ``grace`` plus the longest single
        batch."""
        if self._loop is None or self._server is None:
            return DrainReport(True)
        abandoned = self.call(lambda: self._drain(grace))
        self._shutdown_threads()
        self._close_loop()
        return DrainReport(not abandoned, tuple(abandoned))

    async def _drain(self, grace: float) -> list[str]:
        assert self._server is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        await self._health.enter_graceful_shutdown()
        transport = self.transport
        transport.start_drain()  # streams end after their batch; new calls: UNAVAILABLE
        while (transport.streams or transport.unary_in_flight) and loop.time() < deadline:
            await asyncio.sleep(0.01)
        abandoned = transport.abandoned()
        # keep the connections open a moment so the final statuses reach the clients
        # (closing at once races a client still writing: it would see a broken pipe)
        await asyncio.sleep(max(0.0, min(LINGER_SECONDS, deadline - loop.time())))
        await self._server.stop(max(0.0, deadline - loop.time()))
        return abandoned

    def stop(self) -> None:
        """Stop at once (in-flight calls are cancelled); idempotent."""
        if self._loop is not None and self._server is not None:
            try:
                self.call(lambda: self._server.stop(None), timeout=10)  # type: ignore[union-attr]
            except (RuntimeError, TimeoutError):
                pass
        self._shutdown_threads()
        self._close_loop()

    def _shutdown_threads(self) -> None:
        """Let the work and batch threads finish what they run, then end them."""
        self.executor.shutdown(wait=True)
        self.batch_executor.shutdown(wait=True)

    def _close_loop(self) -> None:
        loop, self._loop = self._loop, None
        if loop is None:
            return
        flusher, self._flusher = self._flusher, None
        if flusher is not None:
            loop.call_soon_threadsafe(flusher.cancel)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=10)
        if not loop.is_running():
            loop.close()

    def __enter__(self) -> LiteHitServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def probe_port(host: str, port: int, address: str) -> None:
    """Raise ``OSError("cannot listen on ADDRESS: <reason>")`` when no address ``host``
    resolves to can be bound on ``port``; a no-op for port 0.

    Checked with a throwaway socket (SO_REUSEADDR, as gRPC binds) before gRPC binds,
    because gRPC's C core logs a raw ``add_port.cc`` line to stderr when it cannot bind;
    gRPC's own failure stays the fallback for a port taken in between. O(addresses).
    """
    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError:
        return  # let gRPC resolve it and report its own error
    reason = ""
    for family, kind, proto, _, sockaddr in infos:
        try:
            with socket.socket(family, kind, proto) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(sockaddr)
        except OSError as exc:
            reason = reason or exc.strerror or str(exc)
            continue
        return  # one bindable address is enough (gRPC binds what it can)
    if reason:
        raise OSError(f"cannot listen on {address}: {reason}")


async def _awaited(make: Callable[[], Awaitable[_T]]) -> _T:
    return await make()


def create_server(
    manager: OnlineOptimizerManager,
    metrics: ServiceMetrics | None,
    listen: str = "127.0.0.1:0",
    **options: Any,
) -> LiteHitServer:
    """A :class:`LiteHitServer` (not started) serving ``manager`` on ``listen`` (``HOST:PORT``,
    port 0 = ephemeral); keyword ``options`` are :class:`ServerOptions` fields. Registers
    OptimizerService, gRPC health (``""`` and the service name SERVING) and reflection.
    ``start()`` it; it raises OSError when the address cannot be bound."""
    return LiteHitServer(manager, metrics, listen, ServerOptions(**options))
