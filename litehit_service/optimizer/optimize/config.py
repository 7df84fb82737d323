"""The ``litehit optimize`` configuration: the KVCacheManager optimizer's JSON, strictly.

A reference configuration runs as is (spec §1)::

    {"trace_file_path": "...", "output_result_path": "...",
     "eviction_params": {"eviction_mode": 1|2|3, "eviction_batch_size_per_instance": 100},
     "trace_replay": {"write_delay_ns": 0},
     "instance_groups": [{"group_name": "g", "quota_capacity": 12.5, "used_percentage": 1.0,
        "default_block_ttl_seconds": 0, "ttl_refresh_on_read": true,
        "tier_strategy": {...}, "storages": [...],
        "instances": [{"instance_id": "a", "block_size": 16, "bytes_per_token": 512,
                       "eviction_policy_type": "lru",
                       "eviction_policy_params": {"sample_rate": 0.1}}]}]}

Every field is checked and every problem reported at once (``ConfigErrors``: file, line,
field path, value); an unknown field is an error naming it. A replay configuration or a
serve groups file is refused as such first, in one error (:mod:`litehit_service.config_kinds`);
reading and locating use :mod:`litehit_service.config_files`. Fields the reference knows and
LiteHit reads but does not act on are in :data:`KNOWN_UNUSED` (the README lists them).
Policies, their parameters and defaults come from :data:`litehit_core.engine.POLICIES`.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from litehit_core import LocatedError
from litehit_core.engine import DEFAULT_POLICY, POLICIES, PolicyModel
from litehit_service.config_files import field_line, raise_config_errors, read_json_document
from litehit_service.config_kinds import check_kind
from litehit_service.entries import Fields
from litehit_service.optimizer.optimize.tier_config import (
    TierConfig,
    TierStrategy,
    group_tiers,
    is_tiered,
)

__all__ = [
    "EVICTION_MODES",
    "KNOWN_UNUSED",
    "MAX_BATCH",
    "GroupConfig",
    "InstanceConfig",
    "OptimizeConfig",
    "load_optimize_config",
    "optimize_config_from_dict",
]

GIB = 1 << 30
EVICTION_MODES = (1, 2, 3)
"""GROUP_ROUGH, INSTANCE_ROUGH, INSTANCE_PRECISE (spec §4)."""
KNOWN_UNUSED = {
    "mamba_state": "hybrid (Mamba) state sizes: the policy replay counts full-attention "
    "blocks only",
    "trace_replay.mode": "'read_write' or 'request': each record's own type decides here",
    "instance_groups[].storages (hierarchical eviction off)": "without tiers the group's "
    "quota_capacity is the one tier",
    "instance_groups[].quota_capacity (hierarchical eviction on)": "each storage's capacity "
    "is its tier's quota",
    "instance_groups[].storages[].storage_type, band_width_mbps": "the replay counts hits "
    "per tier, not transfer times",
    "instance_groups[].instances[].instance_group_name": "must name the enclosing group",
    "instance_groups[].instances[].eviction_policy_params.sample_rate (lru, leaf_aware_lru), "
    "shard_count, sample_times, eviction_amplification_factor": "the reference's sharded "
    "LRU tuning; the replay's LRU is exact",
}
"""Fields a reference configuration may carry that this replay accepts and does not act
on, with why (field path pattern -> reason)."""

_TOP = (
    "trace_type",  # refused with what to do (the reference's older configurations)
    "trace_file_path",
    "output_result_path",
    "eviction_params",
    "trace_replay",
    "instance_groups",
    "mamba_state",
)
_EVICTION = ("eviction_mode", "eviction_batch_size_per_instance")
_REPLAY = ("write_delay_ns", "mode")
_REPLAY_MODES = ("read_write", "request")
_MAMBA = ("enabled", "chunk_size_blocks", "chunk_size", "bytes_per_state")
_GROUP = (
    "group_name",
    "quota_capacity",
    "used_percentage",
    "default_block_ttl_seconds",
    "ttl_refresh_on_read",
    "ttl_config",
    "tier_strategy",
    "tier_flows",
    "storages",
    "hierarchical_eviction_enabled",
    "tier_write_mode",
    "enable_promote",
    "instances",
)
_TTL_CONFIG = ("default_block_ttl_seconds", "refresh_on_read")
_INSTANCE = (
    "instance_id",
    "block_size",
    "bytes_per_token",
    "eviction_policy_type",
    "eviction_policy_params",
    "instance_group_name",
)


@dataclass(frozen=True, slots=True)
class InstanceConfig:
    """One instance: ``block_size`` tokens per block, ``bytes_per_token`` KV bytes per
    token, its ``policy`` and the policy's ``params`` (every parameter the policy reads,
    defaults filled in)."""

    instance_id: str
    block_size: int
    bytes_per_token: int
    policy: PolicyModel
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def bytes_per_block(self) -> int:
        """``block_size * bytes_per_token``."""
        return self.block_size * self.bytes_per_token


MAX_BATCH = 1 << 62
"""The largest ``eviction_batch_size_per_instance``: any batch beyond every cache's size
evicts the same (a whole instance), and the replay counts in int64."""


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """One instance group: its quota in GiB and the share of it used, the TTL options of
    its ``ttl`` instances, and its instances in configuration order; a tiered group's
    ``tiers`` (tier 0 first; empty = untiered) and ``strategy``."""

    group_name: str
    quota_capacity: float
    used_percentage: float
    default_block_ttl_seconds: float
    ttl_refresh_on_read: bool
    instances: tuple[InstanceConfig, ...]
    tiers: tuple[TierConfig, ...] = ()
    strategy: TierStrategy = TierStrategy()

    def tier_quota_bytes(self, tier: int) -> int:
        """Tier ``tier``'s quota: ``floor(capacity * 2**30 * used_percentage)``, -1 when
        infinite."""
        return _quota_bytes(self.tiers[tier].capacity, self.used_percentage)

    @property
    def quota_bytes(self) -> int:
        """``floor(quota_capacity * 2**30 * used_percentage)``; -1 (infinite) when
        ``quota_capacity`` is negative (spec §1)."""
        return _quota_bytes(self.quota_capacity, self.used_percentage)

    @property
    def default_ttl_ns(self) -> int:
        """``default_block_ttl_seconds`` in ns, rounded to nearest (0 = never)."""
        return round(self.default_block_ttl_seconds * 1e9)


@dataclass(frozen=True, slots=True)
class OptimizeConfig:
    """A validated ``litehit optimize`` configuration (relative paths joined to the
    configuration file's folder). ``source``/``field_lines`` locate errors found later."""

    trace_file_path: str
    output_result_path: str
    eviction_mode: int
    batch_size: int
    write_delay_ns: int
    groups: tuple[GroupConfig, ...]
    source: str = ""
    field_lines: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    @property
    def instances(self) -> tuple[InstanceConfig, ...]:
        """Every instance, groups in order."""
        return tuple(i for g in self.groups for i in g.instances)

    @property
    def warnings(self) -> list[str]:
        """What is valid but likely not meant, one line each (the commands print them on
        stderr before they run): a quota of 0 bytes (every read misses; a tier's too),
        and a ``ttl`` instance that neither falls back to LRU under pressure nor has a
        default TTL, whose blocks without a ``ttl_us`` are never removed (spec §5: its
        cache can grow past the quota without bound). O(instances)."""
        out = []
        for g in self.groups:
            quotas = ([("quota_capacity", g.quota_bytes)] if not g.tiers else
                      [(f"storage {t.name!r}", g.tier_quota_bytes(i))
                       for i, t in enumerate(g.tiers)])  # fmt: skip
            for what, quota in quotas:
                if quota == 0:
                    out.append(f"WARNING: group {g.group_name!r}: {what} is 0 bytes: it "
                               "caches nothing and every read misses")  # fmt: skip
            for inst in g.instances:
                if (
                    inst.policy.expires
                    and not inst.params.get("fallback_on_pressure", True)
                    and g.default_ttl_ns == 0
                ):
                    out.append(
                        f"WARNING: instance {inst.instance_id!r} (ttl, fallback_on_pressure "
                        "false, default_block_ttl_seconds 0): a block written without a "
                        "ttl_us never expires and is never evicted, so its cache can grow "
                        "past the quota without bound"
                    )
        return out

    def error(self, field_path: str, reason: str) -> LocatedError:
        """A LocatedError about ``field_path``, at its line of :attr:`source`."""
        return LocatedError(
            self.source, field_line(self.field_lines, field_path), reason, field_path
        )


def load_optimize_config(path: str | os.PathLike[str]) -> OptimizeConfig:
    """Read and validate a configuration file (every problem at once). O(file size)."""
    name = os.fspath(path)
    data, lines = read_json_document(name, "configuration")
    return optimize_config_from_dict(
        data, base_dir=Path(name).parent, source=name, field_lines=lines
    )


def optimize_config_from_dict(
    data: Any,
    *,
    base_dir: str | os.PathLike[str] = ".",
    source: str = "",
    field_lines: dict[str, int] | None = None,
) -> OptimizeConfig:
    """Validate a configuration object (module docstring); ``ConfigErrors`` with every
    problem located in ``source``. A replay configuration or a serve groups file is refused
    as such before any field is checked (:func:`~litehit_service.config_kinds.check_kind`).
    O(configuration size)."""
    lines = dict(field_lines or {})
    check_kind(data, "optimizer", source, lines)  # another kind of document: say so, alone
    found: list[LocatedError] = []
    f = Fields(data, "", _TOP, found)
    if "trace_type" in f.data:
        found.append(LocatedError(
            "", 0,
            f"the reference's older configurations name the trace's source here "
            f"({f.data['trace_type']!r}); litehit reads a standard trace (JSONL or Parquet) "
            "whatever its source: convert it first (litehit convert --from publisher-log "
            "LOG -o trace.jsonl for a publisher log; --from qwen-bailian, mooncake or "
            "lmcache likewise), point trace_file_path at the result and delete trace_type",
            "trace_type",
        ))  # fmt: skip
    trace = f.string("trace_file_path", required=True)
    output = f.string("output_result_path", required=True)
    ev = Fields(f.object("eviction_params"), "eviction_params", _EVICTION, found)
    mode = ev.integer("eviction_mode", required=True, default=1)
    if mode not in EVICTION_MODES:
        found.append(_bad("eviction_params.eviction_mode", "1, 2 or 3", mode))
    batch = ev.integer("eviction_batch_size_per_instance", required=True, default=1)
    if not 1 <= batch <= MAX_BATCH:
        found.append(_bad("eviction_params.eviction_batch_size_per_instance",
                          f"an integer in [1, {MAX_BATCH}] (2^62)", batch))  # fmt: skip
    tr = Fields(f.object("trace_replay"), "trace_replay", _REPLAY, found)
    delay = tr.integer("write_delay_ns", default=0)
    if delay < 0:
        found.append(_bad("trace_replay.write_delay_ns", "an integer >= 0", delay))
    replay_mode = tr.string("mode", default="read_write")
    if replay_mode not in _REPLAY_MODES:
        found.append(_bad("trace_replay.mode", f"one of {list(_REPLAY_MODES)}", replay_mode))
    mamba = Fields(f.object("mamba_state"), "mamba_state", _MAMBA, found)
    mamba.boolean("enabled", default=True)
    for name in ("chunk_size_blocks", "chunk_size", "bytes_per_state"):
        mamba.integer(name)
    groups = tuple(
        _group(g, f"instance_groups[{i}]", found)
        for i, g in enumerate(f.array("instance_groups", required=True))
    )
    if not groups and not f.broken and "instance_groups" in f.data:
        found.append(_bad("instance_groups", "at least one group", []))
    seen: dict[str, str] = {}
    for gi, group in enumerate(groups):
        for ii, inst in enumerate(group.instances):
            where = f"instance_groups[{gi}].instances[{ii}].instance_id"
            if inst.instance_id in seen:
                found.append(
                    LocatedError(
                        "",
                        0,
                        f"instance {inst.instance_id!r} is already "
                        f"configured at {seen[inst.instance_id]} (an instance belongs to "
                        "exactly one group)",
                        where,
                    )
                )
            seen.setdefault(inst.instance_id, where)
    raise_config_errors(
        [LocatedError(source, field_line(lines, p.field), p.reason, p.field) for p in found]
    )
    base = Path(base_dir)
    return OptimizeConfig(
        trace_file_path=str(base / trace),
        output_result_path=str(base / output),
        eviction_mode=mode,
        batch_size=batch,
        write_delay_ns=delay,
        groups=groups,
        source=source,
        field_lines=lines,
    )


def _quota_bytes(gib: float, used: float) -> int:
    return -1 if gib < 0 else math.floor(gib * GIB * used)


def _bad(field_path: str, what: str, value: Any) -> LocatedError:
    return LocatedError("", 0, f"must be {what}, got {value!r}", field_path)


def _group(data: Any, where: str, found: list[LocatedError]) -> GroupConfig:
    f = Fields(data, where, _GROUP, found)
    name = f.string("group_name", required=True)
    tiered = is_tiered(f, found)
    quota = f.number("quota_capacity", required=not tiered, default=-1.0)
    used = f.number("used_percentage", default=1.0)
    if not 0 < used <= 1:
        found.append(_bad(f.path("used_percentage"), "a number in (0, 1]", used))
    ttl_where = f.path("default_block_ttl_seconds")
    ttl = f.number("default_block_ttl_seconds", default=0.0)
    refresh = f.boolean("ttl_refresh_on_read", default=True)
    if "ttl_config" in f.data:  # the reference's newest layout
        if "default_block_ttl_seconds" in f.data or "ttl_refresh_on_read" in f.data:
            found.append(
                LocatedError(
                    "",
                    0,
                    "give the TTL options either here or as "
                    "default_block_ttl_seconds / ttl_refresh_on_read, not both",
                    f.path("ttl_config"),
                )
            )
        tc = Fields(f.object("ttl_config"), f.path("ttl_config"), _TTL_CONFIG, found)
        ttl_where = tc.path("default_block_ttl_seconds")
        ttl = tc.number("default_block_ttl_seconds", default=0.0)
        refresh = tc.boolean("refresh_on_read", default=True)
    if ttl < 0:
        found.append(_bad(ttl_where, "a number >= 0", ttl))
    tiers, strategy = group_tiers(f, found, tiered)
    instances = tuple(
        _instance(d, f"{where}.instances[{i}]", found, name)
        for i, d in enumerate(f.array("instances", required=True))
    )
    if not instances and not f.broken and "instances" in f.data:
        found.append(_bad(f.path("instances"), "at least one instance", []))
    return GroupConfig(name, quota, used, ttl, refresh, instances, tiers, strategy)


def _safe_name(name: str) -> bool:
    """A name that is one file-name component (``{instance_id}_hit_rates.csv``)."""
    return bool(name) and name not in (".", "..") and not any(c in name for c in "/\\\0")


def _instance(data: Any, where: str, found: list[LocatedError], group: str) -> InstanceConfig:
    f = Fields(data, where, _INSTANCE, found)
    iid = f.string("instance_id", required=True)
    if "instance_id" in f.data and not _safe_name(iid):
        found.append(
            _bad(
                f.path("instance_id"),
                "a non-empty name usable in a file name (no '/', '\\', NUL; not '.' or '..')",
                iid,
            )
        )
    named = f.string("instance_group_name", default=group)
    if named != group:
        found.append(_bad(f.path("instance_group_name"), f"the enclosing group {group!r}", named))
    block = f.integer("block_size", required=True, default=1)
    if block < 1:
        found.append(_bad(f.path("block_size"), "an integer >= 1", block))
    per_token = f.integer("bytes_per_token", default=1)
    if not f.broken and "bytes_per_token" not in f.data:
        found.append(LocatedError(
            "", 0,
            "missing required field: the KV cache bytes per token, which turns blocks into "
            "bytes (a block is block_size x bytes_per_token bytes). quota_capacity is GiB "
            "here (x used_percentage), where the reference's older configurations gave it "
            "in blocks: quota_capacity = blocks x block_size x bytes_per_token / 2^30",
            f.path("bytes_per_token"),
        ))  # fmt: skip
    if per_token < 1:
        found.append(_bad(f.path("bytes_per_token"), "an integer >= 1", per_token))
    name = f.string("eviction_policy_type", required=True, default=DEFAULT_POLICY.name)
    policy = POLICIES.get(name)
    if policy is None:
        found.append(_bad(f.path("eviction_policy_type"), f"one of {list(POLICIES)}", name))
        policy = DEFAULT_POLICY
    names = tuple(n for n, _ in policy.params) + policy.ignored
    pf = Fields(f.object("eviction_policy_params"), f.path("eviction_policy_params"), names, found)
    params: dict[str, Any] = {}
    for pname, default in policy.params:
        if isinstance(default, bool):
            params[pname] = pf.boolean(pname, default=default)
        else:
            params[pname] = pf.number(pname, default=default)
    rate = params.get("sample_rate")
    if rate is not None and not 0 < rate <= 1:
        found.append(_bad(pf.path("sample_rate"), "a number in (0, 1]", rate))
    return InstanceConfig(iid, block, per_token, policy, params)
