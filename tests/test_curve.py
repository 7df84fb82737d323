"""`litehit curve`: exact curves from facts, agreement with `query`, marks, PNG/CSV/table."""

from __future__ import annotations

import csv
import json
import math
import random
import struct
from itertools import pairwise
from pathlib import Path

import pytest
from conftest import mooncake_trace

from litehit_core import FactRow, FactsWriter, LiteHit, query_facts, read_facts
from litehit_core.errors import InvalidRequestError
from litehit_core.projector import project_curve
from litehit_service.cli import main
from litehit_service.litehit.curve import (
    CSV_HEADER,
    CurveError,
    build_curves,
    table_capacities,
)
from litehit_service.litehit.plot import sample_curve

GIB = 1024**3
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
A, B, C, D, E = 1, 2, 3, 4, 5
WORKED_REQUESTS = [([A, B, C], 13), ([A, B, D], 12), ([A, B, C], 13), ([A, E], 8), ([A, E], 8)]
# instance -> (block_size_tokens, block_bytes, key range): different sizes on purpose
INSTANCES = {"a": (4, 1024, 60), "b": (16, 3000, 25), "c": (8, 4096, 200)}


def write_facts(path: Path, rows: list[FactRow]) -> Path:
    with FactsWriter(path) as writer:
        for row in rows:
            writer.write(row)
    return path


def worked_rows(instance_id: str = "gpu-0") -> list[FactRow]:
    engine = LiteHit()
    rows = []
    for i, (keys, tokens) in enumerate(WORKED_REQUESTS, 1):
        fact = engine.process_request(keys)
        rows.append(FactRow(f"r{i}", instance_id, 1000 * i, tokens, 4, 1024, fact.hit_curve))
    return rows


def random_rows(seed: int, n: int = 1500) -> list[FactRow]:
    """Replay random shared-prefix traffic on three instances with LiteHit."""
    rng = random.Random(seed)
    engines = {iid: LiteHit() for iid in INSTANCES}
    rows = []
    for i in range(n):
        iid = rng.choice(sorted(INSTANCES))
        bs, bb, key_range = INSTANCES[iid]
        prefix = rng.randint(1, 6)
        keys = [prefix * 1000 + k for k in range(rng.randint(0, 4))]
        keys += [rng.randint(1, key_range) for _ in range(rng.randint(0, 10))]
        fact = engines[iid].process_request(keys)
        tokens = len(keys) * bs + rng.randint(0, bs - 1)
        rows.append(FactRow(str(i), iid, i + 1, tokens, bs, bb, fact.hit_curve))
    return rows


