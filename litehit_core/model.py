"""Domain value types shared by every LiteHit component.

Everything here is in *blocks* (cache blocks of ``block_size_tokens`` tokens) or
*tokens*; bytes only appear at the projection boundary (see :mod:`litehit_core.projector`).
"""

from __future__ import annotations

from typing import NamedTuple

from litehit_core.errors import InvalidRequestError

__all__ = [
    "FACT_MODELS",
    "FactModel",
    "HitCurveSegment",
    "HitCurveStep",
    "InvalidRequestError",
    "NormalizedRequest",
    "RequestFact",
]


class HitCurveSegment(NamedTuple):
    """One arithmetic run of a request's hit curve.

    The k-th block (0-based) of the segment is a hit at every capacity
    ``>= start_required_blocks + k`` (capacities in blocks).
    """

    start_required_blocks: int
    run_length: int


class HitCurveStep(NamedTuple):
    """One corner of a staircase hit curve: from ``threshold`` (in the model's capacity
    unit: bytes for hybrid instances) on, ``hit_blocks`` head blocks hit.

    A staircase holds corners with strictly increasing thresholds and hit blocks; the hits
    at capacity C are those of the last corner with ``threshold <= C`` (0 before the
    first).
    """

    threshold: int
    hit_blocks: int


class RequestFact(NamedTuple):
    """The capacity-independent outcome of one request.

    ``hit_curve`` holds the prefix blocks that were cached (in any LRU large enough),
    head first, as segments whose thresholds strictly increase; blocks past the last
    segment miss at every capacity. Project it with :func:`litehit_core.project_blocks`.
    """

    hit_curve: tuple[HitCurveSegment, ...]
    total_blocks: int


class NormalizedRequest(NamedTuple):
    """Block keys at the instance's block size plus the token denominator.

    ``input_token_len`` keeps any trailing partial-block tokens: they count in the
    denominator of hit rates but never enter the cache.
    """

    block_keys: list[int]
    input_token_len: int


class FactModel(NamedTuple):
    """How the facts of a replay model read: ``curve`` ``"ramps"`` (:class:`HitCurveSegment`)
    or ``"steps"`` (:class:`HitCurveStep` corners), thresholds in ``unit`` ``"blocks"`` or
    ``"bytes"``."""

    name: str
    curve: str
    unit: str


FACT_MODELS: dict[str, FactModel] = {
    "lru": FactModel("lru", "ramps", "blocks"),
    "hybrid": FactModel("hybrid", "steps", "bytes"),
    "lru-head-first": FactModel("lru-head-first", "steps", "blocks"),
}
"""Every replay model's facts by model name (the engines are in :mod:`litehit_core.engine`)."""


TOUCH_ORDERS = ("tail-first", "head-first")
"""The touch orders an offline replay can use (``tail-first`` is the default)."""


def touch_order_model(touch_order: str) -> str:
    """The full-attention model name of a touch order: ``"lru"`` (tail-first, the
    :class:`~litehit_core.lite_hit.LiteHit` engine) or ``"lru-head-first"``.
    InvalidRequestError naming the value otherwise. O(1)."""
    if touch_order == "tail-first":
        return "lru"
    if touch_order == "head-first":
        return "lru-head-first"
    raise InvalidRequestError(
        f"touch_order must be one of {list(TOUCH_ORDERS)}, got {touch_order!r}"
    )


MAX_OBJECT_BYTES = 1 << 40
"""Largest charge of one Full block or Linear state (1 TiB): byte sums stay within int64."""


def check_lru_parameters(ttl_ns: int, max_tracked_blocks: int) -> None:
    """The one check of an LRU engine's parameters (both implementations and
    :func:`~litehit_core.engine.create_engine`): InvalidRequestError naming a negative one.
    O(1)."""
    if ttl_ns < 0:
        raise InvalidRequestError(f"ttl_ns must not be negative, got {ttl_ns}")
    if max_tracked_blocks < 0:
        raise InvalidRequestError(
            f"max_tracked_blocks must not be negative, got {max_tracked_blocks}"
        )
