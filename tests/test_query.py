"""query_facts: exact rows and summaries, slot semantics, ratio of sums, chunking, errors."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import pytest

from litehit_core.facts import FactRow, FactsWriter, read_facts
from litehit_core.model import HitCurveSegment, InvalidRequestError, RequestFact
from litehit_core.projector import (
    CAPACITY_SLOT_RULE,
    MAX_CAPACITY_GB,
    capacity_slot_bytes,
    project_bytes,
    project_infinite,
)
from litehit_core.query import FactsQuery, query_facts

S = HitCurveSegment
GIB = 1024**3

WORKED_ROWS = [
    FactRow("r1", "gpu-0", 1000, 13, 4, 1024, ()),
    FactRow("r2", "gpu-0", 2000, 12, 4, 1024, (S(1, 2),)),
    FactRow("r3", "gpu-0", 3000, 13, 4, 1024, (S(1, 2), S(4, 1))),
    FactRow("r4", "gpu-0", 4000, 8, 4, 1024, (S(1, 1),)),
    FactRow("r5", "gpu-0", 5000, 8, 4, 1024, (S(1, 2),)),
]

REQUEST_KEYS = [
    "trace_id",
    "instance_id",
    "timestamp_ns",
    "input_token_len",
    "hit_blocks",
    "hit_rates",
]
INSTANCE_KEYS = [
    "summary",
    "instance_id",
    "requests",
    "total_input_tokens",
    "capacity_gb",
    "total_hit_blocks",
    "total_hit_tokens",
    "hit_rates",
]
TOTAL_KEYS = [k for k in INSTANCE_KEYS if k != "instance_id"]


def request_row(row: FactRow, hit_blocks: list[int], hit_rates: list[float]) -> dict[str, Any]:
    return {
        "trace_id": row.trace_id,
        "instance_id": row.instance_id,
        "timestamp_ns": row.timestamp_ns,
        "input_token_len": row.input_token_len,
        "hit_blocks": hit_blocks,
        "hit_rates": hit_rates,
    }


def test_worked_example_exact() -> None:
    caps = [2048 / GIB, 3072 / GIB, -1]
    out = list(query_facts(WORKED_ROWS, caps))
    r = WORKED_ROWS
    summary_body = {
        "requests": 5,
        "total_input_tokens": 54,
        "capacity_gb": caps,
        "total_hit_blocks": [7, 7, 8],
        "total_hit_tokens": [28, 28, 32],
        "hit_rates": [28 / 54, 28 / 54, 32 / 54],
    }
    expected = [
        request_row(r[0], [0, 0, 0], [0.0, 0.0, 0.0]),
        request_row(r[1], [2, 2, 2], [8 / 12, 8 / 12, 8 / 12]),
        request_row(r[2], [2, 2, 3], [8 / 13, 8 / 13, 12 / 13]),
        request_row(r[3], [1, 1, 1], [0.5, 0.5, 0.5]),
        request_row(r[4], [2, 2, 2], [1.0, 1.0, 1.0]),
        {"summary": True, "instance_id": "gpu-0", **summary_body},
        {"summary": True, **summary_body},
    ]
    assert out == expected
    for row in out[:5]:
        assert list(row) == REQUEST_KEYS
        assert all(type(x) is int for x in row["hit_blocks"])
        assert all(type(x) is float for x in row["hit_rates"])
    assert list(out[5]) == INSTANCE_KEYS
    assert list(out[6]) == TOTAL_KEYS
    assert [round(100 * x, 2) for x in out[6]["hit_rates"]] == [51.85, 51.85, 59.26]
    assert all(type(x) is int for x in out[6]["total_hit_blocks"] + out[6]["total_hit_tokens"])
    assert out[6]["summary"] is True


def test_worked_example_through_the_ledger(tmp_path: Path) -> None:
    path = tmp_path / "litehit_facts.csv"
    with FactsWriter(path) as writer:
        for row in WORKED_ROWS:
            writer.write(row)
    out = list(query_facts(read_facts(path), [2048 / GIB, -1]))
    assert [row["hit_blocks"] for row in out[:5]] == [[0, 0], [2, 2], [2, 3], [1, 1], [2, 2]]
    assert out[-1]["total_hit_tokens"] == [28, 32]


def test_slots_keep_caller_order_with_duplicates_zero_and_infinite() -> None:
    caps = [-1, 0, 2048 / GIB, -1.0, 0, 2048 / GIB, 1024 / GIB]
    out = list(query_facts(WORKED_ROWS, caps))
    assert [row["hit_blocks"] for row in out[:5]] == [
        [0, 0, 0, 0, 0, 0, 0],
        [2, 0, 2, 2, 0, 2, 1],
        [3, 0, 2, 3, 0, 2, 1],
        [1, 0, 1, 1, 0, 1, 1],
        [2, 0, 2, 2, 0, 2, 1],
    ]
    assert out[-1]["capacity_gb"] == caps
    assert out[-1]["total_hit_blocks"] == [8, 0, 7, 8, 0, 7, 4]
    assert out[-1]["total_hit_tokens"] == [32, 0, 28, 32, 0, 28, 16]


def test_integer_gb_capacity_echoed() -> None:
    out = list(query_facts(WORKED_ROWS, [1]))
    assert out[-1]["capacity_gb"] == [1]
    assert out[-1]["total_hit_blocks"] == [8]  # 1 GiB = 1,048,576 blocks: everything hits


def test_rates_are_ratios_of_sums_not_means_of_ratios() -> None:
    rows = [
        FactRow("long", "a", 0, 100, 4, 1024, (S(1, 1),)),  # 4 / 100 = 0.04
        FactRow("short", "a", 1, 4, 4, 1024, (S(1, 1),)),  # 4 / 4 = 1.0
    ]
    out = list(query_facts(rows, [-1]))
    assert out[0]["hit_rates"] == [0.04]
    assert out[1]["hit_rates"] == [1.0]
    mean_of_ratios = (0.04 + 1.0) / 2
    for summary in out[2:]:
        assert summary["total_hit_tokens"] == [8]
        assert summary["total_input_tokens"] == 104
        assert summary["hit_rates"] == [8 / 104]
        assert summary["hit_rates"][0] != pytest.approx(mean_of_ratios)


def test_zero_tokens_give_zero_rates() -> None:
    rows = [FactRow("empty", "z", 0, 0, 4, 1024, ())]
    out = list(query_facts(rows, [-1, 1]))
    assert out[0]["hit_rates"] == [0.0, 0.0]
    assert out[1] == {
        "summary": True,
        "instance_id": "z",
        "requests": 1,
        "total_input_tokens": 0,
        "capacity_gb": [-1, 1],
        "total_hit_blocks": [0, 0],
        "total_hit_tokens": [0, 0],
        "hit_rates": [0.0, 0.0],
    }


def test_no_rows_yields_only_the_total() -> None:
    assert list(query_facts([], [1.0])) == [
        {
            "summary": True,
            "requests": 0,
            "total_input_tokens": 0,
            "capacity_gb": [1.0],
            "total_hit_blocks": [0],
            "total_hit_tokens": [0],
            "hit_rates": [0.0],
        }
    ]


def test_multiple_instances_with_different_block_sizes() -> None:
    # "gpu-2": 4 tokens / 1024 B per block; "gpu-10": 16 tokens / 4096 B; "a": 8 / 2048.
    rows = [
        FactRow("x1", "gpu-2", 1, 40, 4, 1024, (S(1, 10),)),
        FactRow("y1", "gpu-10", 2, 160, 16, 4096, (S(1, 10),)),
        FactRow("z1", "a", 3, 81, 8, 2048, (S(2, 3), S(7, 2))),
        FactRow("x2", "gpu-2", 4, 41, 4, 1024, (S(3, 2),)),
    ]
    caps = [8192 / GIB, -1]  # 8192 B = 8 blocks (gpu-2), 2 blocks (gpu-10), 4 blocks (a)
    out = list(query_facts(rows, caps))
    assert [row["trace_id"] for row in out[:4]] == ["x1", "y1", "z1", "x2"]
    assert [row["hit_blocks"] for row in out[:4]] == [[8, 10], [2, 10], [3, 5], [2, 2]]
    assert out[2]["hit_rates"] == [24 / 81, 40 / 81]
    # lexicographic instance order, not insertion or natural order
    assert [row.get("instance_id") for row in out[4:]] == ["a", "gpu-10", "gpu-2", None]
    a, g10, g2, total = out[4:]
    assert (a["requests"], a["total_input_tokens"]) == (1, 81)
    assert a["total_hit_blocks"] == [3, 5] and a["total_hit_tokens"] == [24, 40]
    assert g10["total_hit_blocks"] == [2, 10] and g10["total_hit_tokens"] == [32, 160]
    assert g2["requests"] == 2 and g2["total_input_tokens"] == 81
    assert g2["total_hit_blocks"] == [10, 12] and g2["total_hit_tokens"] == [40, 48]
    assert total["requests"] == 4
    assert total["total_input_tokens"] == 81 + 160 + 81
    # blocks of different sizes are summed as blocks; tokens use each row's block size
    assert total["total_hit_blocks"] == [15, 27]
    assert total["total_hit_tokens"] == [96, 248]
    assert total["hit_rates"] == [96 / 322, 248 / 322]


def random_rows(seed: int, n: int) -> list[FactRow]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        bs = rng.choice([4, 16])
        bb = bs * 256
        curve = []
        end = 0
        for _ in range(rng.randint(0, 3)):
            s = end + 1 + rng.randint(0, 5)
            r = rng.randint(1, 6)
            curve.append(S(s, r))
            end = s + r - 1
        blocks = sum(r for _, r in curve) + rng.randint(0, 3)
        tokens = blocks * bs + rng.randint(0, bs - 1)
        rows.append(FactRow(f"t{i}", rng.choice(["b", "a", "c"]), i, tokens, bs, bb, tuple(curve)))
    return rows


@pytest.mark.parametrize("chunk_rows", [1, 2, 3, 7])
def test_chunking_does_not_change_output(chunk_rows: int) -> None:
    rows = random_rows(11, 40)
    caps = [0, 4096 / GIB, 10_000 / GIB, -1, 4096 / GIB]
    small = list(query_facts(rows, caps, chunk_rows=chunk_rows))
    large = list(query_facts(rows, caps, chunk_rows=1_000_000))
    assert small == large
    assert len(small) == 40 + 3 + 1


def test_query_matches_the_projector_row_by_row() -> None:
    rows = random_rows(5, 60)
    caps = [0, 1024 / GIB, 5000 / GIB, 20_000 / GIB, -1]
    out = list(query_facts(rows, caps, chunk_rows=16))
    totals = [0] * len(caps)
    for row, got in zip(rows, out[: len(rows)], strict=True):  # then the totals rows
        f = RequestFact(row.hit_curve, 0)
        expected = [
            project_infinite(f) if gb < 0 else project_bytes(f, int(gb * GIB), row.block_bytes)
            for gb in caps
        ]
        assert got["hit_blocks"] == expected
        assert got["hit_rates"] == [
            h * row.block_size_tokens / row.input_token_len if row.input_token_len else 0.0
            for h in expected
        ]
        totals = [t + h * row.block_size_tokens for t, h in zip(totals, expected, strict=True)]
    assert out[-1]["total_hit_tokens"] == totals
    assert out[-1]["total_input_tokens"] == sum(r.input_token_len for r in rows)


def test_accepts_a_one_shot_iterator() -> None:
    out = list(query_facts(iter(WORKED_ROWS), (-1,), chunk_rows=2))
    assert out[-1]["total_hit_blocks"] == [8]
    assert out[-1]["capacity_gb"] == [-1]


# ---------------------------------------------------------------- errors


def test_empty_capacity_list_rejected_before_any_output() -> None:
    with pytest.raises(InvalidRequestError) as info:
        query_facts(WORKED_ROWS, [])  # raised at the call, before any row is read
    assert "capacity_gb" in str(info.value)
    assert "[]" in str(info.value)


@pytest.mark.parametrize("bad", [math.nan, "1", None, True])
def test_non_numeric_or_nan_capacity_rejected(bad: Any) -> None:
    with pytest.raises(InvalidRequestError) as info:
        list(query_facts(WORKED_ROWS, [1.0, bad]))
    assert "capacity_gb" in str(info.value)
    assert repr(bad) in str(info.value)


RULE = "-1 (infinite) or a finite number of GiB in [0, 8589934591]"


@pytest.mark.parametrize(
    "bad", [-5, -0.5, -1.5, -2, -1e-300, math.inf, -math.inf, MAX_CAPACITY_GB + 1, 1e10]
)
def test_only_minus_one_is_infinite_other_bad_capacities_rejected(bad: float) -> None:
    with pytest.raises(InvalidRequestError) as info:
        FactsQuery([1, bad])  # at construction, before any row is read
    assert str(info.value) == f"capacity_gb[1] must be {RULE}, got {bad!r}"
    assert CAPACITY_SLOT_RULE == RULE


def test_the_one_capacity_rule() -> None:
    assert [capacity_slot_bytes(gb) for gb in (-1, -1.0, 0, 0.0, -0.0, 1, 0.5)] == [
        -1,
        -1,
        0,
        0,
        0,
        GIB,
        GIB // 2,
    ]
    assert capacity_slot_bytes(MAX_CAPACITY_GB) == MAX_CAPACITY_GB * GIB <= 2**63 - 1
    with pytest.raises(InvalidRequestError) as info:
        capacity_slot_bytes(-5, "--capacity-gb")
    assert str(info.value) == f"--capacity-gb must be {RULE}, got -5"


def test_largest_capacity_is_exact() -> None:
    # MAX_CAPACITY_GB GiB is the largest slot whose bytes fit in int64: everything hits.
    out = list(query_facts(WORKED_ROWS, [MAX_CAPACITY_GB, -1, 0]))
    assert [row["hit_blocks"] for row in out[:5]] == [
        [0, 0, 0],
        [2, 2, 0],
        [3, 3, 0],
        [1, 1, 0],
        [2, 2, 0],
    ]
    assert out[-1]["capacity_gb"] == [MAX_CAPACITY_GB, -1, 0]
