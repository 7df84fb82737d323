"""``litehit lifecycle`` end to end: literal rows for a hand-built trace with births,
deaths by eviction and by TTL, revivals and lives alive at the end; the statistics (text
and JSON); a tiered (cascading) instance's rows with their tiers; the picture; bad flags
and configurations (exit 2, nothing written)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.test_export_tree import PNG, rec, write_config

HEADER = "BlockKey,BirthTimeUs,DeathTimeUs,LifespanUs,AccessCount,LastAccessTimeUs,IsAlive"


def lifecycle(tmp: Path, config: Path, *args: str) -> tuple[list[str], str]:
    done = run_cli("lifecycle", str(config), *args, cwd=tmp)
    assert done.returncode == 0, done.stderr
    folder = tmp / "out" / "lifecycle"
    assert (folder / "a_lifespan.png").read_bytes()[:8] == PNG
    return (folder / "a_block_lifecycle.csv").read_text().splitlines(), done.stdout


MS = 1_000_000  # ns
TTL_CASE = [
    rec(1 * MS, [1, 2]),  # born 1000 us
    rec(int(1.5 * MS), [1, 2, 3]),  # hits 1, 2; refreshes them; 3 born
    rec(int(1.6 * MS), [7, 8], "write"),  # 5 blocks > 3: evicts 1 then 2 (oldest)
    rec(int(2.5 * MS), [7, 8], "get"),  # hits 7, 8; 3 (anchored 1.5 ms) is not 1 ms old yet
    rec(int(2.6 * MS), [1, 2]),  # 3 expires (1.1 ms > 1 ms); 1, 2 revive; 7 is evicted
]


def test_rows_with_evictions_expiries_revivals_and_alive_lives(tmp_path):
    config = write_config(tmp_path, TTL_CASE, policy="ttl", blocks=3,
                          group_extra={"default_block_ttl_seconds": 0.001})  # fmt: skip
    rows, out = lifecycle(tmp_path, config)
    assert rows == [
        HEADER,
        "1,1000,1600,600,1,1500,false",
        "2,1000,1600,600,1,1500,false",
        "3,1500,2600,1100,0,,false",
        "7,1600,2600,1000,1,2500,false",
        "8,1600,,1000,1,2500,true",  # alive: lasts to the last record (2600 us)
        "1,2600,,0,0,,true",
        "2,2600,,0,0,,true",
    ]
    assert out.splitlines() == [
        "a (ttl): 7 lives of 5 paths, 3 alive at the end",
        "  lifespan: P25 300.000 us, P50 600.000 us, P75 1.000 ms, P90 1.040 ms, "
        "P95 1.070 ms, P99 1.094 ms",
        "  never hit: 3 lives (42.86%); utilisation 57.14% (lives hit at least once)",
        "  revivals: 2 (a path written again after its death)",
        "  deaths: 3 by eviction, 1 by TTL",
    ]
    done = run_cli("lifecycle", str(config), "--json", "-o", str(tmp_path / "j"), cwd=tmp_path)
    data = json.loads(done.stdout)
    (stats,) = data["instances"]
    assert data["end_time_ns"] == int(2.6 * MS)
    assert {k: stats[k] for k in ("lives", "alive", "paths", "revivals", "never_hit",
                                  "evicted", "expired")} == {  # fmt: skip
        "lives": 7, "alive": 3, "paths": 5, "revivals": 2, "never_hit": 3, "evicted": 3,
        "expired": 1,
    }  # fmt: skip
    assert stats["never_hit_share"] == pytest.approx(3 / 7)
    assert stats["utilisation"] == pytest.approx(4 / 7)
    assert stats["lifespan_us"] == {
        "p25": 300.0, "p50": 600.0, "p75": 1000.0, "p90": 1040.0, "p95": 1070.0,
        "p99": 1094.0, "mean": 614.286, "max": 1100.0,
    }  # fmt: skip
    assert "tiers" not in stats


def test_floors_to_microseconds_and_delayed_writes_extend_the_end(tmp_path):
    """ns are floored to whole us (the lifespan from the ns difference); a write delayed
    past the last record is applied at its due time, which is then the end."""
    records = [rec(1_999, [5]), rec(3_001, [5], "get")]
    path = write_config(tmp_path, records)
    data = json.loads(path.read_text())
    data["trace_replay"] = {"write_delay_ns": 2_500}  # the first write lands at 4499 ns
    path.write_text(json.dumps(data))
    rows, _ = lifecycle(tmp_path, path)
    assert rows == [HEADER, "5,4,,0,0,,true"]


TIERS = {
    "tier_strategy": {"hierarchical_eviction_enabled": True, "write_mode": "cascading"},
    "storages": [
        {"unique_name": "hbm", "priority": 0, "capacity": 2 / 1024},
        {"unique_name": "ssd", "priority": 1, "capacity": 10 / 1024},
    ],
}


def test_tiered_cascading_rows_carry_their_tier(tmp_path):
    """Spec example 5: the first write puts [1,2,3] into hbm (2 blocks), which demotes
    [1] to ssd (a death by eviction in hbm, a birth in ssd); the second read hits all
    three, [1] from ssd."""
    records = [rec(1 * MS, [1, 2, 3]), rec(2 * MS, [1, 2, 3])]
    config = write_config(tmp_path, records, group_extra=TIERS)
    done = run_cli("lifecycle", str(config), cwd=tmp_path)
    assert done.returncode == 0, f"tier configurations not accepted yet? {done.stderr}"
    rows = (tmp_path / "out" / "lifecycle" / "a_block_lifecycle.csv").read_text().splitlines()
    assert rows == [
        HEADER + ",Tier",
        "1,1000,1000,0,0,,false,hbm",
        "2,1000,,1000,1,2000,true,hbm",
        "3,1000,,1000,1,2000,true,hbm",
        "1,1000,,1000,1,2000,true,ssd",
    ]
    lines = done.stdout.splitlines()
    assert lines[0] == "a (lru): 4 lives of 4 paths, 3 alive at the end"
    assert lines[-2:] == [
        "  tier 0 (hbm): 3 lives, 2 alive, 0 revivals, 1 evicted, 0 expired, 1 never hit",
        "  tier 1 (ssd): 1 lives, 1 alive, 0 revivals, 0 evicted, 0 expired, 0 never hit",
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--trace-format", "nope"), "unknown trace format 'nope'; known formats: 'standard'"),
        (("--instance", "zz"), "--instance 'zz' is not a configured instance (configured: a)"),
        (("-c", "other.json"), "two configurations given: "),
        (("--bogus",), "unrecognized arguments: --bogus"),
    ],
)
def test_bad_flags(tmp_path, args, message):
    config = write_config(tmp_path, [rec(1, [1])])
    done = run_cli("lifecycle", str(config), *args, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_bad_configuration_and_record(tmp_path):
    config = write_config(tmp_path, [rec(1, [1])], group_extra={"used_percentage": 0})
    done = run_cli("lifecycle", "-c", str(config), cwd=tmp_path)
    assert done.returncode == 2
    assert "used_percentage: must be a number in (0, 1], got 0" in done.stderr
    config = write_config(tmp_path, [rec(1, [1]), rec(5, [1], inst="nobody")])
    done = run_cli("lifecycle", str(config), cwd=tmp_path)
    assert done.returncode == 2
    assert "trace.jsonl:2: instance_id: instance 'nobody' is not configured" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "out").exists()


def test_optimize_export_lifecycle_writes_the_references_file(tmp_path):
    """The reference's optimizer_run.py --export-lifecycle: {instance_id}_lifecycle.csv
    beside the hit-rate CSVs, litehit lifecycle's rows with the reference's values where
    ours are empty (an alive life dies at the end, 2600 us; a life never hit was last
    accessed at its birth), and their statistics in --json. Catches the file under our
    name or folder, and the empty fields left in."""
    config = write_config(tmp_path, TTL_CASE, policy="ttl", blocks=3,
                          group_extra={"default_block_ttl_seconds": 0.001})  # fmt: skip
    done = run_cli("optimize", str(config), "--export-lifecycle", "--json", "-o",
                   str(tmp_path / "both"), cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "both").iterdir()) == [
        "a_hit_rates.csv", "a_lifecycle.csv"
    ]  # fmt: skip
    assert (tmp_path / "both" / "a_lifecycle.csv").read_text().splitlines() == [
        HEADER,
        "1,1000,1600,600,1,1500,false",
        "2,1000,1600,600,1,1500,false",
        "3,1500,2600,1100,0,1500,false",
        "7,1600,2600,1000,1,2500,false",
        "8,1600,2600,1000,1,2500,true",
        "1,2600,2600,0,0,2600,true",
        "2,2600,2600,0,0,2600,true",
    ]
    (stats,) = json.loads(done.stdout)["lifecycle"]
    assert (stats["lives"], stats["revivals"], stats["expired"]) == (7, 2, 1)
