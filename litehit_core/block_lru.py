"""An LRU of blocks with a chosen touch order, exact at every capacity in one pass.

After reading a request's prefix on the snapshot (a block hits at capacity C while its
recency depth is <= C, the prefix while every block of it does), its blocks are touched:

- ``"tail-first"``: tail to head, so the head ends most recent (vLLM's free queue and
  SGLang's leaf eviction; :class:`~litehit_core.lite_hit.LiteHit`, model ``"lru"``, is the
  fast engine of this order);
- ``"head-first"``: head to tail, so the head ends least recent (LMCache's order).

With either order a request's hits at capacity C are ``#{k : T_k <= C}`` for
``T_k = max(depth(key_0..key_{k-1}))``, so its fact is a staircase of corners
``(threshold blocks, hit blocks)``: model ``"lru-head-first"`` in
:data:`~litehit_core.model.FACT_MODELS`. The engine is the numba kernel of
:class:`~litehit_core.hybrid.HybridLRU` with one charge per block and no saved states: a
Fenwick tree over positions counts the more recent blocks (depths in O(log U)), TTL and
``max_tracked_blocks`` move a floor, compaction keeps the position space bounded.

:meth:`BlockLRU.process_with_depths` also returns what a per-capacity report needs and a
fact does not hold: the snapshot depth of each cached prefix block (its LRU position at
hit time, 1 = most recent) and the depth of each touch in touch order (the stack distance
of the flattened touch sequence: at capacity C a touch deeper than C, or of an untracked
block, is a miss that inserts, so evictions = such touches - final occupancy).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from litehit_core.errors import InvalidRequestError
from litehit_core.hybrid import HybridLRU
from litehit_core.kernels import distinct_keys
from litehit_core.model import TOUCH_ORDERS, RequestFact
from litehit_core.staircases import BatchResult
from litehit_core.state import EngineState

__all__ = ["TOUCH_ORDERS", "TOUCH_ORDER_MODELS", "BatchResult", "BlockLRU"]

TOUCH_ORDER_MODELS = {"tail-first": "lru-tail-first", "head-first": "lru-head-first"}
"""The model name the states of an engine of each touch order carry."""


class BlockLRU(HybridLRU):
    """Exact prefix hits of a block LRU with ``touch_order`` (see the module docstring) at
    every capacity (blocks); ``ttl_ns`` block lifetime (0 = none), ``max_tracked_blocks``
    (0 = unlimited; beyond it the least recent are dropped). O(n log U) per request."""

    __slots__ = ()

    def __init__(
        self, touch_order: str = "head-first", ttl_ns: int = 0, max_tracked_blocks: int = 0
    ) -> None:
        if touch_order not in TOUCH_ORDERS:
            raise InvalidRequestError(
                f"touch_order must be one of {list(TOUCH_ORDERS)}, got {touch_order!r}"
            )
        super().__init__(1, 1, 1, ttl_ns, max_tracked_blocks)
        self._blocks_only(touch_order == "head-first")
        self.model = TOUCH_ORDER_MODELS[touch_order]

    @property
    def touch_order(self) -> str:
        """``"head-first"`` or ``"tail-first"``."""
        return "head-first" if self._head_first() else "tail-first"

    def tracked_bytes(self, block_bytes: int = 0) -> int:
        """Bytes of every tracked block, blocks of ``block_bytes``. O(1)."""
        return self.current_unique_blocks() * block_bytes

    def process_with_depths(
        self, block_keys: Sequence[int], now_ns: int = 0
    ) -> tuple[RequestFact, np.ndarray, np.ndarray]:
        """:meth:`process_request` plus two int64 arrays: the snapshot depth of each cached
        prefix block (head first, as long as blocks are tracked) and, in touch order, each
        touch's depth just before it (-1: not tracked). O(n log U)."""
        keys = distinct_keys(block_keys)
        n = keys.shape[0]
        depths = np.full(n, -1, np.int64)
        touches = np.zeros(n, np.int64)
        fact = self._run(keys, now_ns, depths, touches)
        prefix = int(np.argmax(depths < 0)) if (depths < 0).any() else n
        return fact, depths[:prefix], touches

    def process_batch(
        self, keys: np.ndarray, offsets: np.ndarray, times: np.ndarray | None = None
    ) -> BatchResult:
        """Replay many requests in one compiled loop: request r is ``keys[offsets[r]:
        offsets[r + 1]]`` (int64, distinct within a request, head first) at ``times[r]``
        (0 without). Returns every request's staircase, prefix depths and touch depths as
        flat arrays over the same spans as ``keys`` (:class:`BatchResult`). O(K log U) for
        K keys, with no Python work per request."""
        keys = np.ascontiguousarray(keys, np.int64)
        offsets = np.ascontiguousarray(offsets, np.int64)
        requests = offsets.shape[0] - 1
        if times is None:
            times = np.zeros(requests, np.int64)
        total = keys.shape[0]
        thr = np.zeros(total, np.int64)
        hits = np.zeros(total, np.int64)
        counts = np.zeros(requests, np.int64)
        depths = np.full(total, -1, np.int64)
        touches = np.zeros(total, np.int64)
        self._run_batch(keys, offsets, times, thr, hits, counts, depths, touches)
        return BatchResult(offsets, thr, hits, counts, depths, touches)

    @classmethod
    def from_state(  # type: ignore[override]
        cls,
        state: EngineState,
        touch_order: str = "head-first",
        ttl_ns: int = 0,
        max_tracked_blocks: int = 0,
    ) -> BlockLRU:
        """An engine continuing exactly where ``state``'s exporter stopped (validated:
        InvalidRequestError naming the field). O(blocks)."""
        engine = cls(touch_order, ttl_ns, max_tracked_blocks)
        engine._load(state)
        return engine
