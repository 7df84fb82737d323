"""The ``litehit replay`` configuration: strict JSON parsing into domain objects.

A config file is one JSON object::

    {
      "trace_file_path": "trace.jsonl",          # relative paths: from the config's folder
      "output_result_path": "results",           # litehit_facts.csv goes here
      "block_size": 256,                         # trace granularity, tokens (default 256)
      "trace_format": "standard",                # "standard" | "mooncake" | "lmcache"
      "override_instance_id": "",                # route every request to this instance
      "fanout_all_instances": false,             # send every request to every instance
      "pipeline_worker_count": 1,                # parse in this many processes
      "instance_groups": [{"name", "capacity_gb", "eviction_policy", "ttl_seconds",
                           "enable_prefix_hash", "enable_theoretical_max_cache",
                           "shared_group_quota",
                           "touch_order"}],              # "tail-first" | "head-first"
      "instances": [{"instance_id", "instance_group", "block_size",
                     "location_spec_infos": [{"name", "size"}],
                     "location_spec_groups": [{"name", "spec_names"}],
                     "optimizer_state_info": {"full_location_spec_group_name",
                                              "linear_location_spec_group_name"},
                     "linear_step"}]
    }

Every level is strict: an unknown field, a duplicate field or a value of the wrong JSON type
is a :class:`LocatedError` naming the field's path (``instances[0].blok_size``) and, when
read from a file, its line. Structure and types are checked here; the semantic rules of
groups and registrations (capacities > 0, known spec names, ...) are the manager's, applied
when the replay starts. An optimizer configuration or a serve groups file is refused as such
first, in one error (:mod:`litehit_service.config_kinds`). :func:`group_from_dict` and
:func:`registration_from_dict` parse one entry each and are reusable for any JSON/YAML source
(e.g. a ``serve --groups`` file).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from litehit_core import LocatedError
from litehit_service.config_files import field_line, raise_config_errors, read_json_document
from litehit_service.config_kinds import check_kind
from litehit_service.entries import Fields, group_from_dict, registration_from_dict
from litehit_service.model import (
    InstanceGroup,
    InstanceRegistration,
)
from litehit_service.traces.readers.registry import format_names, get_reader

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "TRACE_FORMATS",
    "ReplayConfig",
    "check_config",
    "group_from_dict",
    "load_config",
    "registration_from_dict",
    "replay_config_from_dict",
]

DEFAULT_BLOCK_SIZE = 256
"""Default trace granularity (tokens per key) of a replay config."""
TRACE_FORMATS = format_names()
"""Accepted ``trace_format`` values: the registered trace formats, in registration order."""


@dataclass(frozen=True, slots=True)
class ReplayConfig:
    """A validated ``litehit replay`` configuration.

    Paths as given in the file are joined to the config file's folder (absolute ones stay
    as they are); ``pipeline_worker_count`` is the number of parsing processes (1 = parse in
    the replaying process). ``block_size`` is the
    trace's native granularity in tokens; every instance's block_size is a multiple of it.
    ``source`` is the config file (for error messages) and ``field_lines`` maps field paths
    (``instances[0].block_size``) to their 1-based line in it; both are empty for a config
    built in code.
    """

    trace_file_path: str
    output_result_path: str
    instance_groups: tuple[InstanceGroup, ...]
    instances: tuple[InstanceRegistration, ...]
    block_size: int = DEFAULT_BLOCK_SIZE
    override_instance_id: str = ""
    fanout_all_instances: bool = False
    pipeline_worker_count: int = 1
    trace_format: str = "standard"
    source: str = ""
    field_lines: Mapping[str, int] = field(default_factory=dict, compare=False, repr=False)

    def line_of(self, field_path: str) -> int:
        """Line of ``field_path`` in :attr:`source` (:func:`field_line`)."""
        return field_line(self.field_lines, field_path)

    def error(self, field_path: str, reason: str) -> LocatedError:
        """A :class:`LocatedError` about ``field_path`` located in :attr:`source`."""
        return LocatedError(self.source, self.line_of(field_path), reason, field_path)


_TOP_FIELDS = (
    "trace_file_path",
    "output_result_path",
    "instance_groups",
    "instances",
    "block_size",
    "override_instance_id",
    "fanout_all_instances",
    "pipeline_worker_count",
    "trace_format",
)


# --------------------------------------------------------------------------- whole config


def replay_config_from_dict(
    data: Any,
    *,
    base_dir: str | os.PathLike[str] = ".",
    source: str = "",
    field_lines: Mapping[str, int] | None = None,
) -> ReplayConfig:
    """Validate a whole replay config object (see the module docstring).

    Relative paths are resolved against ``base_dir``. Checks beyond types: block_size and
    pipeline_worker_count > 0, a known trace_format, at least one group and one instance,
    unique instance ids, every instance's block_size a positive multiple of block_size,
    override_instance_id naming a configured instance, and not both override and fanout.
    Every problem is reported at once: :class:`~litehit_service.config_files.ConfigErrors`
    (a :class:`LocatedError`), each located via ``source``/``field_lines``. An optimizer
    configuration or a serve groups file is refused as such before any field is checked
    (:func:`~litehit_service.config_kinds.check_kind`). O(config size).
    """
    lines = dict(field_lines or {})
    check_kind(data, "replay", source, lines)  # another kind of document: say so, alone
    probe = ReplayConfig("", "", (), (), source=source, field_lines=lines)
    return _build(data, Path(base_dir), probe)


def _build(data: Any, base_dir: Path, probe: ReplayConfig) -> ReplayConfig:
    found: list[LocatedError] = []
    f = Fields(data, "", _TOP_FIELDS, found)
    trace = f.string("trace_file_path", required=True)
    output = f.string("output_result_path", required=True)
    groups = tuple(
        group_from_dict(g, f"instance_groups[{i}]", found)
        for i, g in enumerate(f.array("instance_groups", required=True))
    )
    regs = tuple(
        registration_from_dict(r, f"instances[{i}]", found)
        for i, r in enumerate(f.array("instances", required=True))
    )
    config = ReplayConfig(
        trace_file_path=str(base_dir / trace) if trace else "",
        output_result_path=str(base_dir / output) if output else "",
        instance_groups=groups,
        instances=regs,
        block_size=f.integer("block_size", default=DEFAULT_BLOCK_SIZE),
        override_instance_id=f.string("override_instance_id"),
        fanout_all_instances=f.boolean("fanout_all_instances"),
        pipeline_worker_count=f.integer("pipeline_worker_count", default=1),
        trace_format=f.string("trace_format", default="standard"),
        source=probe.source,
        field_lines=probe.field_lines,
    )
    problems = [probe.error(p.field, p.reason) for p in found]
    # the rules below judge what the structure check let through (defaults in place of
    # bad values): leave out their verdicts on an entry (or a block_size) already reported
    broken = {_entry(p.field) for p in found}
    problems += [
        p
        for p in config_problems(config)
        if _entry(p.field) not in broken
        and not ("block_size" in broken and p.field.endswith(".block_size"))
    ]
    raise_config_errors(problems)
    return config


def _entry(field_path: str) -> str:
    """The top-level field or list entry a field belongs to: ``instances[0].a.b`` ->
    ``instances[0]``."""
    return field_path.split(".", 1)[0]


def check_config(config: ReplayConfig) -> None:
    """Raise :class:`LocatedError` (located in ``config.source``) unless ``config`` is usable.

    Rules: non-empty paths; ``block_size`` > 0; ``pipeline_worker_count`` >= 1; a known
    ``trace_format``; at least one group and one instance; unique instance ids; every
    instance's block_size a positive multiple of ``block_size`` (coarsening only);
    ``override_instance_id`` names a configured instance and is not combined with
    ``fanout_all_instances``; a Mooncake trace (no instance ids) needs override, fanout or
    exactly one instance. Group and registration value rules are left to the manager.
    Every problem is reported at once
    (:class:`~litehit_service.config_files.ConfigErrors`). O(instances).
    """
    raise_config_errors(config_problems(config))


def config_problems(config: ReplayConfig) -> list[LocatedError]:
    """Every problem :func:`check_config` finds, located, in the order checked."""
    err = config.error
    found: list[LocatedError] = []
    if not config.trace_file_path:
        found.append(err("trace_file_path", "must not be empty"))
    if not config.output_result_path:
        found.append(err("output_result_path", "must not be empty"))
    bs = config.block_size
    bs_ok = not isinstance(bs, bool) and isinstance(bs, int) and bs > 0
    if not bs_ok:
        reason = f"must be an integer > 0 (tokens per trace key), got {bs!r}"
        found.append(err("block_size", reason))
    workers = config.pipeline_worker_count
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        found.append(err("pipeline_worker_count", f"must be an integer >= 1, got {workers!r}"))
    format_ok = config.trace_format in TRACE_FORMATS
    if not format_ok:
        reason = f"must be one of {list(TRACE_FORMATS)}, got {config.trace_format!r}"
        found.append(err("trace_format", reason))
    if not config.instance_groups:
        found.append(err("instance_groups", "must list at least one instance group"))
    if not config.instances:
        found.append(err("instances", "must list at least one instance"))
    seen: dict[str, int] = {}
    for i, reg in enumerate(config.instances):
        if reg.instance_id in seen:
            reason = f"{reg.instance_id!r} is already used by instances[{seen[reg.instance_id]}]"
            found.append(err(f"instances[{i}].instance_id", reason))
        else:
            seen[reg.instance_id] = i
        rbs = reg.block_size
        if bs_ok and (isinstance(rbs, bool) or not isinstance(rbs, int) or rbs <= 0 or rbs % bs):
            found.append(
                err(
                    f"instances[{i}].block_size",
                    f"{rbs!r} must be a positive multiple of the trace block_size {bs} "
                    "(re-blocking only coarsens)",
                )
            )
    override = config.override_instance_id
    if override and config.fanout_all_instances:
        found.append(
            err(
                "override_instance_id",
                "override_instance_id and fanout_all_instances are mutually exclusive",
            )
        )
    elif override and override not in seen:
        found.append(
            err(
                "override_instance_id",
                f"{override!r} is not one of the configured instances {sorted(seen)}",
            )
        )
    if (
        format_ok
        and not get_reader(config.trace_format).names_instances
        and not override
        and not config.fanout_all_instances
        and len(config.instances) > 1
    ):
        found.append(
            err(
                "trace_format",
                f"a {config.trace_format} trace has no instance ids but {len(config.instances)} "
                "instances are configured: set override_instance_id or fanout_all_instances",
            )
        )
    return found


def load_config(path: str | os.PathLike[str]) -> ReplayConfig:
    """Read and validate a replay config file (JSON, UTF-8).

    Errors are :class:`LocatedError` with the file, the line and the field path (JSON syntax
    errors carry the parser's line). Relative paths inside are resolved against the config
    file's folder. O(file size).
    """
    name = os.fspath(path)
    data, lines = read_json_document(name, "config")
    return replay_config_from_dict(data, base_dir=Path(name).parent, source=name, field_lines=lines)
