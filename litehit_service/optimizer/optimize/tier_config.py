"""The tier fields of an optimizer configuration's group (spec §7, §7a): its storages,
its ``tier_strategy`` (both of the reference's layouts) and ``tier_flows`` (per-edge
strategies), checked with every problem located, as
:func:`~.config.load_optimize_config` reports them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from litehit_core import LocatedError
from litehit_service.entries import Fields

__all__ = [
    "EDGE_MODES",
    "WRITE_MODES",
    "EdgeFlow",
    "TierConfig",
    "TierStrategy",
    "group_tiers",
    "is_tiered",
]

_TIER_STRATEGY = (
    "hierarchical_eviction_enabled",
    "write_mode",
    "access_propagation_enabled",
    "promote_enabled",
    "selective_write_threshold",
    "tier_flows",
)
_STORAGE = ("unique_name", "storage_type", "band_width_mbps", "priority", "capacity")
_FLOW = (
    "from_tier",
    "to_tier",
    "write_mode",
    "access_propagation_enabled",
    "write_propagation_enabled",
    "promote_enabled",
    "selective_write_threshold",
)


@dataclass(frozen=True, slots=True)
class TierConfig:
    """One storage tier of a tiered group (spec §7): its ``name`` (``unique_name``), its
    ``priority`` (tiers are ordered by it, lowest = tier 0, the fastest) and ``capacity``
    in GiB (negative = infinite; ``used_percentage`` applies)."""

    name: str
    priority: int
    capacity: float


WRITE_MODES = ("write_through", "write_through_selective", "cascading")
"""Tier write modes (spec §7), in the kernel's code order."""


EDGE_MODES = (*WRITE_MODES, "inert")
"""An edge's write modes (spec §7a) in the kernel's code order: "inert" is an edge that
neither places nor demotes (after the first under a group-wide write_through_selective)."""


@dataclass(frozen=True, slots=True)
class EdgeFlow:
    """One edge between adjacent tiers, tier t -> t + 1 (spec §7a), resolved: its write
    mode (:data:`EDGE_MODES`) and whether a read's touch, a write's refresh and a
    promotion cross it."""

    write_mode: str = "write_through"
    access_propagation: bool = True
    write_propagation: bool = True
    promote: bool = False


@dataclass(frozen=True, slots=True)
class TierStrategy:
    """How a tiered group writes and reads its tiers (spec §7; defaults there); ``edges``:
    one :class:`EdgeFlow` per adjacent pair when the group gave ``tier_flows`` (§7a),
    empty when every edge follows the group-wide fields."""

    write_mode: str = "write_through"
    access_propagation: bool = True
    promote: bool = False
    selective_write_threshold: int = 2
    edges: tuple[EdgeFlow, ...] = ()


def is_tiered(f: Fields, found: list[LocatedError]) -> bool:
    """Whether the group is tiered: ``hierarchical_eviction_enabled`` in its
    ``tier_strategy`` or (older layout) on the group itself, or ``tier_flows`` with two or
    more storages (spec §7a)."""
    ts = Fields(f.object("tier_strategy"), f.path("tier_strategy"), _TIER_STRATEGY, [])
    if ts.boolean("hierarchical_eviction_enabled") or f.boolean("hierarchical_eviction_enabled"):
        return True
    flows = bool(ts.array("tier_flows")) or bool(f.array("tier_flows"))
    return flows and len(f.array("storages")) >= 2


