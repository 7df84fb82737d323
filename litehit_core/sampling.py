"""Spatial sampling of a prefix-cache trace by subtree, below a shared trunk (issue 37).

A prefix cache hits a block only when its whole prefix is cached, so sampling blocks
one by one (SHARDS) cuts the chains, and sampling whole trees by their root keeps all or
nothing of a trace hanging off one shared root. The unit here is a *subtree below the
trunk*:

- the **trunk** is the set of blocks carried by at least ``theta`` of the records of a
  window (:class:`TrunkLearner`: learned window by window as the trace is read; a key
  once in the trunk stays in it);
- a record's **sampling key** is its first key not in the trunk (a record entirely in
  the trunk, or without keys: its position in the file, see :func:`sampling_units`);
- a record is kept iff ``splitmix64(sampling_key ^ salt(seed)) < R * 2**64``
  (:func:`kept`): deterministic per seed, independent across seeds, and every kept
  record is kept whole, so it still sees its trunk (trunk blocks are replayed at weight
  1 by every kept record).

Capacities scale as :func:`scaled_bytes` says: the trunk's bytes ``T`` unscaled, the
rest by ``R``. Everything is numpy over a batch's flat keys: O(keys) per batch, no Python
object per key. No I/O.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "MIN_CACHE_REQUESTS",
    "MIN_TRUNK_RECORDS",
    "THETA",
    "TrunkLearner",
    "kept",
    "salt",
    "sample_dir",
    "sampling_keys",
    "sampling_units",
    "scaled_bytes",
    "scaled_count",
    "splitmix64",
    "threshold",
]

THETA = 0.02
"""Default trunk share: a key carried by >= 2 % of a window's records is trunk
(bench/bench_sampling.py measured 1 %, 2 % and 5 %; see docs/optimizer.md)."""
MIN_CACHE_REQUESTS = 200
"""A scaled cache holding fewer of the sample's average requests than this reads low: the
sample's traffic between two uses of a block is a sum of few whole requests, and a
concave curve read through that noise bends down (Mooncake x10, lru, 8 seeds: -2.1
points at ~18 requests, -0.9 at ~74, -0.5 at ~150, -0.16 at ~300; bench/README.md,
2026-12-05). Outputs flag such estimates as coarse."""
MIN_TRUNK_RECORDS = 64
"""A key joins the trunk only when at least this many records of its window carry it: a
short window (a small trace, a small last batch) does not make every key trunk."""
_M64 = (1 << 64) - 1
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser of ``x + golden`` per element (uint64 in, uint64 out;
    wrapping arithmetic). O(n)."""
    z = np.asarray(x, dtype=np.uint64) + _GOLDEN
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def salt(seed: int) -> np.uint64:
    """The 64-bit salt of ``seed`` (any int >= 0): splitmix64 of it. O(1)."""
    return splitmix64(np.array([seed & _M64], dtype=np.uint64))[0]


def threshold(rate: float) -> int | None:
    """``floor(rate * 2**64)`` as the bound a hash must stay below; None for rate 1
    (keep everything). ValueError outside (0, 1]. O(1)."""
    if not (0 < rate <= 1):  # False for NaN
        raise ValueError(f"sample rate must be in (0, 1], got {rate!r}")
    if rate == 1:
        return None
    return min(math.floor(rate * 2.0**64), _M64)


def kept(sample_keys: np.ndarray, seed: int, rate: float) -> np.ndarray:
    """Per record whether seed ``seed`` keeps it at ``rate``: ``splitmix64(key ^
    salt(seed)) < floor(rate * 2**64)`` (all True at rate 1). O(records)."""
    bound = threshold(rate)
    if bound is None:
        return np.ones(len(sample_keys), dtype=bool)
    mixed = splitmix64(np.asarray(sample_keys, dtype=np.int64).view(np.uint64) ^ salt(seed))
    return mixed < np.uint64(bound)


def _record_of_key(key_off: np.ndarray) -> np.ndarray:
    lens = np.diff(key_off)
    return np.repeat(np.arange(len(lens), dtype=np.int64), lens)


