"""Replay and counters: prepared queries through an instance's engine, projected onto its
slots and added to its counters, clock and live curve.

:func:`apply_query` replays one query (unary, stream, offline); :func:`replay_packed` a
batch, in one compiled call when the engine registry says the instance's engine replays
batches (projected as arrays: :func:`~litehit_core.projector.project_segments`), query
by query otherwise. Callers hold the instance's lock for :func:`replay_packed`;
:func:`apply_query` takes it. Hits are in blocks, the denominators in tokens.
"""

from __future__ import annotations

import numpy as np

from litehit_core import RequestFact
from litehit_core.projector import project_segments, segment_sums
from litehit_service.manager.instance import InstanceState
from litehit_service.policy import QueryPolicy

__all__ = ["apply_query", "replay_packed"]


def apply_query(
    state: InstanceState,
    policy: QueryPolicy,
    keys: list[int],
    tokens: int,
    stamp: int,
    answer: bool,
) -> tuple[RequestFact, tuple[int, ...], int, int, tuple[int, ...]]:
    """Replay ``keys`` on ``state`` under its lock (its clock advanced by the policy's
    rule 9) and add to its counters.

    Returns (fact, hit blocks per slot, unique blocks, infinite-capacity hit blocks,
    blocks resident per slot afterwards: only with ``answer``, else ``()``). The fact
    also goes into the instance's live curve.
    """
    projection = state.projection
    with state.lock:
        now = state.clock_ns = policy.advance(state.instance_id, state.clock_ns, stamp)
        engine = state.engine
        fact = engine.process_request(keys, now)
        unique = engine.current_unique_blocks()
        hits = tuple(projection.slots(fact, state.slot_units))
        resident = engine.resident_blocks(state.slot_units) if answer else ()
        best = projection.infinite(fact)
        state.count(hits, best, 1, fact.total_blocks, tokens)
        state.add_to_curve(fact.hit_curve)
    return fact, hits, unique, best, resident


def replay_packed(
    state: InstanceState,
    keys: np.ndarray,
    offsets: np.ndarray,
    tokens: np.ndarray,
    now: np.ndarray,
    want_facts: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[RequestFact]]:
    """Replay validated requests (``keys[offsets[i]:offsets[i + 1]]`` at ``now[i]``)
    on ``state`` and add them to its counters, clock and live curve; call with its
    lock held. Returns (hit blocks per request and slot, infinite-capacity hits,
    blocks, unique blocks after each request, the facts when ``want_facts``). A
    compact full-attention engine replays them in one compiled call and they are
    projected as arrays; other engines one by one. O(keys + requests x slots)."""
    n = len(tokens)
    engine = state.engine
    facts: list[RequestFact] = []
    if state.batched:
        batch = engine.process_batch(keys, offsets, now)  # type: ignore[attr-defined]
        used = int(batch.seg_offsets[-1])
        starts, runs = batch.seg_start[:used], batch.seg_len[:used]
        hits = project_segments(starts, runs, batch.seg_offsets, state.slot_units)
        best = segment_sums(runs, batch.seg_offsets)
        totals, uniques = batch.totals, batch.uniques
        state.curve.accumulator.add_ramps(starts, runs)
        if want_facts:
            facts = batch.facts()
    else:
        totals, uniques, best = (np.zeros(n, np.int64) for _ in range(3))
        hit_rows = []
        projection = state.projection
        flat = keys.tolist()
        for i in range(n):
            fact = engine.process_request(flat[offsets[i] : offsets[i + 1]], int(now[i]))
            hit_rows.append(projection.slots(fact, state.slot_units))
            best[i] = projection.infinite(fact)
            totals[i] = fact.total_blocks
            uniques[i] = engine.current_unique_blocks()
            state.add_to_curve(fact.hit_curve)
            facts.append(fact)
        hits = np.array(hit_rows, np.int64).reshape(n, len(state.slot_units))
    if n:
        state.clock_ns = int(now[-1])
    per_slot = hits.sum(axis=0).tolist()
    state.count(per_slot, int(best.sum()), n, int(totals.sum()), int(tokens.sum()))
    return hits, best, totals, uniques, facts
