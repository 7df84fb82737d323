"""``litehit simulate`` and ``litehit sweep``: LMCache's cache-simulator report and capacity
sweep, computed from ONE replay that is exact at every capacity.

The workload (:func:`load_workload`) is every request of the inputs as one stream through
one cache, sorted by time and cut to ``max_samples``, as LMCache's simulator takes it; an
LMCache log, a Mooncake trace or a standard trace. :func:`replay_workload` runs it once
in the chosen touch order, through :class:`~litehit_core.block_lru.BlockLRU` (one compiled
loop) or, for a small workload of prefix-chained keys, an interpreter engine
(:mod:`litehit_core.staircases`: no numba start-up), and keeps, per request, its staircase
fact, the depth of each cached prefix chunk and the depth of each touch. Everything a
capacity asks for is then arithmetic on arrays:

- a request's hit prefix at C chunks is the last corner of its staircase at or below C;
- LMCache's Stat 7 (cache position at hit, 0 = most recent) is a hit chunk's depth - 1;
- evictions at C are the touches deeper than C (or of untracked chunks: misses that insert)
  minus the chunks held at the end, min(C, distinct chunks): LMCache's cache is a plain LRU
  over the touch sequence;
- Stat 3 (reuse) and Stat 6 (span since the chunk's previous occurrence) come from the
  flattened keys and the hit mask.

With ``touch_order="head-first"`` every number equals LMCache 0.5.6's simulator on logs
without the three cases where that simulator departs from LMCache's documented semantics
(a partial tail-chunk hash, a duplicate hash within a request, a capacity below one
chunk): see the README's "Coming from LMCache". Hit rates are ratios of summed tokens; the
tail tokens of a request stay in the denominator.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import numpy as np

from litehit_core.accumulator import HitCurveAccumulator
from litehit_core.curve import GIB, InstanceCurve, log_spaced
from litehit_core.engine import staircase_batch_engine
from litehit_core.errors import InvalidRequestError
from litehit_core.lines import DEFAULT_MAX_LINE_BYTES
from litehit_core.projector import MAX_CAPACITY_GB
from litehit_core.staircases import BatchResult
from litehit_service.traces.readers import TraceEvent, format_names, reader_of_inputs

__all__ = [
    "FORMATS",
    "Replay",
    "Workload",
    "format_report",
    "format_sweep",
    "load_workload",
    "replay_workload",
    "report",
    "sweep",
    "sweep_capacities",
]

FORMATS = tuple(sorted(format_names()))
"""The trace formats ``simulate`` and ``sweep`` read (``--trace-format``), in name order."""
PERCENTILES = (25, 50, 75, 90, 99)
ROLLING_FRACTIONS = (0.1, 0.25, 0.5, 0.75, 1.0)
CURVE_TABLE_ROWS = 12


class SimulateError(InvalidRequestError):
    """The inputs cannot be simulated (no requests, no bytes per chunk, a bad option)."""


# ---------------------------------------------------------------- the workload


@dataclass(frozen=True)
class Workload:
    """Every request of the inputs as one stream, flattened for the compiled replay.

    ``keys`` (int64) holds request r's distinct chunk keys at ``keys[offsets[r]:offsets[r
    + 1]]``, head first; ``seq_len`` its tokens (the denominator, tail included);
    ``chunk_size`` its tokens per chunk. ``kv_bytes_per_chunk`` converts capacities in bytes
    to chunks (``detected`` when it came from the first event's shapes and dtypes).
    """

    keys: np.ndarray
    offsets: np.ndarray
    seq_len: np.ndarray
    chunk_size: np.ndarray
    kv_bytes_per_chunk: int
    detected: bool
    sources: tuple[str, ...]
    fmt: str
    model: str | None = None
    load_seconds: float = 0.0

    @property
    def requests(self) -> int:
        return int(self.seq_len.shape[0])

    @property
    def first_chunk_size(self) -> int:
        return int(self.chunk_size[0])


def load_workload(
    inputs: Sequence[str | os.PathLike[str]],
    *,
    fmt: str | None = None,
    model: str | None = None,
    max_samples: int | None = None,
    kv_bytes_per_chunk: int | None = None,
    block_size: int | None = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> Workload:
    """Read the inputs (files; directories of ``lookup_hashes_*.jsonl`` for LMCache logs)
    in format ``fmt`` (None: detected from each input's first line, which must agree), keep
    ``model``'s events (LMCache ``model_name``, a standard trace's ``instance_id``),
    sort them stably by time, keep the first ``max_samples`` (None or <= 0: all) and
    flatten them. LocatedError for a bad line; SimulateError naming the option otherwise.
    O(input size)."""
    started = time.process_time()
    paths = [os.fspath(p) for p in inputs]
    if not paths:
        raise SimulateError("-i/--input needs at least one file or directory")
    if fmt is not None and fmt not in FORMATS:
        raise SimulateError(f"--trace-format must be one of {list(FORMATS)}, got {fmt!r}")
    if kv_bytes_per_chunk is not None and kv_bytes_per_chunk <= 0:
        raise SimulateError(f"--kv-bytes-per-chunk must be > 0, got {kv_bytes_per_chunk}")
    reader = reader_of_inputs(paths, fmt, max_line_bytes=max_line_bytes)
    fmt = reader.name
    if reader.sizes_in_trace and block_size is not None:
        raise SimulateError("--block-size is not for LMCache logs: chunk_size is in the logs")
    if not reader.sizes_in_trace and kv_bytes_per_chunk is None:
        raise SimulateError(
            f"--kv-bytes-per-chunk is required for {fmt} inputs (their chunks have no shapes "
            "and dtypes to take the bytes from)"
        )
    events: list[TraceEvent] = []
    sizes: dict[str, tuple[int, int]] = {}
    for path in paths:
        if reader.sizes_in_trace:
            read_events, models = reader.read_sized(
                path, max_line_bytes=max_line_bytes, model=model,
                kv_bytes_per_chunk=kv_bytes_per_chunk,
            )  # fmt: skip
            events.extend(read_events)
            for name, (chunk, kv_bytes) in models.items():
                sizes.setdefault(name, (chunk, kv_bytes))
            continue
        size = block_size if block_size is not None else reader.default_block_size or 0
        options = {"block_size": size} if "block_size" in reader.options else {}
        for event in reader.read(path, max_line_bytes=max_line_bytes, **options):
            if event.kind == "write" or (model is not None and event.instance_id != model):
                continue
            events.append(event)
            sizes.setdefault(event.instance_id, (size, kv_bytes_per_chunk or 0))
    events.sort(key=lambda e: e.timestamp_ns)  # stable: ties keep input order
    if max_samples is not None and max_samples > 0:
        events = events[:max_samples]
    if not events:
        wanted = f" of model {model!r}" if model is not None else ""
        raise SimulateError(f"no requests{wanted} in {', '.join(paths)}")
    kv = kv_bytes_per_chunk
    detected = False
    if kv is None:
        kv = sizes[events[0].instance_id][1]
        detected = True
    lists = []
    for event in events:
        keys = event.keys
        if len(set(keys)) != len(keys):  # a repeated chunk counts at its first occurrence
            keys = list(dict.fromkeys(keys))
        lists.append(keys)
    lengths = np.fromiter(map(len, lists), np.int64, count=len(lists))
    offsets = np.zeros(len(lists) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    keys = np.fromiter(chain.from_iterable(lists), np.int64, count=int(offsets[-1]))
    seq_len = np.fromiter((e.input_len for e in events), np.int64, count=len(events))
    chunk = np.fromiter((sizes[e.instance_id][0] for e in events), np.int64, count=len(events))
    return Workload(
        keys, offsets, seq_len, chunk, int(kv), detected, tuple(paths), fmt, model,
        time.process_time() - started,
    )  # fmt: skip


# ---------------------------------------------------------------- one replay


@dataclass(frozen=True)
class Replay:
    """The capacity-free result of one pass (see the module docstring): the batch arrays,
    the distinct chunks held at the end, and the exact curve (hit tokens at every capacity
    in chunks)."""

    workload: Workload
    touch_order: str
    batch: BatchResult
    unique_chunks: int
    curve: InstanceCurve
    seconds: float
    _corners: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] = field(repr=False)

    def hit_prefix(self, capacity_chunks: int) -> np.ndarray:
        """Per request, its hit prefix (chunks) in an LRU of ``capacity_chunks`` (< 0:
        unlimited). O(corners + requests)."""
        owner, starts, thr, hits = self._corners
        n = self.workload.requests
        if capacity_chunks < 0:
            mask = np.ones(thr.shape[0], bool)
        else:
            mask = thr <= capacity_chunks
        below = np.bincount(owner[mask], minlength=n)
        last = starts + below - 1
        out = np.zeros(n, np.int64)
        some = below > 0
        out[some] = hits[last[some]]
        return out

    def hit_tokens(self, capacity_chunks: int) -> np.ndarray:
        """Per request, hit tokens (hit prefix x its chunk size). O(corners + requests)."""
        return self.hit_prefix(capacity_chunks) * self.workload.chunk_size


def replay_workload(
    workload: Workload,
    touch_order: str = "tail-first",
    *,
    depths: bool = True,
    engine: str = "auto",
) -> Replay:
    """Replay ``workload`` once in ``touch_order`` with ``engine`` (see
    :func:`~litehit_core.engine.staircase_batch_engine`; ``depths=False``: the per-block
    depths may be left out, for :func:`sweep` and the curve; :func:`report` refuses a replay
    without them). O(K log U) for K chunk keys."""
    started = time.process_time()
    staircases, curve_model = staircase_batch_engine(
        touch_order, keys=workload.keys, offsets=workload.offsets, depths=depths, engine=engine
    )
    batch = staircases.process_batch(workload.keys, workload.offsets)
    n = workload.requests
    counts = batch.counts
    owner = np.repeat(np.arange(n, dtype=np.int64), counts)
    first = np.zeros(n, np.int64)  # each request's first corner, in the corner arrays
    np.cumsum(counts[:-1], out=first[1:])
    within = np.arange(owner.shape[0], dtype=np.int64) - first[owner]
    index = workload.offsets[:-1][owner] + within
    thr, hits = batch.thr[index], batch.hits[index]
    jumps = hits.copy()
    jumps[within > 0] -= hits[np.flatnonzero(within > 0) - 1]
    sizes = workload.chunk_size
    single = bool((sizes == sizes[0]).all())
    accumulator = HitCurveAccumulator()
    accumulator.add_jumps(thr, jumps if single else jumps * sizes[owner])
    curve = InstanceCurve(
        workload.model or "all requests",
        int(sizes[0]) if single else 1,
        workload.kv_bytes_per_chunk,
        model=curve_model,  # a staircase in chunks, whichever the touch order
        accumulator=accumulator,
    )
    curve.requests = n
    curve.input_tokens = int(workload.seq_len.sum())
    return Replay(
        workload, touch_order, batch, staircases.current_unique_blocks(), curve,
        time.process_time() - started, (owner, first, thr, hits),
    )  # fmt: skip


# ---------------------------------------------------------------- the report


def _percentiles(sorted_values: np.ndarray | list[Any]) -> dict[str, Any]:
    """Nearest-rank percentiles (rank ceil(p * n / 100), 1-based) of sorted values."""
    n = len(sorted_values)
    if not n:
        return {}
    return {
        f"p{p}": _plain(sorted_values[min(max((p * n + 99) // 100, 1), n) - 1]) for p in PERCENTILES
    }


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python int or float it is (JSON keeps integers exact)."""
    return value.item() if hasattr(value, "item") else value


def _distribution(values: np.ndarray) -> dict[str, Any]:
    """count, mean (sum / count, exact for integers), max and percentiles of ints."""
    if not values.shape[0]:
        return {"count": 0}
    ordered = np.sort(values)
    return {
        "count": int(values.shape[0]),
        "mean": int(values.sum()) / int(values.shape[0]),
        "max": int(ordered[-1]),
        **_percentiles(ordered),
    }


def report(replay: Replay, capacity_bytes: int) -> dict[str, Any]:
    """LMCache's report at ``capacity_bytes`` (whole chunks; < 0 unlimited) plus the exact
    curve's figures, as JSON-ready data (integers stay integers). ValueError for a replay
    made without per-block depths. O(K + requests log)."""
    if replay.batch.depths is None or replay.batch.touches is None:
        raise ValueError("report() needs a replay with per-block depths (depths=True)")
    w = replay.workload
    kv = w.kv_bytes_per_chunk
    chunks = -1 if capacity_bytes < 0 else capacity_bytes // kv
    prefix = replay.hit_prefix(chunks)
    hit_tokens = prefix * w.chunk_size
    tokens = w.seq_len
    total, hit_total = int(tokens.sum()), int(hit_tokens.sum())
    n = w.requests
    rates = (hit_tokens / tokens).tolist()
    mean_rate = sum(rates) / n  # summed in request order, as LMCache sums
    # every chunk occurrence, flattened: its request, its place in it, hit or not
    keys, offsets = w.keys, w.offsets
    owner = np.repeat(np.arange(n, dtype=np.int64), np.diff(offsets))
    place = np.arange(keys.shape[0], dtype=np.int64) - offsets[:-1][owner]
    hit = place < prefix[owner]
    reuse = np.unique(keys[hit], return_counts=True)[1] if hit.any() else np.zeros(0, np.int64)
    order = np.argsort(keys, kind="stable")
    same = keys[order[1:]] == keys[order[:-1]]
    previous = np.full(keys.shape[0], -1, np.int64)
    previous[order[1:][same]] = order[:-1][same]
    where = np.flatnonzero(hit)
    spans = where - previous[where]
    positions = replay.batch.depths[hit] - 1
    touches = replay.batch.touches
    occupancy = replay.unique_chunks if chunks < 0 else min(chunks, replay.unique_chunks)
    misses = int(((touches < 0) | ((touches > chunks) if chunks >= 0 else False)).sum())
    evictions = misses - occupancy
    cum_hits = np.cumsum(hit_tokens)
    cum_tokens = np.cumsum(tokens)
    rolling = []
    for fraction in ROLLING_FRACTIONS:
        i = max(0, min(int(n * fraction) - 1, n - 1))
        rolling.append({"after_request": i + 1, "hit_rate": int(cum_hits[i]) / int(cum_tokens[i])})
    ordered_rates = sorted(rates)
    return {
        "aggregate": {
            "requests": n,
            "total_tokens": total,
            "hit_tokens": hit_total,
            "miss_tokens": total - hit_total,
            "token_hit_rate": hit_total / total,
            "cache_capacity_bytes": capacity_bytes,
            "cache_capacity_gib": capacity_bytes / GIB if capacity_bytes >= 0 else -1,
            "cache_capacity_chunks": chunks,
            "kv_bytes_per_chunk": kv,
            "cache_occupancy_chunks": occupancy,
            "evictions": evictions,
        },
        "per_request_hit_rate": {
            "zero_hit_requests": sum(1 for r in rates if r == 0.0),
            "full_hit_requests": sum(1 for r in rates if r == 1.0),
            "mean": mean_rate,
            **_percentiles(ordered_rates),
        },
        "hit_prefix_chunks": _distribution(prefix),
        "chunk_reuse": _distribution(reuse),
        "rolling_hit_rate": rolling,
        "global_span_chunks": _distribution(spans),
        "cache_position": _distribution(positions),
        "curve": curve_summary(replay),
        "input": input_summary(replay),
    }


def input_summary(replay: Replay) -> dict[str, Any]:
    """What the report and the sweep say of their input: sources, format, model, chunk
    size, KV bytes per chunk (and whether detected) and the touch order. O(sources)."""
    w = replay.workload
    return {
        "sources": list(w.sources),
        "format": w.fmt,
        "model": w.model,
        "chunk_size": w.first_chunk_size,
        "kv_bytes_per_chunk": w.kv_bytes_per_chunk,
        "kv_bytes_detected": w.detected,
        "touch_order": replay.touch_order,
    }


def curve_summary(replay: Replay, rows: int = CURVE_TABLE_ROWS) -> dict[str, Any]:
    """The exact curve's figures: the theoretical maximum, the 90/95/99 %-of-theoretical
    marks and ``rows`` log-spaced capacities up to saturation. O(rows log B)."""
    curve = replay.curve
    kv = replay.workload.kv_bytes_per_chunk
    marks = [
        {
            "percent": m.percent,
            "capacity_chunks": m.capacity,
            "capacity_bytes": m.capacity_bytes,
            "capacity_gib": m.capacity_gb,
            "hit_tokens": m.hit_tokens,
            "hit_rate": m.hit_rate,
        }
        for m in curve.marks()
    ]
    table = []
    saturation = curve.saturation
    if saturation > 0:
        for c in log_spaced(max(curve.first_hit, 1), saturation, rows).tolist():
            hits = curve.hit_tokens_at(c)
            table.append(
                {"capacity_chunks": c, "capacity_gib": c * kv / GIB, "hit_tokens": hits,
                 "hit_rate": curve.rate(hits)}
            )  # fmt: skip
    return {
        "theoretical_hit_tokens": curve.infinite_hit_tokens,
        "theoretical_hit_rate": curve.infinite_hit_rate,
        "saturation_chunks": saturation,
        "saturation_gib": saturation * kv / GIB,
        "marks": marks,
        "table": table,
    }


_SEP = "=" * 60


def _heading(out: list[str], title: str) -> None:
    out.extend(["", _SEP, title, _SEP])


def format_report(data: dict[str, Any]) -> str:
    """The text report: LMCache's sections and layout, then the exact curve."""
    a = data["aggregate"]
    chunks = a["cache_capacity_chunks"]
    if chunks < 0:
        capacity = "unlimited"
        occupancy = f"{a['cache_occupancy_chunks']:,} chunks"
    else:
        capacity = (f"{a['cache_capacity_gib']:.2f} GiB  ({chunks:,} chunks × "
                    f"{a['kv_bytes_per_chunk']:,} bytes/chunk)")  # fmt: skip
        occupancy = f"{a['cache_occupancy_chunks']:,} / {chunks:,} chunks"
    out = [_SEP, "Aggregate", _SEP]
    _rows(out, 16, [
        ("Requests processed", f"{a['requests']:,}"),
        ("Total tokens", f"{a['total_tokens']:,}"),
        ("Hit tokens", f"{a['hit_tokens']:,}"),
        ("Miss tokens", f"{a['miss_tokens']:,}"),
        ("Token hit rate", f"{a['token_hit_rate']:.2%}"),
        ("Cache capacity", capacity),
        ("Cache occupancy", occupancy),
    ])  # fmt: skip
    r, n = data["per_request_hit_rate"], a["requests"]
    _section(out, "Stat 1 — Per-request token hit rate distribution", r, 24, ".2%", [
        ("Requests with 0% hit rate", f"{r['zero_hit_requests']:,} "
                                      f"({r['zero_hit_requests'] / n:.1%})"),
        ("Requests with 100% hit rate", f"{r['full_hit_requests']:,} "
                                        f"({r['full_hit_requests'] / n:.1%})"),
        ("Mean", f"{r['mean']:.2%}"),
    ])  # fmt: skip
    p = data["hit_prefix_chunks"]
    _section(out, "Stat 2 — Hit prefix length per request (chunks)", p, 15, ".0f",
             [("Mean", f"{p['mean']:.1f}")])  # fmt: skip
    reuse = data["chunk_reuse"]
    if reuse["count"]:
        _section(out, "Stat 3 — Chunk reuse count distribution", reuse, 28, ".0f", [
            ("Unique chunks hit at least once", f"{reuse['count']:,}"),
            ("Mean reuse count", f"{reuse['mean']:.1f}"),
            ("Max reuse count", f"{reuse['max']:,}"),
        ])  # fmt: skip
    _heading(out, "Stat 4 — Rolling (cumulative) token hit rate over time")
    for row in data["rolling_hit_rate"]:
        out.append(f"  After request {row['after_request']:>6,} : {row['hit_rate']:.2%}")
    _heading(out, "Stat 5 — Evictions")
    _rows(out, 15, [("Total evictions", f"{a['evictions']:,}")])
    span = data["global_span_chunks"]
    if span["count"]:
        _section(out, "Stat 6 — Global span distribution (chunks between last store and hit)",
                 span, 15, ".0f", [("Total hit chunks", f"{span['count']:,}"),
                                   ("Mean span", f"{span['mean']:.1f}"),
                                   ("Max span", f"{span['max']:,}")])  # fmt: skip
    pos = data["cache_position"]
    if pos["count"]:
        _section(out, "Stat 7 — Cache position at hit (0 = MRU, max = LRU)", pos, 15, ".0f",
                 [("Mean position", f"{pos['mean']:.1f}"),
                  ("Max position", f"{pos['max']:,}")])  # fmt: skip
    _curve_lines(out, data["curve"], data["input"]["touch_order"])
    out.append(_SEP)
    return "\n".join(out) + "\n"


def _rows(out: list[str], pad: int, rows: list[tuple[str, str]]) -> None:
    """LMCache's ``  label<spaces>: value`` lines, labels padded to ``4 + pad`` characters."""
    out.extend(f"  {label:<{4 + pad}}: {text}" for label, text in rows)


def _section(out: list[str], title: str, stats: dict[str, Any], pad: int, spec: str,
             rows: list[tuple[str, str]]) -> None:  # fmt: skip
    """One statistics section: heading, ``rows``, then the percentiles of ``stats`` (p25 ...
    as :data:`PERCENTILES`) in format ``spec``, all aligned at ``4 + pad``."""
    _heading(out, title)
    _rows(out, pad, rows)
    _rows(out, pad, [(f"p{q}", f"{stats[f'p{q}']:{spec}}") for q in PERCENTILES])


def _curve_lines(out: list[str], c: dict[str, Any], touch_order: str) -> None:
    _heading(out, f"Every capacity, exactly (one replay, {touch_order})")
    out.append(
        f"  Theoretical max    : {c['theoretical_hit_rate']:.2%} (unlimited cache), first "
        f"reached at {c['saturation_chunks']:,} chunks = {c['saturation_gib']:.2f} GiB"
    )
    for m in c["marks"]:
        out.append(
            f"  {m['percent']}% of max         : {m['capacity_gib']:.2f} GiB "
            f"({m['capacity_chunks']:,} chunks), hit rate {m['hit_rate']:.2%}"
        )
    if c["table"]:
        out.append(f"  {'Capacity (GiB)':>16}  {'chunks':>10}  {'Hit rate':>9}")
        for row in c["table"]:
            out.append(
                f"  {row['capacity_gib']:>16.3f}  {row['capacity_chunks']:>10,}  "
                f"{row['hit_rate']:>8.2%}"
            )


# ---------------------------------------------------------------- the sweep


def sweep_capacities(min_gib: float, max_gib: float, points: int) -> list[int]:
    """``points`` capacities in bytes, log-spaced from ``min_gib`` to ``max_gib`` GiB the
    way LMCache's sweep spaces them (decimal logarithms, rounded to whole bytes, distinct,
    ascending). SimulateError for a bound that is not finite, > 0 and at most
    :data:`~litehit_core.projector.MAX_CAPACITY_GB`, or max < min."""
    for name, value in (("--min-capacity-gib", min_gib), ("--max-capacity-gib", max_gib)):
        if not (math.isfinite(value) and value > 0):
            raise SimulateError(f"{name} must be finite and > 0, got {value!r}")
        if value > MAX_CAPACITY_GB:
            raise SimulateError(f"{name} must be at most {MAX_CAPACITY_GB} GiB, got {value!r}")
    if max_gib < min_gib:
        raise SimulateError(
            f"--max-capacity-gib {max_gib!r} must not be below --min-capacity-gib {min_gib!r}"
        )
    if points < 1:
        raise SimulateError(f"--points must be >= 1, got {points}")
    low, high = math.log10(min_gib * GIB), math.log10(max_gib * GIB)
    step = (high - low) / max(points - 1, 1)
    return sorted({round(10 ** (low + i * step)) for i in range(points)})


def sweep(replay: Replay, capacities_bytes: Iterable[int]) -> dict[str, Any]:
    """The token hit rate at each capacity (whole chunks) from the one replay, plus the
    exact curve's figures. O(points x (corners + requests))."""
    w = replay.workload
    total = int(w.seq_len.sum())
    rows = []
    for capacity in capacities_bytes:
        chunks = capacity // w.kv_bytes_per_chunk
        hits = int(replay.hit_tokens(chunks).sum())
        rows.append(
            {"capacity_bytes": capacity, "capacity_gib": capacity / GIB,
             "capacity_chunks": chunks, "hit_tokens": hits, "hit_rate": hits / total}
        )  # fmt: skip
    return {
        "points": rows,
        "requests": w.requests,
        "total_tokens": total,
        "curve": curve_summary(replay),
        "input": input_summary(replay),
    }


def format_sweep(data: dict[str, Any]) -> str:
    """The sweep table as LMCache prints it, then the exact curve's figures."""
    out = [f"{'Capacity (GiB)':>18}  {'Hit rate':>10}", "-" * 32]
    out.extend(f"{r['capacity_gib']:>18.3f}  {r['hit_rate']:>9.2%}" for r in data["points"])
    _curve_lines(out, data["curve"], data["input"]["touch_order"])
    return "\n".join(out) + "\n"
