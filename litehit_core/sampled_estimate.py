"""A policy replay's hit rate from a subtree sample, corrected by the trace's reuse (issue 37).

A sample of whole subtrees (:mod:`litehit_core.sampling`) replayed through the real
policy gives the hit rate of the sampled subtrees. Its error is that of a cluster sample:
a few long sessions carry much of the reuse, and whether a seed keeps them moves the
estimate by points (sd ≈ 100 points / √(sampled subtrees) on the Mooncake conversations,
bench/README.md). Most of that swing is not the policy's: it is how much *reuse* the
kept subtrees carry. This module takes it out with a control variate that one pass
measures far more precisely:

- **reuse** ``Z``: tokens of reads whose (instance, block) was read before (what an
  infinite cache that never expires would hit; read blocks minus distinct read blocks,
  in tokens). The whole trace's is estimated per *block* (:class:`ReuseSketch`: blocks
  hash-sampled at rate R, one salt per seed): ``Ẑ = (N - D / R) b`` with ``N`` the read
  blocks (exact) and ``D`` the distinct sampled ones, unbiased, variance ``D (1 - R) b²
  / R²``; its units are blocks, not sessions, so it is ~10x sharper.
- **the regression estimator** (:func:`regression_estimate`): with the sample's per
  subtree hit tokens ``h_u``, input tokens ``x_u`` and reuse ``z_u``,
  ``ĥ = h/x + β (Ẑ/X - z/x)``, ``β`` the least-squares slope of the subtrees'
  linearised residuals. At large caches β ≈ 1 and the subtree swing cancels; where hits
  hardly follow reuse β ≈ 0 and the estimate is the plain ratio: to first order never
  worse than it. Its variance is the linearised cluster-sample variance of the residual
  plus ``β²`` times Ẑ's, so one seed has an interval too.

What it does not remove: the bias of a scaled cache that holds few requests (the sample's
traffic between two uses of a block is a sum of few whole requests, and a concave curve
read through that noise reads low; bench/README.md measures it). Cost: O(keys) per batch
for the sketch, O(sampled distinct blocks) memory per seed; O(units) per estimate. No I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from litehit_core.sampling import TrunkLearner, kept, splitmix64

__all__ = [
    "BLOCK_SALT",
    "Reuse",
    "ReuseSketch",
    "RunningReuse",
    "SeenKeys",
    "SubtreeSampler",
    "Z90",
    "pair_ids",
    "regression_estimate",
    "sample_reuse",
    "t90",
]

BLOCK_SALT = 0xB10C_0000
"""Seed k's block sample is salted with ``BLOCK_SALT + k``: independent of its subtree
sample (salted with k)."""
Z90 = 1.6448536269514722
"""The normal quantile of a two-sided 90 % interval."""
_T90 = (6.3138, 2.9200, 2.3534, 2.1318, 2.0150, 1.9432, 1.8946, 1.8595, 1.8331, 1.8125)
_INST_MIX = np.uint64(0xD6E8FEB86659FD93)


def t90(df: int) -> float:
    """Student's t quantile of a two-sided 90 % interval with ``df`` >= 1 degrees of
    freedom (a table to 10, then the Cornish-Fisher expansion, within 0.002). O(1)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(_T90):
        return _T90[df - 1]
    return Z90 + (Z90**3 + Z90) / (4 * df)


def pair_ids(keys: np.ndarray, insts: np.ndarray) -> np.ndarray:
    """One 64-bit id per (instance, block key) pair (``keys`` int64, ``insts`` their
    instances): the key mixed with a hash of the instance; distinct pairs collide with
    probability ~n² / 2⁶⁵. O(n)."""
    inst = splitmix64(np.asarray(insts, dtype=np.uint64) * _INST_MIX)
    return np.asarray(keys, dtype=np.int64).view(np.uint64) ^ inst


