"""Registry: SQLite persistence of groups and registrations (real files, real locks)."""

from __future__ import annotations

import json
import sqlite3

import pytest

from litehit_service.errors import RegistryIOError
from litehit_service.model import (
    InstanceGroup,
    InstanceRegistration,
    LocationSpec,
    LocationSpecGroup,
)
from litehit_service.registry import SCHEMA_VERSION, Registry

GROUP = InstanceGroup(
    name="g",
    capacity_gb=(2048 / 1024**3, 0.1, 8.0),
    eviction_policy="lru",
    ttl_seconds=30,
    enable_theoretical_max_cache=True,
    enable_prefix_hash=True,
)
REG = InstanceRegistration(
    instance_id="i1",
    instance_group="g",
    block_size=16,
    location_spec_infos=(LocationSpec("k", 1024), LocationSpec("v", 2048)),
    location_spec_groups=(LocationSpecGroup("full", ("k", "v")), LocationSpecGroup("lin", ("v",))),
    full_location_spec_group_name="full",
    linear_location_spec_group_name="lin",
)


def rows(path, table: str) -> list[tuple[str, dict]]:
    conn = sqlite3.connect(path)
    try:
        return [(k, json.loads(b)) for k, b in conn.execute(f"SELECT * FROM {table} ORDER BY 1")]
    finally:
        conn.close()


def test_round_trip_and_reopen(tmp_path) -> None:
    path = tmp_path / "nested" / "dir" / "litehit.sqlite3"
    reg = Registry(path)  # parent directories are created
    reg.save_group(GROUP)
    reg.save_group(InstanceGroup("a", (1.0,)))
    reg.save_instance(REG)
    reg.save_instance(InstanceRegistration("i0", "a", 1, (LocationSpec("s", 1),), ()))
    expected = (
        [InstanceGroup("a", (1.0,)), GROUP],
        [InstanceRegistration("i0", "a", 1, (LocationSpec("s", 1),), ()), REG],
    )
    assert reg.load() == expected
    reg.close()
    reopened = Registry(path)
    groups, regs = reopened.load()
    assert (groups, regs) == expected
    assert groups[1].capacity_gb[0] == 2048 / 1024**3  # floats round-trip exactly
    reopened.close()


def test_rows_are_json_documents(tmp_path) -> None:
    path = tmp_path / "r.sqlite3"
    reg = Registry(path)
    reg.save_group(GROUP)
    reg.save_instance(REG)
    reg.close()
    assert rows(path, "instance_groups") == [
        (
            "g",
            {
                "name": "g",
                "capacity_gb": [2048 / 1024**3, 0.1, 8.0],
                "eviction_policy": "lru",
                "shared_group_quota": False,
                "ttl_seconds": 30,
                "enable_theoretical_max_cache": True,
                "enable_prefix_hash": True,
            },
        )
    ]
    assert rows(path, "instances") == [
        (
            "i1",
            {
                "instance_id": "i1",
                "instance_group": "g",
                "block_size": 16,
                "location_spec_infos": [{"name": "k", "size": 1024}, {"name": "v", "size": 2048}],
                "location_spec_groups": [
                    {"name": "full", "spec_names": ["k", "v"]},
                    {"name": "lin", "spec_names": ["v"]},
                ],
                "full_location_spec_group_name": "full",
                "linear_location_spec_group_name": "lin",
                "linear_step": 0,
            },
        )
    ]
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    conn.close()


def test_save_replaces_and_delete_removes(tmp_path) -> None:
    reg = Registry(tmp_path / "r.sqlite3")
    reg.save_group(GROUP)
    updated = InstanceGroup("g", (4.0,))
    reg.save_group(updated)
    reg.save_instance(REG)
    moved = InstanceRegistration("i1", "h", 8, (LocationSpec("s", 5),), ())
    reg.save_instance(moved)
    assert reg.load() == ([updated], [moved])
    reg.delete_instance("i1")
    reg.delete_instance("i1")  # absent: no error
    reg.delete_group("g")
    reg.delete_group("never")
    assert reg.load() == ([], [])
    reg.close()


def test_in_memory_registry() -> None:
    reg = Registry.in_memory()
    assert reg.load() == ([], [])
    reg.save_group(GROUP)
    assert reg.load() == ([GROUP], [])
    assert Registry.in_memory().load() == ([], [])  # private to each object
    reg.close()


def test_closed_registry_raises_and_close_is_idempotent(tmp_path) -> None:
    reg = Registry(tmp_path / "r.sqlite3")
    reg.close()
    reg.close()
    with pytest.raises(RegistryIOError) as info:
        reg.save_group(GROUP)
    assert str(info.value) == (f"registry {reg.path!r}: save_group 'g' failed: registry is closed")
    with pytest.raises(RegistryIOError, match="load failed: registry is closed"):
        reg.load()


def test_locked_database_fails_cleanly_and_writes_nothing(tmp_path) -> None:
    path = tmp_path / "r.sqlite3"
    reg = Registry(path, busy_timeout_s=0)
    reg.save_group(GROUP)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(RegistryIOError) as info:
            reg.save_instance(REG)
        assert str(info.value) == (
            f"registry {reg.path!r}: save_instance 'i1' failed: database is locked"
        )
        with pytest.raises(RegistryIOError, match="delete_group 'g' failed: database is locked"):
            reg.delete_group("g")
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert reg.load() == ([GROUP], [])
    reg.close()


def test_failed_statement_rolls_back_the_transaction(tmp_path) -> None:
    path = tmp_path / "r.sqlite3"
    reg = Registry(path)
    reg.save_group(GROUP)
    # make the instances table unwritable by a trigger: the group write of the same
    # registry must still succeed afterwards and the failed row must not exist
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TRIGGER no_i BEFORE INSERT ON instances BEGIN SELECT RAISE(ABORT, 'nope'); END"
    )
    conn.commit()
    conn.close()
    with pytest.raises(RegistryIOError) as info:
        reg.save_instance(REG)
    assert str(info.value) == f"registry {reg.path!r}: save_instance 'i1' failed: nope"
    reg.save_group(InstanceGroup("h", (1.0,)))
    assert reg.load() == ([GROUP, InstanceGroup("h", (1.0,))], [])
    reg.close()


def test_corrupt_row_is_reported_by_key(tmp_path) -> None:
    path = tmp_path / "r.sqlite3"
    Registry(path).close()
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO instance_groups VALUES ('bad', '{\"name\": \"bad\"}')")
    conn.commit()
    conn.close()
    reg = Registry(path)
    with pytest.raises(RegistryIOError) as info:
        reg.load()
    assert str(info.value) == (
        f"registry {reg.path!r}: stored instance group 'bad' is corrupt: KeyError('capacity_gb')"
    )
    reg.close()


def test_unsupported_schema_version(tmp_path) -> None:
    path = tmp_path / "r.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(RegistryIOError) as info:
        Registry(path)
    assert str(info.value) == (
        f"registry {str(path)!r}: schema version 99 is not supported (expected {SCHEMA_VERSION})"
    )


def test_unopenable_path(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(RegistryIOError) as info:
        Registry(blocker / "r.sqlite3")
    assert str(info.value).startswith(f"registry {str(blocker / 'r.sqlite3')!r}: cannot open: ")
    not_sqlite = tmp_path / "junk.sqlite3"
    not_sqlite.write_bytes(b"this is not a database" * 100)
    with pytest.raises(RegistryIOError) as info:
        Registry(not_sqlite)
    assert "file is not a database" in str(info.value)
    assert not_sqlite.read_bytes() == b"this is not a database" * 100
