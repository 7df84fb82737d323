"""JSON/YAML entries of instance groups and instances, with the proto's field names.

One strict parser for every place an operator writes groups and instances by hand: the
``instance_groups``/``instances`` of a replay config and of a ``litehit serve --groups``
file. An unknown field (with a "did you mean"), a missing required field or a value of the
wrong JSON type is a :class:`~litehit_core.LocatedError` naming the field's dotted path
(``instances[0].block_size``); the caller places it in its file. Only structure and JSON
types are checked here; the value rules (capacities > 0, known spec names, ...) are the
manager's. Every parser is O(size of the entry).
"""

from __future__ import annotations

import difflib
import json
import math
import os
from collections.abc import Mapping
from typing import Any

import yaml

from litehit_core import LocatedError
from litehit_service.config_files import join_field, parse_json, read_text
from litehit_service.config_kinds import check_kind
from litehit_service.model import (
    InstanceGroup,
    InstanceRegistration,
    LocationSpec,
    LocationSpecGroup,
)

__all__ = [
    "Fields",
    "group_from_dict",
    "load_groups_file",
    "registration_from_dict",
]

_POLICIES = {
    "lru": "lru",
    "optimizer_eviction_policy_lru": "lru",
    "unspecified": "unspecified",
    "optimizer_eviction_policy_unspecified": "unspecified",
}


def _bad_field(field: str, reason: str) -> LocatedError:
    """An error about ``field`` of an entry not (yet) placed in a file."""
    return LocatedError("", 0, reason, field)


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


def _report(problems: list[LocatedError] | None, error: LocatedError) -> None:
    """Raise ``error``, or with a ``problems`` list collect it there and carry on."""
    if problems is None:
        raise error
    problems.append(error)


class Fields:
    """Typed access to one JSON object's fields; unknown fields are rejected up front.

    Without ``problems`` the first bad field raises its LocatedError; with a list, every
    bad field is appended to it and its getter returns the default (so a whole entry is
    checked at once).
    """

    def __init__(
        self,
        data: Any,
        where: str,
        allowed: tuple[str, ...],
        problems: list[LocatedError] | None = None,
    ) -> None:
        self.problems = problems
        self.where = where
        self.data: Mapping[Any, Any] = {}
        self.suggested: set[str] = set()  # a misspelling was reported: not missing as well
        self.broken = not isinstance(data, Mapping)  # reported once; its fields are not
        if self.broken:
            _report(
                problems,
                _bad_field(where, f"must be an object, got {_json_type(data)} {_show(data)}"),
            )
            return
        for key in data:
            if key not in allowed:
                hint = difflib.get_close_matches(str(key), allowed, n=1)
                also = f"; did you mean {hint[0]!r}?" if hint else ""
                self.suggested.update(hint)
                _report(
                    problems,
                    _bad_field(
                        join_field(where, str(key)),
                        f"unknown field {key!r} (allowed: {', '.join(allowed)}){also}",
                    ),
                )
        self.data = data

    def path(self, name: str) -> str:
        return join_field(self.where, name)

    def _bad(self, name: str, what: str, value: Any, default: Any) -> Any:
        reason = f"must be {what}, got {_json_type(value)} {_show(value)}"
        _report(self.problems, _bad_field(self.path(name), reason))
        return default

    def _get(self, name: str, required: bool, default: Any) -> Any:
        if name in self.data:
            return self.data[name]
        if required and not self.broken and name not in self.suggested:
            _report(self.problems, _bad_field(self.path(name), "missing required field"))
        return default

    def string(self, name: str, *, required: bool = False, default: str = "") -> str:
        value = self._get(name, required, default)
        if not isinstance(value, str):
            return self._bad(name, "a string", value, default)
        return value

    def integer(self, name: str, *, required: bool = False, default: int = 0) -> int:
        value = self._get(name, required, default)
        if not isinstance(value, int) or isinstance(value, bool):
            return self._bad(name, "an integer", value, default)
        return value

    def number(self, name: str, *, required: bool = False, default: float = 0.0) -> float:
        """An integer or a finite float (booleans are not numbers)."""
        value = self._get(name, required, default)
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
        ):
            return self._bad(name, "a number", value, default)
        return value

    def object(self, name: str) -> Any:
        """The raw value of an object field (``{}`` when absent); its type is checked by
        the ``Fields`` built on it."""
        return self._get(name, False, {})

    def boolean(self, name: str, *, default: bool = False) -> bool:
        value = self._get(name, False, default)
        if not isinstance(value, bool):
            return self._bad(name, "true or false", value, default)
        return value

    def array(self, name: str, *, required: bool = False) -> list[Any]:
        value = self._get(name, required, [])
        if not isinstance(value, (list, tuple)):
            return self._bad(name, "an array", value, [])
        return list(value)


def _string_list(
    values: list[Any], where: str, problems: list[LocatedError] | None
) -> tuple[str, ...]:
    for i, v in enumerate(values):
        if not isinstance(v, str):
            reason = f"must be a string, got {_json_type(v)} {_show(v)}"
            _report(problems, _bad_field(f"{where}[{i}]", reason))
    return tuple(v for v in values if isinstance(v, str))


# --------------------------------------------------------------------------- entries

