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

A ledger sampled by *subtree* (head-first or hybrid instances, where a prefix hit is not
a block's own distance) kept or dropped whole requests by their first block below the
instance's shared trunk (:mod:`litehit_core.sampling`): the trunk, ``T`` in the curve's
unit, is replayed by every kept request at full weight, the rest at rate ``R``. So a
sample capacity ``c`` stands for ``c`` up to ``T`` and for ``T + (c - T) / R`` above
(the inverse of :func:`~litehit_core.sampling.scaled_bytes`, as ``optimize
--sample-rate`` scales quotas), and the whole trace's hit blocks are the sample's times
``N / n`` (the ratio estimator: the hit rate per kept block is the estimate):
:func:`subtree_curve`. The ledger also carries the whole trace's reused blocks ``Ẑ``
estimated by a block sample and each row's reuse in the sample ``z_r``, and each
capacity's ratio is corrected by them as ``optimize --sample-rate`` corrects a point
(:mod:`litehit_core.sampled_estimate`): ``ĥ(c) = h(c)/n + β(c) (Ẑ/N - z/n)``, ``z = Σ
z_r`` and ``β(c)`` the least-squares slope of the kept rows' residuals ``h_r(c) - ĥ x_r``
on ``z_r - (z/n) x_r``, from two curves weighted per row by ``z_r`` and ``x_r``
(:class:`SubtreeControl`), so one pass over the ledger gives every capacity's slope. The
reuse is the control for every model (a hybrid hit or one under a TTL is not the reuse,
but hits follow it): where they follow it closely (full attention, no TTL: at infinite
capacity β = 1 and the estimate is ``Ẑ/N``) the correction takes out most of the swing
of sampling whole sessions; where they do not, β is small and the estimate stays near
the plain ratio.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from litehit_core.accumulator import HitCurveAccumulator
from litehit_core.curve import InstanceCurve
from litehit_core.engine import FACT_MODELS
from litehit_core.facts import FactRow
from litehit_core.sampled_estimate import Z90, t90
from litehit_core.sampling import MIN_CACHE_REQUESTS

__all__ = [
    "Estimate",
    "SampleCounts",
    "SubtreeControl",
    "count_rows",
    "estimated_curve",
    "subtree_curve",
]


class SubtreeControl:
    """One instance's sums for the reuse correction of a ledger sampled by subtree
    (module docstring): over its kept rows ``r`` (blocks ``x_r``, sample reuse ``z_r``)
    the curves ``Σ z_r h_r(c)`` (``wz``) and ``Σ x_r h_r(c)`` (``wx``), ``Σ x_r z_r``,
    ``Σ x_r²``, ``Σ z_r²`` and ``z = Σ z_r``; ``reuse`` is the whole trace's estimated
    reused blocks (the instance's last row's ``trace_reuse``). O(segments) per row."""

    __slots__ = ("wz", "wx", "sxz", "sxx", "szz", "z", "reuse", "_steps")

    def __init__(self, steps: bool) -> None:
        self.wz = HitCurveAccumulator()
        self.wx = HitCurveAccumulator()
        self.sxz = self.sxx = self.szz = self.z = 0
        self.reuse = -1
        self._steps = steps

    def add(self, row: FactRow) -> None:
        """Count one row (the instance's next)."""
        self.reuse = row.trace_reuse
        x = row.sampled_blocks
        if x <= 0:
            return
        curve = row.hit_curve
        z = row.sample_reuse
        self.sxx += x * x
        if not z:
            return
        self.sxz += x * z
        self.szz += z * z
        self.z += z
        if self._steps:
            self.wz.add_steps(curve, z)
            self.wx.add_steps(curve, x)
        else:
            self.wz.add_curve(curve, z)  # type: ignore[arg-type]
            self.wx.add_curve(curve, x)  # type: ignore[arg-type]

    def estimate(self, cx: np.ndarray, ch: np.ndarray, kept: int, blocks: int) -> np.ndarray:
        """The hit rate per block at capacities ``cx`` (the sample's curve ``ch`` there),
        corrected (module docstring); the plain ratio without a reuse estimate. O(B)."""
        rh = ch / kept
        if self.reuse < 0 or not blocks or not kept:
            return rh
        rz = self.z / kept
        wz = self.wz.hits_at_many(cx).astype(np.float64)
        wx = self.wx.hits_at_many(cx).astype(np.float64)
        num = wz - rz * wx - rh * self.sxz + rh * rz * self.sxx
        den = self.szz - 2 * rz * self.sxz + rz * rz * self.sxx
        beta = num / den if den > 0 else np.zeros_like(rh)
        return rh + beta * (self.reuse / blocks - rz)


class SampleCounts:
    """Per instance the blocks of its requests (``blocks``, N) and the blocks the sample
    kept (``kept``, n), summed over a sampled ledger's rows. O(1) per row."""

    __slots__ = ("blocks", "kept", "trunk", "controls")

    def __init__(self) -> None:
        self.blocks: dict[str, int] = {}
        self.kept: dict[str, int] = {}
        self.trunk: dict[str, int] = {}
        """A ledger sampled by subtree: the largest ``trunk_size`` (the trunk only grows)."""
        self.controls: dict[str, SubtreeControl] = {}
        """... and the sums of its reuse correction."""

    def add(self, row: FactRow) -> None:
        """Count one row (of a sampled ledger: ``sampled_blocks >= 0``)."""
        iid = row.instance_id
        self.blocks[iid] = self.blocks.get(iid, 0) + row.input_token_len // row.block_size_tokens
        self.kept[iid] = self.kept.get(iid, 0) + max(row.sampled_blocks, 0)
        if row.trunk_size > self.trunk.get(iid, 0):
            self.trunk[iid] = row.trunk_size
        if row.trace_reuse >= 0:
            control = self.controls.get(iid)
            if control is None:
                steps = FACT_MODELS[row.model].curve == "steps"
                control = self.controls[iid] = SubtreeControl(steps)
            control.add(row)

    def coarse_below(self, sample: InstanceCurve, rate: float, unit: str) -> int:
        """The whole trace's capacity (the curve's unit) below which a sample by subtree
        of ``sample``'s instance is *coarse*: its scaled cache (``c`` up to the trunk
        ``T``, ``T + R (c - T)`` above) holds fewer than
        :data:`~litehit_core.sampling.MIN_CACHE_REQUESTS` of the trace's average
        requests, where the estimate reads low (as ``optimize`` flags). 0 for a sample by
        block (its unit is the block, not the request) and for a curve in bytes (the
        bytes of a request's states are not in the ledger). O(1)."""
        if unit != "subtree" or sample.unit != "blocks" or not sample.requests:
            return 0
        iid = sample.instance_id
        need = MIN_CACHE_REQUESTS * self.blocks[iid] / sample.requests
        trunk = self.trunk.get(iid, 0)
        return math.ceil(need if need <= trunk else trunk + (need - trunk) / rate)

    def curve(self, sample: InstanceCurve, rate: float, unit: str) -> InstanceCurve:
        """The whole trace's estimated curve of ``sample`` (one instance's curve of the
        ledger these rows were counted from) sampled at ``rate`` by ``unit`` (``"block"``:
        :func:`estimated_curve`, ``"subtree"``: :func:`subtree_curve`). O(B)."""
        iid = sample.instance_id
        blocks, kept = self.blocks[iid], self.kept[iid]
        if unit == "subtree":
            trunk = self.trunk.get(iid, 0)
            return subtree_curve(sample, rate, blocks, kept, trunk, self.controls.get(iid))
        return estimated_curve(sample, rate, blocks, kept)


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
    return _whole_trace(sample, np.rint(cx / rate).astype(np.int64), hits)


def subtree_curve(
    sample: InstanceCurve,
    rate: float,
    blocks: int,
    kept: int,
    trunk: int,
    control: SubtreeControl | None = None,
) -> InstanceCurve:
    """The whole trace's estimated curve (module docstring) from the exact curve
    ``sample`` of a sample by subtree at ``rate`` (0 < R <= 1; any model, capacities in
    its unit), the requests' ``blocks`` N, the ``kept`` requests' blocks n and the
    ``trunk`` T (the curve's unit): each breakpoint ``(c, h)`` becomes ``(c, N ĥ(c))`` up
    to T and ``(T + (c - T) / R, N ĥ(c))`` above, ``ĥ`` the ratio ``h / n`` or, with a
    ``control`` holding a reuse estimate, the corrected one; hits rounded, clamped to
    [0, N] and made non-decreasing, capacities strictly increasing. No kept block: the
    zero curve. O(B)."""
    if not (0 < rate <= 1):
        raise ValueError(f"sample rate must be in (0, 1], got {rate!r}")
    if trunk < 0:
        raise ValueError(f"trunk size must be >= 0, got {trunk!r}")
    cx, ch = sample.accumulator.points()
    if not kept:
        per_block = np.zeros(len(cx))
    elif control is None:
        per_block = ch / kept
    else:
        per_block = control.estimate(cx, ch.astype(np.float64), kept, blocks)
    hits = np.rint(np.clip(per_block, 0.0, 1.0) * blocks)
    hits[0] = 0.0
    hits = np.maximum.accumulate(hits).astype(np.int64)
    fx = cx.astype(np.float64)
    caps = np.where(fx <= trunk, fx, trunk + (fx - trunk) / rate)
    return _whole_trace(sample, np.rint(caps).astype(np.int64), hits)


def _whole_trace(sample: InstanceCurve, caps: np.ndarray, hits: np.ndarray) -> InstanceCurve:
    """``sample``'s instance with the curve through ``(caps, hits)`` (``(0, 0)`` first;
    capacities made strictly increasing), its requests and input tokens kept. O(B)."""
    idx = np.arange(len(caps), dtype=np.int64)
    caps = np.maximum.accumulate(caps - idx) + idx  # strictly increasing, whatever R
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
