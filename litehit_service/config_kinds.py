"""Which kind of configuration document is this? One detector for the three kinds LiteHit reads.

==========  ===================================  =======================================
kind        what                                 read by
==========  ===================================  =======================================
replay      a replay configuration               litehit replay or feed --register-from
optimizer   an optimizer configuration (the      litehit optimize, tradeoff, export-tree
            KVCacheManager optimizer's format)   or lifecycle
groups      a serve groups file (JSON or YAML)   litehit serve --groups
==========  ===================================  =======================================

(:data:`KINDS` holds this table.) The three share field names (``instance_groups``,
``trace_file_path``, ...), so a document given to another kind's command used to give a list
of unknown-field errors. :func:`config_kind` tells the kinds apart by the fields only one of
them has, and :func:`check_kind` (called by each loader before its field-by-field checks)
turns a mismatch into one error naming the kind found, the fields that show it, the
commands that read it and what this command reads.

**The rules** (:func:`config_kind`). Only a non-empty object can be told; the top level and
the first :data:`SCANNED_ENTRIES` entries of ``instance_groups`` are looked at:

- *optimizer marks*: a top-level ``eviction_params``, ``trace_replay``, ``mamba_state`` or
  ``trace_type`` (the reference's older configurations), or
  an ``instance_groups[]`` entry with a field of the optimizer's own (``group_name``,
  ``quota_capacity``, a nested ``instances``, ``storages``, ``tier_strategy``, ...:
  :data:`OPTIMIZER_GROUP_MARKS`);
- *entry marks* (a replay configuration's and a groups file's): a top-level ``instances``, or
  an ``instance_groups[]`` entry with a field of the proto's own (``name``, ``capacity_gb``,
  ``eviction_policy``, ...: :data:`ENTRY_GROUP_MARKS`);
- *trace fields*: :data:`TRACE_FIELDS` (``trace_file_path``, ``output_result_path``,
  ``block_size``, ``trace_format``, ...).

1. optimizer marks and entry marks both: ``None`` (a mix, e.g. a half-converted document:
   the loader's field checks name each wrong field better);
2. optimizer marks: ``"optimizer"``;
3. entry marks and a trace field: ``"replay"``;
4. entry marks alone: ``"groups"`` (a groups file's fields are a subset of a replay
   configuration's: it is one without any trace field);
5. anything else (not an object, ``{}``, only shared fields such as ``trace_file_path`` or an
   empty ``instance_groups``): ``None``, cannot tell.

A valid document of each kind is detected as its kind or ``None``, never as another (every
mark is a field the other kinds' loaders reject), so the check refuses no valid document.

Imports nothing from the loaders' homes (:mod:`litehit_service.litehit`,
:mod:`litehit_service.optimizer`, :mod:`litehit_service.commands`) nor
:mod:`litehit_service.entries`, and no YAML, numpy or gRPC of its own (only
:mod:`litehit_core`, for :class:`~litehit_core.LocatedError`, and
:mod:`litehit_service.config_files`): every loader can call it without an import cycle.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from litehit_core import LocatedError
from litehit_service.config_files import field_line

__all__ = [
    "ENTRY_GROUP_MARKS",
    "KINDS",
    "OPTIMIZER_GROUP_MARKS",
    "OPTIMIZER_TOP_MARKS",
    "SCANNED_ENTRIES",
    "TRACE_FIELDS",
    "ConfigKind",
    "check_kind",
    "config_kind",
]


@dataclass(frozen=True, slots=True)
class ConfigKind:
    """One kind of configuration document: ``label`` names it in a sentence ("a replay
    configuration"), ``commands`` are the commands that read it (plain text)."""

    label: str
    commands: str


KINDS: Mapping[str, ConfigKind] = {
    "replay": ConfigKind("a replay configuration", "litehit replay or feed --register-from"),
    "optimizer": ConfigKind(
        "an optimizer configuration", "litehit optimize, tradeoff, export-tree or lifecycle"
    ),
    "groups": ConfigKind("a serve groups file", "litehit serve --groups"),
}
"""Every kind :func:`config_kind` names -> what it is and which commands read it."""

SCANNED_ENTRIES = 4
"""How many ``instance_groups`` entries the detector looks at (the first ones)."""

OPTIMIZER_TOP_MARKS = ("eviction_params", "trace_replay", "mamba_state", "trace_type")
"""Top-level fields only an optimizer configuration has."""
OPTIMIZER_GROUP_MARKS = (
    "group_name",
    "quota_capacity",
    "instances",
    "storages",
    "tier_strategy",
    "used_percentage",
    "default_block_ttl_seconds",
    "ttl_refresh_on_read",
    "ttl_config",
    "tier_flows",
    "hierarchical_eviction_enabled",
    "tier_write_mode",
    "enable_promote",
)
"""``instance_groups[]`` fields only an optimizer configuration has (most telling first)."""
ENTRY_GROUP_MARKS = (
    "name",
    "capacity_gb",
    "eviction_policy",
    "ttl_seconds",
    "enable_prefix_hash",
    "enable_theoretical_max_cache",
    "shared_group_quota",
    "touch_order",
)
"""``instance_groups[]`` fields (the proto's) only a replay configuration and a serve groups
file have (most telling first)."""
TRACE_FIELDS = (
    "trace_file_path",
    "output_result_path",
    "block_size",
    "trace_format",
    "override_instance_id",
    "fanout_all_instances",
    "pipeline_worker_count",
)
"""Top-level fields of a replay configuration that a serve groups file never has (the
first two an optimizer configuration has as well)."""

_SHOWN = 3  # fields of evidence named in a message, at most


def config_kind(data: Any) -> str | None:
    """The kind of the parsed document ``data`` (a key of :data:`KINDS`), or ``None`` when
    it cannot be told (rules in the module docstring). O(top-level fields + the first
    :data:`SCANNED_ENTRIES` entries' fields)."""
    return _detect(data)[0]


def check_kind(
    data: Any,
    expected: str,
    path: str,
    field_lines: Mapping[str, int] | None = None,
) -> None:
    """Raise :class:`~litehit_core.LocatedError` at ``path`` when :func:`config_kind` names
    a kind other than ``expected`` (a key of :data:`KINDS`); no-op when it names
    ``expected`` or cannot tell. The message names the kind found, the fields that show
    it, the commands that read it and what ``expected``'s commands read, e.g. ``this is an
    optimizer configuration (eviction_params, instance_groups[0].group_name,
    quota_capacity): use litehit optimize, tradeoff, export-tree or lifecycle; litehit
    replay or feed --register-from reads a replay configuration``. The line is that of the
    first field showing the kind in ``field_lines`` (:func:`read_json_document
    <litehit_service.config_files.read_json_document>`), 0 without them. Cost as
    :func:`config_kind`.
    """
    want = KINDS[expected]  # KeyError: a caller's bug
    kind, shown, at = _detect(data)
    if kind is None or kind == expected:
        return
    found = KINDS[kind]
    evidence = _join(shown) + ("; no trace_file_path" if kind == "groups" else "")
    reason = (
        f"this is {found.label} ({evidence}): use {found.commands}; "
        f"{want.commands} reads {want.label}"
    )
    raise LocatedError(path, field_line(field_lines or {}, at), reason)


def _detect(data: Any) -> tuple[str | None, list[str], str]:
    """``(kind, fields to show, field to locate)`` of ``data`` (module docstring)."""
    if not isinstance(data, Mapping) or not data:
        return None, [], ""
    groups = data.get("instance_groups")
    entries = groups[:SCANNED_ENTRIES] if isinstance(groups, (list, tuple)) else []
    optimizer = [k for k in OPTIMIZER_TOP_MARKS if k in data][:1]
    optimizer += _entry_marks(entries, OPTIMIZER_GROUP_MARKS)
    entry = ["instances"] if "instances" in data else []
    entry += _entry_marks(entries, ENTRY_GROUP_MARKS)
    if optimizer and entry:
        return None, [], ""
    if optimizer:
        return "optimizer", optimizer[:_SHOWN], optimizer[0]
    if not entry:
        return None, [], ""
    trace = [k for k in TRACE_FIELDS if k in data][:1]
    if trace:
        return "replay", (trace + entry)[:_SHOWN], entry[0]
    return "groups", entry[:_SHOWN], entry[0]


def _entry_marks(entries: Sequence[Any], marks: tuple[str, ...]) -> list[str]:
    """Paths of ``marks`` in the first of ``entries`` (``instance_groups[i]``) having any."""
    for i, entry in enumerate(entries):
        if isinstance(entry, Mapping):
            found = [f"instance_groups[{i}].{k}" for k in marks if k in entry]
            if found:
                return found
    return []


def _join(paths: list[str]) -> str:
    """``a[0].x, a[0].y, b`` as ``a[0].x, y, b``: a field of the same entry as the one
    before it by its name only."""
    shown: list[str] = []
    previous = ""
    for path in paths:
        parent, _, name = path.rpartition(".")
        shown.append(name if parent and parent == previous else path)
        previous = parent
    return ", ".join(shown)