@dataclass(frozen=True, slots=True)
class Reuse:
    """The whole trace's reused tokens (module docstring) estimated by one seed's block
    sample: ``tokens`` (Ẑ), its ``variance`` (tokens²) and the exact ``input_tokens`` X."""

    tokens: float
    variance: float
    input_tokens: int

    @property
    def ratio(self) -> float:
        """Ẑ / X (0 without input)."""
        return self.tokens / self.input_tokens if self.input_tokens else 0.0

    @property
    def ratio_variance(self) -> float:
        """Var(Ẑ) / X²."""
        return self.variance / self.input_tokens**2 if self.input_tokens else 0.0

    def __add__(self, other: Reuse) -> Reuse:
        return Reuse(
            self.tokens + other.tokens,
            self.variance + other.variance,
            self.input_tokens + other.input_tokens,
        )


class ReuseSketch:
    """The whole trace's read blocks per instance (exact) and, per seed, its distinct
    (instance, block) pairs among the blocks hash-sampled at ``rate`` (salt
    ``BLOCK_SALT + seed``). Feed it every read's keys (:meth:`add`), in any order; the
    input tokens are the caller's (counted once, where the reads are counted).
    Memory ~ seeds x rate x distinct pairs x 16 bytes (deduplicated as it grows);
    O(keys) per :meth:`add`, amortised O(n log n) for the deduplication."""

    def __init__(self, rate: float, seeds: int, instances: int) -> None:
        kept(np.zeros(0, np.int64), 0, rate)  # checks the rate
        self.rate = rate
        self.seeds = seeds
        self.read_blocks = np.zeros(instances, dtype=np.int64)
        self._parts: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in range(seeds)]
        self._held = [0] * seeds
        self._base = [0] * seeds

    def add(self, keys: np.ndarray, insts: np.ndarray) -> None:
        """Count reads: their ``keys`` (int64, every read's, head first) with each key's
        instance ``insts``. O(len(keys))."""
        self.read_blocks += np.bincount(insts, minlength=len(self.read_blocks))
        for seed in range(self.seeds):
            mine = kept(keys, BLOCK_SALT + seed, self.rate)
            if not mine.any():
                continue
            ids, at = np.unique(pair_ids(keys[mine], insts[mine]), return_index=True)
            self._parts[seed].append((ids, np.asarray(insts[mine][at], dtype=np.int32)))
            self._held[seed] += len(ids)
            if self._held[seed] > 2 * self._base[seed] + (1 << 20):
                self._compact(seed)

    def _compact(self, seed: int) -> tuple[np.ndarray, np.ndarray]:
        parts = self._parts[seed]
        if len(parts) != 1:
            ids = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.uint64)
            insts = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.int32)
            ids, at = np.unique(ids, return_index=True)
            parts[:] = [(ids, insts[at])]
        self._held[seed] = self._base[seed] = len(parts[0][0])
        return parts[0]

    def reuse(
        self, seed: int, block_tokens: Sequence[int], input_tokens: Sequence[int]
    ) -> list[Reuse]:
        """Per instance the estimated reuse (:class:`Reuse`) by seed ``seed``'s block
        sample; ``block_tokens`` each instance's tokens per block, ``input_tokens`` its
        reads' input tokens (exact). O(sampled pairs)."""
        _ids, insts = self._compact(seed)
        distinct = np.bincount(insts, minlength=len(self.read_blocks))
        r = self.rate
        out = []
        for i, b in enumerate(block_tokens):
            d = int(distinct[i])
            tokens = (
                (int(self.read_blocks[i]) - d / r) * b
                if r < 1
                else float((int(self.read_blocks[i]) - d) * b)
            )
            out.append(Reuse(tokens, d * (1 - r) * b * b / (r * r), int(input_tokens[i])))
        return out