def sampling_units(
    key_off: np.ndarray, keys: np.ndarray, trunk: np.ndarray, positions: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per record its sampling key (module docstring) and whether it has a key below the
    ``trunk`` (sorted int64): the first of its keys (``keys[key_off[r]:key_off[r + 1]]``,
    head first) not in the trunk; a record without such a key (no keys, or every key in
    the trunk) gets ``positions[r]`` mixed (its line in the file): it hits only trunk
    blocks, which every kept record keeps cached, so it is sampled on its own. (Sampling
    it by its last key, a trunk block, kept or dropped every such record of a trunk
    together: on Mooncake x 10, where 11 % of the requests are the shared root alone,
    that cost 1.2 points of hit rate at every quota; bench/bench_sampling.py, 2026-12-05.)
    O(keys log trunk)."""
    n = len(key_off) - 1
    pos = splitmix64(np.asarray(positions, dtype=np.uint64) ^ np.uint64(0x5A5A))
    out = pos.view(np.int64).copy()
    below = np.zeros(n, dtype=bool)
    if not len(keys) or not n:
        return out, below
    where = np.flatnonzero(~_member(keys, trunk))
    recs = _record_of_key(key_off)[where]
    first, at = np.unique(recs, return_index=True)  # the first outside key of each record
    out[first] = keys[where[at]]
    below[first] = True
    return out, below


def sampling_keys(
    key_off: np.ndarray, keys: np.ndarray, trunk: np.ndarray, positions: np.ndarray
) -> np.ndarray:
    """Per record its sampling key (:func:`sampling_units`). O(keys log trunk)."""
    return sampling_units(key_off, keys, trunk, positions)[0]


def _member(keys: np.ndarray, trunk: np.ndarray) -> np.ndarray:
    if not len(trunk):
        return np.zeros(len(keys), dtype=bool)
    at = np.minimum(np.searchsorted(trunk, keys), len(trunk) - 1)
    return trunk[at] == keys


class TrunkLearner:
    """The trunk, learned window by window (module docstring): :meth:`learn` takes one
    window of records (a reader's batch) and adds to the trunk every sampling key that at
    least ``max(theta * records, MIN_TRUNK_RECORDS)`` of the window's records share,
    level by level (a root joins, then its hot children become sampling keys and may
    join), before that window's records are sampled. The trunk never shrinks. O(keys
    log trunk) per level, a few levels per window."""

    def __init__(self, theta: float = THETA, max_levels: int = 64) -> None:
        if not (0 < theta <= 1):
            raise ValueError(f"trunk share theta must be in (0, 1], got {theta!r}")
        self.theta = theta
        self.max_levels = max_levels
        self.trunk = np.zeros(0, dtype=np.int64)

    def learn(self, key_off: np.ndarray, keys: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """Grow the trunk from this window; its records' sampling keys under the grown
        trunk."""
        n = len(key_off) - 1
        need = max(self.theta * n, MIN_TRUNK_RECORDS)
        for _ in range(self.max_levels):
            skeys, below = sampling_units(key_off, keys, self.trunk, positions)
            candidates = skeys[below]
            if not len(candidates):
                return skeys
            values, counts = np.unique(candidates, return_counts=True)
            hot = values[counts >= need]
            if not len(hot):
                return skeys
            self.trunk = np.union1d(self.trunk, hot)
        return sampling_keys(key_off, keys, self.trunk, positions)

    def members(self, keys: np.ndarray) -> np.ndarray:
        """Per key whether it is in the trunk. O(keys log trunk)."""
        return _member(keys, self.trunk)


def sample_dir(rate: float, seed: int) -> str:
    """The folder, in a command's output folder, of seed ``seed``'s outputs at ``rate``:
    ``sample-r{rate:g}-seed{seed}`` (``replay``'s ledgers, ``optimize``'s tables), so no
    reader of the exact outputs finds an estimate there. O(1)."""
    return f"sample-r{rate:g}-seed{seed}"


def scaled_bytes(quota: int, trunk_bytes: int, rate: float) -> int:
    """A capacity of ``quota`` bytes (negative: infinite, kept) for the sampled replay at
    ``rate``: the trunk's ``T = min(trunk_bytes, quota)`` bytes unscaled, the rest by the
    rate: ``T + floor(rate * (quota - T))``. The inverse is ``T + (q - T) / rate``. O(1)."""
    if quota < 0:
        return quota
    t = min(max(trunk_bytes, 0), quota)
    return t + math.floor(rate * (quota - t))


def scaled_count(count: int, rate: float) -> int:
    """A per-call count (an eviction batch) at ``rate``: ``max(1, round(rate * count))``."""
    return max(1, round(rate * count))
