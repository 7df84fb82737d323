"""A trace read once and sampled for K seeds at once (issue 37).

:func:`load_sampled` streams the trace's checked batches (:func:`~..optimize.trace.
open_trace_batches`), grows the trunk on each batch (:class:`~litehit_core.sampling.
TrunkLearner`: a key carried by at least ``theta`` of the batch's records joins it, before
the batch is sampled), and keeps each record that at least one seed keeps, with one bit
per seed. The records no seed keeps are dropped as they are read, so memory follows the
sample: ~(1 - (1 - R)^K) of the trace's records and keys, plus one batch. The kept
records are then sorted by time (as :func:`~..optimize.trace.load_trace` sorts the whole
trace: a stable sort, so each seed's records are in the order the whole trace's would
be) and :func:`seed_trace` gives one seed's. Exact totals the sample cannot know (the
records, reads and input tokens of the whole trace) are counted on the way, and every
read's keys go to a :class:`~litehit_core.sampled_estimate.ReuseSketch` (the whole
trace's reuse, per-block sampled per seed: the estimates' control variate). Cost:
O(bytes) to read, O(keys log trunk) to sample.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from litehit_core.policy_replay import ReplayRecords
from litehit_core.policy_replay.loop import WRITE
from litehit_core.sampled_estimate import ReuseSketch
from litehit_core.sampling import THETA, TrunkLearner, kept
from litehit_service.optimizer.optimize.columns import Batch, concat_batches, event_batch
from litehit_service.optimizer.optimize.config import OptimizeConfig
from litehit_service.optimizer.optimize.trace import (
    LoadedTrace,
    open_trace_batches,
    sorted_trace,
)

__all__ = [
    "MAX_SEEDS",
    "SampleOptions",
    "SampledTrace",
    "load_sampled",
    "seed_mask",
    "seed_trace",
]

MAX_SEEDS = 64
"""Seeds a run may ask for (one bit each per kept record)."""


@dataclass(frozen=True, slots=True)
class SampleOptions:
    """The sample: ``rate`` R in (0, 1], ``seeds`` K (seed k salts the hash with k),
    ``theta`` the trunk share."""

    rate: float
    seeds: int = 1
    theta: float = THETA

    def __post_init__(self) -> None:
        if not (0 < self.rate <= 1):
            raise ValueError(f"--sample-rate must be in (0, 1], got {self.rate!r}")
        if not (1 <= self.seeds <= MAX_SEEDS):
            raise ValueError(f"--sample-seeds must be in [1, {MAX_SEEDS}], got {self.seeds!r}")


@dataclass(frozen=True, slots=True)
class SampledTrace:
    """The records some seed keeps (``kept``: sorted by time as the whole trace would be),
    per kept record its seeds (``bits``: bit k = seed k keeps it), the trunk at the end
    (sorted keys), and the whole trace's records, reads and input tokens per instance;
    per kept record its sampling unit (``units``: the key that sampled it) and the whole
    trace's reuse sketch (``reuse``)."""

    kept: LoadedTrace
    bits: np.ndarray
    trunk: np.ndarray
    options: SampleOptions
    records: int
    reads: np.ndarray
    input_tokens: np.ndarray
    units: np.ndarray
    reuse: ReuseSketch


def _offsets(lens: np.ndarray) -> np.ndarray:
    off = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=off[1:])
    return off


def _select(batch: Batch, rows: np.ndarray) -> Batch:
    """The records ``rows`` (ascending) of ``batch``, their keys and masks with them."""
    off = _offsets(batch.lens)
    lens = batch.lens[rows]
    take = np.repeat(off[:-1][rows] - _offsets(lens)[:-1], lens) + np.arange(
        int(lens.sum()), dtype=np.int64
    )
    return Batch(
        batch.kinds[rows], batch.insts[rows], batch.times[rows], lens, batch.inputs[rows],
        batch.keys[take], batch.local[take], batch.buckets[rows], batch.lines[rows],
    )  # fmt: skip


