"""A running instance's live curve, fetched with GetHitRateCurve, as an
:class:`~litehit_core.curve.InstanceCurve` that ``litehit curve --server`` renders exactly like
a curve built from a ledger (same table, marks, PNG and CSV).

A curve of at most :data:`MAX_POINTS` corners arrives whole (``corners_complete``): the
local copy is the server's curve, exact everywhere. A longer one arrives as that many
log-spaced exact samples; then a second call fetches the exact values the renderer reads
(the table's capacities, and both sides of the first hit, of each mark and of saturation,
from the server's exact capacities for those targets), and they join the samples, so every
number printed is exact and only the drawn line between samples is interpolated.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from litehit_core.accumulator import HitCurveAccumulator
from litehit_core.curve import GIB, MARK_PERCENTS, InstanceCurve
from litehit_core.engine import model_for
from litehit_service.client import OptimizerClient
from litehit_service.model import HitRateCurveResult
from litehit_service.wire import hit_rate_curve_from_pb

MAX_POINTS = 100_000
"""Points asked for: the RPC's maximum."""
FIRST_HIT_FRACTION = 1e-15
"""A target fraction whose capacity is the first hit (ceil(f * T) = 1 for T < 10**15)."""


@dataclass(frozen=True)
class LiveCurve:
    """The rendered copy (``curve``) and the server's answer it came from (``answer``);
    ``exact_everywhere`` when the answer held every corner."""

    curve: InstanceCurve
    answer: HitRateCurveResult

    @property
    def exact_everywhere(self) -> bool:
        return self.answer.corners_complete


def _curve(instance_id: str, answer: HitRateCurveResult, caps, hits) -> InstanceCurve:
    """An InstanceCurve over the points ``(caps, hit tokens)`` in the curve's unit."""
    bs = answer.block_size
    order = np.argsort(caps, kind="stable")
    caps, hits = np.asarray(caps, np.int64)[order], np.asarray(hits, np.int64)[order]
    keep = np.concatenate(([True], caps[1:] != caps[:-1]))
    accumulator = HitCurveAccumulator.from_points(caps[keep], hits[keep] // bs)
    curve = InstanceCurve(
        instance_id,
        bs,
        answer.block_bytes,
        model=answer.model or model_for(answer.linear_step),  # older servers: tail-first
        accumulator=accumulator,
    )
    curve.requests = answer.total_queries
    curve.input_tokens = answer.total_input_tokens
    return curve


def fetch_live_curve(
    client: OptimizerClient, instance_id: str, max_points: int = MAX_POINTS
) -> LiveCurve:
    """GetHitRateCurve (and, for a curve of more than ``max_points`` corners, one more call
    for exact values) -> a renderable curve. Raises the client's typed errors.
    O(points)."""
    from litehit_service.litehit.curve import table_capacities

    fractions = [FIRST_HIT_FRACTION, *(p / 100 for p in MARK_PERCENTS), 1.0]
    answer = hit_rate_curve_from_pb(
        client.get_hit_rate_curve(instance_id, target_fractions=fractions, max_points=max_points)
    )
    blocks = answer.linear_step == 0
    caps = [p.capacity_blocks if blocks else p.capacity_bytes for p in answer.points]
    hits = [p.hit_tokens for p in answer.points]
    if not answer.corners_complete:
        caps, hits = [0, *caps], [0, *hits]  # samples start at the first hit
        sampled = _curve(instance_id, answer, caps, hits)
        wanted = set(table_capacities(sampled))
        for t in answer.capacity_for_targets:
            unit = t.capacity_blocks if blocks else t.capacity_bytes
            wanted |= {unit, max(unit - 1, 0)}
        wanted -= set(caps)
        unit_bytes = answer.block_bytes if blocks else 1
        ordered = sorted(wanted)
        extra = hit_rate_curve_from_pb(
            client.get_hit_rate_curve(instance_id, [u * unit_bytes / GIB for u in ordered])
        )
        caps += ordered
        hits += [p.hit_tokens for p in extra.points]
    return LiveCurve(_curve(instance_id, answer, caps, hits), answer)