class SeenKeys:
    """A set of int64 keys that answers, for keys arriving in order, which were seen
    before: a few disjoint sorted runs (sizes halving, merged like a binary counter).
    :meth:`mark` of k keys costs O(k log² D) for D distinct keys so far, merges O(D log D)
    amortised; memory 8 bytes per distinct key."""

    __slots__ = ("distinct", "_runs")

    def __init__(self) -> None:
        self.distinct = 0
        self._runs: list[np.ndarray] = []

    def mark(self, keys: np.ndarray) -> np.ndarray:
        """Per key of ``keys`` (int64, in order) whether it was seen before (by an earlier
        call or earlier in ``keys``); all of them are seen afterwards. O(k log² D)."""
        keys = np.asarray(keys, dtype=np.int64)
        fresh, first = np.unique(keys, return_index=True)
        new = np.ones(len(fresh), dtype=bool)
        for run in self._runs:
            at = np.minimum(np.searchsorted(run, fresh), len(run) - 1)
            new &= run[at] != fresh
        seen = np.ones(len(keys), dtype=bool)
        seen[first[new]] = False
        self._insert(fresh[new])
        return seen

    def _insert(self, fresh: np.ndarray) -> None:
        if not len(fresh):
            return
        self.distinct += len(fresh)
        runs = self._runs
        runs.append(fresh)
        while len(runs) > 1 and len(runs[-2]) <= 2 * len(runs[-1]):
            last = runs.pop()
            runs[-1] = np.sort(np.concatenate((runs[-1], last)))  # disjoint: no duplicates

    def _check(self) -> None:
        """Runs sorted, disjoint, summing to :attr:`distinct`."""
        assert sum(len(r) for r in self._runs) == self.distinct
        if self._runs:
            every = np.concatenate(self._runs)
            assert len(np.unique(every)) == len(every)
            assert all(bool((r[1:] > r[:-1]).all()) for r in self._runs)


class RunningReuse:
    """One instance's reused blocks (module docstring) estimated *so far* by one seed's
    block sample (salt ``BLOCK_SALT + seed``), for a sample that writes the estimate as
    it goes (``litehit replay --sample-rate`` by subtree): :meth:`add` every read's keys
    in order, :attr:`blocks` is ``N - D / R`` at any time (D the distinct sampled keys,
    a :class:`SeenKeys`). O(k log² D) per add of k keys; 8 bytes per distinct sampled
    key."""

    __slots__ = ("rate", "seed", "read_blocks", "sampled")

    def __init__(self, rate: float, seed: int) -> None:
        kept(np.zeros(0, np.int64), 0, rate)  # checks the rate
        self.rate = rate
        self.seed = seed
        self.read_blocks = 0
        self.sampled = SeenKeys()

    def add(self, keys: np.ndarray) -> None:
        """Count reads' ``keys`` (int64, normalised). O(k log² D)."""
        self.read_blocks += len(keys)
        self.sampled.mark(keys[kept(keys, BLOCK_SALT + self.seed, self.rate)])

    @property
    def distinct(self) -> int:
        """D: the distinct keys the block sample kept so far."""
        return self.sampled.distinct

    @property
    def blocks(self) -> float:
        """The estimate ``N - D / R`` (exactly ``N - D`` at rate 1). O(1)."""
        return self.read_blocks - self.distinct / self.rate


