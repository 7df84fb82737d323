"""The interpreter during a long offline run: the cyclic garbage collector held back.

A replay that turns every record into Python objects (events, keys, facts) allocates
millions of containers that die young and form no cycles; with CPython's default
thresholds (a collection every 700 net allocations, a full one every 100 of those) the
collector spends a third of ``litehit replay``'s time scanning them (measured: 8.3 s ->
6.2 s on the Mooncake conversation x 40). :func:`relaxed_gc` raises the thresholds for the
block and restores them after; cycles are still collected, only less often.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["RELAXED_THRESHOLDS", "relaxed_gc"]

RELAXED_THRESHOLDS = (50_000, 20, 100)
"""Generation 0 every 50,000 net allocations, generation 1 every 20 of those, a full
collection every 100 of those (and CPython's own rule: not before the young objects are a
quarter of the old)."""


@contextmanager
def relaxed_gc() -> Iterator[None]:
    """Run the block with :data:`RELAXED_THRESHOLDS`; the previous thresholds after."""
    before = gc.get_threshold()
    gc.set_threshold(*RELAXED_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)
