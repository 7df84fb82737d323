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
                           "shared_group_quota"}],
      "instances": [{"instance_id", "instance_group", "block_size",
                     "location_spec_infos": [{"name", "size"}],
                     "location_spec_groups": [{"name", "spec_names"}],
                     "optimizer_state_info": {"full_location_spec_group_name",
                                              "linear_location_spec_group_name"},
                     "linear_step"}]
    }

Every level is strict: an unknown field, a duplicate field or a value of the wrong JSON type
is a :class:`ConfigError` naming the field's path (``instances[0].blok_size``) and, when
read from a file, its line. Structure and types are checked here; the semantic rules of
groups and registrations (capacities > 0, known spec names, ...) are the manager's, applied
when the replay starts. :func:`group_from_dict` and :func:`registration_from_dict` parse one
entry each and are reusable for any JSON/YAML source (e.g. a ``serve --groups`` file).
"""

from __future__ import annotations

import bisect
import difflib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from litehit_service.errors import InvalidArgument
from litehit_service.model import (
    InstanceGroup,
    InstanceRegistration,
    LocationSpec,
    LocationSpecGroup,
)

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "TRACE_FORMATS",
    "ConfigError",
    "ReplayConfig",
    "ReplayError",
    "check_config",
    "group_from_dict",
    "load_config",
    "registration_from_dict",
    "replay_config_from_dict",
]

DEFAULT_BLOCK_SIZE = 256
"""Default trace granularity (tokens per key) of a replay config."""
TRACE_FORMATS = ("standard", "mooncake", "lmcache")
"""Accepted ``trace_format`` values."""

_POLICIES = {
    "lru": "lru",
    "optimizer_eviction_policy_lru": "lru",
    "unspecified": "unspecified",
    "optimizer_eviction_policy_unspecified": "unspecified",
}


class ReplayError(ValueError):
    """A replay stopped: ``str(exc)`` is ``"{path}:{line_no}: {reason}"``.

    ``path`` is the trace (or config) file, ``line_no`` its 1-based line (0 = the file as a
    whole). Nothing was published when this is raised.
    """

    def __init__(self, path: str, line_no: int, reason: str) -> None:
        self.path = path
        self.line_no = line_no
        self.reason = reason
        super().__init__(f"{path}:{line_no}: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, self.line_no, self.reason))


class ConfigError(ReplayError, InvalidArgument):
    """A malformed configuration entry.

    ``field`` is the dotted path of the offending value (``instances[0].blok_size``),
    ``reason`` says what is wrong with which value. ``str(exc)`` is
    ``"{path}:{line}: {field}: {reason}"`` when the file is known (``line`` 0 = the file as
    a whole), else ``"{field}: {reason}"``. It is a :class:`ReplayError` and an
    ``InvalidArgument`` (so service code reports it like any other bad request).
    """

    def __init__(self, field: str, reason: str, path: str = "", line_no: int = 0) -> None:
        self.field = field
        self.path = path
        self.line_no = line_no
        self.reason = f"{field}: {reason}" if field else reason
        self.field_reason = reason
        text = f"{path}:{line_no}: {self.reason}" if path else self.reason
        Exception.__init__(self, text)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.field, self.field_reason, self.path, self.line_no))


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
        """Line of ``field_path`` in :attr:`source`, else of its nearest parent; 0 if unknown."""
        path = field_path
        while path:
            line = self.field_lines.get(path)
            if line is not None:
                return line
            cut = max(path.rfind("."), path.rfind("["))
            path = path[:cut] if cut > 0 else ""
        return 0

    def error(self, field_path: str, reason: str) -> ConfigError:
        """A :class:`ConfigError` about ``field_path`` located in :attr:`source`."""
        return ConfigError(field_path, reason, self.source, self.line_of(field_path))


# --------------------------------------------------------------------------- typed getters


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    if value is None:
        return "null"
    return type(value).__name__


def _show(value: Any) -> str:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


class _Fields:
    """Typed access to one JSON object's fields; unknown fields are rejected up front."""

    def __init__(self, data: Any, where: str, allowed: tuple[str, ...]) -> None:
        if not isinstance(data, Mapping):
            raise ConfigError(where, f"must be an object, got {_json_type(data)} {_show(data)}")
        for key in data:
            if key not in allowed:
                hint = difflib.get_close_matches(str(key), allowed, n=1)
                also = f"; did you mean {hint[0]!r}?" if hint else ""
                raise ConfigError(
                    _join(where, str(key)),
                    f"unknown field {key!r} (allowed: {', '.join(allowed)}){also}",
                )
        self.data = data
        self.where = where

    def path(self, name: str) -> str:
        return _join(self.where, name)

    def _get(self, name: str, required: bool, default: Any) -> Any:
        if name in self.data:
            return self.data[name]
        if required:
            raise ConfigError(self.path(name), "missing required field")
        return default

    def string(self, name: str, *, required: bool = False, default: str = "") -> str:
        value = self._get(name, required, default)
        if not isinstance(value, str):
            raise ConfigError(
                self.path(name), f"must be a string, got {_json_type(value)} {_show(value)}"
            )
        return value

    def integer(self, name: str, *, required: bool = False, default: int = 0) -> int:
        value = self._get(name, required, default)
        if not isinstance(value, int) or isinstance(value, bool):
            raise ConfigError(
                self.path(name), f"must be an integer, got {_json_type(value)} {_show(value)}"
            )
        return value

    def boolean(self, name: str, *, default: bool = False) -> bool:
        value = self._get(name, False, default)
        if not isinstance(value, bool):
            raise ConfigError(
                self.path(name), f"must be true or false, got {_json_type(value)} {_show(value)}"
            )
        return value

    def array(self, name: str, *, required: bool = False) -> list[Any]:
        value = self._get(name, required, [])
        if not isinstance(value, (list, tuple)):
            raise ConfigError(
                self.path(name), f"must be an array, got {_json_type(value)} {_show(value)}"
            )
        return list(value)


