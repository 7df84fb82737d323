"""Placement: a group and a registration validated and turned into capacity slots.

:func:`validated_group` checks every group rule; :func:`place_instance` checks a
registration against its group, asks the engine registry for its model
(:func:`~litehit_core.engine.model_for`), sums its location specs into block (and
linear-state) bytes and turns each ``capacity_gb`` slot into the model's capacity unit
(blocks, or bytes for hybrid instances) through the projector. :class:`ManagerLimits`
bounds what clients can make the manager hold. Every error names the field and value.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

from litehit_core import MAX_CAPACITY_GB, InvalidRequestError, capacity_gb_to_bytes
from litehit_core.engine import EVICTION_POLICIES, EngineSpec, model_for
from litehit_core.model import MAX_OBJECT_BYTES, TOUCH_ORDERS
from litehit_core.projector import Projection
from litehit_service.errors import InstanceNotExist, InvalidArgument, Unsupported
from litehit_service.manager.instance import InstanceState
from litehit_service.model import (
    InstanceGroup,
    InstanceRegistration,
    LocationSpec,
    LocationSpecGroup,
    RegistrationResult,
)

__all__ = [
    "DEFAULT_MAX_INSTANCES",
    "DEFAULT_MAX_TRACKED_BLOCKS",
    "MAX_TTL_SECONDS",
    "ManagerLimits",
    "place_instance",
    "validated_group",
]

NS_PER_SECOND = 1_000_000_000
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
MAX_TTL_SECONDS = INT64_MAX // NS_PER_SECOND

DEFAULT_MAX_INSTANCES = 1024
DEFAULT_MAX_TRACKED_BLOCKS = 8_388_608
CURVE_CORNERS_PER_TRACKED_BLOCK = 4
MIN_CURVE_CORNERS = 1 << 16


@dataclass(frozen=True, slots=True)
class ManagerLimits:
    """Bounds on what clients can make the manager hold; 0 = unlimited.

    ``max_instances``: registered instances (one more is REACH_MAX_ENTITY_CAPACITY).
    ``max_tracked_blocks``: distinct blocks one instance's engine tracks; past it the least
    recent are dropped, so every slot (at most this many blocks, checked at registration)
    stays exact and the theoretical maximum becomes an LRU of this many blocks.
    """

    max_instances: int = 0
    max_tracked_blocks: int = 0

    def __post_init__(self) -> None:
        for name in ("max_instances", "max_tracked_blocks"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")

    @classmethod
    def online(
        cls,
        max_instances: int = DEFAULT_MAX_INSTANCES,
        max_tracked_blocks: int = DEFAULT_MAX_TRACKED_BLOCKS,
    ) -> ManagerLimits:
        """The service's limits (defaults: 1,024 instances, 8,388,608 blocks each)."""
        return cls(max_instances=max_instances, max_tracked_blocks=max_tracked_blocks)


def validated_group(group: InstanceGroup) -> InstanceGroup:
    """Check every group rule; return the group as stored (capacity_gb as sorted floats).

    Raises the OptimizerError that create/update would. O(slots log slots).
    """
    name = group.name
    if not isinstance(name, str) or not name:
        raise InvalidArgument(f"instance group name must not be empty, got {name!r}")
    where = f"instance group {name!r}"
    if not group.capacity_gb:
        raise InvalidArgument(
            f"capacity_gb of {where} must not be empty, got {list(group.capacity_gb)!r}"
        )
    caps: list[float] = []
    for i, raw in enumerate(group.capacity_gb):
        try:
            gb = float(raw)
        except (TypeError, ValueError):
            raise InvalidArgument(
                f"capacity_gb[{i}] of {where} must be a number, got {raw!r}"
            ) from None
        if not (math.isfinite(gb) and gb > 0):
            raise InvalidArgument(f"capacity_gb[{i}] of {where} must be finite and > 0, got {gb!r}")
        if gb > MAX_CAPACITY_GB:
            raise InvalidArgument(
                f"capacity_gb[{i}] of {where} must be at most {MAX_CAPACITY_GB} GiB "
                f"(bytes must fit in int64), got {gb!r}"
            )
        caps.append(gb)
    if group.eviction_policy not in EVICTION_POLICIES:
        allowed = " or ".join(repr(p) for p in EVICTION_POLICIES)
        raise InvalidArgument(
            f"eviction_policy of {where} must be {allowed}, got {group.eviction_policy!r}"
        )
    ttl = group.ttl_seconds
    if not isinstance(ttl, int) or isinstance(ttl, bool) or not 0 <= ttl <= MAX_TTL_SECONDS:
        raise InvalidArgument(
            f"ttl_seconds of {where} must be an integer in 0..{MAX_TTL_SECONDS}, got {ttl!r}"
        )
    if group.touch_order not in TOUCH_ORDERS:
        raise InvalidArgument(
            f"touch_order of {where} must be one of {list(TOUCH_ORDERS)}, got {group.touch_order!r}"
        )
    if group.shared_group_quota:
        raise Unsupported(
            f"shared_group_quota=True of {where} is not supported: every instance is "
            "simulated with its own capacity"
        )
    return replace(
        group,
        capacity_gb=tuple(sorted(caps)),
        shared_group_quota=bool(group.shared_group_quota),
        enable_theoretical_max_cache=bool(group.enable_theoretical_max_cache),
        enable_prefix_hash=bool(group.enable_prefix_hash),
    )