_GROUP_FIELDS = (
    "name",
    "eviction_policy",
    "capacity_gb",
    "ttl_seconds",
    "enable_prefix_hash",
    "enable_theoretical_max_cache",
    "shared_group_quota",
    "touch_order",
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


def group_from_dict(
    d: Any, where: str = "instance_group", problems: list[LocatedError] | None = None
) -> InstanceGroup:
    """Parse one instance group object (gRPC field names) into an :class:`InstanceGroup`.

    Required: ``name`` (string), ``capacity_gb`` (array of numbers, GiB). Optional:
    ``eviction_policy`` ("lru" default; "unspecified" or the proto enum names are accepted
    and judged by the manager), ``ttl_seconds`` (integer, 0 = off), ``enable_prefix_hash``,
    ``enable_theoretical_max_cache``, ``shared_group_quota`` (booleans, default false),
    ``touch_order`` (``"tail-first"`` default or ``"head-first"``; offline replays only).
    Only structure and JSON types are checked here (LocatedError naming
    ``{where}.{field}``); value rules are the manager's. With a ``problems`` list every
    bad field is appended to it (see :class:`Fields`) instead of raising the first.
    O(fields).
    """
    f = Fields(d, where, _GROUP_FIELDS, problems)
    name = f.string("name", required=True)
    policy_text = f.string("eviction_policy", default="lru")
    policy = _POLICIES.get(policy_text.lower())
    if policy is None:
        reason = f"must be 'lru' (or 'unspecified'), got {policy_text!r}"
        _report(problems, _bad_field(f.path("eviction_policy"), reason))
        policy = "lru"
    caps = f.array("capacity_gb", required=True)
    for i, gb in enumerate(caps):
        if isinstance(gb, bool) or not isinstance(gb, (int, float)):
            reason = f"must be a number of GiB, got {_json_type(gb)} {_show(gb)}"
            _report(problems, _bad_field(f"{f.path('capacity_gb')}[{i}]", reason))
    return InstanceGroup(
        name=name,
        capacity_gb=tuple(
            float(gb) for gb in caps if isinstance(gb, (int, float)) and not isinstance(gb, bool)
        ),
        eviction_policy=policy,
        shared_group_quota=f.boolean("shared_group_quota"),
        ttl_seconds=f.integer("ttl_seconds"),
        enable_theoretical_max_cache=f.boolean("enable_theoretical_max_cache"),
        enable_prefix_hash=f.boolean("enable_prefix_hash"),
        touch_order=f.string("touch_order", default="tail-first"),
    )


def registration_from_dict(
    d: Any, where: str = "instance", problems: list[LocatedError] | None = None
) -> InstanceRegistration:
    """Parse one instance object (RegisterInstance field names) into a registration.

    Required: ``instance_id``, ``instance_group`` (strings), ``block_size`` (integer,
    tokens), ``location_spec_infos`` (``[{name, size}]``, size in bytes),
    ``location_spec_groups`` (``[{name, spec_names}]``). Optional: ``optimizer_state_info``
    (``{full_location_spec_group_name, linear_location_spec_group_name}``), ``linear_step``
    (integer, default 0). Structure and JSON types only (LocatedError naming
    ``{where}.{field}``); value rules are the manager's. With a ``problems`` list every
    bad field is appended to it instead of raising the first. O(fields + specs).
    """
    f = Fields(d, where, _INSTANCE_FIELDS, problems)
    instance_id = f.string("instance_id", required=True)
    group = f.string("instance_group", required=True)
    block_size = f.integer("block_size", required=True)
    specs = []
    for i, item in enumerate(f.array("location_spec_infos", required=True)):
        s = Fields(item, f"{f.path('location_spec_infos')}[{i}]", _SPEC_FIELDS, problems)
        specs.append(
            LocationSpec(s.string("name", required=True), s.integer("size", required=True))
        )
    spec_groups = []
    for i, item in enumerate(f.array("location_spec_groups", required=True)):
        g = Fields(item, f"{f.path('location_spec_groups')}[{i}]", _SPEC_GROUP_FIELDS, problems)
        spec_names = g.array("spec_names", required=True)
        names = _string_list(spec_names, g.path("spec_names"), problems)
        spec_groups.append(LocationSpecGroup(g.string("name", required=True), names))
    state = Fields(
        f.data.get("optimizer_state_info", {}),
        f.path("optimizer_state_info"),
        _STATE_FIELDS,
        problems,
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


_GROUPS_FILE_KEYS = ("instance_groups", "instances")


def load_groups_file(
    path: str | os.PathLike[str],
) -> tuple[list[InstanceGroup], list[InstanceRegistration]]:
    """Parse a JSON or YAML groups file: ``{"instance_groups": [...], "instances": [...]}``.

    Entries use the proto's field names, parsed exactly like the ``instance_groups`` and
    ``instances`` of a replay config (e.g. eviction_policy defaults to "lru"). Raises
    :class:`~litehit_core.LocatedError` naming the file, the line where the parser knows
    it (syntax errors; 0 otherwise), the entry's field and the value; a replay or optimizer
    configuration is refused as such first (:func:`~litehit_service.config_kinds.check_kind`).
    O(file size).
    """
    name = os.fspath(path)
    text = read_text(name, "groups file")
    try:
        if name.lower().endswith(".json"):
            data: Any = parse_json(name, text)
        else:
            data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 0
        problem = getattr(exc, "problem", None) or str(exc)
        raise LocatedError(name, line, f"invalid YAML: {problem}") from None
    if data is None:
        data = {}
    check_kind(data, "groups", name)  # another kind of document: say so, alone
    try:
        f = Fields(data, "", _GROUPS_FILE_KEYS)
        # YAML writes an empty list as "instances:" (null): treat null as empty
        group_items, instance_items = (
            f.array(key) if f.data.get(key) is not None else [] for key in _GROUPS_FILE_KEYS
        )
        groups = [group_from_dict(d, f"instance_groups[{i}]") for i, d in enumerate(group_items)]
        regs = [registration_from_dict(d, f"instances[{i}]") for i, d in enumerate(instance_items)]
    except LocatedError as exc:
        raise exc.at(name, 0) from None
    return groups, regs
