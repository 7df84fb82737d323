"""Policy ``random_lru``: evict the least recent of a random sample (spec §5).

The instance keeps a dense array of its cached blocks (its segment of
``ReplayArrays.dense``; a node's position in ``prev``): an insert appends, a removal moves
the last block into the hole. A call for ``m`` victims draws ``min(S, n)`` positions with
replacement from the instance's xorshift64 generator (``x ^= x << 13; x ^= x >> 7;
x ^= x << 17``, position ``x mod n``; ``S = floor(batch / sample_rate)`` in ``sample``),
orders the drawn blocks by (last access, seq) -- the same as by ``seq``, since a replay
applies events in time order -- and returns the first ``k = min(m, n, S)``, duplicates
included (the caller skips a block already evicted, so a call may evict fewer than
``k``). A touch copies the block's new ``seq`` into ``dense_seq`` (so a draw reads one array);
``choose_victims`` O(min(S, n)) draws, each a serial xorshift step, a modulo and one load,
plus O(k) per draw that enters the k least recent kept so far.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from litehit_core.policy_replay.state import ReplayArrays

__all__ = ["KIND", "ONE_SHOT", "choose_victims", "on_access", "on_remove", "on_write"]

KIND = 1
"""This policy's code in ``ReplayArrays.kind``."""
ONE_SHOT = True
"""One draw per call: the caller must not ask again for the victims a call did not give."""


@njit(cache=True, nogil=True)
def on_write(a: ReplayArrays, inst: np.int64, node: np.int64, inserted: bool) -> None:
    """A write inserted ``node`` (appended to the dense array; ``cached`` already counts
    it) or rewrote it; either way its new ``seq`` goes to ``dense_seq``."""
    start = a.dense_start[inst]
    if inserted:
        pos = a.cached[inst] - 1
        a.dense[start + pos] = node
        a.prev[node] = pos
    a.dense_seq[start + a.prev[node]] = a.seq[node]


@njit(cache=True, nogil=True)
def on_access(a: ReplayArrays, inst: np.int64, node: np.int64) -> None:
    """A read hit ``node``: its new ``seq`` goes to ``dense_seq``."""
    a.dense_seq[a.dense_start[inst] + a.prev[node]] = a.seq[node]


@njit(cache=True, nogil=True)
def on_remove(a: ReplayArrays, inst: np.int64, node: np.int64) -> None:
    """``node`` leaves: the last block of the dense array moves into its place
    (``cached`` still counts ``node``)."""
    start = a.dense_start[inst]
    pos = np.int64(a.prev[node])
    last_pos = start + a.cached[inst] - 1
    last = a.dense[last_pos]
    a.dense[start + pos] = last
    a.dense_seq[start + pos] = a.dense_seq[last_pos]
    a.prev[last] = pos


@njit(cache=True, nogil=True)
def _next(x: np.uint64) -> np.uint64:
    x ^= x << np.uint64(13)
    x ^= x >> np.uint64(7)
    x ^= x << np.uint64(17)
    return x


@njit(cache=True, nogil=True)
def choose_victims(a: ReplayArrays, inst: np.int64, m: np.int64, out: np.ndarray) -> np.int64:
    """The ``k`` least recent of the sample into ``out``, least recent first (see the
    module docstring). Keeps ``out[:count]`` sorted while drawing, so it never sorts the
    whole sample."""
    n = a.cached[inst]
    draws = min(a.sample[inst], n)
    k = min(m, n, a.sample[inst])
    if k <= 0:
        return np.int64(0)
    seq = a.dense_seq
    start = a.dense_start[inst]
    x = a.rng[inst]
    count = np.int64(0)
    un = np.uint64(n)
    for _ in range(draws):
        x = _next(x)
        pos = start + np.int64(x % un)
        value = seq[pos]
        if count == k:
            if value >= seq[out[k - 1]]:
                continue
            count -= 1  # the largest kept drops out
        j = count
        while j > 0 and seq[out[j - 1]] > value:
            out[j] = out[j - 1]
            j -= 1
        out[j] = pos
        count += 1
    a.rng[inst] = x
    for j in range(count):  # positions -> blocks (nothing moved while drawing)
        out[j] = a.dense[out[j]]
    return count