def brute_hit_tokens(rows: list[FactRow], instance_id: str, capacity_blocks: int) -> int:
    """Hit tokens by projecting every row (independent of the accumulator)."""
    return sum(
        project_curve(r.hit_curve, capacity_blocks) * r.block_size_tokens
        for r in rows
        if r.instance_id == instance_id
    )


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["curve", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


# ---------------------------------------------------------------- the curve itself


def test_worked_example_curve_exact() -> None:
    (curve,) = build_curves(worked_rows())
    assert (curve.instance_id, curve.block_size_tokens, curve.block_bytes) == ("gpu-0", 4, 1024)
    assert (curve.requests, curve.input_tokens) == (5, 54)
    assert curve.breakpoints() == [(0, 0), (1, 16), (2, 28), (3, 28), (4, 32)]
    assert [curve.hit_tokens_at(c) for c in (0, 1, 2, 3, 4, 5, 10**9, -1)] == [
        0, 16, 28, 28, 32, 32, 32, 32,
    ]  # fmt: skip
    assert curve.hit_rate_at_gb(2048 / GIB) == 28 / 54
    assert curve.hit_rate_at_gb(-1) == 32 / 54 == curve.infinite_hit_rate
    assert curve.saturation == 4
    # ceil(0.9 * 32) = 29 > H(3) = 28: all three marks need 4 blocks
    assert [(m.percent, m.target_hit_tokens, m.capacity) for m in curve.marks()] == [
        (90, 29, 4),
        (95, 31, 4),
        (99, 32, 4),
    ]
    assert curve.mark(50) == (50, 16, 1, 1024, 1024 / GIB, 16, 16 / 54)
    assert curve.mark(0).capacity == 0


def test_monotone_non_decreasing() -> None:
    rows = random_rows(1)
    for curve in build_curves(rows):
        points = curve.breakpoints()
        caps = [c for c, _ in points]
        assert caps == sorted(set(caps)) and caps[0] == 0
        assert all(h0 <= h1 for (_, h0), (_, h1) in pairwise(points))
        rates = [curve.hit_rate_at(c) for c in range(curve.saturation + 3)]
        assert all(r0 <= r1 for r0, r1 in pairwise(rates))
        assert rates[-1] == curve.infinite_hit_rate > 0


def test_equals_brute_force_at_every_capacity() -> None:
    rows = random_rows(2)
    for curve in build_curves(rows):
        for c in range(curve.saturation + 2):
            assert curve.hit_tokens_at(c) == brute_hit_tokens(rows, curve.instance_id, c)


def test_equals_query_at_random_capacities() -> None:
    rows = random_rows(3)
    curves = {c.instance_id: c for c in build_curves(rows)}
    rng = random.Random(3)
    caps: list[float] = [-1, 0, -1.0]
    for _ in range(40):  # GiB values landing anywhere, including between block boundaries
        bs, bb, _ = INSTANCES[rng.choice(sorted(INSTANCES))]
        blocks = rng.randint(1, 2 * max(c.saturation for c in curves.values()))
        caps.append((blocks + rng.choice([0.0, 0.3, 0.999])) * bb / GIB)
    summaries = [r for r in query_facts(rows, caps) if "instance_id" in r and "summary" in r]
    assert [s["instance_id"] for s in summaries] == sorted(curves)
    for s in summaries:
        curve = curves[s["instance_id"]]
        assert s["total_input_tokens"] == curve.input_tokens
        assert s["total_hit_tokens"] == [curve.hit_tokens_at(curve.units_for_gb(g)) for g in caps]
        assert s["hit_rates"] == [curve.hit_rate_at_gb(g) for g in caps]  # exactly


@pytest.mark.parametrize("seed", [4, 5, 6])
def test_marks_are_exact_minimal_capacities(seed: int) -> None:
    rows = random_rows(seed)
    for curve in build_curves(rows):
        inf = brute_hit_tokens(rows, curve.instance_id, 10**9)
        assert curve.infinite_hit_tokens == inf
        for percent in (90, 95, 99, 100, 37):
            # smallest C with 100 * H(C) >= percent * inf, by brute force
            want = next(
                c
                for c in range(curve.saturation + 1)
                if 100 * brute_hit_tokens(rows, curve.instance_id, c) >= percent * inf
            )
            mark = curve.mark(percent)
            assert mark.capacity == want
            assert mark.hit_tokens == brute_hit_tokens(rows, curve.instance_id, want)
            assert mark.capacity_gb == want * curve.block_bytes / GIB
        assert curve.mark(100).capacity == curve.saturation


def test_mark_percent_validated() -> None:
    (curve,) = build_curves(worked_rows())
    message = r"percent must be an integer in \[0, 100\], got 101"
    with pytest.raises(InvalidRequestError, match=message):
        curve.mark(101)
    with pytest.raises(InvalidRequestError, match="got 0.9"):
        curve.mark(0.9)  # type: ignore[arg-type]


def test_instance_filter_and_errors() -> None:
    rows = random_rows(7, n=200)
    (only_b,) = build_curves(rows, "b")
    assert only_b.requests == sum(r.instance_id == "b" for r in rows)
    with pytest.raises(CurveError) as info:
        build_curves(rows, "zz")
    assert str(info.value) == (
        "instance_id 'zz' is not in the facts; instances present: 'a', 'b', 'c'"
    )
    with pytest.raises(CurveError, match="^the facts have no rows$"):
        build_curves([])


@pytest.mark.parametrize(
    ("field", "replace", "values"),
    [
        ("block_bytes", {"block_bytes": 2048}, "1024 (trace_id 'r1') and 2048 (trace_id 'r4')"),
        ("block_size_tokens", {"block_size_tokens": 2}, "4 (trace_id 'r1') and 2 (trace_id 'r4')"),
    ],
)
def test_mixed_block_sizes_rejected(field: str, replace: dict, values: str) -> None:
    rows = worked_rows()
    rows[3] = rows[3]._replace(**replace)
    with pytest.raises(CurveError) as info:
        build_curves(rows)
    assert str(info.value) == (
        f"instance 'gpu-0' has rows with different {field}: {values}; "
        "a curve needs one block size and one model per instance"
    )


def test_table_capacities_log_spaced() -> None:
    rows = random_rows(8)
    for curve in build_curves(rows):
        caps = table_capacities(curve)
        assert caps[0] == 1 and caps[-1] == curve.saturation
        assert caps == sorted(set(caps)) and len(caps) <= 30
    (worked,) = build_curves(worked_rows())
    assert table_capacities(worked) == [1, 2, 3, 4]


def test_plot_samples_exact_and_dense() -> None:
    (curve,) = build_curves(worked_rows())
    xs, ys = sample_curve(curve, 64.0, linear=False, samples=200)
    assert xs[0] == 1.0 and xs[-1] == 64.0
    for c in (1, 2, 3, 4):  # every breakpoint is drawn, at its exact value
        (i,) = [k for k, x in enumerate(xs) if x == c]
        assert ys[i] == curve.hit_rate_at(c)
    assert max(b / a for a, b in pairwise(xs)) <= 64 ** (1 / 199) * (1 + 1e-12)
    # between breakpoints the samples lie on the straight piece (in blocks)
    for x, y in zip(xs, ys, strict=True):
        lo = math.floor(x)
        want = curve.hit_tokens_at(lo) + (x - lo) * (
            curve.hit_tokens_at(lo + 1) - curve.hit_tokens_at(lo)
        )
        assert y == pytest.approx(want / 54, rel=1e-12)
    xs, ys = sample_curve(curve, 10.0, linear=True)
    assert list(xs) == [0, 1, 2, 3, 4, 10] and list(ys * 54) == pytest.approx(
        [0, 16, 28, 28, 32, 32]
    )


# ---------------------------------------------------------------- the command

WORKED_TABLE = """\
instance gpu-0: 5 requests, 54 input tokens, blocks of 4 tokens = 1024 bytes
theoretical max (infinite capacity): hit rate 0.592593 (32 hit tokens), \
first reached at 4 blocks = 3.8147e-06 GiB
  capacity_gib capacity_blocks  hit_rate  of_max  mark
   9.53674e-07               1  0.296296   50.0%
   1.90735e-06               2  0.518519   87.5%
   2.86102e-06               3  0.518519   87.5%
    3.8147e-06               4  0.592593  100.0%  90%, 95%, 99% of max; max
"""

WORKED_CSV = """\
instance_id,capacity_blocks,capacity_bytes,capacity_gb,hit_tokens,hit_rate
gpu-0,0,0,0.0,0,0.0
gpu-0,1,1024,9.5367431640625e-07,16,0.2962962962962963
gpu-0,2,2048,1.9073486328125e-06,28,0.5185185185185185
gpu-0,3,3072,2.86102294921875e-06,28,0.5185185185185185
gpu-0,4,4096,3.814697265625e-06,32,0.5925925925925926
"""


def test_cli_worked_example_png_csv_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    facts = write_facts(tmp_path / "litehit_facts.csv", worked_rows())
    png, csv_path = tmp_path / "curve.png", tmp_path / "curve.csv"
    code, out, err = run(capsys, str(facts), "-o", str(png), "--csv", str(csv_path))
    assert code == 0
    assert out == WORKED_TABLE
    assert csv_path.read_text() == WORKED_CSV
    assert png_size(png) == (1200, 720)
    assert png.stat().st_size > 10_000
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "curve.csv",
        "curve.png",
        "litehit_facts.csv",
    ]
    assert err.startswith("curve: 5 requests, 1 instances, ")
    assert err.endswith(f" requests/s -> {png}, {csv_path}\n") and err.count("\n") == 1


