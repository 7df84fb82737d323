"""The query semantics policy: one set of rules for online queries and offline replay.

Every query, whether a gateway sent it (TraceQuery, TraceQueryStream,
TraceQueryPackedStream) or a trace line carried it (``litehit replay``), goes through the
same manager code under a :class:`QueryPolicy`. The rules, in the order they apply:

1. The instance must be registered (INSTANCE_NOT_EXIST).
2. ``input_token_len``, ``token_ids_len`` and ``timestamp_ns`` must not be negative.
3. At most ``max_block_keys`` block keys (online: ``--max-block-keys``, default 1,000,000;
   offline: unlimited, the trace file is the operator's own).
4. Tokens: ``input_token_len``, else ``token_ids_len``, else the keys' count times the
   key granularity; the keys must be exactly the complete blocks of those tokens.
5. Key granularity: keys are given at ``trace_block_size_tokens`` per key (0 = the
   instance's block size; online there is no wire field, so always 0; offline the replay
   config's ``block_size``) and coarsened to the instance's block size (the key of a
   coarse block is the chained key of its last fine block).
6. Prefix hash: with the group's ``enable_prefix_hash`` the keys are raw ids, chained by
   LiteHit (before re-blocking).
7. Timestamp 0 means "now" by ``clock_ns`` (online: the wall clock); without a clock
   (offline) it means 0, as the trace says.
8. A timestamp more than ``max_clock_skew_ns`` ahead of ``clock_ns`` is refused (online:
   ``--max-clock-skew-seconds``, default 300 s), so one bad client cannot freeze an
   instance's TTL clock far in the future; offline traces have no wall clock to compare to.
9. Each instance has a monotone clock. A timestamp before it is ``"clamp"``-ed to it
   (online: gateways' clocks differ a little) or ``"reject"``-ed (offline: a trace out of
   time order is a broken trace), per ``backwards``.
10. A group's ``touch_order`` must be one of ``touch_orders`` (online: ``tail-first``
    only, the wire has no field for it; offline: ``tail-first`` or ``head-first``).

A rejected query changes nothing. The policy is immutable; the manager holds one.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from litehit_core.facts import SAMPLE_UNITS
from litehit_core.model import TOUCH_ORDERS
from litehit_service.errors import InvalidArgument

_NS_PER_SECOND = 1_000_000_000
BACKWARDS_CHOICES = ("clamp", "reject")
DEFAULT_MAX_BLOCK_KEYS = 1_000_000
DEFAULT_MAX_CLOCK_SKEW_SECONDS = 300


class BatchQueryError(Exception):
    """Request ``index`` of a batch broke a rule: ``error`` is the exception the
    one-request path raises for it. Nothing of the batch was applied."""

    def __init__(self, index: int, error: Exception) -> None:
        super().__init__(f"request {index} of the batch: {error}")
        self.index = index
        self.error = error


@dataclass(frozen=True, slots=True)
class QueryPolicy:
    """The rules of the module docstring, with the fields where online and offline differ.

    ``max_block_keys``: most keys per query (rule 3). ``trace_block_size_tokens``: tokens
    per key of the input (rule 5; 0 = the instance's block size). ``clock_ns``: "now" in
    ns since the epoch, or None when timestamps are taken as given (rules 7, 8).
    ``max_clock_skew_ns``: how far ahead of ``clock_ns`` a timestamp may be (rule 8; None =
    no limit). ``backwards``: ``"clamp"`` or ``"reject"`` (rule 9). ``touch_orders``: the
    touch orders a group may use (rule 10). ``sample_rate``/``sample_seed``: an offline
    sampled replay (issue 37) keeps only the normalised keys
    :func:`litehit_core.sampling.kept` keeps (rate 1: every key), the token denominator
    unchanged; ``sample_unit`` ``"block"`` hashes each key, ``"subtree"`` keeps or drops
    whole requests by their first key below the instance's learned trunk (a batch is one
    window of :class:`~litehit_core.sampling.TrunkLearner`).
    """

    max_block_keys: int = DEFAULT_MAX_BLOCK_KEYS
    trace_block_size_tokens: int = 0
    clock_ns: Callable[[], int] | None = time.time_ns
    max_clock_skew_ns: int | None = DEFAULT_MAX_CLOCK_SKEW_SECONDS * _NS_PER_SECOND
    backwards: str = "clamp"
    touch_orders: tuple[str, ...] = ("tail-first",)
    sample_rate: float = 1.0
    sample_seed: int = 0
    sample_unit: str = "block"

    def __post_init__(self) -> None:
        if not (0 < self.sample_rate <= 1) or self.sample_seed < 0:
            raise ValueError(
                f"sample_rate must be in (0, 1] and sample_seed >= 0, got {self.sample_rate!r} "
                f"and {self.sample_seed!r}"
            )
        if self.sample_unit not in SAMPLE_UNITS:
            raise ValueError(f"sample_unit must be one of {SAMPLE_UNITS}, got {self.sample_unit!r}")
        if self.max_block_keys <= 0:
            raise ValueError(f"max_block_keys must be > 0, got {self.max_block_keys}")
        if self.trace_block_size_tokens < 0:
            raise ValueError(
                f"trace_block_size_tokens must be >= 0, got {self.trace_block_size_tokens}"
            )
        if self.max_clock_skew_ns is not None and self.max_clock_skew_ns < 0:
            raise ValueError(f"max_clock_skew_ns must be >= 0, got {self.max_clock_skew_ns}")
        if self.backwards not in BACKWARDS_CHOICES:
            raise ValueError(
                f"backwards must be one of {BACKWARDS_CHOICES}, got {self.backwards!r}"
            )

    @classmethod
    def online(
        cls,
        *,
        max_block_keys: int = DEFAULT_MAX_BLOCK_KEYS,
        max_clock_skew_seconds: float = DEFAULT_MAX_CLOCK_SKEW_SECONDS,
        clock_ns: Callable[[], int] = time.time_ns,
    ) -> QueryPolicy:
        """The service's policy: wall clock, bounded keys and skew, clamped clocks."""
        return cls(
            max_block_keys=max_block_keys,
            clock_ns=clock_ns,
            max_clock_skew_ns=int(max_clock_skew_seconds * _NS_PER_SECOND),
            backwards="clamp",
        )

    @classmethod
    def offline(
        cls,
        trace_block_size_tokens: int = 0,
        sample_rate: float = 1.0,
        sample_seed: int = 0,
        sample_unit: str = "block",
    ) -> QueryPolicy:
        """The replay's policy: trace timestamps as given, any key count, rejected
        backwards timestamps, keys coarsened from ``trace_block_size_tokens``, sampled at
        ``sample_rate`` with ``sample_seed`` by ``sample_unit`` (rate 1: every key)."""
        return cls(
            sample_rate=sample_rate,
            sample_seed=sample_seed,
            sample_unit=sample_unit,
            max_block_keys=sys.maxsize,
            trace_block_size_tokens=trace_block_size_tokens,
            clock_ns=None,
            max_clock_skew_ns=None,
            backwards="reject",
            touch_orders=TOUCH_ORDERS,
        )

    def check_touch_order(self, group_name: str, touch_order: str) -> None:
        """Rule 10: InvalidArgument naming the group and value unless ``touch_order`` is
        allowed. O(1)."""
        if touch_order in self.touch_orders:
            return
        if touch_order in TOUCH_ORDERS:
            raise InvalidArgument(
                f"touch_order {touch_order!r} of instance group {group_name!r} is for offline "
                "replays only: online instances touch tail first (the wire has no field for it)"
            )
        raise InvalidArgument(
            f"touch_order of instance group {group_name!r} must be one of "
            f"{list(TOUCH_ORDERS)}, got {touch_order!r}"
        )

    def stamp(self, timestamp_ns: int) -> int:
        """Rules 2, 7 and 8: the time of a query that gave ``timestamp_ns``. O(1).

        Raises InvalidArgument for a negative timestamp or one too far ahead.
        """
        if timestamp_ns < 0:
            raise InvalidArgument(f"timestamp_ns must not be negative, got {timestamp_ns}")
        clock = self.clock_ns
        if clock is None:
            return timestamp_ns
        if timestamp_ns == 0:
            return clock()
        skew = self.max_clock_skew_ns
        if skew is not None:
            now = clock()
            if timestamp_ns > now + skew:
                raise InvalidArgument(
                    f"timestamp_ns {timestamp_ns} is {(timestamp_ns - now) / _NS_PER_SECOND:.3f}"
                    f" s ahead of the server clock {now}; at most "
                    f"{skew / _NS_PER_SECOND:g} s are allowed (max_clock_skew)"
                )
        return timestamp_ns

    def advance_many(self, instance_id: str, clock_ns: int, stamps: np.ndarray) -> np.ndarray:
        """Rule 9 for requests in order (times ``stamps``, int64): the instance clock after
        each, from ``clock_ns``. Under ``"reject"`` the first backwards time raises
        :class:`BatchQueryError` with its index and the error :meth:`advance` raises for
        it. O(requests) numpy work."""
        running = np.maximum.accumulate(np.concatenate(([clock_ns], stamps)).astype(np.int64))
        if self.backwards == "reject" and len(stamps):
            back = stamps < running[:-1]
            if back.any():
                i = int(np.argmax(back))
                try:
                    self.advance(instance_id, int(running[i]), int(stamps[i]))
                except InvalidArgument as exc:
                    raise BatchQueryError(i, exc) from None
        return running[1:]

    def advance(self, instance_id: str, clock_ns: int, timestamp_ns: int) -> int:
        """Rule 9: the instance clock after a query at ``timestamp_ns``, when it was at
        ``clock_ns``. O(1). Raises InvalidArgument (``"reject"``) for a backwards time."""
        if timestamp_ns >= clock_ns:
            return timestamp_ns
        if self.backwards == "reject":
            raise InvalidArgument(
                f"instance_id {instance_id!r}: timestamp_ns {timestamp_ns} goes backwards "
                f"(the instance's clock is at {clock_ns}); events must be in time order"
            )
        return clock_ns
