"""SQLite persistence of instance groups and registrations.

One table per entity, one JSON document per row, WAL journal; every write is a single
transaction, so a failed write changes nothing on disk. LRU state and counters are never
persisted: a restart restores configuration only. Every failure surfaces as
:class:`~litehit_service.errors.RegistryIOError` naming the file and the entity.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any, TypeVar

from litehit_service.errors import RegistryIOError
from litehit_service.model import (
    InstanceGroup,
    InstanceRegistration,
    LocationSpec,
    LocationSpecGroup,
)

_T = TypeVar("_T")

SCHEMA_VERSION = 1
_MEMORY = ":memory:"

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS instance_groups (name TEXT PRIMARY KEY, body TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS instances (instance_id TEXT PRIMARY KEY, body TEXT NOT NULL)",
)


def group_to_dict(group: InstanceGroup) -> dict[str, Any]:
    """A group as JSON-ready data (field names as in the dataclass; lists for tuples, as
    JSON gives them back). O(fields)."""
    return json.loads(json.dumps(_group_fields(group), allow_nan=False))


def _group_fields(group: InstanceGroup) -> dict[str, Any]:
    """The group's fields; ``touch_order`` only when not the default, so groups stored
    (and snapshots written) before it existed still compare equal. O(fields)."""
    fields = asdict(group)
    if fields["touch_order"] == "tail-first":
        del fields["touch_order"]
    return fields


def group_to_json(group: InstanceGroup) -> str:
    """Serialise a group as a JSON object (field names as in the dataclass). O(fields)."""
    return json.dumps(_group_fields(group), allow_nan=False, sort_keys=True)


def group_from_json(text: str) -> InstanceGroup:
    """Inverse of :func:`group_to_json`; raises ``ValueError``/``KeyError``/``TypeError``."""
    d = json.loads(text)
    return InstanceGroup(
        name=str(d["name"]),
        capacity_gb=tuple(float(x) for x in d["capacity_gb"]),
        eviction_policy=str(d["eviction_policy"]),
        shared_group_quota=bool(d["shared_group_quota"]),
        ttl_seconds=int(d["ttl_seconds"]),
        enable_theoretical_max_cache=bool(d["enable_theoretical_max_cache"]),
        enable_prefix_hash=bool(d["enable_prefix_hash"]),
        touch_order=str(d.get("touch_order", "tail-first")),
    )


def registration_to_dict(reg: InstanceRegistration) -> dict[str, Any]:
    """A registration as JSON-ready data (as :func:`group_to_dict`). O(fields + specs)."""
    return json.loads(json.dumps(asdict(reg), allow_nan=False))


def registration_to_json(reg: InstanceRegistration) -> str:
    """Serialise a registration as a JSON object (nested specs/groups as objects)."""
    return json.dumps(asdict(reg), allow_nan=False, sort_keys=True)


def registration_from_json(text: str) -> InstanceRegistration:
    """Inverse of :func:`registration_to_json`; raises ``ValueError``/``KeyError``/``TypeError``."""
    d = json.loads(text)
    return InstanceRegistration(
        instance_id=str(d["instance_id"]),
        instance_group=str(d["instance_group"]),
        block_size=int(d["block_size"]),
        location_spec_infos=tuple(
            LocationSpec(str(s["name"]), int(s["size"])) for s in d["location_spec_infos"]
        ),
        location_spec_groups=tuple(
            LocationSpecGroup(str(g["name"]), tuple(str(n) for n in g["spec_names"]))
            for g in d["location_spec_groups"]
        ),
        full_location_spec_group_name=str(d["full_location_spec_group_name"]),
        linear_location_spec_group_name=str(d["linear_location_spec_group_name"]),
        linear_step=int(d["linear_step"]),
    )


class Registry:
    """Groups and registrations in one SQLite file (``path``; its parent dir is created).

    Thread-safe (one connection guarded by a lock). Each write is one transaction of
    O(row size); ``load`` is O(rows). ``busy_timeout_s`` bounds how long a write waits for
    another process holding the database lock before failing with ``RegistryIOError``.
    """

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout_s: float = 5.0) -> None:
        self.path = str(path)
        self._lock = threading.Lock()
        try:
            if self.path != _MEMORY:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(
                self.path, timeout=busy_timeout_s, check_same_thread=False, isolation_level=None
            )
        except (OSError, sqlite3.Error) as exc:
            raise RegistryIOError(f"registry {self.path!r}: cannot open: {exc}") from exc
        try:
            if self.path != _MEMORY:
                conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, SCHEMA_VERSION):
                raise RegistryIOError(
                    f"registry {self.path!r}: schema version {version} is not supported "
                    f"(expected {SCHEMA_VERSION})"
                )
            conn.execute("BEGIN IMMEDIATE")
            try:
                for stmt in _SCHEMA:
                    conn.execute(stmt)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            conn.close()
            raise RegistryIOError(f"registry {self.path!r}: cannot initialise: {exc}") from exc
        except BaseException:
            conn.close()
            raise
        self._conn: sqlite3.Connection | None = conn

    @classmethod
    def in_memory(cls) -> Registry:
        """A private, non-persistent registry (for tests and ephemeral servers)."""
        return cls(_MEMORY)

    @contextmanager
    def _transaction(self, what: str, write: bool = True) -> Iterator[sqlite3.Connection]:
        """Run the body as one transaction; any failure rolls back and raises RegistryIOError.

        ``write`` takes the database write lock up front (``BEGIN IMMEDIATE``).
        """
        with self._lock:
            conn = self._conn
            if conn is None:
                raise RegistryIOError(f"registry {self.path!r}: {what} failed: registry is closed")
            try:
                conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            except sqlite3.Error as exc:
                raise RegistryIOError(f"registry {self.path!r}: {what} failed: {exc}") from exc
            try:
                yield conn
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                _rollback(conn)
                raise RegistryIOError(f"registry {self.path!r}: {what} failed: {exc}") from exc
            except BaseException:
                _rollback(conn)
                raise

    def save_group(self, group: InstanceGroup) -> None:
        """Insert or replace the group named ``group.name``."""
        body = group_to_json(group)
        with self._transaction(f"save_group {group.name!r}") as conn:
            conn.execute(
                "INSERT OR REPLACE INTO instance_groups (name, body) VALUES (?, ?)",
                (group.name, body),
            )

    def delete_group(self, name: str) -> None:
        """Delete the group ``name`` (no error if absent)."""
        with self._transaction(f"delete_group {name!r}") as conn:
            conn.execute("DELETE FROM instance_groups WHERE name = ?", (name,))

    def save_instance(self, reg: InstanceRegistration) -> None:
        """Insert or replace the registration of ``reg.instance_id``."""
        body = registration_to_json(reg)
        with self._transaction(f"save_instance {reg.instance_id!r}") as conn:
            conn.execute(
                "INSERT OR REPLACE INTO instances (instance_id, body) VALUES (?, ?)",
                (reg.instance_id, body),
            )

    def delete_instance(self, instance_id: str) -> None:
        """Delete the registration of ``instance_id`` (no error if absent)."""
        with self._transaction(f"delete_instance {instance_id!r}") as conn:
            conn.execute("DELETE FROM instances WHERE instance_id = ?", (instance_id,))

    def load(self) -> tuple[list[InstanceGroup], list[InstanceRegistration]]:
        """All stored groups (by name) and registrations (by instance_id). O(rows)."""
        with self._transaction("load", write=False) as conn:
            g_rows = conn.execute("SELECT name, body FROM instance_groups ORDER BY name").fetchall()
            inst_rows = conn.execute(
                "SELECT instance_id, body FROM instances ORDER BY instance_id"
            ).fetchall()
        groups = [_decode(self.path, "instance group", k, b, group_from_json) for k, b in g_rows]
        regs = [_decode(self.path, "instance", k, b, registration_from_json) for k, b in inst_rows]
        return groups, regs

    def close(self) -> None:
        """Close the connection; later calls raise RegistryIOError. Idempotent."""
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


def _rollback(conn: sqlite3.Connection) -> None:
    try:
        conn.execute("ROLLBACK")
    except sqlite3.Error:
        pass  # the transaction is already gone (e.g. the failing statement ended it)


def _decode(path: str, what: str, key: str, body: str, parse: Callable[[str], _T]) -> _T:
    try:
        return parse(body)
    except (ValueError, KeyError, TypeError) as exc:
        raise RegistryIOError(
            f"registry {path!r}: stored {what} {key!r} is corrupt: {exc!r}"
        ) from exc
