"""Domain value types shared by every LiteHit component.

Everything here is in *blocks* (cache blocks of ``block_size_tokens`` tokens) or
*tokens*; bytes only appear at the projection boundary (see :mod:`litehit_core.projector`).
"""

from __future__ import annotations

from typing import NamedTuple

from litehit_core.errors import InvalidRequestError

__all__ = [
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


TOUCH_ORDERS = ("tail-first", "head-first")
"""The touch orders an offline replay can use (``tail-first`` is the default); which model
each order replays is the engine registry's word (:func:`litehit_core.engine.model_for`)."""


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
