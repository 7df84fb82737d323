"""Estimates of the whole trace's curve from a sampled ledger (issue 37, SHARDS).

``litehit replay --sample-rate R`` keeps a block iff ``splitmix64(key ^ salt(seed)) <
R * 2**64`` (:func:`litehit_core.sampling.kept` on the prefix-chained key) and replays
only the kept blocks, so the engine holds ~R of the blocks. Under tail-first LRU an
ancestor is always more recent than its descendants, so a block's prefix hit at capacity
``C`` is exactly "its own stack distance < C" and the prefix curve is the per-block curve
(checked in tests/test_replay_sampling.py); a kept block at distance ``d`` in the sample
stands for one at ``d / R`` in the whole trace (Waldspurger et al., FAST'15). So the
whole trace's hit blocks at a capacity ``C`` (blocks) are estimated as

    H(C) = (h(floor(R C)) + R N - n) / R        for C >= 1, H(0) = 0,

``h`` the sample's exact hit blocks, ``N`` the requests' blocks (``input_token_len //
block_size_tokens``) and ``n`` the blocks the sample kept (``sampled_blocks``): the term
``R N - n`` is SHARDS_adj's correction of the sampled references to their expected count
at the smallest distance, which takes out the swing of a hot block (a shared root every
request starts with) being kept or not. Input tokens are the rows' own (exact) totals.

:func:`estimated_curve` turns an :class:`InstanceCurve` of a sampled ledger (the sample's
exact curve) into one over the whole trace's capacities: every breakpoint ``(c, h)``
becomes ``(round(c / R), round((h + R N - n) / R))`` (clamped at 0, non-decreasing), linear
in between, so every reader of curves (table, CSV, plot, marks, projections at slots)
reads estimates in the whole trace's units through the curve's own projection, with no
capacity seen anywhere else. O(breakpoints).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from litehit_core.accumulator import HitCurveAccumulator
from litehit_core.curve import InstanceCurve
from litehit_core.facts import FactRow
from litehit_core.sampled_estimate import Z90, t90

__all__ = ["Estimate", "SampleCounts", "count_rows", "estimated_curve"]


class SampleCounts:
    """Per instance the blocks of its requests (``blocks``, N) and the blocks the sample
    kept (``kept``, n), summed over a sampled ledger's rows. O(1) per row."""

    __slots__ = ("blocks", "kept")

    def __init__(self) -> None:
        self.blocks: dict[str, int] = {}
        self.kept: dict[str, int] = {}

    def add(self, row: FactRow) -> None:
        """Count one row (of a sampled ledger: ``sampled_blocks >= 0``)."""
        iid = row.instance_id
        self.blocks[iid] = self.blocks.get(iid, 0) + row.input_token_len // row.block_size_tokens
        self.kept[iid] = self.kept.get(iid, 0) + max(row.sampled_blocks, 0)


def count_rows(rows: Iterable[FactRow], counts: SampleCounts) -> Iterable[FactRow]:
    """``rows`` unchanged, each counted into ``counts`` on the way. O(1) per row."""
    add = counts.add
    for row in rows:
        add(row)
        yield row