def place_instance(
    reg: InstanceRegistration,
    groups: dict[str, InstanceGroup],
    limits: ManagerLimits,
    lru_engine: str = "python",
) -> tuple[InstanceState, RegistrationResult]:
    """Validate a registration against ``groups``; build its fresh state (model from the
    engine registry, slots in the model's unit) and its result. ``lru_engine``: the
    implementation of full-attention instances (see :class:`~litehit_core.engine.EngineSpec`).
    O(specs + slots)."""
    iid = reg.instance_id
    if not isinstance(iid, str) or not iid:
        raise InvalidArgument(f"instance_id must not be empty, got {iid!r}")
    where = f"instance_id {iid!r}"
    group = groups.get(reg.instance_group)
    if group is None:
        raise InstanceNotExist(f"instance_group {reg.instance_group!r} of {where} does not exist")
    bs = reg.block_size
    if not isinstance(bs, int) or isinstance(bs, bool) or not 0 < bs <= INT32_MAX:
        raise InvalidArgument(
            f"block_size of {where} must be an integer in 1..{INT32_MAX} (tokens), got {bs!r}"
        )
    specs = tuple(reg.location_spec_infos)
    sizes = validated_specs(specs, where)
    spec_groups = tuple(
        LocationSpecGroup(g.name, tuple(g.spec_names)) for g in reg.location_spec_groups
    )
    members = validated_spec_groups(spec_groups, sizes, where)
    step = reg.linear_step
    if not isinstance(step, int) or isinstance(step, bool) or not 0 <= step <= INT32_MAX:
        raise InvalidArgument(
            f"linear_step of {where} must be an integer in 0..{INT32_MAX} (tokens), got {step!r}"
        )
    if step % bs:
        hint = f"; {step} blocks would be {step * bs} tokens" if step * bs <= INT32_MAX else ""
        raise InvalidArgument(
            f"linear_step of {where} is in tokens and must be a positive multiple of "
            f"block_size {bs} tokens, got {step}{hint}"
        )
    full_name = reg.full_location_spec_group_name
    if full_name:
        if full_name not in members:
            raise InvalidArgument(
                f"full_location_spec_group_name {full_name!r} of {where} is not one of the "
                f"location_spec_groups {sorted(members)!r}"
            )
    elif len(members) == 1:
        full_name = next(iter(members))
    else:
        raise InvalidArgument(
            f"full_location_spec_group_name of {where} is empty and there are "
            f"{len(members)} location_spec_groups {sorted(members)!r}: name the full group "
            "(it may only be omitted when there is exactly one)"
        )
    linear_name = reg.linear_location_spec_group_name
    if step == 0 and linear_name:
        raise InvalidArgument(
            f"linear_location_spec_group_name of {where} must be empty when linear_step is "
            f"0 (a full-attention instance), got {linear_name!r}"
        )
    if step and not linear_name:
        raise InvalidArgument(
            f"linear_location_spec_group_name of {where} must name the location_spec_group "
            f"of the linear/Mamba state when linear_step is {step}, got ''"
        )
    if linear_name and linear_name not in members:
        raise InvalidArgument(
            f"linear_location_spec_group_name {linear_name!r} of {where} is not one of the "
            f"location_spec_groups {sorted(members)!r}"
        )
    if linear_name and linear_name == full_name:
        raise InvalidArgument(
            f"linear_location_spec_group_name of {where} must differ from the full group, "
            f"both are {full_name!r}"
        )
    full_specs = members[full_name]
    linear_specs = members[linear_name] if linear_name else ()
    shared = sorted(set(full_specs) & set(linear_specs))
    if shared:
        raise InvalidArgument(
            f"location_spec_groups {full_name!r} (full) and {linear_name!r} (linear) of "
            f"{where} share specs {shared!r}: a spec belongs to one of them"
        )
    block_bytes = sum(sizes[n] for n in full_specs)
    state_bytes = sum(sizes[n] for n in linear_specs)
    size_full_linear = block_bytes + state_bytes
    if size_full_linear > INT64_MAX:
        raise InvalidArgument(
            f"location_spec_infos sizes of {where} add up to {size_full_linear} bytes per "
            f"block, more than {INT64_MAX} (int64)"
        )
    ttl_ns = group.ttl_seconds * NS_PER_SECOND
    slot_bytes = tuple(capacity_gb_to_bytes(gb) for gb in group.capacity_gb)
    limit = limits.max_tracked_blocks
    try:
        model = model_for(step, group.touch_order)
    except InvalidRequestError:
        raise InvalidArgument(
            f"touch_order {group.touch_order!r} of instance group {group.name!r} is for "
            f"full-attention instances; {where} is hybrid (linear_step {step}), whose "
            "blocks and states are touched tail first"
        ) from None
    if step:
        for name, value in (("full", block_bytes), ("linear", state_bytes)):
            if value > MAX_OBJECT_BYTES:
                raise InvalidArgument(
                    f"the {name} location_spec_group of {where} takes {value} bytes, more than "
                    f"{MAX_OBJECT_BYTES} (1 TiB) per block or state"
                )
        steps = step // bs
        spec = EngineSpec(
            model=model,
            ttl_ns=ttl_ns,
            max_tracked_blocks=limit,
            full_bytes=block_bytes,
            linear_bytes=state_bytes,
            step_blocks=steps,
        )
        projection = Projection(spec, block_bytes)
        slot_units = tuple(projection.units(b) for b in slot_bytes)
        per_step = steps * block_bytes + state_bytes
        capacity_blocks = tuple(b * steps // per_step for b in slot_bytes)
        too_big = limit and slot_units[-1] > spec.max_tracked_bytes
        # every threshold is a sum of block and state charges: a multiple of their gcd
        curve_resolution = math.gcd(block_bytes, state_bytes)
        curve_max_corners = (
            max(CURVE_CORNERS_PER_TRACKED_BLOCK * limit, MIN_CURVE_CORNERS) if limit else 0
        )
    else:
        spec = EngineSpec(
            model=model, ttl_ns=ttl_ns, max_tracked_blocks=limit, lru_engine=lru_engine
        )
        projection = Projection(spec, block_bytes)
        slot_units = capacity_blocks = tuple(projection.units(b) for b in slot_bytes)
        too_big = limit and capacity_blocks[-1] > limit
        curve_resolution, curve_max_corners = 1, 0  # depths: at most limit + 1 corners
    if too_big:
        raise InvalidArgument(
            f"capacity_gb {group.capacity_gb[-1]!r} of instance group {group.name!r} holds "
            f"{capacity_blocks[-1]} blocks of {block_bytes} bytes for {where}, more than "
            f"max_tracked_blocks {limit}: raise --max-tracked-blocks or use a smaller slot"
        )
    stored = replace(reg, location_spec_infos=specs, location_spec_groups=spec_groups)
    state = InstanceState(
        stored,
        group,
        spec,
        projection,
        slot_units,
        capacity_blocks,
        curve_resolution,
        curve_max_corners,
    )
    return state, RegistrationResult(capacity_blocks, block_bytes, size_full_linear)


def validated_specs(specs: Iterable[LocationSpec], where: str) -> dict[str, int]:
    """Spec name -> size (bytes); names non-empty and unique, sizes integers > 0."""
    sizes: dict[str, int] = {}
    for i, spec in enumerate(specs):
        if not isinstance(spec.name, str) or not spec.name:
            raise InvalidArgument(
                f"location_spec_infos[{i}].name of {where} must not be empty, got {spec.name!r}"
            )
        if spec.name in sizes:
            raise InvalidArgument(
                f"location_spec_infos[{i}].name {spec.name!r} of {where} is duplicated"
            )
        size = spec.size
        if not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= INT64_MAX:
            raise InvalidArgument(
                f"location_spec_infos[{i}].size of spec {spec.name!r} of {where} must be an "
                f"integer in 1..{INT64_MAX} (bytes), got {size!r}"
            )
        sizes[spec.name] = size
    return sizes


def validated_spec_groups(
    groups: Iterable[LocationSpecGroup], sizes: dict[str, int], where: str
) -> dict[str, tuple[str, ...]]:
    """Group name -> member spec names; names unique, members non-empty, unique and known."""
    members: dict[str, tuple[str, ...]] = {}
    for i, g in enumerate(groups):
        if not isinstance(g.name, str) or not g.name:
            raise InvalidArgument(
                f"location_spec_groups[{i}].name of {where} must not be empty, got {g.name!r}"
            )
        if g.name in members:
            raise InvalidArgument(
                f"location_spec_groups[{i}].name {g.name!r} of {where} is duplicated"
            )
        if not g.spec_names:
            raise InvalidArgument(
                f"location_spec_groups[{i}].spec_names of group {g.name!r} of {where} must not "
                "be empty"
            )
        seen: set[str] = set()
        for name in g.spec_names:
            if name not in sizes:
                raise InvalidArgument(
                    f"location_spec_groups[{i}].spec_names of group {g.name!r} of {where} names "
                    f"unknown spec {name!r} (known: {sorted(sizes)!r})"
                )
            if name in seen:
                raise InvalidArgument(
                    f"location_spec_groups[{i}].spec_names of group {g.name!r} of {where} lists "
                    f"spec {name!r} twice"
                )
            seen.add(name)
        members[g.name] = tuple(g.spec_names)
    return members
