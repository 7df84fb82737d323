"""Prometheus metrics of the online optimizer.

Per-instance series are computed at scrape time from the manager's live states (each
state's lock is held only while its counters are copied), so a removed instance's series
disappear and ResetStats restarts them from zero. Request latency and error counts are
ordinary instruments fed by the servicer. The standard ``process_*``, ``python_gc_*`` and
``python_info`` families are exported as client_python does by default. Everything lives
on a private :class:`~prometheus_client.CollectorRegistry`, never the process-global one.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from wsgiref.simple_server import WSGIServer

import numpy as np
from prometheus_client import (
    CollectorRegistry,
    Counter,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client import start_http_server as _start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from litehit_core import capacity_gb_to_bytes
from litehit_core.curve import log_spaced
from litehit_service.addresses import format_address
from litehit_service.manager import InstanceInfo, OnlineOptimizerManager
from litehit_service.stats import StreamSource

_LABELS = ["instance_group", "instance_id"]
_CAP_LABELS = [*_LABELS, "capacity_gb"]

LATENCY_BUCKETS = (
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    1.0,
)
"""Histogram buckets (seconds) for one TraceQuery: 50 us to 1 s."""


def format_capacity_label(gb: float) -> str:
    """The ``capacity_gb`` label text: shortest float repr without a trailing ".0".

    ``8.0 -> "8"``, ``0.5 -> "0.5"``, ``1e-06 -> "1e-06"``. O(1).
    """
    text = repr(float(gb))
    return text[:-2] if text.endswith(".0") else text


class InstanceCollector(Collector):
    """Computes every per-instance family from ``manager.list_instances()`` per scrape.

    Cost per scrape: O(instances * slots) plus each instance's
    ``LiteHit.memory_usage_bytes`` (taken under that instance's lock).
    """

    def __init__(self, manager: OnlineOptimizerManager) -> None:
        self._manager = manager

    def describe(self) -> Iterator[Metric]:
        """The families this collector produces (without samples)."""
        return iter(_families())

    def collect(self) -> Iterator[Metric]:
        """One sample set per live instance, computed now."""
        fams = _families()
        (
            queries,
            tokens,
            blocks,
            hit_tokens,
            hit_blocks,
            theoretical,
            capacity,
            unique,
            memory,
            kv_usage,
            expired,
            dropped,
            limit,
            instances,
        ) = fams
        summaries = self._manager.list_instances()
        for s in summaries:
            lv = [s.instance_group, s.instance_id]
            bs = s.debug_info.block_size
            queries.add_metric(lv, s.total_queries)
            tokens.add_metric(lv, s.total_input_tokens)
            blocks.add_metric(lv, s.total_blocks_queried)
            seen: set[str] = set()
            for c in s.capacity_summaries:
                label = format_capacity_label(c.capacity_gb)
                if label in seen:
                    continue  # duplicate capacity_gb: identical slot, one series
                seen.add(label)
                clv = [*lv, label]
                hit_tokens.add_metric(clv, c.total_hits * bs)
                hit_blocks.add_metric(clv, c.total_hits)
                capacity.add_metric(clv, c.capacity_blocks)
            if s.theoretical_enabled:
                theoretical.add_metric(lv, s.total_max_hits * bs)
            unique.add_metric(lv, s.debug_info.unique_keys)
            memory.add_metric(lv, s.debug_info.memory_usage_bytes)
            kv_usage.add_metric(lv, s.debug_info.kv_cache_usage_bytes)
            expired.add_metric(lv, s.debug_info.ttl_eviction_count)
            dropped.add_metric(lv, s.debug_info.dropped_blocks)
            limit.add_metric(lv, s.debug_info.max_tracked_blocks)
        instances.add_metric([], len(summaries))
        return iter(fams)


def _families() -> list[Metric]:
    """Fresh, empty metric families in a fixed order (see :meth:`InstanceCollector.collect`)."""
    return [
        CounterMetricFamily(
            "litehit_trace_queries", "TraceQuery requests processed (queries).", labels=_LABELS
        ),
        CounterMetricFamily(
            "litehit_input_tokens", "Input tokens of processed queries (tokens).", labels=_LABELS
        ),
        CounterMetricFamily(
            "litehit_queried_blocks",
            "Blocks of processed queries at the instance block size (blocks).",
            labels=_LABELS,
        ),
        CounterMetricFamily(
            "litehit_hit_tokens",
            "Prefix-hit tokens in an LRU of this capacity (tokens = hit blocks * block_size).",
            labels=_CAP_LABELS,
        ),
        CounterMetricFamily(
            "litehit_hit_blocks",
            "Prefix-hit blocks in an LRU of this capacity (blocks).",
            labels=_CAP_LABELS,
        ),
        CounterMetricFamily(
            "litehit_theoretical_hit_tokens",
            "Prefix-hit tokens with unlimited capacity (tokens; theoretical-enabled groups).",
            labels=_LABELS,
        ),
        GaugeMetricFamily(
            "litehit_capacity_blocks",
            "Capacity of the slot in whole blocks (blocks; hybrid instances: "
            "floor(C*s/(s*F+L)), display only).",
            labels=_CAP_LABELS,
        ),
        GaugeMetricFamily(
            "litehit_unique_blocks",
            "Distinct blocks resident with unlimited capacity (blocks).",
            labels=_LABELS,
        ),
        GaugeMetricFamily(
            "litehit_memory_bytes",
            "Tracked engine state of the instance (bytes, estimated: its key tables, "
            "recency lists and live curve), not the process; the process's resident "
            "memory is process_resident_memory_bytes.",
            labels=_LABELS,
        ),
        GaugeMetricFamily(
            "litehit_kv_cache_usage_bytes",
            "KV cache bytes the tracked objects would occupy (bytes = tracked blocks x block "
            "bytes, plus saved states x state bytes for hybrid instances).",
            labels=_LABELS,
        ),
        CounterMetricFamily(
            "litehit_ttl_expired_blocks",
            "Blocks dropped because their TTL lapsed (blocks).",
            labels=_LABELS,
        ),
        CounterMetricFamily(
            "litehit_dropped_blocks",
            "Least recent blocks dropped past max_tracked_blocks (blocks); while it grows the "
            "theoretical maximum is that of an LRU of max_tracked_blocks.",
            labels=_LABELS,
        ),
        GaugeMetricFamily(
            "litehit_max_tracked_blocks",
            "Most blocks the instance tracks (blocks; 0 = unlimited).",
            labels=_LABELS,
        ),
        GaugeMetricFamily("litehit_instances", "Registered instances.", labels=[]),
    ]


class LatencyHistogram(Collector):
    """``litehit_trace_query_duration_seconds{method,instance_group,instance_id}``.

    Per-query handling time. Unlike ``prometheus_client.Histogram`` it takes a whole batch
    of observations under one lock (:meth:`observe_many`), which keeps the per-query cost
    of a streamed batch far below a microsecond. Buckets are ``le`` (inclusive) bounds in
    seconds. Series are keyed by instance id; the group label is looked up at scrape time,
    and ids that are no longer registered are dropped then (bounded cardinality: a query
    for an unknown instance is recorded with empty instance labels).
    """

    name = "litehit_trace_query_duration_seconds"
    labels = ["method", "instance_group", "instance_id"]

    def __init__(
        self, manager: OnlineOptimizerManager, bounds: tuple[float, ...] = LATENCY_BUCKETS
    ) -> None:
        self._manager = manager
        self._bounds = bounds
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], list[int]] = {}
        self._sums: dict[tuple[str, str], float] = {}

    def observe_many(
        self, method: str, seconds: Sequence[float], instance_ids: Sequence[str]
    ) -> None:
        """Record observations (seconds) of ``method``, one per instance id. O(k log b)."""
        bounds = self._bounds
        slots = [bisect_left(bounds, v) for v in seconds]
        with self._lock:
            counts_of, sums = self._counts, self._sums
            for iid, slot, value in zip(instance_ids, slots, seconds, strict=True):
                key = (method, iid)
                counts = counts_of.get(key)
                if counts is None:
                    counts = counts_of[key] = [0] * (len(bounds) + 1)
                    sums[key] = 0.0
                counts[slot] += 1
                sums[key] += value

    def observe_uniform(self, method: str, seconds: float, count: int, instance_id: str) -> None:
        """Record ``count`` observations of ``seconds`` each (a packed batch's queries share
        its time per query). O(log b)."""
        slot = bisect_left(self._bounds, seconds)
        with self._lock:
            key = (method, instance_id)
            counts = self._counts.get(key)
            if counts is None:
                counts = self._counts[key] = [0] * (len(self._bounds) + 1)
                self._sums[key] = 0.0
            counts[slot] += count
            self._sums[key] += seconds * count

    def forget(self, instance_id: str) -> None:
        """Drop every series of ``instance_id`` (removed, reset or re-registered). O(series)."""
        with self._lock:
            for key in [k for k in self._counts if k[1] == instance_id]:
                del self._counts[key]
                del self._sums[key]

    def describe(self) -> Iterator[Metric]:
        yield HistogramMetricFamily(self.name, "", labels=self.labels)

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(
            self.name, "Time to handle one TraceQuery, per query (seconds).", labels=self.labels
        )
        groups = {i.instance_id: i.instance_group for i in self._manager.instance_infos()}
        groups[""] = ""
        with self._lock:
            for key in [k for k in self._counts if k[1] not in groups]:
                del self._counts[key]
                del self._sums[key]
            snapshot = [(k, list(c), self._sums[k]) for k, c in sorted(self._counts.items())]
        for (method, iid), counts, total in snapshot:
            cumulative = 0
            buckets = []
            for bound, count in zip(self._bounds, counts[:-1], strict=True):  # then +Inf
                cumulative += count
                buckets.append((repr(float(bound)), cumulative))
            buckets.append(("+Inf", cumulative + counts[-1]))
            family.add_metric([method, groups[iid], iid], buckets, total)
        yield family


DEFAULT_CURVE_GRID_POINTS = 16
MAX_CURVE_GRID_POINTS = 256
CURVE_TARGETS = (0.5, 0.8, 0.9, 0.95, 0.99)
"""Fractions of the theoretical hits whose capacity ``litehit_capacity_for_target_bytes``
reports."""


def curve_grid(info: InstanceInfo, points: int) -> tuple[int, ...]:
    """The fixed capacities (bytes) of an instance's ``litehit_curve_hit_tokens_total``
    series: ``points`` log-spaced capacities from one block (a block and a state for hybrid
    instances) to the most the instance tracks (16x its largest slot when unlimited),
    whole blocks (multiples of the gcd of block and state bytes for hybrid instances). Fixed
    for the registration, so ``rate()`` over any window reads the windowed curve there.
    O(points)."""
    if points <= 0:
        return ()
    unit, low, top = info.spec.capacity_bounds(info.block_bytes)
    if not top:
        top = 16 * capacity_gb_to_bytes(max(info.group.capacity_gb))
    lo_units = -(-low // unit)
    units = log_spaced(lo_units, max(top // unit, lo_units), points)
    return tuple((units * unit).tolist())


class CurveCollector(Collector):
    """The live curves at scrape time: per instance, cumulative hit tokens at the fixed
    :func:`curve_grid` capacities (``rate()`` of them over a window is the windowed curve),
    the capacity reaching each of :data:`CURVE_TARGETS` of the theoretical hits
    (cumulative), the curve's corners and resolution.

    Cost per scrape: per instance, a frozen copy of its curve (under its lock: O(1) after
    merging the buffered facts) and O(B) to read B corners, outside every lock.
    """

    def __init__(self, manager: OnlineOptimizerManager, grid_points: int) -> None:
        if isinstance(grid_points, bool) or not isinstance(grid_points, int):
            raise ValueError(f"curve grid points must be an integer, got {grid_points!r}")
        if not 0 <= grid_points <= MAX_CURVE_GRID_POINTS:
            raise ValueError(
                f"curve grid points must be in 0..{MAX_CURVE_GRID_POINTS}, got {grid_points}"
            )
        self._manager = manager
        self.grid_points = grid_points

    def describe(self) -> Iterator[Metric]:
        return iter(self._families())

    def _families(self) -> list[Metric]:
        return [
            CounterMetricFamily(
                "litehit_curve_hit_tokens",
                "Prefix-hit tokens an LRU of capacity_bytes would have had (tokens, exact; "
                "rate() over a window gives the windowed curve at these capacities).",
                labels=[*_LABELS, "capacity_bytes"],
            ),
            GaugeMetricFamily(
                "litehit_capacity_for_target_bytes",
                "Smallest capacity whose hits reach this fraction of the theoretical hits "
                "(bytes; cumulative since registration or ResetStats; 0 without hits).",
                labels=[*_LABELS, "target"],
            ),
            GaugeMetricFamily(
                "litehit_curve_corners",
                "Corners of the instance's exact live curve.",
                labels=_LABELS,
            ),
            GaugeMetricFamily(
                "litehit_curve_resolution_bytes",
                "The live curve is exact at every multiple of this many bytes.",
                labels=_LABELS,
            ),
        ]

    def collect(self) -> Iterator[Metric]:
        fams = hit_tokens, targets, corners, resolution = self._families()
        for info, view in self._manager.curve_views():
            lv = [info.instance_group, info.instance_id]
            grid = curve_grid(info, self.grid_points)
            if grid:
                units = np.array([view.units_for_bytes(b) for b in grid], np.int64)
                for nbytes, h in zip(grid, view.hit_tokens_at_many(units).tolist(), strict=True):
                    hit_tokens.add_metric([*lv, str(nbytes)], h)
            for f in CURVE_TARGETS:
                targets.add_metric([*lv, repr(f)], view.capacity_for_fraction(f) * view.unit_bytes)
            corners.add_metric(lv, view.corners())
            resolution.add_metric(lv, view.resolution_bytes)
        return iter(fams)


class ServiceCollector(Collector):
    """Process-wide figures computed at scrape time: re-registrations, durable state and
    the transport's streams (once :meth:`ServiceMetrics.attach_transport` ran)."""

    def __init__(self, manager: OnlineOptimizerManager) -> None:
        self._manager = manager
        self.transport: StreamSource | None = None

    def describe(self) -> Iterator[Metric]:
        return iter(self._families())

    def _families(self) -> list[Metric]:
        return [
            CounterMetricFamily(
                "litehit_instance_replacements",
                "Registrations that replaced an instance with a different registration "
                "(fresh state).",
            ),
            CounterMetricFamily(
                "litehit_snapshot_failures",
                "Instance snapshots that could not be used (corrupt, mismatch: the instance "
                "started fresh) or written (write_failed).",
                labels=["reason"],
            ),
            CounterMetricFamily("litehit_snapshots_written", "Instance snapshots written."),
            GaugeMetricFamily(
                "litehit_snapshot_last_write_seconds", "Time to write the last snapshot (s)."
            ),
            GaugeMetricFamily(
                "litehit_snapshot_last_success_timestamp_seconds",
                "Unix time of the last snapshot written (s).",
            ),
            GaugeMetricFamily(
                "litehit_snapshot_restored_instances",
                "Instances restored from their snapshot at start-up.",
            ),
            GaugeMetricFamily(
                "litehit_active_streams",
                "Open TraceQueryStream and TraceQueryPackedStream calls.",
            ),
            CounterMetricFamily(
                "litehit_streams_rejected",
                "Stream calls (TraceQueryStream, TraceQueryPackedStream) refused past "
                "--max-streams (RESOURCE_EXHAUSTED).",
            ),
            CounterMetricFamily(
                "litehit_streams_idle_closed",
                "Streams ended after --stream-idle-seconds without a message.",
            ),
            CounterMetricFamily(
                "litehit_unauthenticated",
                "Calls refused for a missing or wrong token (UNAUTHENTICATED).",
                labels=["method"],
            ),
            CounterMetricFamily(
                "litehit_undecodable_messages",
                "Messages that could not be decoded (their call was ended).",
                labels=["method"],
            ),
        ]

    def collect(self) -> Iterator[Metric]:
        (
            replacements,
            failures,
            written,
            last_seconds,
            last_success,
            restored,
            active,
            rejected,
            idle,
            unauthenticated,
            undecodable,
        ) = fams = self._families()
        manager = self._manager
        replacements.add_metric([], manager.instance_replacements)
        stats = manager.state_stats
        for reason in ("corrupt", "mismatch", "write_failed"):
            failures.add_metric([reason], stats.failures.get(reason, 0))
        written.add_metric([], stats.writes)
        last_seconds.add_metric([], stats.last_write_seconds)
        last_success.add_metric([], stats.last_write_unix)
        restored.add_metric([], stats.restored)
        transport = self.transport
        if transport is not None:
            t = transport.stats
            active.add_metric([], len(transport.streams))
            rejected.add_metric([], t.streams_rejected)
            idle.add_metric([], t.streams_idle_closed)
            for method, n in sorted(dict(t.unauthenticated).items()):
                unauthenticated.add_metric([method], n)
            for method, n in sorted(dict(t.undecodable).items()):
                undecodable.add_metric([method], n)
        return iter(fams)


class ServiceMetrics:
    """Every metric of one service, on ``registry`` (None: a fresh private registry);
    ``curve_grid_points`` capacities per instance in ``litehit_curve_hit_tokens_total``
    (0 = none; at most :data:`MAX_CURVE_GRID_POINTS`). The registry also gets
    client_python's default process (``process_*``: resident memory, CPU, open fds, start
    time; Linux), garbage collector (``python_gc_*``) and platform (``python_info``)
    collectors, unless it already holds them (the global registry does)."""

    def __init__(
        self,
        manager: OnlineOptimizerManager,
        registry: CollectorRegistry | None = None,
        curve_grid_points: int = DEFAULT_CURVE_GRID_POINTS,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.registry.register(InstanceCollector(manager))
        self.registry.register(CurveCollector(manager, curve_grid_points))
        self._service = ServiceCollector(manager)
        self.registry.register(self._service)
        self._latency = LatencyHistogram(manager)
        self.registry.register(self._latency)
        self._errors = Counter(
            "litehit_errors",
            "Requests answered with an error status, by RPC method and ErrorCode name "
            "(kept across restarts in the data dir, like every other counter).",
            ["method", "code"],
            registry=self.registry,
        )
        for standard in (ProcessCollector, GCCollector, PlatformCollector):
            try:
                standard(registry=self.registry)
            except ValueError:  # already there (the global registry holds them)
                pass

    def attach_transport(self, transport: StreamSource) -> None:
        """Report the transport's streams and refusals from now on."""
        self._service.transport = transport

    def observe_query(self, method: str, seconds: float, instance_id: str = "") -> None:
        """Record one query's handling time (seconds). O(log buckets)."""
        self._latency.observe_many(method, (seconds,), (instance_id,))

    def observe_queries(
        self, method: str, seconds: Sequence[float], instance_ids: Sequence[str]
    ) -> None:
        """Record a batch of queries' handling times under one lock. O(k log buckets)."""
        self._latency.observe_many(method, seconds, instance_ids)

    def observe_packed(self, method: str, seconds: float, queries: int, instance_id: str) -> None:
        """Record a packed batch of ``queries`` queries handled in ``seconds``: each query
        counts its share of the time. O(log buckets)."""
        if queries:
            self._latency.observe_uniform(method, seconds / queries, queries, instance_id)

    def forget_instance(self, instance_id: str) -> None:
        """Drop the latency series of ``instance_id`` (the per-instance counters are
        computed from live state and need nothing). O(series)."""
        self._latency.forget(instance_id)

    def count_error(self, method: str, code: str) -> None:
        """Count one error answer of ``method`` with ErrorCode name ``code``. O(1)."""
        self._errors.labels(method, code).inc()

    def error_counts(self) -> dict[tuple[str, str], float]:
        """``litehit_errors_total`` now: (method, code) -> count. O(series)."""
        return {
            (s.labels["method"], s.labels["code"]): s.value
            for family in self._errors.collect()
            for s in family.samples
            if s.name.endswith("_total")
        }

    def restore_error_counts(self, counts: dict[tuple[str, str], float]) -> None:
        """Add ``counts`` ((method, code) -> count, saved by an earlier process) to
        ``litehit_errors_total``. O(series)."""
        for (method, code), value in counts.items():
            if value > 0:
                self._errors.labels(method, code).inc(value)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric (computed now)."""
        return generate_latest(self.registry)

    def start_http_server(self, host: str, port: int) -> tuple[WSGIServer, int]:
        """Serve ``/metrics`` on ``host:port`` (0 = ephemeral) in a daemon thread.

        Returns the server (stop it with ``shutdown()`` then ``server_close()``) and the
        bound port. An address that cannot be bound (in use, not local) is an ``OSError``
        ``cannot listen on HOST:PORT (metrics): reason``.
        """
        try:
            server, _thread = _start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            where = format_address(host, port)
            raise OSError(f"cannot listen on {where} (metrics): {exc.strerror or exc}") from None
        return server, int(server.server_port)