def load_sampled(
    config: OptimizeConfig,
    options: SampleOptions,
    *,
    trace_format: str | None = None,
    instance: str | None = None,
    max_line_bytes: int,
    progress: Callable[[int], object] | None = None,
) -> SampledTrace:
    """Read ``config``'s trace once and sample it for every seed (module docstring); the
    options as :func:`~..optimize.trace.load_trace`'s. LocatedError for a bad record."""
    routing, batches, name = open_trace_batches(
        config, trace_format=trace_format, instance=instance, max_line_bytes=max_line_bytes
    )
    n_inst = len(config.instances)
    learner = TrunkLearner(options.theta)
    sketch = ReuseSketch(options.rate, options.seeds, n_inst)
    parts: list[Batch] = []
    bit_parts: list[np.ndarray] = []
    unit_parts: list[np.ndarray] = []
    records = 0
    reads = np.zeros(n_inst, dtype=np.int64)
    tokens = np.zeros(n_inst, dtype=np.int64)
    for batch, done in batches.batches:
        records += len(batch.kinds)
        is_read = batch.kinds != WRITE
        np.add.at(reads, batch.insts[is_read], 1)
        np.add.at(tokens, batch.insts[is_read], batch.inputs[is_read])
        on_read = np.repeat(is_read, batch.lens)
        sketch.add(batch.keys[on_read], np.repeat(batch.insts, batch.lens)[on_read])
        skeys = learner.learn(_offsets(batch.lens), batch.keys, batch.lines)
        bits = np.zeros(len(skeys), dtype=np.uint64)
        for seed in range(options.seeds):
            bits |= kept(skeys, seed, options.rate).astype(np.uint64) << np.uint64(seed)
        rows = np.flatnonzero(bits)
        if len(rows) == len(bits):
            parts.append(batch)
        else:
            parts.append(_select(batch, rows))
        bit_parts.append(bits[rows])
        unit_parts.append(skeys[rows])
        if progress is not None:
            progress(done)
    whole = concat_batches(parts) if parts else event_batch((), routing)
    all_bits = np.concatenate(bit_parts) if bit_parts else np.zeros(0, np.uint64)
    units = np.concatenate(unit_parts) if unit_parts else np.zeros(0, np.int64)
    loaded = sorted_trace(whole, routing.ttl_values, routing.path, name)
    order = np.argsort(whole.times, kind="stable")  # sorted_trace's order
    return SampledTrace(loaded, all_bits[order], learner.trunk, options, records, reads, tokens,
                        units[order], sketch)  # fmt: skip


def _take(trace: LoadedTrace, rows: np.ndarray) -> LoadedTrace:
    r = trace.records
    off = r.key_off
    lens = (off[1:] - off[:-1])[rows]
    new_off = _offsets(lens)
    take = np.repeat(off[:-1][rows] - new_off[:-1], lens) + np.arange(
        int(new_off[-1]), dtype=np.int64
    )
    records = ReplayRecords(
        kinds=r.kinds[rows], insts=r.insts[rows], times=r.times[rows], key_off=new_off,
        keys=r.keys[take], local=r.local[take], buckets=r.buckets[rows],
    )  # fmt: skip
    return replace(trace, records=records, input_lens=trace.input_lens[rows])


def seed_mask(sampled: SampledTrace, seed: int) -> np.ndarray:
    """Per kept record whether seed ``seed`` keeps it. O(kept records)."""
    return ((sampled.bits >> np.uint64(seed)) & np.uint64(1)).astype(bool)


def seed_trace(sampled: SampledTrace, seed: int, mine: np.ndarray | None = None) -> LoadedTrace:
    """The records seed ``seed`` keeps (``mine``: its :func:`seed_mask`, if computed
    already), in replay order (the whole kept trace when every seed keeps every record,
    as at rate 1). O(kept keys)."""
    if mine is None:
        mine = seed_mask(sampled, seed)
    if mine.all():
        return sampled.kept
    return _take(sampled.kept, np.flatnonzero(mine))