def test_cli_linear_axis(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    facts = write_facts(tmp_path / "f.csv", random_rows(9, n=300))
    log_png, lin_png = tmp_path / "log.png", tmp_path / "lin.png"
    assert run(capsys, str(facts), "-o", str(log_png))[0] == 0
    assert run(capsys, str(facts), "-o", str(lin_png), "--linear")[0] == 0
    assert png_size(lin_png) == png_size(log_png) == (1200, 720)
    assert lin_png.read_bytes() != log_png.read_bytes()


def test_cli_csv_matches_query_at_breakpoints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = random_rows(10, n=600)
    facts = write_facts(tmp_path / "f.csv", rows)
    csv_path = tmp_path / "curve.csv"
    code, out, _ = run(capsys, str(facts), "--no-png", "--csv", str(csv_path))
    assert code == 0
    with open(csv_path, newline="") as fh:
        records = list(csv.reader(fh))
    assert tuple(records[0]) == CSV_HEADER
    by_instance: dict[str, list[list[str]]] = {}
    for rec in records[1:]:
        by_instance.setdefault(rec[0], []).append(rec)
    assert list(by_instance) == ["a", "b", "c"]
    for iid, recs in by_instance.items():
        _, bb, _ = INSTANCES[iid]
        tokens = sum(r.input_token_len for r in rows if r.instance_id == iid)
        blocks = [int(r[1]) for r in recs]
        assert blocks[0] == 0 and blocks == sorted(set(blocks))
        for rec in recs:
            c, nbytes, gb = int(rec[1]), int(rec[2]), float(rec[3])
            hits, rate = int(rec[4]), float(rec[5])
            assert nbytes == c * bb and gb == c * bb / GIB
            assert hits == brute_hit_tokens(rows, iid, c)
            assert rate == hits / tokens
        # the same numbers from `litehit query` at each breakpoint's capacity in GiB
        gbs = [repr(float(r[3])) for r in recs]
        code = main(["query", str(facts), "--capacity-gib", *gbs, "--summary-only"])
        q_out = capsys.readouterr().out
        assert code == 0
        (summary,) = [s for s in map(json.loads, q_out.splitlines()) if s.get("instance_id") == iid]
        assert summary["total_hit_tokens"] == [int(r[4]) for r in recs]
    assert out.count("theoretical max") == 3
    assert not list(tmp_path.glob("*.png")) and not list(tmp_path.glob("*.tmp"))


def test_cli_instance_filter(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    facts = write_facts(tmp_path / "f.csv", random_rows(11, n=300))
    png, csv_path = tmp_path / "b.png", tmp_path / "b.csv"
    code, out, err = run(
        capsys, str(facts), "-o", str(png), "--csv", str(csv_path), "--instance", "b"
    )
    assert code == 0
    assert {line.split(",")[0] for line in csv_path.read_text().splitlines()[1:]} == {"b"}
    assert out.startswith("instance b: ") and out.count("instance ") == 1
    assert png.read_bytes()[:8] == PNG_SIGNATURE
    assert err.startswith("curve: 300 requests, 1 instances, ")


def test_cli_unknown_instance(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    facts = write_facts(tmp_path / "f.csv", random_rows(12, n=100))
    png, csv_path = tmp_path / "x.png", tmp_path / "x.csv"
    code, out, err = run(
        capsys, str(facts), "-o", str(png), "--csv", str(csv_path), "--instance", "nope"
    )
    assert code == 2
    assert out == ""
    assert err == (
        "litehit curve: error: instance_id 'nope' is not in the facts; "
        "instances present: 'a', 'b', 'c'\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.csv"]


def test_cli_mixed_block_bytes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = worked_rows()
    rows[4] = rows[4]._replace(block_bytes=4096)
    facts = write_facts(tmp_path / "f.csv", rows)
    code, _, err = run(capsys, str(facts), "-o", str(tmp_path / "c.png"))
    assert code == 2
    assert err == (
        "litehit curve: error: instance 'gpu-0' has rows with different block_bytes: "
        "1024 (trace_id 'r1') and 4096 (trace_id 'r5'); a curve needs one block size and "
        "one model per instance\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.csv"]


def test_cli_malformed_row_publishes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    facts = write_facts(tmp_path / "f.csv", worked_rows())
    lines = facts.read_text().splitlines(keepends=True)
    lines[5] = 'r5,gpu-0,5000,8,4,1024,"[[1,3]]"\n'  # 3 blocks of 4 tokens > 8 tokens
    facts.write_text("".join(lines))
    png, csv_path = tmp_path / "c.png", tmp_path / "c.csv"
    png.write_bytes(b"previous")
    code, out, err = run(capsys, str(facts), "-o", str(png), "--csv", str(csv_path))
    assert code == 2
    assert out == ""
    assert err == (f"{facts}:6: hit_curve covers 3 blocks of 4 tokens but input_token_len is 8\n")
    assert png.read_bytes() == b"previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.png", "f.csv"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "-o/--output CURVE.png is required (or pass --no-png)"),
        (["--no-png", "-o", "c.png"], "-o/--output and --no-png contradict each other; drop one"),
        (["--no-png", "--linear"], "--linear only affects the PNG, which --no-png skips"),
        (["-o", "same", "--csv", "same"], "-o and --csv must be different files"),
        (["-o", "f.csv"], "an output file is the facts file 'f.csv'"),
        (["--no-png", "--instance", ""], "--instance must not be empty"),
    ],
)
def test_cli_option_errors(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    message: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    write_facts(tmp_path / "f.csv", worked_rows())
    code, out, err = run(capsys, "f.csv", *argv)
    assert code == 2
    assert err == f"litehit curve: error: {message}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.csv"]