def estimated_curve(sample: InstanceCurve, rate: float, blocks: int, kept: int) -> InstanceCurve:
    """The whole trace's estimated curve (module docstring) from the sample's exact curve
    ``sample`` (model ``lru``, capacities in sample blocks) at ``rate`` (0 < R <= 1), the
    requests' ``blocks`` N and the ``kept`` blocks n. At rate 1 with ``kept == blocks``
    the same points. Requests and input tokens are the sample's (the whole trace's).
    ValueError for a curve in bytes (hybrid instances are never sampled). O(B)."""
    if sample.unit != "blocks":
        raise ValueError(f"a sampled curve must be in blocks, got model {sample.model!r}")
    if not (0 < rate <= 1):
        raise ValueError(f"sample rate must be in (0, 1], got {rate!r}")
    cx, ch = sample.accumulator.points()
    cx = cx.astype(np.int64)
    ch = ch.astype(np.float64)
    if len(cx) < 2 or cx[1] != 1:  # the correction applies from one block on
        at_one = float(np.interp(1, cx, ch)) if len(cx) else 0.0
        cx = np.insert(cx, 1, 1)
        ch = np.insert(ch, 1, at_one)
    adj = rate * blocks - kept
    hits = np.maximum((ch + adj) / rate, 0.0)
    hits[0] = 0.0
    hits = np.maximum.accumulate(np.rint(hits)).astype(np.int64)
    caps = np.rint(cx / rate).astype(np.int64)
    caps[1:] = np.maximum(caps[1:], caps[:-1] + 1)  # strictly increasing, whatever R
    out = InstanceCurve(
        sample.instance_id,
        sample.block_size_tokens,
        sample.block_bytes,
        sample.first_trace_id,
        sample.model,
        accumulator=HitCurveAccumulator.from_points(caps, hits),
    )
    out.requests, out.input_tokens = sample.requests, sample.input_tokens
    return out


@dataclass(frozen=True, slots=True)
class Estimate:
    """A hit rate estimated from K seeds: per seed its sampled hit and input tokens and,
    when the caller corrected them (:func:`~litehit_core.sampled_estimate.
    regression_estimate`), per seed its estimate (``rates``) and that estimate's variance
    (``variances``).

    The estimate is the mean of the seeds' estimates, or without ``rates`` the pooled
    ratio (hit tokens over input tokens summed over the seeds). The band is a 90 %
    interval: ``estimate ± q·se`` with ``se²`` the larger of the seeds' own variances
    over K (``q`` the normal quantile) and, for K >= 2, the seeds' spread over K
    (``q`` Student's t with K - 1 degrees of freedom), clamped to [0, 1]; one seed
    without a variance has no band (low = high = the estimate)."""

    hits: tuple[int, ...]
    inputs: tuple[int, ...]
    rates: tuple[float, ...] | None = None
    variances: tuple[float, ...] | None = None

    @property
    def per_seed(self) -> list[float]:
        """Each seed's own estimate (without ``rates``: its hit tokens / input tokens)."""
        if self.rates is not None:
            return list(self.rates)
        return [h / n if n else 0.0 for h, n in zip(self.hits, self.inputs, strict=True)]

    @property
    def rate(self) -> float:
        """The estimate (class docstring)."""
        if self.rates is not None:
            return sum(self.rates) / len(self.rates) if self.rates else 0.0
        total = sum(self.inputs)
        return sum(self.hits) / total if total else 0.0

    @property
    def half_width(self) -> float | None:
        """The band's half width before clamping (None: no band)."""
        k = len(self.hits)
        best: float | None = None
        if self.variances is not None and k:
            best = Z90 * math.sqrt(max(sum(self.variances) / k, 0.0) / k)
        if k >= 2:
            seeds = self.per_seed
            mean = sum(seeds) / k
            sd = math.sqrt(sum((s - mean) ** 2 for s in seeds) / (k - 1))
            between = t90(k - 1) * sd / math.sqrt(k)
            best = between if best is None else max(best, between)
        return best

    @property
    def low(self) -> float:
        """The band's lower end (the estimate when there is no band)."""
        w = self.half_width
        return self.rate if w is None else max(self.rate - w, 0.0)

    @property
    def high(self) -> float:
        """The band's upper end (the estimate when there is no band)."""
        w = self.half_width
        return self.rate if w is None else min(self.rate + w, 1.0)

    def text(self) -> str:
        """``≈ 45.12% (90% band 44.80..45.40%, 4 seeds)``, or ``≈ 45.12% (1 seed, no
        band)``."""
        k = len(self.hits)
        seeds = f"{k} seed{'s' if k != 1 else ''}"
        if self.half_width is None:
            return f"≈ {self.rate * 100:.2f}% ({seeds}, no band)"
        band = f"{self.low * 100:.2f}..{self.high * 100:.2f}%"
        return f"≈ {self.rate * 100:.2f}% (90% band {band}, {seeds})"