def group_tiers(
    f: Fields, found: list[LocatedError], tiered: bool
) -> tuple[tuple[TierConfig, ...], TierStrategy]:
    """A group's tier fields (both layouts of the reference): its tiers sorted by
    priority and its strategy; every field checked even when hierarchical eviction is off
    (the tiers are then unused: empty)."""
    ts = Fields(f.object("tier_strategy"), f.path("tier_strategy"), _TIER_STRATEGY, found)
    flows_where = ts.path("tier_flows") if ts.array("tier_flows") else f.path("tier_flows")
    flows = ts.array("tier_flows") or f.array("tier_flows")
    if ts.array("tier_flows") and f.array("tier_flows"):
        found.append(LocatedError("", 0, "give tier_flows once: in tier_strategy or in the "
                                  "group, not both", f.path("tier_flows")))  # fmt: skip
    storages = [
        Fields(d, f"{f.where}.storages[{i}]", _STORAGE, found)
        for i, d in enumerate(f.array("storages"))
    ]
    # with tier_flows, storages without a priority are ordered as listed (spec §7a)
    listed = bool(flows) and not any("priority" in s.data for s in storages)
    tiers: list[TierConfig] = []
    for i, s in enumerate(storages):
        name = s.string("unique_name", required=tiered, default=f"tier{i}")
        s.string("storage_type")
        s.integer("band_width_mbps")
        priority = s.integer("priority", required=tiered and not listed, default=i)
        capacity = s.number("capacity", required=tiered, default=-1.0)
        tiers.append(TierConfig(name, priority, capacity))
    ts.boolean("hierarchical_eviction_enabled")
    f.boolean("hierarchical_eviction_enabled")
    group_mode = f.string("tier_write_mode", default="write_through")
    mode_where = ts.path("write_mode") if "write_mode" in ts.data else f.path("tier_write_mode")
    mode = ts.string("write_mode", default=group_mode)
    if mode not in WRITE_MODES:
        found.append(_bad(mode_where, f"one of {list(WRITE_MODES)}", mode))
    propagate = ts.boolean("access_propagation_enabled", default=True)
    promote = ts.boolean("promote_enabled", default=f.boolean("enable_promote"))
    threshold = ts.integer("selective_write_threshold", default=2)
    if threshold < 1:
        found.append(_bad(ts.path("selective_write_threshold"), "an integer >= 1", threshold))
    strategy = TierStrategy(mode, propagate, promote, threshold)
    if not tiered:
        if flows:
            _flows(flows, flows_where, [t.name for t in tiers], strategy, found)
        return (), strategy
    if not tiers and not f.broken:
        found.append(
            _bad(
                f.path("storages"),
                "at least one storage (a tier) when hierarchical_eviction_enabled is true",
                f.data.get("storages", []),
            )
        )
    names = [t.name for t in tiers]
    for i, t in enumerate(tiers):
        if names.index(t.name) != i:
            found.append(_bad(f"{f.where}.storages[{i}].unique_name", "unique", t.name))
        if [u.priority for u in tiers].index(t.priority) != i:
            found.append(
                _bad(f"{f.where}.storages[{i}].priority", "distinct in its group", t.priority)
            )
    ordered = tuple(sorted(tiers, key=lambda t: t.priority))
    if flows:
        edges, threshold = _flows(flows, flows_where, [t.name for t in ordered], strategy, found)
        strategy = TierStrategy(mode, propagate, promote, threshold, edges)
    return ordered, strategy


def _flows(
    flows: list[Any],
    where: str,
    names: list[str],
    group: TierStrategy,
    found: list[LocatedError],
) -> tuple[tuple[EdgeFlow, ...], int]:
    """``tier_flows`` resolved against the tiers ``names`` (tier 0 first), spec §7a: one
    :class:`EdgeFlow` per adjacent pair (a field left out, or an edge not listed, takes the
    group's ``tier_strategy`` value; ``write_propagation_enabled`` defaults to true), and
    edge 0's selective write threshold. Errors name the edge's field and value. O(edges)."""
    group_edges = [
        EdgeFlow("inert" if group.write_mode == "write_through_selective" and e > 0
                 else group.write_mode, group.access_propagation, True, group.promote)
        for e in range(max(len(names) - 1, 0))
    ]  # fmt: skip
    threshold = group.selective_write_threshold
    seen: dict[int, int] = {}
    for i, data in enumerate(flows):
        e = Fields(data, f"{where}[{i}]", _FLOW, found)
        ends = []
        for end in ("from_tier", "to_tier"):
            name = e.string(end, required=True)
            if name and name not in names:
                found.append(_bad(e.path(end), f"one of the group's storages {names}", name))
            ends.append(names.index(name) if name in names else None)
        edge_mode = e.string("write_mode", default=group.write_mode)
        access = e.boolean("access_propagation_enabled", default=group.access_propagation)
        write = e.boolean("write_propagation_enabled", default=True)
        promote = e.boolean("promote_enabled", default=group.promote)
        edge_threshold = e.integer("selective_write_threshold", default=threshold)
        if edge_threshold < 1:
            found.append(_bad(e.path("selective_write_threshold"), "an integer >= 1",
                              edge_threshold))  # fmt: skip
        if edge_mode not in WRITE_MODES:
            found.append(_bad(e.path("write_mode"), f"one of {list(WRITE_MODES)}", edge_mode))
        low, high = ends
        if low is None or high is None:
            continue
        if high != low + 1:
            found.append(_bad(e.path("to_tier"), f"the tier right after from_tier "
                              f"{names[low]!r} (an edge joins adjacent tiers, in priority "
                              f"order: {names})", names[high]))  # fmt: skip
            continue
        if low in seen:
            found.append(_bad(e.path("from_tier"), f"one edge per pair of tiers (edge "
                              f"{seen[low]} joins the same ones)", names[low]))  # fmt: skip
            continue
        seen[low] = i
        if edge_mode == "write_through_selective" and low > 0:
            found.append(_bad(e.path("write_mode"), "write_through or cascading on an edge "
                              "after the first (write_through_selective copies from tier 0 "
                              "to tier 1 only)", edge_mode))  # fmt: skip
        if edge_mode not in WRITE_MODES:
            continue
        if "write_mode" not in e.data and group.write_mode == "write_through_selective" and low:
            edge_mode = "inert"  # a group-wide selective mode: later edges neither place nor demote
        group_edges[low] = EdgeFlow(edge_mode, access, write, promote)
        if low == 0:
            threshold = edge_threshold
    return tuple(group_edges), threshold


def _bad(field_path: str, what: str, value: Any) -> LocatedError:
    return LocatedError("", 0, f"must be {what}, got {value!r}", field_path)
