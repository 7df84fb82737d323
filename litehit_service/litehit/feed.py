"""``litehit feed``: a trace file streamed into a running server as a gateway would.

:func:`run_feed` reads a trace through the reader registry (standard, Mooncake, LMCache;
:mod:`litehit_service.traces.readers`), routes every request event the way ``litehit
replay`` routes it (:class:`FeedRoute`: one fixed instance, a fan-out to several, or the
event's own ``instance_id``; ``write`` events are skipped), and sends the requests over
one ``TraceQueryPackedStream`` (:meth:`~litehit_service.client.OptimizerClient.stream_packed`)
in packed batches of one instance each, in trace order per instance.

Keys are normalised as the server expects them: a server takes keys at the instance's
block size (the wire has no field for a trace's granularity), so a trace recorded at a
finer ``trace_block_size`` is coarsened here exactly as the replay does
(:func:`litehit_core.normalize_request`: chained first when the instance's group hashes
prefixes, then every k-th key; the server chains those again, which changes no hit since a
chained key already stands for its whole prefix). Keys at the instance's block size go as
they are. Every request of every reader carries its prompt length, so the token counts
are the trace's (no option derives them). Timestamps are left to the server (0: its wall
clock), like a live gateway's: the hit counts of groups without a TTL equal the replay's
exactly; a TTL expires by the feed's wall-clock pace, not the trace's.

``rate`` paces the batches (:class:`Pacer`, with an injectable clock). A bad trace line
raises its :class:`~litehit_core.LocatedError` after the requests before it were fed (a
live server cannot take them back). Cost: O(trace bytes) parsing plus O(keys) packing;
memory O(batch x instances).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from litehit_core import InvalidRequestError, normalize_request
from litehit_core.lines import DEFAULT_MAX_LINE_BYTES
from litehit_service import messages as pb2
from litehit_service import wire
from litehit_service.errors import DuplicateEntity, InstanceNotExist
from litehit_service.litehit.config import ReplayConfig
from litehit_service.litehit.parsing import inline_batches
from litehit_service.offline.outputs import run_line
from litehit_service.traces.readers import get_reader

DEFAULT_BATCH_QUERIES = 1024
"""Queries per packed batch (fewer with a low ``rate``: about ten batches a second)."""


def check_rate(rate: float | None) -> None:
    """``InvalidRequestError`` naming the value unless ``rate`` is None (no limit) or a
    finite number of queries per second > 0. O(1)."""
    if rate is None:
        return
    if isinstance(rate, bool) or not isinstance(rate, (int, float)):
        raise InvalidRequestError(f"rate must be a number of queries/s > 0, got {rate!r}")
    if not (math.isfinite(rate) and rate > 0):
        raise InvalidRequestError(f"rate must be a finite number of queries/s > 0, got {rate!r}")


class Pacer:
    """Holds a stream to ``rate`` queries per second: :meth:`wait` before sending, given
    the queries sent so far, sleeps until ``start + sent / rate`` (``start``: the first
    call). ``rate`` None never sleeps. ``clock`` (seconds, monotonic) and ``sleep`` are
    injectable for tests. O(1) per call."""

    def __init__(
        self,
        rate: float | None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        check_rate(rate)
        self.rate = rate
        self._clock = clock
        self._sleep = sleep
        self._start: float | None = None

    def delay(self, sent: int) -> float:
        """Seconds to wait before sending more after ``sent`` queries (0 when on time)."""
        now = self._clock()
        if self._start is None:
            self._start = now
        if self.rate is None:
            return 0.0
        return max(0.0, self._start + sent / self.rate - now)

    def wait(self, sent: int) -> None:
        """Sleep :meth:`delay` seconds (no call to ``sleep`` when on time)."""
        seconds = self.delay(sent)
        if seconds > 0:
            self._sleep(seconds)


@dataclass(frozen=True, slots=True)
class FeedRoute:
    """Where requests go, the replay's rule: ``fixed`` instances for every request (one:
    ``--instance`` or the config's ``override_instance_id``; several: its
    ``fanout_all_instances``), else (empty) the event's own ``instance_id``;
    ``default_instance`` names the events of a format without instance ids."""

    fixed: tuple[str, ...] = ()
    default_instance: str = ""

    def targets(self, event_instance: str) -> tuple[str, ...]:
        """The instances one request of ``event_instance`` goes to. O(1)."""
        return self.fixed or (event_instance,)


@dataclass(frozen=True, slots=True)
class Target:
    """A registered instance as the feed needs it: block size (tokens) and whether its
    group chains keys (``enable_prefix_hash``)."""

    instance_id: str
    block_size: int
    prefix_hash: bool


def lookup_target(client: Any, instance_id: str, hint: str = "") -> Target:
    """GetInstance and GetInstanceGroup (two reads) for ``instance_id``; an unknown
    instance raises :class:`~litehit_service.errors.InstanceNotExist` whose message names
    it, the server and ``hint``."""
    try:
        info = client.get_instance(instance_id)
    except InstanceNotExist:
        raise InstanceNotExist(
            f"instance_id {instance_id!r} is not registered on {client.target}{hint}"
        ) from None
    group = client.get_instance_group(info.instance_group).instance_group
    return Target(instance_id, int(info.block_size), bool(group.enable_prefix_hash))


def register_from_config(client: Any, config: ReplayConfig, only: str = "") -> tuple[str, ...]:
    """Create the config's groups (an existing group of that name is kept as it is) and
    register its instances (all, or ``only``: it must be one of them, else
    ``InvalidRequestError`` naming it). Identical registrations are accepted by the server
    as they are. Returns the instance ids registered. Admin RPCs; O(instances)."""
    regs = [r for r in config.instances if not only or r.instance_id == only]
    if not regs:
        known = [r.instance_id for r in config.instances]
        raise InvalidRequestError(
            f"--instance {only!r} is not an instance of {config.source or 'the config'} {known}"
        )
    needed = {r.instance_group for r in regs}
    for group in config.instance_groups:
        if group.name not in needed:
            continue
        try:
            client.create_instance_group(group)
        except DuplicateEntity:
            pass  # kept as it is: the server's group is the truth
    for reg in regs:
        client.register_instance(reg)
    return tuple(r.instance_id for r in regs)


def trace_events(
    path: str, trace_format: str, block_size: int, instance_id: str, max_line_bytes: int
) -> Iterator[Any]:
    """The request and write events of ``path`` in the format's order, lazily for formats
    read line by line (their first bad line raises after the events before it), at once
    for a format read whole (LMCache). Events are ``(line_no, kind, instance_id, trace_id,
    timestamp_ns, keys, input_len)``. O(trace bytes)."""
    reader = get_reader(trace_format)
    if reader.whole_input:
        yield from reader.read(path, max_line_bytes=max_line_bytes)
        return
    for events, error, _ in inline_batches(
        path, trace_format, block_size, instance_id, False, max_line_bytes
    ):
        yield from events
        if error is not None:
            raise error


@dataclass
class _Buffer:
    keys: list[int] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)


class BatchBuilder:
    """Routes events to instances and packs them into one ``TraceQueryPackedRequest`` per
    ``batch_queries`` queries of an instance (:meth:`batches`), normalising keys from
    ``trace_block_size`` to each instance's block size. ``lookup`` (instance id ->
    :class:`Target`) is called once per instance. Counts ``requests`` (request events),
    ``writes`` (skipped) and ``queries`` (packed; a fanned-out request counts once per
    instance)."""

    def __init__(
        self,
        route: FeedRoute,
        trace_block_size: int,
        lookup: Callable[[str], Target],
        batch_queries: int = DEFAULT_BATCH_QUERIES,
    ) -> None:
        if batch_queries <= 0:
            raise ValueError(f"batch_queries must be > 0, got {batch_queries}")
        self.route = route
        self.trace_block_size = trace_block_size
        self.lookup = lookup
        self.batch_queries = batch_queries
        self.targets: dict[str, Target] = {}
        self.requests = 0
        self.writes = 0
        self.queries = 0

    def target(self, instance_id: str) -> Target:
        """The :class:`Target` of ``instance_id`` (looked up once); InvalidRequestError when
        its block size is not a multiple of the trace's."""
        found = self.targets.get(instance_id)
        if found is None:
            found = self.lookup(instance_id)
            if found.block_size % self.trace_block_size:
                raise InvalidRequestError(
                    f"instance {instance_id!r} has block_size {found.block_size}, not a "
                    f"multiple of the trace block size {self.trace_block_size} (re-blocking "
                    "only coarsens)"
                )
            self.targets[instance_id] = found
        return found

    def keys_for(self, target: Target, keys: Sequence[int], tokens: int) -> tuple[list[int], int]:
        """``keys`` and ``tokens`` as the server takes them for ``target``. O(keys)."""
        if target.block_size == self.trace_block_size:
            return list(keys), tokens
        normalized = normalize_request(
            keys, tokens, target.block_size, target.prefix_hash, self.trace_block_size
        )
        return normalized.block_keys, normalized.input_token_len

    def batches(self, events: Iterable[Any]) -> Iterator[pb2.TraceQueryPackedRequest]:
        """Packed batches of ``events`` (full ones as they fill, the rest at the end; when
        reading or routing fails, the requests before the failure are still sent, then the
        error is raised)."""
        buffers: dict[str, _Buffer] = {}
        try:
            yield from self._fill(events, buffers)
        except Exception:  # what came before the error is fed, then the error goes on
            for iid in list(buffers):
                yield self._pack(iid, buffers.pop(iid))
            raise
        for iid in list(buffers):
            yield self._pack(iid, buffers.pop(iid))

    def _fill(
        self, events: Iterable[Any], buffers: dict[str, _Buffer]
    ) -> Iterator[pb2.TraceQueryPackedRequest]:
        for event in events:
            if event[1] == "write":
                self.writes += 1
                continue
            self.requests += 1
            for iid in self.route.targets(event[2]):
                target = self.target(iid)
                try:
                    keys, tokens = self.keys_for(target, event[5], event[6])
                except InvalidRequestError as exc:
                    raise InvalidRequestError(f"line {event[0]}: {exc}") from None
                buf = buffers.setdefault(iid, _Buffer())
                buf.keys += keys
                buf.counts.append(len(keys))
                buf.tokens.append(tokens)
                if len(buf.counts) >= self.batch_queries:
                    yield self._pack(iid, buffers.pop(iid))

    def _pack(self, iid: str, buf: _Buffer) -> pb2.TraceQueryPackedRequest:
        self.queries += len(buf.counts)
        return wire.packed_query_to_pb(iid, buf.keys, buf.counts, buf.tokens)


