"""Whole workloads answered as staircases: the batch result the staircase engines return,
and the interpreter engines of both touch orders (no numba).

A staircase (model ``"lru-head-first"`` in :data:`~litehit_core.model.FACT_MODELS`) is a
request's hit prefix at every capacity as corners ``(threshold blocks, hit blocks)``.
:class:`~litehit_core.block_lru.BlockLRU` computes them in one compiled loop for either
touch order, with each block's depths (what ``simulate``'s per-capacity report reads).
:class:`LiteHitStaircases` gives the same corners for the tail-first order from
:class:`~litehit_core.lite_hit.LiteHit`, the interpreter engine of that order: a ramp
``(start, run)`` of its fact is the run of blocks hit from capacities ``start``,
``start + 1``, ..., so each hit block has a threshold and the staircase is their counts
(:func:`ramps_to_staircases`); where keys name their prefix the per-block depths follow
from the corners (:meth:`LiteHitStaircases.process_batch`). :class:`HeadFirstStaircases`
does the same for the head-first order (LMCache's) with one rank per run of blocks last
touched together. For a workload of a few hundred thousand keys either answers before
numba would have loaded its kernels (the choice is
:func:`~litehit_core.engine.staircase_batch_engine`'s).
"""

from __future__ import annotations

from itertools import pairwise
from typing import NamedTuple, Protocol

import numpy as np

from litehit_core.lite_hit import LiteHit

__all__ = [
    "BatchResult",
    "HeadFirstStaircases",
    "LiteHitStaircases",
    "StaircaseEngine",
    "ramps_to_staircases",
]


class BatchResult(NamedTuple):
    """What a staircase engine's ``process_batch`` returns; every array but ``counts`` spans
    the requests' keys (``offsets`` as given). Request r's staircase is ``thr[a:a + c]``,
    ``hits[a:a + c]`` for ``a = offsets[r]``, ``c = counts[r]``; ``depths[a:b]`` holds the
    snapshot depth of each cached prefix block and -1 after the prefix; ``touches[a:b]``
    each touch's depth in touch order (-1: the block was not tracked). ``depths`` and
    ``touches`` are None where they were not asked for (:class:`LiteHitStaircases`)."""

    offsets: np.ndarray
    thr: np.ndarray
    hits: np.ndarray
    counts: np.ndarray
    depths: np.ndarray | None
    touches: np.ndarray | None


class StaircaseEngine(Protocol):
    """What both staircase engines offer (:func:`~litehit_core.engine.staircase_batch_engine`
    hands out one or the other)."""

    def process_batch(self, keys: np.ndarray, offsets: np.ndarray) -> BatchResult:
        """Replay request r = ``keys[offsets[r]:offsets[r + 1]]`` for every r in order."""
        ...

    def current_unique_blocks(self) -> int:
        """Distinct blocks tracked now."""
        ...