def _string_list(values: list[Any], where: str) -> tuple[str, ...]:
    for i, v in enumerate(values):
        if not isinstance(v, str):
            raise ConfigError(f"{where}[{i}]", f"must be a string, got {_json_type(v)} {_show(v)}")
    return tuple(values)


# --------------------------------------------------------------------------- entries

_GROUP_FIELDS = (
    "name",
    "eviction_policy",
    "capacity_gb",
    "ttl_seconds",
    "enable_prefix_hash",
    "enable_theoretical_max_cache",
    "shared_group_quota",
)
_INSTANCE_FIELDS = (
    "instance_id",
    "instance_group",
    "block_size",
    "location_spec_infos",
    "location_spec_groups",
    "optimizer_state_info",
    "linear_step",
)
_SPEC_FIELDS = ("name", "size")
_SPEC_GROUP_FIELDS = ("name", "spec_names")
_STATE_FIELDS = ("full_location_spec_group_name", "linear_location_spec_group_name")
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


def group_from_dict(d: Any, where: str = "instance_group") -> InstanceGroup:
    """Parse one instance group object (gRPC field names) into an :class:`InstanceGroup`.

    Required: ``name`` (string), ``capacity_gb`` (array of numbers, GiB). Optional:
    ``eviction_policy`` ("lru" default; "unspecified" or the proto enum names are accepted
    and judged by the manager), ``ttl_seconds`` (integer, 0 = off), ``enable_prefix_hash``,
    ``enable_theoretical_max_cache``, ``shared_group_quota`` (booleans, default false).
    Only structure and JSON types are checked here (ConfigError naming
    ``{where}.{field}``); value rules are the manager's. O(fields).
    """
    f = _Fields(d, where, _GROUP_FIELDS)
    name = f.string("name", required=True)
    policy_text = f.string("eviction_policy", default="lru")
    policy = _POLICIES.get(policy_text.lower())
    if policy is None:
        raise ConfigError(
            f.path("eviction_policy"), f"must be 'lru' (or 'unspecified'), got {policy_text!r}"
        )
    caps = f.array("capacity_gb", required=True)
    for i, gb in enumerate(caps):
        if isinstance(gb, bool) or not isinstance(gb, (int, float)):
            raise ConfigError(
                f"{f.path('capacity_gb')}[{i}]",
                f"must be a number of GiB, got {_json_type(gb)} {_show(gb)}",
            )
    return InstanceGroup(
        name=name,
        capacity_gb=tuple(float(gb) for gb in caps),
        eviction_policy=policy,
        shared_group_quota=f.boolean("shared_group_quota"),
        ttl_seconds=f.integer("ttl_seconds"),
        enable_theoretical_max_cache=f.boolean("enable_theoretical_max_cache"),
        enable_prefix_hash=f.boolean("enable_prefix_hash"),
    )