@dataclass(frozen=True, slots=True)
class FeedSummary:
    """What a feed did: ``requests`` read (``writes`` skipped), ``queries`` answered,
    ``elapsed_s`` (wall seconds, registration included), ``server``, and per fed instance
    the server's ``ListInstances`` entry after the feed (``instances``, by id)."""

    requests: int
    writes: int
    queries: int
    elapsed_s: float
    server: str
    instances: tuple[pb2.OptimizerInstanceSummary, ...]

    @property
    def queries_per_s(self) -> float:
        """Queries answered per wall second (0 when no time passed)."""
        return self.queries / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def instance_lines(self) -> list[str]:
        """One line per fed instance: the token hit rate the server reports per capacity
        slot (and unlimited, when tracked), over all its queries so far."""
        out = []
        for s in self.instances:
            rates = [f"{c.capacity_gb:g} GiB {c.hit_rate:.2%}" for c in s.capacity_summaries]
            theo = s.theoretical_summary
            if theo.total_max_hits >= 0:
                rates.append(f"inf {theo.max_hit_rate:.2%}")
            out.append(
                f"  {s.instance_id} (group {s.instance_group}, block {s.debug_info.block_size} "
                f"tokens, {s.total_queries} queries on the server): token hit rate "
                f"{', '.join(rates)}"
            )
        return out

    def summary_line(self) -> str:
        """``feed: N queries, R requests, K instances, T s, Q queries/s -> SERVER``."""
        parts = f"{self.requests} requests, {len(self.instances)} instances"
        return run_line("feed", self.queries, "queries", parts, self.elapsed_s, self.server)


