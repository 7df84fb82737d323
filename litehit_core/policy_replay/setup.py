"""What a policy replay is asked to replay, per instance and per tiered group: the
setups :func:`~.state.allocate` lays out as arrays (pure data, no numba)."""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "CASCADING",
    "EDGE_INERT",
    "WRITE_SELECTIVE",
    "WRITE_THROUGH",
    "EdgeSetup",
    "InstanceSetup",
    "TierSetup",
]

WRITE_THROUGH, WRITE_SELECTIVE, CASCADING, EDGE_INERT = range(4)
"""Tier write modes (spec §7); per edge (§7a) also :data:`EDGE_INERT`, an edge that
neither places nor demotes (the edges after the first under a group-wide
``write_through_selective``)."""


class InstanceSetup(NamedTuple):
    """One instance as the replay needs it: ``kind`` (its policy's code), ``group``
    (index), ``bytes_per_block``, ``sample`` (RandomLRU's draws per call, else 0),
    ``fallback`` and ``refresh`` (TTL options), ``dense`` (True for a policy with a dense
    array of its blocks: RandomLRU)."""

    kind: int
    group: int
    bytes_per_block: int
    sample: int
    fallback: bool
    refresh: bool
    dense: bool


class EdgeSetup(NamedTuple):
    """One edge between adjacent tiers (spec §7a): its write mode
    (:data:`WRITE_THROUGH`, :data:`WRITE_SELECTIVE` on edge 0 only,
    :data:`CASCADING` or :data:`EDGE_INERT`) and whether a read's touch
    (``access``), a write's refresh (``write``) and a promotion (``promote``) cross it."""

    write_mode: int = WRITE_THROUGH
    access: bool = True
    write: bool = True
    promote: bool = False


class TierSetup(NamedTuple):
    """A tiered group (spec §7): each tier's quota in bytes (-1 infinite; tier 0 first),
    the group-wide write mode (:data:`WRITE_THROUGH`, :data:`WRITE_SELECTIVE`,
    :data:`CASCADING`), access propagation, promotion, the selective write threshold, and
    ``edges``: one :class:`EdgeSetup` per adjacent pair (§7a; empty: every edge as the
    group-wide fields say, :meth:`edge_setups`)."""

    quotas: tuple[int, ...]
    write_mode: int = WRITE_THROUGH
    propagate: bool = True
    promote: bool = False
    threshold: int = 2
    edges: tuple[EdgeSetup, ...] = ()

    def edge_setups(self) -> tuple[EdgeSetup, ...]:
        """Every edge (tier t -> t + 1), the group-wide strategy's when ``edges`` is empty:
        each edge alike, except that a group-wide selective mode makes edge 0 selective
        and the later edges inert (§7a)."""
        if self.edges:
            return self.edges
        out = []
        for e in range(len(self.quotas) - 1):
            mode = self.write_mode
            if mode == WRITE_SELECTIVE and e > 0:
                mode = EDGE_INERT
            out.append(EdgeSetup(mode, self.propagate, True, self.promote))
        return tuple(out)