class SubtreeSampler:
    """One instance's sample by subtree for one seed, as ``litehit replay --sample-rate``
    takes it batch by batch: the trunk (:class:`~litehit_core.sampling.TrunkLearner`, a
    batch is one window), the whole trace's reuse (:class:`RunningReuse`), the keys the
    sample kept (:class:`SeenKeys`) and, for the last batch, each request's *sample
    reuse*: its kept blocks the sample read before (the quantity ``Ẑ`` estimates for the
    whole trace, measured on the sample). Memory follows the sample: 8 bytes per distinct
    kept key and per distinct block-sampled key."""

    __slots__ = ("rate", "seed", "learner", "reuse", "seen", "last_reuse")

    def __init__(self, rate: float, seed: int) -> None:
        self.rate = rate
        self.seed = seed
        self.learner = TrunkLearner()
        self.reuse = RunningReuse(rate, seed)
        self.seen = SeenKeys()
        self.last_reuse = np.zeros(0, dtype=np.int64)

    def keep(self, keys: np.ndarray, offsets: np.ndarray, first: int) -> np.ndarray:
        """Per key of a batch (request i: ``keys[offsets[i]:offsets[i + 1]]``, numbered
        from ``first``) whether the sample keeps it: each request whole or not by the hash
        of its sampling key under the trunk grown by this batch. Sets
        :attr:`last_reuse`. O(keys log² D)."""
        lens = np.diff(offsets)
        n = len(lens)
        self.reuse.add(keys)
        units = self.learner.learn(offsets, keys, np.arange(first, first + n, dtype=np.int64))
        mask = np.repeat(kept(units, self.seed, self.rate), lens)
        seen = self.seen.mark(keys[mask])
        query = np.repeat(np.arange(n, dtype=np.int64), lens)[mask]
        self.last_reuse = np.bincount(query, weights=seen, minlength=n).astype(np.int64)
        return mask

    @property
    def trunk_blocks(self) -> int:
        """Blocks in the trunk so far."""
        return len(self.learner.trunk)


def sample_reuse(
    key_off: np.ndarray, keys: np.ndarray, insts: np.ndarray, reads: np.ndarray,
    block_tokens: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """Per record of a sample in replay order its reused tokens (module docstring): for a
    read (``reads[r]``), its keys whose (instance, key) pair an earlier read of the
    sample (or an earlier key of its own) read, times its instance's ``block_tokens``;
    0 for a write. The sample's total is the same quantity :class:`ReuseSketch` estimates
    for the whole trace. O(keys log keys)."""
    n = len(key_off) - 1
    out = np.zeros(n, dtype=np.int64)
    lens = np.diff(key_off)
    rec = np.repeat(np.arange(n, dtype=np.int64), lens)
    on_read = reads[rec]
    if not on_read.any():
        return out
    rec = rec[on_read]
    ids = pair_ids(keys[on_read], insts[rec])
    _, first = np.unique(ids, return_index=True)
    seen = np.ones(len(ids), dtype=np.int64)
    seen[first] = 0
    out += np.bincount(rec, weights=seen, minlength=n).astype(np.int64)
    return out * np.asarray(block_tokens, dtype=np.int64)[insts]


def regression_estimate(
    hits: np.ndarray, inputs: np.ndarray, reuse: np.ndarray, whole: Reuse, rate: float
) -> tuple[float, float]:
    """The hit rate of the whole trace and its variance (module docstring) from the
    sample's per-subtree ``hits``, ``inputs`` and ``reuse`` (tokens, one entry per
    sampled subtree) and the whole trace's reuse ``whole`` estimated per block. At
    ``rate`` 1 (the whole trace) exactly ``sum(hits) / sum(inputs)`` with variance 0.
    O(units)."""
    h = np.asarray(hits, dtype=np.float64)
    x = np.asarray(inputs, dtype=np.float64)
    z = np.asarray(reuse, dtype=np.float64)
    total = float(x.sum())
    if total <= 0:
        return 0.0, 0.0
    rh, rz = float(h.sum()) / total, float(z.sum()) / total
    a = (h - rh * x) / total
    b = (z - rz * x) / total
    sbb = float(b @ b)
    beta = float(a @ b) / sbb if sbb > 0 else 0.0
    gap = whole.ratio - rz
    estimate = rh + beta * gap if gap else rh
    n = len(h)
    resid = a - beta * b
    spread = (1 - rate) * n / (n - 1) * float(resid @ resid) if n > 1 else 0.0
    variance = spread + beta * beta * whole.ratio_variance
    return min(max(estimate, 0.0), 1.0), variance if math.isfinite(variance) else 0.0