def run_feed(
    client: Any,
    trace_path: str,
    trace_format: str,
    trace_block_size: int,
    route: FeedRoute,
    *,
    rate: float | None = None,
    batch_queries: int = DEFAULT_BATCH_QUERIES,
    progress: bool = False,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    hint: str = "",
    pacer: Pacer | None = None,
) -> FeedSummary:
    """Stream the requests of ``trace_path`` into the server of ``client`` (a query token
    as its bearer when the server wants one) and return the :class:`FeedSummary`.

    The instances of ``route.fixed`` are looked up before anything is sent (an unknown one
    raises InstanceNotExist naming it and ``hint``); those named by events when they first
    appear. ``rate`` (queries/s, None = as fast as the server answers) lowers the batch
    size to about a tenth of a second of queries. A trace or lookup error raised while
    the stream runs is raised here once the stream stopped; a refused batch raises its
    typed error, a transport failure ``grpc.RpcError``. Cost: module docstring.
    """
    started = time.perf_counter()
    check_rate(rate)
    pacer = pacer or Pacer(rate)
    if rate is not None:
        batch_queries = max(1, min(batch_queries, int(rate / 10)))
    builder = BatchBuilder(
        route, trace_block_size, lambda iid: lookup_target(client, iid, hint), batch_queries
    )
    for iid in route.fixed:
        builder.target(iid)
    events = trace_events(
        trace_path, trace_format, trace_block_size, route.default_instance, max_line_bytes
    )
    failure: list[BaseException] = []
    sent = [0]
    lock = threading.Lock()

    def paced() -> Iterator[pb2.TraceQueryPackedRequest]:
        try:
            for batch in builder.batches(events):
                pacer.wait(sent[0])
                sent[0] += len(batch.key_counts)
                yield batch
        except Exception as exc:  # raised in gRPC's sender thread: handed to the caller
            with lock:
                failure.append(exc)

    bar = _bar(progress)
    answered = 0
    try:
        try:
            for result in client.stream_packed(paced()):
                answered += result.queries
                if bar is not None:
                    bar.update(result.queries)
        except Exception:
            if failure:
                raise failure[0] from None
            raise
        if failure:
            raise failure[0]
    finally:
        if bar is not None:
            bar.close()
    fed = sorted(builder.targets)
    listed = {s.instance_id: s for s in client.list_instances().instances}
    return FeedSummary(
        requests=builder.requests,
        writes=builder.writes,
        queries=answered,
        elapsed_s=time.perf_counter() - started,
        server=client.target,
        instances=tuple(listed[iid] for iid in fed if iid in listed),
    )


def _bar(enabled: bool) -> Any:
    """A tqdm bar of queries answered on stderr, or None when not ``enabled``."""
    if not enabled:
        return None
    import sys

    from tqdm import tqdm

    return tqdm(unit="q", unit_scale=True, file=sys.stderr, leave=False, mininterval=0.5,
                desc="feed")  # fmt: skip
