"""A seeded synthetic trace for one instance that grows to any number of unique blocks.

Shape (each knob a :class:`Shape` field; defaults in brackets):

- ``system_prompts`` [64] shared system prompts of lognormal length (median
  ``system_median`` [8] blocks), chosen per conversation by Zipf popularity
  (``system_zipf`` [1.1]): the prefix many requests share;
- ``slots`` [1024] concurrent conversations ("sessions"); every request picks one by Zipf
  popularity (``slot_zipf`` [1.0]: a few hot sessions, a long tail). A request sends the
  session's system prompt, its whole history and a new turn (lognormal, median
  ``turn_median`` [2] blocks), so a returning session hits its history;
- a session starts with a document (lognormal, median ``doc_median`` [12] blocks) and ends
  after a turn with probability ``end_probability`` [0.25] or once its history reaches
  ``max_history`` [200] blocks (~100k tokens of 512); its slot then starts a new session
  with fresh keys, which is what keeps the unique blocks growing (~7 a request);
- timestamps: Poisson arrivals at ``rate`` [20] requests/s.

Keys are ``splitmix64`` of distinct tags (system prompt or session, block index), so they
are distinct 64-bit hashes as real prefix hashes are. Everything comes from one
``numpy.random.Generator(PCG64(seed))``, drawn chunk by chunk: the same seed and chunk
sizes give the same trace on every machine. Generation is a numba loop (~10 ns a key).

Usage from a benchmark::

    for keys, offsets, times in SyntheticTrace(seed=1).chunks(8192, max_unique_blocks=N):
        ...  # request r is keys[offsets[r]:offsets[r + 1]] at times[r]
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from numba import njit


@dataclass(frozen=True)
class Shape:
    system_prompts: int = 64
    system_median: float = 8.0
    system_zipf: float = 1.1
    slots: int = 1024
    slot_zipf: float = 1.0
    turn_median: float = 2.0
    doc_median: float = 12.0
    sigma: float = 0.8
    end_probability: float = 0.25
    max_history: int = 200
    rate: float = 20.0


@njit(cache=True)
def _mix(z: np.uint64) -> np.int64:
    z = (z + np.uint64(0x9E3779B97F4A7C15)) & np.uint64(0xFFFFFFFFFFFFFFFF)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return np.int64(z ^ (z >> np.uint64(31)))


@njit(cache=True)
def _assemble(state, slot_id, slot_sys, slot_len, sys_len, sys_used, picks, sys_picks, turns,
              docs, ends, end_p, max_history, keys, offsets) -> np.int64:  # fmt: skip
    """Write the chunk's keys; returns how many. ``state`` = [next session id, unique
    blocks so far]."""
    w = 0
    for r in range(picks.shape[0]):
        s = picks[r]
        if slot_len[s] == 0:  # a new session in this slot
            slot_id[s] = state[0]
            state[0] += 1
            slot_sys[s] = sys_picks[r]
            if not sys_used[sys_picks[r]]:
                sys_used[sys_picks[r]] = True
                state[1] += sys_len[sys_picks[r]]
            add = docs[r]
        else:
            add = turns[r]
        if slot_len[s] + add > max_history:
            add = max(1, max_history - slot_len[s])
        p = slot_sys[s]
        for j in range(sys_len[p]):
            keys[w] = _mix(np.uint64((1 << 62) | (p << 20) | j))
            w += 1
        base = np.uint64((slot_id[s] + 1) << 20)
        total = slot_len[s] + add
        for j in range(total):
            keys[w] = _mix(base | np.uint64(j))
            w += 1
        state[1] += add
        slot_len[s] = total
        if total >= max_history or ends[r] < end_p:
            slot_len[s] = 0
        offsets[r + 1] = w
    return w


class SyntheticTrace:
    """The generator's state: sessions in their slots and the clock (see the module
    docstring). ``unique_blocks`` counts the distinct keys produced so far (system prompts
    count once they are first used)."""

    def __init__(self, seed: int = 1, shape: Shape | None = None) -> None:
        self.shape = shape or Shape()
        sh = self.shape
        self._rng = np.random.Generator(np.random.PCG64(seed))
        rng = self._rng
        self._sys_len = np.clip(
            np.rint(rng.lognormal(np.log(sh.system_median), sh.sigma, sh.system_prompts)), 1, 64
        ).astype(np.int64)
        self._sys_cdf = _zipf_cdf(sh.system_prompts, sh.system_zipf)
        self._slot_cdf = _zipf_cdf(sh.slots, sh.slot_zipf)
        self._slot_id = np.zeros(sh.slots, np.int64)
        self._slot_sys = np.zeros(sh.slots, np.int64)
        self._slot_len = np.zeros(sh.slots, np.int64)
        self._state = np.zeros(2, np.int64)
        self._sys_used = np.zeros(sh.system_prompts, np.bool_)  # prompts seen
        self._now = 0.0
        self.requests = 0

    @property
    def unique_blocks(self) -> int:
        """Distinct keys produced so far (exact: sessions never share keys). O(1)."""
        return int(self._state[1])

    def chunk(self, requests: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The next ``requests`` requests: (keys, offsets, times ns), int64 arrays."""
        sh, rng = self.shape, self._rng
        picks = np.searchsorted(self._slot_cdf, rng.random(requests), "right")
        sys_picks = np.searchsorted(self._sys_cdf, rng.random(requests), "right")
        turns = _lengths(rng, sh.turn_median, sh.sigma, requests, sh.max_history)
        docs = _lengths(rng, sh.doc_median, sh.sigma, requests, sh.max_history)
        ends = rng.random(requests)
        gaps = rng.exponential(1.0 / sh.rate, requests)
        times = (self._now + np.cumsum(gaps)) * 1e9
        self._now += float(gaps.sum())
        upper = int(self._sys_len.max()) + sh.max_history
        keys = np.empty(requests * upper, np.int64)
        offsets = np.zeros(requests + 1, np.int64)
        n = _assemble(self._state, self._slot_id, self._slot_sys, self._slot_len, self._sys_len,
                      self._sys_used, picks, sys_picks, turns, docs, ends, sh.end_probability,
                      sh.max_history, keys, offsets)  # fmt: skip
        self.requests += requests
        return keys[:n].copy(), offsets, times.astype(np.int64)

    def chunks(
        self, requests: int, max_unique_blocks: int
    ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Chunks of ``requests`` requests until ``max_unique_blocks`` unique blocks."""
        while self.unique_blocks < max_unique_blocks:
            yield self.chunk(requests)


def _zipf_cdf(n: int, s: float) -> np.ndarray:
    weights = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** s
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    cdf[-1] = 2.0  # searchsorted never runs past the end
    return cdf


def _lengths(rng: np.random.Generator, median: float, sigma: float, n: int, top: int) -> np.ndarray:
    return np.clip(np.rint(rng.lognormal(np.log(median), sigma, n)), 1, top).astype(np.int64)
