"""The live curve of an instance as GetHitRateCurve answers it.

:func:`hit_rate_curve` copies the instance's exact curve under its lock in O(1) and reads
it outside: at the capacities asked for (bytes from ``capacity_gb``), at every corner, or
at log-spaced capacities, with the smallest capacity reaching each target fraction.
Hit tokens over input tokens, never a mean of ratios.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from litehit_core import MAX_CAPACITY_GB, capacity_gb_to_bytes
from litehit_core.curve import GIB, log_spaced
from litehit_service.errors import InvalidArgument
from litehit_service.manager.instance import InstanceState
from litehit_service.model import HitRateCurveResult, HitRatePoint, TargetCapacity

__all__ = [
    "DEFAULT_CURVE_POINTS",
    "MAX_CURVE_POINTS",
    "MAX_CURVE_TARGETS",
    "curve_capacities",
    "hit_rate_curve",
    "target_fractions_checked",
]

MAX_CURVE_POINTS = 100_000
DEFAULT_CURVE_POINTS = 512
MAX_CURVE_TARGETS = 1_000


def hit_rate_curve(
    state: InstanceState,
    capacity_gb: Sequence[float] = (),
    target_fractions: Sequence[float] = (),
    max_points: int = 0,
) -> HitRateCurveResult:
    """The exact live curve of an instance (since registration or its last reset).

    With ``capacity_gb`` (each finite, >= 0, at most :data:`MAX_CURVE_POINTS` of them):
    the curve at those capacities, in their order. Without: every corner of the curve
    if there are at most ``max_points`` (0 = :data:`DEFAULT_CURVE_POINTS`, at most
    :data:`MAX_CURVE_POINTS`), else exact values at ``max_points`` log-spaced capacities
    from the first hit to saturation. Per target fraction (in (0, 1], at most
    :data:`MAX_CURVE_TARGETS`): the smallest capacity reaching it. InvalidArgument
    naming the field and value. The curve is copied under the
    instance's lock in O(1) (after merging its buffer); the rest runs outside it,
    O(points log B + B).
    """
    caps = curve_capacities(capacity_gb)
    fractions = target_fractions_checked(target_fractions)
    if isinstance(max_points, bool) or not isinstance(max_points, int):
        raise InvalidArgument(f"max_points must be an integer, got {max_points!r}")
    if not 0 <= max_points <= MAX_CURVE_POINTS:
        raise InvalidArgument(f"max_points must be in 0..{MAX_CURVE_POINTS}, got {max_points}")
    with state.lock:
        view = state.curve_view()
    blocks = view.unit == "blocks"
    ub = view.unit_bytes
    cx, ch = view.points()
    complete = False
    if caps:
        units = np.array([view.units_for_bytes(b) for b in caps], np.int64)
        nbytes = list(caps)
        gbs = [float(g) for g in capacity_gb]
    else:
        limit = max_points or DEFAULT_CURVE_POINTS
        if len(cx) <= limit:
            units, complete = cx, True
        else:
            units = log_spaced(max(view.first_hit, 1), max(view.saturation, 1), limit)
        nbytes = (units * ub).tolist()
        gbs = [b / GIB for b in nbytes]
    hit_tokens = ch if complete else view.hit_tokens_at_many(units)
    tokens = view.input_tokens
    points = tuple(
        HitRatePoint(gb, u if blocks else 0, b, h, h / tokens if tokens else 0.0)
        for gb, u, b, h in zip(gbs, units.tolist(), nbytes, hit_tokens.tolist(), strict=True)
    )
    targets = []
    for f in fractions:
        u = view.capacity_for_fraction(f)
        targets.append(TargetCapacity(f, u if blocks else 0, u * ub, u * ub / GIB))
    return HitRateCurveResult(
        points=points,
        capacity_for_targets=tuple(targets),
        total_input_tokens=tokens,
        theoretical_hit_tokens=view.infinite_hit_tokens,
        corners_complete=complete,
        resolution_bytes=view.resolution_bytes,
        corners=view.corners(),
        block_size=state.block_size,
        block_bytes=state.block_bytes,
        linear_step=state.registration.linear_step,
        total_queries=view.requests,
        model=state.spec.model,
    )


def curve_capacities(capacity_gb: Sequence[float]) -> list[int]:
    """``capacity_gb`` as bytes, each checked finite and in [0, MAX_CAPACITY_GB]."""
    if len(capacity_gb) > MAX_CURVE_POINTS:
        raise InvalidArgument(
            f"capacity_gb has {len(capacity_gb)} values, at most {MAX_CURVE_POINTS} are allowed"
        )
    out = []
    for i, gb in enumerate(capacity_gb):
        if isinstance(gb, bool) or not isinstance(gb, int | float):
            raise InvalidArgument(f"capacity_gb[{i}] must be a number, got {gb!r}")
        if not (math.isfinite(gb) and 0 <= gb <= MAX_CAPACITY_GB):
            raise InvalidArgument(
                f"capacity_gb[{i}] must be finite and in [0, {MAX_CAPACITY_GB}], got {gb!r}"
            )
        out.append(capacity_gb_to_bytes(gb))
    return out


def target_fractions_checked(target_fractions: Sequence[float]) -> list[float]:
    """``target_fractions`` checked: at most MAX_CURVE_TARGETS, each a number in (0, 1]."""
    if len(target_fractions) > MAX_CURVE_TARGETS:
        raise InvalidArgument(
            f"target_fractions has {len(target_fractions)} values, at most {MAX_CURVE_TARGETS} "
            "are allowed"
        )
    out = []
    for i, f in enumerate(target_fractions):
        if isinstance(f, bool) or not isinstance(f, int | float) or not 0 < f <= 1:
            raise InvalidArgument(f"target_fractions[{i}] must be in (0, 1], got {f!r}")
        out.append(float(f))
    return out
