"""The gRPC transport of OptimizerService on ``grpc.aio``: access, decoding, limits, drain.

One asyncio event loop carries every call; no thread waits for a client. The handlers are
built by walking the service descriptor (so a method added to the proto is served, and
guarded by :mod:`litehit_service.access`, without editing any list). For each call:

1. **Access**: the method's kind (read/query/admin) and the configured tokens decide;
   a refused call ends with UNAUTHENTICATED before anything is decoded or changed.
2. **Decoding** happens here (requests arrive as bytes): a message that cannot be decoded
   ends that call only, with INVALID_ARGUMENT, is counted and logged (no traceback). A
   packed batch is only scanned here (compiled, without the GIL: its ids and sizes); its
   arrays are decoded and its answer encoded on the work thread
   (:mod:`litehit_service.packed_frames`), so streams on different instances run on
   different cores.
3. **Work** runs on a thread pool (the event loop never blocks on the engine, the registry
   or an instance lock). Queries on one instance are serialised by an asyncio gate per
   instance, so a batch waiting for a busy instance (e.g. one being snapshotted) holds no
   thread and never delays other instances. Stream batches run on their own threads
   (``batch_executor``: one per core by default, so that more streams than cores queue
   instead of contending for the cores and the GIL).
4. **Streams**: at most ``max_streams`` stream calls at once, of every kind in
   :data:`STREAM_KINDS` (one more:
   RESOURCE_EXHAUSTED naming the limit); a stream that sends nothing for
   ``stream_idle_seconds`` is ended (DEADLINE_EXCEEDED). Batches of one stream are applied
   in order, one at a time.
5. **Drain** (:meth:`Transport.start_drain`): a stream finishes the batch it is applying,
   answers it, then ends with UNAVAILABLE "server shutting down"; a batch is applied and
   answered, or not applied at all. Unary calls that arrive get UNAVAILABLE.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from litehit_service import messages as pb2
from litehit_service.access import Access, TokenCheck, method_access
from litehit_service.log_limits import DEFAULT_INTERVAL_SECONDS, LogLimiter
from litehit_service.packed_frames import packed_frame
from litehit_service.servicer import OptimizerServicer
from litehit_service.stats import TransportStats

log = logging.getLogger(__name__)

SHUTTING_DOWN = "server shutting down"
STREAM_METHOD = "TraceQueryStream"


@dataclass(frozen=True)
class StreamKind:
    """How the transport drives one streaming method: the instances a message's queries
    touch (their gates are held while it is applied), how many queries it holds, the
    servicer method that answers it (``answer(message, method, peer)``, a message or its
    bytes), and ``decode``, what turns the received bytes into what ``answer`` takes
    (protobuf's parse when None; raises ``DecodeError`` for bytes protobuf refuses)."""

    instance_ids: Callable[[Any], set[str]]
    queries: Callable[[Any], int]
    answer: str
    decode: Callable[[bytes], Any] | None = None


STREAM_KINDS: dict[str, StreamKind] = {
    STREAM_METHOD: StreamKind(
        lambda batch: {q.instance_id for q in batch.queries},
        lambda batch: len(batch.queries),
        "answer_batch",
    ),
    "TraceQueryPackedStream": StreamKind(
        lambda frame: {frame.instance_id},
        lambda frame: frame.queries,
        "answer_packed",
        packed_frame,  # bytes in, bytes out: no protobuf object per value, GIL released
    ),
}
"""Every streaming method of the service; :meth:`Transport.generic_handler` refuses to
serve a streaming method missing here (deny by default)."""


@dataclass
class StreamRecord:
    """What one open stream is doing (for the drain's report of abandoned streams)."""

    peer: str
    state: str = "reading"  # reading | applying | writing
    batches: int = 0
    queries: int = 0
    unanswered: int = 0  # queries applied whose answer has not been handed to gRPC (up to
    # two batches: the one being written and the next, applied meanwhile)


class InstanceGates:
    """One asyncio lock per registered instance: queries (and snapshots) of an instance run
    one at a time without holding a thread while they wait. Loop thread only.

    ``known(instance_id)`` says whether an id is registered; unknown ids get no gate (their
    queries fail at once), so a client cannot grow this map. O(instances) memory.
    """

    def __init__(self, known: Callable[[str], bool]) -> None:
        self._known = known
        self._locks: dict[str, asyncio.Lock] = {}

    def _lock(self, instance_id: str) -> asyncio.Lock | None:
        lock = self._locks.get(instance_id)
        if lock is None and self._known(instance_id):
            if len(self._locks) >= 64 and len(self._locks) % 64 == 0:
                self._prune()
            lock = self._locks[instance_id] = asyncio.Lock()
        return lock

    def _prune(self) -> None:
        for iid in [i for i, lock in self._locks.items() if not lock.locked()]:
            if not self._known(iid):
                del self._locks[iid]

    async def run(self, instance_ids: set[str], work: Callable[[], Awaitable[Any]]) -> Any:
        """Await ``work()`` holding the gates of ``instance_ids`` (in sorted order: no
        deadlock between batches naming several instances)."""
        held: list[asyncio.Lock] = []
        try:
            for iid in sorted(instance_ids):
                lock = self._lock(iid)
                if lock is not None:
                    await lock.acquire()
                    held.append(lock)
            return await work()
        finally:
            for lock in reversed(held):
                lock.release()


class Transport:
    """Serves OptimizerService through ``servicer`` on the running event loop.

    ``executor`` runs the servicer's (synchronous) work, ``batch_executor`` (default: the
    same) the batches of streams; ``known_instance`` tells the
    gates which ids are registered; ``max_streams`` and ``stream_idle_seconds`` bound the
    streams; ``tokens`` guards access; ``log_interval`` is the seconds over which
    repeated log events are summarised (:mod:`litehit_service.log_limits`).
    """

    def __init__(
        self,
        servicer: OptimizerServicer,
        executor: Executor,
        known_instance: Callable[[str], bool],
        *,
        tokens: TokenCheck,
        max_streams: int,
        stream_idle_seconds: float,
        log_interval: float = DEFAULT_INTERVAL_SECONDS,
        batch_executor: Executor | None = None,
    ) -> None:
        if max_streams <= 0:
            raise ValueError(f"max_streams must be > 0, got {max_streams}")
        if not stream_idle_seconds > 0:
            raise ValueError(f"stream_idle_seconds must be > 0, got {stream_idle_seconds}")
        self._servicer = servicer
        self._executor = executor
        self._tokens = tokens
        self.max_streams = max_streams
        self.stream_idle_seconds = stream_idle_seconds
        self._batch_executor = batch_executor if batch_executor is not None else executor
        self.gates = InstanceGates(known_instance)
        self.streams: dict[int, StreamRecord] = {}
        self.unary_in_flight = 0
        self.stats = TransportStats()
        self._draining: asyncio.Event | None = None  # created on the loop
        self._next_stream = 0
        self.log_limits = LogLimiter(log, interval=log_interval)
        """Refused tokens, undecodable messages and cancelled streams are logged through it
        (the first per kind and peer in full, repeats summarised)."""

    # ------------------------------------------------------------------ handlers

    def generic_handler(self) -> grpc.GenericRpcHandler:
        """Handlers for every method of the OptimizerService descriptor (bytes in, bytes out)."""
        service = pb2.FILE_DESCRIPTOR.services_by_name["OptimizerService"]
        handlers: dict[str, grpc.RpcMethodHandler] = {}
        for method in service.methods:
            access = method_access(method.name)
            request_type = _message_class(method.input_type.name)
            if method.client_streaming or method.server_streaming:
                if method.name not in STREAM_KINDS:
                    raise ValueError(f"streaming method {method.name} has no StreamKind")
                handlers[method.name] = grpc.stream_stream_rpc_method_handler(
                    self._stream_handler(method.name, access, request_type)
                )
            else:
                handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                    self._unary_handler(method.name, access, request_type)
                )
        return grpc.method_handlers_generic_handler(service.full_name, handlers)

    def _draining_event(self) -> asyncio.Event:
        if self._draining is None:
            self._draining = asyncio.Event()
        return self._draining

    @property
    def draining(self) -> bool:
        """True once :meth:`start_drain` ran."""
        return self._draining is not None and self._draining.is_set()

    def start_drain(self) -> None:
        """Begin the drain (loop thread): streams end after their current batch. The
        summaries of repeated log events still counted are written now."""
        self._draining_event().set()
        self.log_limits.flush(everything=True)
        self._servicer.log_limits.flush(everything=True)

    def flush_logs(self) -> int:
        """Write the summaries of repeated log events (this transport's and the
        servicer's) whose interval has passed, so a flood that stopped is summarised
        without waiting for another event; the server calls it every
        :data:`~litehit_service.server.LOG_FLUSH_SECONDS`. Returns the lines written."""
        return self.log_limits.flush() + self._servicer.log_limits.flush()

    async def _authorize(self, method: str, access: Access, context: Any) -> None:
        if self._tokens.allowed(access, context.invocation_metadata()):
            return
        stats = self.stats.unauthenticated
        stats[method] = stats.get(method, 0) + 1
        needed = "admin" if access is Access.ADMIN else "query (or admin)"
        peer = context.peer()
        self.log_limits.log(
            logging.WARNING,
            "refused: missing or wrong authorization token",
            "",
            peer,
            "%s from %s refused: missing or wrong authorization token",
            method,
            peer,
            extra={"method": method, "code": "UNAUTHENTICATED", "peer": peer},
        )
        await context.abort(
            grpc.StatusCode.UNAUTHENTICATED,
            f"{method} needs metadata 'authorization: Bearer <{needed} token>'",
        )

    async def _decode(self, method: str, request_type: Any, raw: bytes, context: Any) -> Any:
        try:
            return request_type.FromString(raw)
        except DecodeError as exc:
            await self._undecodable(method, request_type, context, 0, exc)

    async def _undecodable(
        self, method: str, request_type: Any, context: Any, n: int, exc: DecodeError
    ) -> None:
        """End the call for message ``n`` (0: the unary request) that could not be
        decoded: counted, logged (no traceback), INVALID_ARGUMENT."""
        stats = self.stats.undecodable
        stats[method] = stats.get(method, 0) + 1
        where = f"message {n} of the stream" if n else "the request"
        peer = context.peer()
        self.log_limits.log(
            logging.INFO,
            f"{method} undecodable",
            "",
            peer,
            "%s: %s could not be decoded (%s); the call is ended",
            method,
            where,
            exc,
            extra={"method": method, "code": "INVALID_ARGUMENT", "peer": peer},
        )
        await context.abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"{method}: {where} could not be decoded as {request_type.DESCRIPTOR.name}",
        )

    def _unary_handler(
        self, method: str, access: Access, request_type: Any
    ) -> Callable[[bytes, Any], Awaitable[bytes]]:
        servicer_method = getattr(self._servicer, method, None)
        loop_run = self.in_executor

        async def handle(raw: bytes, context: Any) -> bytes:
            await self._authorize(method, access, context)
            request = await self._decode(method, request_type, raw, context)
            if self.draining:
                await context.abort(grpc.StatusCode.UNAVAILABLE, SHUTTING_DOWN)
            if servicer_method is None:
                await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{method} is not implemented")

            caller = Caller(context.peer())

            def work() -> bytes:
                return servicer_method(request, caller).SerializeToString()

            self.unary_in_flight += 1
            try:
                if access is Access.QUERY:
                    return await self.gates.run({request.instance_id}, lambda: loop_run(work))
                return await loop_run(work)
            finally:
                self.unary_in_flight -= 1

        return handle

    def in_executor(self, work: Callable[[], Any]) -> Awaitable[Any]:
        """Run ``work()`` on the work threads (await it on the loop)."""
        return asyncio.get_running_loop().run_in_executor(self._executor, work)

    def apply_batch(self, work: Callable[[], Any]) -> Awaitable[Any]:
        """Run a stream batch's ``work()`` on the batch threads (await it on the loop)."""
        return asyncio.get_running_loop().run_in_executor(self._batch_executor, work)

    def _stream_handler(
        self, method: str, access: Access, request_type: Any
    ) -> Callable[[AsyncIterator[bytes], Any], AsyncIterator[bytes]]:
        async def handle(requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
            await self._authorize(method, access, context)
            if self.draining:
                await context.abort(grpc.StatusCode.UNAVAILABLE, SHUTTING_DOWN)
            if len(self.streams) >= self.max_streams:
                self.stats.streams_rejected += 1
                await context.abort(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"too many concurrent {method} calls: the limit is {self.max_streams} "
                    "(--max-streams); retry later or batch more queries per stream",
                )
            self._next_stream += 1
            key = self._next_stream
            record = self.streams[key] = StreamRecord(peer=context.peer())
            try:
                async for response in self._serve_stream(
                    method, request_type, requests, context, record
                ):
                    yield response
            except (asyncio.CancelledError, GeneratorExit):
                self._log_cancelled(method, record)
                raise
            finally:
                del self.streams[key]

        return handle

    async def _serve_stream(
        self,
        method: str,
        request_type: Any,
        requests: AsyncIterator[bytes],
        context: Any,
        record: StreamRecord,
    ) -> AsyncIterator[bytes]:
        """Apply a stream's batches in order, one at a time, and yield their answers.

        Pipelined: while batch i is applied the next message is read (one at most), and
        batch i + 1 is started as soon as batch i is done, before batch i's answer is
        written; so a stream's work never waits for the network, and at most three of its
        batches are held (one read ahead, one applied, one being written). Ends when the
        client closes its side after the last answer; the idle timeout runs only while
        nothing is applied; a message that cannot be decoded ends the call after the
        answers of the batches applied before it."""
        kind = STREAM_KINDS[method]
        answer = getattr(self._servicer, kind.answer)
        decode = kind.decode or request_type.FromString
        reader = requests.__aiter__()
        draining = self._draining_event()
        drain_wait = asyncio.ensure_future(draining.wait())
        read: asyncio.Future[bytes] = asyncio.ensure_future(reader.__anext__())
        applying: asyncio.Future[bytes] | None = None
        batch: Any = None
        n = 0

        def start(raw: bytes) -> asyncio.Future[bytes]:
            """Decode message ``n`` and start applying it (raises DecodeError)."""
            nonlocal batch

            def work(batch: Any) -> bytes:
                out = answer(batch, method, record.peer)
                return out if isinstance(out, bytes) else out.SerializeToString()

            item = batch = decode(raw)  # ``item``: this call's own, whatever ``batch`` becomes
            task = self.gates.run(kind.instance_ids(item), lambda: self.apply_batch(
                lambda: work(item)))  # fmt: skip
            record.state = "applying"
            return asyncio.ensure_future(task)

        try:
            while True:
                if applying is None:  # nothing in flight: wait for the client
                    if draining.is_set():
                        await context.abort(grpc.StatusCode.UNAVAILABLE, SHUTTING_DOWN)
                    done, _ = await asyncio.wait(
                        {read, drain_wait},
                        timeout=self.stream_idle_seconds,
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                    if read not in done:
                        if drain_wait in done:
                            await context.abort(grpc.StatusCode.UNAVAILABLE, SHUTTING_DOWN)
                        self.stats.streams_idle_closed += 1
                        await context.abort(
                            grpc.StatusCode.DEADLINE_EXCEEDED,
                            f"{method} sent nothing for {self.stream_idle_seconds:g} s "
                            "(--stream-idle-seconds); the stream is closed",
                        )
                    try:
                        raw = read.result()
                    except StopAsyncIteration:
                        return
                    n += 1
                    try:
                        applying = start(raw)
                    except DecodeError as exc:
                        await self._undecodable(method, request_type, context, n, exc)
                    read = asyncio.ensure_future(reader.__anext__())
                    continue
                done_n, done_batch = n, batch
                try:  # a packed batch's arrays are decoded by the work itself
                    response = await applying
                except DecodeError as exc:
                    await self._undecodable(method, request_type, context, done_n, exc)
                applying = None
                queries = kind.queries(done_batch)
                record.batches += 1
                record.queries += queries
                record.unanswered += queries
                refused: DecodeError | None = None
                # start the next batch before this answer is written; the client's end,
                # or a failed read, is met after the answer (by the wait above)
                if read.done() and not read.cancelled() and read.exception() is None:
                    if not draining.is_set():
                        n += 1
                        try:
                            applying = start(read.result())
                        except DecodeError as exc:
                            refused = exc
                        read = asyncio.ensure_future(reader.__anext__())
                record.state = "writing" if applying is None else "applying"
                yield response
                record.unanswered -= queries
                if refused is not None:
                    await self._undecodable(method, request_type, context, n, refused)
                if applying is None:
                    record.state = "reading"
        finally:
            drain_wait.cancel()
            if applying is not None:
                _settle(applying)
            _settle(read)

    def _log_cancelled(self, method: str, record: StreamRecord) -> None:
        """A stream the client cancelled (or the server's stop cut off): normal life, one
        INFO line per peer and interval (repeats summarised)."""
        self.log_limits.log(
            logging.INFO,
            f"{method} cancelled",
            "",
            record.peer,
            "%s from %s cancelled while %s: %d batches "
            "(%d queries) answered, %d queries applied without a delivered answer",
            method,
            record.peer,
            record.state,
            record.batches,
            record.queries,
            record.unanswered,
            extra={"method": method, "code": "CANCELLED", "peer": record.peer},
        )

    def abandoned(self) -> list[str]:
        """One line per stream still open (for the drain's log)."""
        return [
            f"stream from {r.peer}: {r.state}, {r.batches} batches ({r.queries} queries) "
            f"answered, {r.unanswered} queries applied without a delivered answer"
            for r in self.streams.values()
        ]


@dataclass(frozen=True)
class Caller:
    """The servicer's view of a unary call's context: only who called (``peer()``)."""

    address: str

    def peer(self) -> str:
        return self.address


def _settle(read: asyncio.Future[Any]) -> None:
    """Let go of a read the stream no longer awaits (it was cancelled or ended while the
    read was pending): cancel it and retrieve its outcome when it settles, so a client that
    cancels mid-stream (the read then ends with StopAsyncIteration) is not reported by
    asyncio as "Task exception was never retrieved"."""
    read.cancel()
    read.add_done_callback(_retrieve)


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def _message_class(name: str) -> Any:
    return getattr(pb2, name)