def ramps_to_staircases(
    starts: np.ndarray, runs: np.ndarray, ramp_counts: np.ndarray, offsets: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The staircases of ramps facts: request r has ``ramp_counts[r]`` ramps (``starts``,
    ``runs``: int64, request after request) and the keys ``offsets[r]:offsets[r + 1]``.

    Block k of a ramp hits from capacity ``start + k``, so a request's hits at C are its
    blocks with threshold <= C, and its corners are its distinct thresholds with the count
    of blocks at or below each. Returns ``(thr, hits, counts)`` laid out as
    :class:`BatchResult` lays them (arrays over the keys, request r's corners from
    ``offsets[r]``). O(hit blocks) numpy work (plus a sort if some request's thresholds
    are not ascending along its blocks)."""
    n = ramp_counts.shape[0]
    ramp_of, k, _ = _spread(runs)
    thr = starts[ramp_of] + k
    owner = np.repeat(np.arange(n, dtype=np.int64), ramp_counts)[ramp_of]
    if np.any((thr[1:] < thr[:-1]) & (owner[1:] == owner[:-1])):
        thr = thr[np.lexsort((thr, owner))]
    _, place, _ = _spread(np.bincount(owner, minlength=n))  # within the request's hit blocks
    last = np.ones(thr.shape[0], bool)  # the last block of each threshold value: a corner
    last[:-1] = (owner[1:] != owner[:-1]) | (thr[1:] != thr[:-1])
    corner = np.flatnonzero(last)
    return _lay_out(offsets, owner[corner], thr[corner], place[corner] + 1)


def _spread(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pieces of ``lengths`` laid end to end: each element's piece, its place in the piece,
    and where each piece starts. O(total)."""
    lengths = np.asarray(lengths, np.int64)
    piece_starts = np.zeros(lengths.shape[0], np.int64)
    np.cumsum(lengths[:-1], out=piece_starts[1:])
    piece = np.repeat(np.arange(lengths.shape[0], dtype=np.int64), lengths)
    return piece, np.arange(piece.shape[0], dtype=np.int64) - piece_starts[piece], piece_starts


def _lay_out(
    offsets: np.ndarray, owner: np.ndarray, thr: np.ndarray, hits: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Corners (``owner`` ascending: request after request) laid out as
    :class:`BatchResult` holds them: ``(thr, hits, counts)``, request r's corners from
    ``offsets[r]`` on. O(keys)."""
    size = int(offsets[-1])
    thr_out = np.zeros(size, np.int64)
    hits_out = np.zeros(size, np.int64)
    counts = np.bincount(owner, minlength=offsets.shape[0] - 1).astype(np.int64)
    _, place, _ = _spread(counts)
    slot = offsets[:-1][owner] + place
    thr_out[slot] = thr
    hits_out[slot] = hits
    return thr_out, hits_out, counts


def _firsts(ids: np.ndarray) -> np.ndarray:
    """Where each run of equal values of ``ids`` (sorted) begins: a bool per element."""
    first = np.ones(ids.shape[0], bool)
    first[1:] = ids[1:] != ids[:-1]
    return first


class LiteHitStaircases:
    """Tail-first staircases of a whole workload from :class:`LiteHit` (interpreter work,
    no numba): the corners :class:`~litehit_core.block_lru.BlockLRU` gives for the order
    ``"tail-first"`` where every key names its prefix
    (:func:`~litehit_core.prefix_hash.keys_name_their_prefix`: the input on which LiteHit is
    exact). With ``depths``, the per-block depths too (:meth:`process_batch` says how).
    O(K) C-speed dict work for K keys plus O(runs) interpreter steps per request (see
    :class:`LiteHit`)."""

    __slots__ = ("_depths", "_engine")

    def __init__(self, depths: bool = False) -> None:
        self._engine = LiteHit()
        self._depths = depths

    def current_unique_blocks(self) -> int:
        """Distinct blocks tracked now. O(1)."""
        return self._engine.current_unique_blocks()

    def process_batch(self, keys: np.ndarray, offsets: np.ndarray) -> BatchResult:
        """Replay request r = ``keys[offsets[r]:offsets[r + 1]]`` (int64, head first,
        prefix-chained) for every r in order; a :class:`BatchResult`, whose ``depths`` and
        ``touches`` are None unless the engine was made with ``depths``.

        The depths follow from the corners: when every key names its prefix, a touch of a
        block touched its whole prefix after it (tail first), so along a request the
        tracked blocks are a prefix with strictly growing depths, each its own corner
        (block j's depth ``d_j`` is its threshold). Touched tail first, the untracked tail
        blocks come first (-1) and block j of h tracked ones, n in all, is touched at depth
        ``d_j + n - 1 - j``: the n - h inserted blocks and the h - 1 - j deeper prefix
        blocks touched before it are now above it (keys that do not name their prefix get
        neither exact corners nor exact depths: the registry never hands them this
        engine)."""
        key_list = np.asarray(keys, np.int64).tolist()
        bounds = np.asarray(offsets, np.int64).tolist()
        process = self._engine.process_request
        starts: list[int] = []
        runs: list[int] = []
        ramp_counts: list[int] = []
        for a, b in pairwise(bounds):
            curve = process(key_list[a:b]).hit_curve
            ramp_counts.append(len(curve))
            for start, run in curve:
                starts.append(start)
                runs.append(run)
        offsets = np.asarray(offsets, np.int64)
        thr, hits, counts = ramps_to_staircases(
            np.array(starts, np.int64),
            np.array(runs, np.int64),
            np.array(ramp_counts, np.int64),
            offsets,
        )
        if not self._depths:
            return BatchResult(offsets, thr, hits, counts, None, None)
        depths, touches = _prefix_depths(offsets, thr, counts)
        return BatchResult(offsets, thr, hits, counts, depths, touches)


def _prefix_depths(
    offsets: np.ndarray, thr: np.ndarray, counts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``(depths, touches)`` of :meth:`LiteHitStaircases.process_batch` from its corners.
    O(K) numpy work."""
    owner, place, _ = _spread(np.diff(offsets))
    tracked = place < counts[owner]
    depths = np.where(tracked, thr, -1)
    before = depths[offsets[1:][owner] - 1 - place]  # the block touched place-th, tail first
    touches = np.where(before >= 0, before + place, -1)
    return depths, touches


class HeadFirstStaircases:
    """Head-first staircases of a whole workload in the interpreter (no numba): the corners,
    depths and touches :class:`~litehit_core.block_lru.BlockLRU` gives for the order
    ``"head-first"`` where every key names its prefix (the same contract as
    :class:`LiteHitStaircases`; the registry checks it).

    Positions count touches in order (a request's blocks head first); a block's depth is
    the number of live positions at or above its own. Where keys name their prefix, a
    request's tracked blocks are its head, and they fall into runs of consecutive live
    positions (blocks last touched together), along which depths fall by one: one rank
    per run, ``(t - p) - dead[p, t)``, the dead positions summed by a Fenwick tree of the
    killed runs' lengths at their first position. Then, in numpy: each block's depth; the
    staircase, whose corners are the runs starting deeper than every run before them; each
    touch's depth, ``D + sum(min(max(D' - d, 0), L'))`` over the request's earlier runs
    (depth ``D'``, length ``L'``) for a block of depth ``d`` in a run starting at depth
    ``D`` (the deeper blocks touched before it are now above it). O(K) C-speed dict work
    for K keys plus O(runs log K) interpreter steps."""

    __slots__ = ("_depths", "_pos", "_t")

    def __init__(self, depths: bool = False) -> None:
        self._depths = depths
        self._pos: dict[int, int] = {}
        self._t = 0

    def current_unique_blocks(self) -> int:
        """Distinct blocks tracked now. O(1)."""
        return len(self._pos)

    def process_batch(self, keys: np.ndarray, offsets: np.ndarray) -> BatchResult:
        """Replay request r = ``keys[offsets[r]:offsets[r + 1]]`` (int64, head first,
        distinct, prefix-chained) for every r in order, on an engine that has replayed
        nothing before (a batch engine); ``depths`` and ``touches`` are None unless the
        engine was made with ``depths``."""
        if self._t:
            raise ValueError("a HeadFirstStaircases engine replays one batch")
        offsets = np.asarray(offsets, np.int64)
        runs = self._runs(np.asarray(keys, np.int64).tolist(), offsets.tolist())
        thr, hits, counts = _head_first_corners(offsets, *runs)
        if not self._depths:
            return BatchResult(offsets, thr, hits, counts, None, None)
        depths, touches = _head_first_depths(offsets, *runs)
        return BatchResult(offsets, thr, hits, counts, depths, touches)

    def _runs(self, key_list: list[int], bounds: list[int]) -> tuple[np.ndarray, ...]:
        """Every run of tracked blocks: ``(request, first block, length, depth of its first
        block)`` as int64 arrays, request by request, head first."""
        size = len(key_list)
        tree = [0] * (size + 1)  # Fenwick over positions 1..K: dead lengths by run start
        pos = self._pos
        get = pos.get
        t = dead = 0
        out_request: list[int] = []
        out_first: list[int] = []
        out_length: list[int] = []
        out_depth: list[int] = []
        for r, (a, b) in enumerate(pairwise(bounds)):
            ks = key_list[a:b]
            old = list(map(get, ks))
            try:
                h = old.index(None)
            except ValueError:
                h = b - a
            if h:
                cuts = [0]
                prev = old[0]
                for k in range(1, h):
                    p = old[k]
                    if p != prev + 1:
                        cuts.append(k)
                    prev = p
                cuts.append(h)
                for first, stop in pairwise(cuts):
                    i = old[first] + 1  # dead positions >= p: all but those at or below p
                    below = 0
                    while i > 0:
                        below += tree[i]
                        i -= i & -i
                    out_request.append(r)
                    out_first.append(first)
                    out_length.append(stop - first)
                    out_depth.append(t - old[first] - (dead - below))
                for first, stop in pairwise(cuts):  # the runs die after every read
                    i = old[first] + 1
                    length = stop - first
                    while i <= size:
                        tree[i] += length
                        i += i & -i
                    dead += length
            pos.update(zip(ks, range(t, t + b - a), strict=True))
            t += b - a
        self._t = t
        return tuple(
            np.array(values, np.int64) for values in (out_request, out_first, out_length, out_depth)
        )


def _head_first_corners(
    offsets: np.ndarray, request: np.ndarray, first: np.ndarray, length: np.ndarray,
    depth: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """``(thr, hits, counts)`` from the runs: a run starting deeper than every run before
    it in its request is a corner (its depth, hits up to the next such run or the tracked
    head's end). O(runs) numpy work."""
    big = int(depth.max(initial=0)) + 1
    lifted = np.maximum.accumulate(request * big + depth) - request * big
    record = _firsts(request)
    record[1:] |= depth[1:] > lifted[:-1]
    corner = np.flatnonzero(record)
    owner = request[corner]
    tracked = np.bincount(request, weights=length, minlength=offsets.shape[0] - 1).astype(np.int64)
    nxt = np.empty(corner.shape[0], np.int64)  # the next corner's first block, or the end
    nxt[:-1] = first[corner[1:]]
    last = np.ones(corner.shape[0], bool)
    last[:-1] = owner[1:] != owner[:-1]
    nxt[last] = tracked[owner[last]]
    return _lay_out(offsets, owner, depth[corner], nxt)


def _head_first_depths(
    offsets: np.ndarray, request: np.ndarray, first: np.ndarray, length: np.ndarray,
    depth: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """``(depths, touches)`` from the runs (see :class:`HeadFirstStaircases`). O(tracked
    blocks x runs per request) numpy work."""
    total = int(offsets[-1])
    depths = np.full(total, -1, np.int64)
    touches = np.full(total, -1, np.int64)
    run_of, within, run_start = _spread(length)
    slot = offsets[:-1][request[run_of]] + first[run_of] + within
    block_depth = depth[run_of] - within
    depths[slot] = block_depth
    touch = depth[run_of].copy()  # D: this run's deeper blocks touched before each block
    # the request's earlier runs: pairs (earlier, later) of one request
    runs = np.arange(request.shape[0], dtype=np.int64)
    opener = np.maximum.accumulate(np.where(_firsts(request), runs, 0))
    before = runs - opener  # earlier runs of the same request
    if before.any():
        later, back, _ = _spread(before)
        earlier = opener[later] + back
        pair_of, k, _ = _spread(length[later])  # each pair over the later run's blocks
        block = run_start[later[pair_of]] + k
        e = earlier[pair_of]
        np.add.at(touch, block, np.clip(depth[e] - block_depth[block], 0, length[e]))
    touches[slot] = touch
    return depths, touches