# ---------------------------------------------------------------- the Mooncake trace


@pytest.fixture(scope="module")
def mooncake_facts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    trace = mooncake_trace()
    engine = LiteHit()
    path = tmp_path_factory.mktemp("mooncake") / "litehit_facts.csv"
    with FactsWriter(path) as writer, open(trace, encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, 1):
            if not line.strip():
                continue
            rec = json.loads(line)
            n = rec["input_length"]
            fact = engine.process_request(rec["hash_ids"][: n // 512])
            ts = rec["timestamp"] * 1_000_000 + 1
            writer.write(
                FactRow(str(line_no), "mooncake", ts, n, 512, 512 * 131072, fact.hit_curve)
            )
    return path


def test_mooncake_reference_hit_rates(mooncake_facts: Path) -> None:
    (curve,) = build_curves(read_facts(mooncake_facts))
    got = [round(curve.hit_rate_at(c), 6) for c in (1708, 17089, 85449, -1)]
    assert got == [0.053172, 0.281799, 0.370017, 0.373380]
    for mark in curve.marks():
        target = -(-mark.percent * curve.infinite_hit_tokens // 100)
        assert curve.hit_tokens_at(mark.capacity) >= target
        assert curve.hit_tokens_at(mark.capacity - 1) < target


def test_mooncake_cli(
    mooncake_facts: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    png, csv_path = tmp_path / "curve.png", tmp_path / "curve.csv"
    code, out, err = run(capsys, str(mooncake_facts), "-o", str(png), "--csv", str(csv_path))
    assert code == 0
    assert png_size(png) == (1200, 720)
    assert "theoretical max (infinite capacity): hit rate 0.373380" in out
    assert err.startswith("curve: 12031 requests, 1 instances, ")
    with open(csv_path, newline="") as fh:
        last = list(csv.reader(fh))[-1]
    assert last[0] == "mooncake" and round(float(last[5]), 6) == 0.373380
