"""``litehit optimize --compare-exact``: when spec section 7b holds (``request`` records,
no write delay, eviction mode 3, one instance in its group, ``lru``) the replay's hit rate
*is* LiteHit's head-first pass at the quota, and the JSON says so; each condition broken
alone turns the claim off (a claim that ignored the write delay, say, would call a replay
exact that is not)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.test_tradeoff import seeded_records, write_case

MIB = 1 << 20


def _compare(tmp: Path, records: list[dict], *, mode: int = 3, delay: int = 0) -> dict:
    path = write_case(tmp, records, [("g", 12 * MIB / (1 << 30), ["a"])], policy="lru",
                      mode=mode, batch=2)  # fmt: skip
    data = json.loads(path.read_text())
    data["trace_replay"] = {"write_delay_ns": delay}
    path.write_text(json.dumps(data))
    done = run_cli("optimize", str(path), "--compare-exact", "--json", cwd=tmp)
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)["compare_exact"]
    return row


def test_the_replay_is_litehits_head_first_pass_under_7b(tmp_path: Path) -> None:
    row = _compare(tmp_path, seeded_records(5, 600, "a"))
    assert row["replay_is_head_first_exactly"] is True
    assert row["capacity_blocks"] == 12
    assert 0 < row["replay_hit_rate"] == row["litehit_head_first_hit_rate"]


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"delay": 1}, "a write delay"),
        ({"mode": 2}, "eviction mode 2"),
        ({"kind": "get"}, "get reads (a get does not write)"),
    ],
)
def test_each_broken_condition_turns_the_claim_off(tmp_path: Path, change: dict, why: str) -> None:
    records = seeded_records(5, 600, "a")
    if "kind" in change:
        records = [r | {"type": "get"} if k % 2 else r for k, r in enumerate(records)]
    row = _compare(tmp_path, records, mode=change.get("mode", 3), delay=change.get("delay", 0))
    assert row["replay_is_head_first_exactly"] is False, why