def registration_from_dict(d: Any, where: str = "instance") -> InstanceRegistration:
    """Parse one instance object (RegisterInstance field names) into a registration.

    Required: ``instance_id``, ``instance_group`` (strings), ``block_size`` (integer,
    tokens), ``location_spec_infos`` (``[{name, size}]``, size in bytes),
    ``location_spec_groups`` (``[{name, spec_names}]``). Optional: ``optimizer_state_info``
    (``{full_location_spec_group_name, linear_location_spec_group_name}``), ``linear_step``
    (integer, default 0). Structure and JSON types only (ConfigError naming
    ``{where}.{field}``); value rules are the manager's. O(fields + specs).
    """
    f = _Fields(d, where, _INSTANCE_FIELDS)
    instance_id = f.string("instance_id", required=True)
    group = f.string("instance_group", required=True)
    block_size = f.integer("block_size", required=True)
    specs = []
    for i, item in enumerate(f.array("location_spec_infos", required=True)):
        s = _Fields(item, f"{f.path('location_spec_infos')}[{i}]", _SPEC_FIELDS)
        specs.append(
            LocationSpec(s.string("name", required=True), s.integer("size", required=True))
        )
    spec_groups = []
    for i, item in enumerate(f.array("location_spec_groups", required=True)):
        g = _Fields(item, f"{f.path('location_spec_groups')}[{i}]", _SPEC_GROUP_FIELDS)
        names = _string_list(g.array("spec_names", required=True), g.path("spec_names"))
        spec_groups.append(LocationSpecGroup(g.string("name", required=True), names))
    state = _Fields(
        f.data.get("optimizer_state_info", {}), f.path("optimizer_state_info"), _STATE_FIELDS
    )
    return InstanceRegistration(
        instance_id=instance_id,
        instance_group=group,
        block_size=block_size,
        location_spec_infos=tuple(specs),
        location_spec_groups=tuple(spec_groups),
        full_location_spec_group_name=state.string("full_location_spec_group_name"),
        linear_location_spec_group_name=state.string("linear_location_spec_group_name"),
        linear_step=f.integer("linear_step"),
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
    Errors are :class:`ConfigError` located via ``source``/``field_lines``. O(config size).
    """
    lines = dict(field_lines or {})
    probe = ReplayConfig("", "", (), (), source=source, field_lines=lines)
    try:
        return _build(data, Path(base_dir), probe)
    except ConfigError as exc:
        if exc.path or not source:
            raise
        raise probe.error(exc.field, exc.field_reason) from None


def _build(data: Any, base_dir: Path, probe: ReplayConfig) -> ReplayConfig:
    f = _Fields(data, "", _TOP_FIELDS)
    trace = f.string("trace_file_path", required=True)
    output = f.string("output_result_path", required=True)
    groups = tuple(
        group_from_dict(g, f"instance_groups[{i}]")
        for i, g in enumerate(f.array("instance_groups", required=True))
    )
    regs = tuple(
        registration_from_dict(r, f"instances[{i}]")
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
    check_config(config)
    return config


def check_config(config: ReplayConfig) -> None:
    """Raise :class:`ConfigError` (located in ``config.source``) unless ``config`` is usable.

    Rules: non-empty paths; ``block_size`` > 0; ``pipeline_worker_count`` >= 1; a known
    ``trace_format``; at least one group and one instance; unique instance ids; every
    instance's block_size a positive multiple of ``block_size`` (coarsening only);
    ``override_instance_id`` names a configured instance and is not combined with
    ``fanout_all_instances``; a Mooncake trace (no instance ids) needs override, fanout or
    exactly one instance. Group and registration value rules are left to the manager.
    O(instances).
    """
    err = config.error
    if not config.trace_file_path:
        raise err("trace_file_path", "must not be empty")
    if not config.output_result_path:
        raise err("output_result_path", "must not be empty")
    bs = config.block_size
    if isinstance(bs, bool) or not isinstance(bs, int) or bs <= 0:
        raise err("block_size", f"must be an integer > 0 (tokens per trace key), got {bs!r}")
    workers = config.pipeline_worker_count
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise err("pipeline_worker_count", f"must be an integer >= 1, got {workers!r}")
    if config.trace_format not in TRACE_FORMATS:
        raise err(
            "trace_format", f"must be one of {list(TRACE_FORMATS)}, got {config.trace_format!r}"
        )
    if not config.instance_groups:
        raise err("instance_groups", "must list at least one instance group")
    if not config.instances:
        raise err("instances", "must list at least one instance")
    seen: dict[str, int] = {}
    for i, reg in enumerate(config.instances):
        if reg.instance_id in seen:
            raise err(
                f"instances[{i}].instance_id",
                f"{reg.instance_id!r} is already used by instances[{seen[reg.instance_id]}]",
            )
        seen[reg.instance_id] = i
        rbs = reg.block_size
        if isinstance(rbs, bool) or not isinstance(rbs, int) or rbs <= 0 or rbs % bs:
            raise err(
                f"instances[{i}].block_size",
                f"{rbs!r} must be a positive multiple of the trace block_size {bs} "
                "(re-blocking only coarsens)",
            )
    override = config.override_instance_id
    if override and config.fanout_all_instances:
        raise err(
            "override_instance_id",
            "override_instance_id and fanout_all_instances are mutually exclusive",
        )
    if override and override not in seen:
        raise err(
            "override_instance_id",
            f"{override!r} is not one of the configured instances {sorted(seen)}",
        )
    if (
        config.trace_format == "mooncake"
        and not override
        and not config.fanout_all_instances
        and len(config.instances) != 1
    ):
        raise err(
            "trace_format",
            f"a mooncake trace has no instance ids but {len(config.instances)} instances are "
            "configured: set override_instance_id or fanout_all_instances",
        )


def load_config(path: str | os.PathLike[str]) -> ReplayConfig:
    """Read and validate a replay config file (JSON, UTF-8).

    Errors are :class:`ConfigError` with the file, the line and the field path (JSON syntax
    errors carry the parser's line). Relative paths inside are resolved against the config
    file's folder. O(file size).
    """
    name = os.fspath(path)
    try:
        text = Path(name).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError("", f"cannot read the config: {reason}", name, 0) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            "", f"invalid JSON: {exc.msg} at column {exc.colno}", name, exc.lineno
        ) from None
    except RecursionError:
        raise ConfigError("", "invalid JSON: nested too deeply", name, 0) from None
    lines, duplicate = _field_lines(text)
    if duplicate is not None:
        dup_path, dup_line = duplicate
        raise ConfigError(dup_path, "duplicate field (given twice)", name, dup_line)
    return replay_config_from_dict(data, base_dir=Path(name).parent, source=name, field_lines=lines)


# --------------------------------------------------------------------------- line locator

_WS = re.compile(r"[ \t\n\r]*")


def _field_lines(text: str) -> tuple[dict[str, int], tuple[str, int] | None]:
    """Map every field path of a valid JSON document to the 1-based line where it starts.

    Object members map at their key, array elements at their value. Also returns the first
    duplicate member ``(path, line)``, if any. O(len(text) + fields * log lines).
    """
    newlines = [m.start() for m in re.finditer("\n", text)]
    decode = json.JSONDecoder().raw_decode
    ws = _WS.match

    def skip(i: int) -> int:
        return ws(text, i).end()  # type: ignore[union-attr]  # always matches

    lines: dict[str, int] = {}
    duplicate: list[tuple[str, int]] = []

    def line_of(i: int) -> int:
        return bisect.bisect_left(newlines, i) + 1

    def walk(i: int, path: str) -> int:
        i = skip(i)
        ch = text[i]
        if ch not in "{[":
            return decode(text, i)[1]
        close = "}" if ch == "{" else "]"
        i = skip(i + 1)
        if text[i] == close:
            return i + 1
        k = 0
        while True:
            i = skip(i)
            if ch == "{":
                key, i2 = decode(text, i)
                p = _join(path, key)
                if p in lines and not duplicate:
                    duplicate.append((p, line_of(i)))
                lines.setdefault(p, line_of(i))
                i = skip(i2) + 1  # past ':'
            else:
                p = f"{path}[{k}]"
                lines[p] = line_of(i)
                k += 1
            i = skip(walk(i, p))
            if text[i] == ",":
                i += 1
                continue
            return i + 1

    walk(0, "")
    return lines, (duplicate[0] if duplicate else None)
