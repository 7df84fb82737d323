"""`litehit simulate` and `litehit sweep`: LMCache's report and sweep from one replay,
against a naive per-capacity simulation, on a checked-in LMCache log."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
from oracle import naive_report, tree_trace
from test_lmcache_reader import load_bench_trace

from litehit_service.cli import main
from litehit_service.lmcache.simulator.plot import report_figure, sweep_figure
from litehit_service.lmcache.simulator.simulate import (
    load_workload,
    replay_workload,
    report,
    sweep,
    sweep_capacities,
)

FIXTURE = Path(__file__).with_name("data") / "lookup_hashes_small.jsonl"
CHUNK, KV = 16, 2 * 16 * 8  # 16-token chunks of 256 bytes (bf16 shape [1, 16, 8])
GIB = 1024**3


def fixture_requests() -> list[tuple[float, list[int], int]]:
    """The checked-in log's requests: prefix-sharing conversations, 16-token chunks, a
    partial tail on most requests, timestamps not in file order for a few."""
    rng = random.Random(2026)
    out = []
    for i, keys in enumerate(tree_trace(rng, 400, max_new=9, min_new=1)):
        hashed = [(k * 0x9E3779B97F4A7C15) & (2**64 - 1) for k in keys]
        seq_len = CHUNK * len(keys) + rng.randrange(CHUNK)
        out.append((1_700_000_000.0 + i * 0.25 - (0.6 if i % 50 == 7 else 0), hashed, seq_len))
    return out


def write_fixture(path: Path) -> None:
    load_bench_trace().write_lmcache_log(path, fixture_requests(), CHUNK, "tiny-model", KV)


def test_the_checked_in_log_is_what_the_helper_writes(tmp_path: Path) -> None:
    write_fixture(tmp_path / "lookup_hashes_small.jsonl")
    assert (tmp_path / "lookup_hashes_small.jsonl").read_bytes() == FIXTURE.read_bytes()


def ordered_requests() -> list[tuple[list[int], int, int]]:
    """The fixture's requests as LMCache takes them: sorted by timestamp (stable), keys as
    signed int64 like LiteHit reads them."""
    reqs = sorted(fixture_requests(), key=lambda r: r[0])
    return [([k - 2**64 if k >= 2**63 else k for k in keys], n, CHUNK) for _, keys, n in reqs]


@pytest.mark.parametrize("order", ["head-first", "tail-first"])
@pytest.mark.parametrize("chunks", [1, 3, 8, 25, 90, 400, 10**6])
def test_report_equals_a_naive_simulation(order: str, chunks: int) -> None:
    replay = replay_workload(load_workload([FIXTURE]), order)
    data = report(replay, chunks * KV + KV // 2)  # bytes round down to whole chunks
    want = naive_report(ordered_requests(), chunks, order)
    a = data["aggregate"]
    assert a["cache_capacity_chunks"] == chunks
    assert (a["hit_tokens"], a["total_tokens"]) == (want["hit_tokens"], want["total_tokens"])
    assert a["token_hit_rate"] == want["hit_tokens"] / want["total_tokens"]
    assert (a["evictions"], a["cache_occupancy_chunks"]) == (want["evictions"], want["occupancy"])
    rates = want["rates"]
    r = data["per_request_hit_rate"]
    assert r["mean"] == sum(rates) / len(rates)
    assert r["zero_hit_requests"] == sum(1 for x in rates if x == 0.0)
    assert r["full_hit_requests"] == sum(1 for x in rates if x == 1.0)
    assert [r[f"p{p}"] for p in (25, 50, 75, 90, 99)] == nearest_ranks(rates)
    for name, values in (
        ("hit_prefix_chunks", want["prefixes"]),
        ("chunk_reuse", want["reuse"]),
        ("global_span_chunks", want["spans"]),
        ("cache_position", want["positions"]),
    ):
        got = data[name]
        assert got["count"] == len(values), name
        if values:
            assert got["mean"] == sum(values) / len(values), name
            assert got["max"] == max(values), name
            assert [got[f"p{p}"] for p in (25, 50, 75, 90, 99)] == nearest_ranks(values), name
    n = len(rates)
    assert [row["hit_rate"] for row in data["rolling_hit_rate"]] == [
        want["rolling"][max(0, min(int(n * f) - 1, n - 1))] for f in (0.1, 0.25, 0.5, 0.75, 1.0)
    ]


def nearest_ranks(values: list) -> list:
    s = sorted(values)
    return [s[min(max(math.ceil(p * len(s) / 100), 1), len(s)) - 1] for p in (25, 50, 75, 90, 99)]


def test_orders_differ_where_the_issue_says() -> None:
    head = replay_workload(load_workload([FIXTURE]), "head-first")
    tail = replay_workload(load_workload([FIXTURE]), "tail-first")
    at = {c: (report(head, c * KV), report(tail, c * KV)) for c in (2, 10**6)}
    small_head, small_tail = at[2]
    assert small_head["aggregate"]["hit_tokens"] < small_tail["aggregate"]["hit_tokens"]
    big_head, big_tail = at[10**6]
    assert big_head["aggregate"]["hit_tokens"] == big_tail["aggregate"]["hit_tokens"]


def test_sweep_points_are_lmcache_spaced_and_exact() -> None:
    low, high = 0.4 * KV / GIB, 600 * KV / GIB
    caps = sweep_capacities(low, high, 30)
    lo, hi = math.log10(low * GIB), math.log10(high * GIB)
    assert caps == sorted({round(10 ** (lo + i * (hi - lo) / 29)) for i in range(30)})
    replay = replay_workload(load_workload([FIXTURE]), "head-first")
    data = sweep(replay, caps)
    for point in data["points"]:
        chunks = point["capacity_bytes"] // KV
        want = naive_report(ordered_requests(), chunks, "head-first") if chunks else None
        hits = want["hit_tokens"] if want else 0  # 0 chunks: no hits (LMCache rounds up to 1)
        assert (point["capacity_chunks"], point["hit_tokens"]) == (chunks, hits)
        assert point["hit_rate"] == hits / data["total_tokens"]


def test_simulate_cli_json_and_figure(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    png = tmp_path / "stats.png"
    code = main(["simulate", "-i", str(FIXTURE.parent), "--capacity-gib", repr(25 * KV / GIB),
                 "--touch-order", "head-first", "--json", "-o", str(png)])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    data = json.loads(out)
    want = naive_report(ordered_requests(), 25, "head-first")
    assert data["aggregate"]["hit_tokens"] == want["hit_tokens"]
    assert data["aggregate"]["evictions"] == want["evictions"]
    assert data["input"] == {
        "sources": [str(FIXTURE.parent)],
        "format": "lmcache",
        "model": None,
        "chunk_size": CHUNK,
        "kv_bytes_per_chunk": KV,
        "kv_bytes_detected": True,
        "touch_order": "head-first",
    }
    curve = data["curve"]
    assert curve["theoretical_hit_tokens"] == naive_report(ordered_requests(), 10**9)["hit_tokens"]
    assert [m["percent"] for m in curve["marks"]] == [90, 95, 99]
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert err.startswith("simulate: 400 requests, 1 cache, ")
    code = main(["simulate", "-i", str(FIXTURE), "--capacity-gib", "1", "--no-plot"])
    text = capsys.readouterr().out
    assert code == 0 and "Stat 7 — Cache position at hit (0 = MRU, max = LRU)" in text
    assert "Every capacity, exactly (one replay, tail-first)" in text


def test_figures_have_the_panels():
    replay = replay_workload(load_workload([FIXTURE]), "head-first")
    data = report(replay, 25 * KV)
    fig = report_figure(replay, data)
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == [
        "1. Per-request token hit rate",
        "1b. Per-request token hit rate (97–100%)",
        "2. Hit prefix length per request",
        "3. Chunk reuse count",
        "4. Rolling token hit rate over time",
        "5. Input length per request",
        "6. Global span distribution",
        "7. Cache position at hit",
        "8. Exact token hit rate at every capacity (one replay)",
    ]
    # the shares of hit requests and tokens in a box, not pies drawn over the bars
    (box,) = [t.get_text() for t in fig.axes[0].texts]
    hit_requests = np.count_nonzero(replay.hit_prefix(data["aggregate"]["cache_capacity_chunks"]))
    a = data["aggregate"]
    assert box == (
        f"hit at all: {hit_requests / a['requests']:.0%} of requests\n"
        f"hit tokens: {a['hit_tokens'] / (a['hit_tokens'] + a['miss_tokens']):.0%} of tokens"
    )
    assert fig.axes[0].child_axes == []
    # no request reaches 97 % here: 1b says so instead of drawing an empty -0.04..0.04 axis
    assert fig.axes[1].get_xlim() == (97, 100) and fig.axes[1].get_ylim() == (0, 1)
    assert fig.axes[1].texts[0].get_text().startswith("no request reaches a 97% hit rate")
    curve_ax = fig.axes[8]
    assert curve_ax.get_xscale() == "log"
    swept = sweep(replay, sweep_capacities(1 * KV / GIB, 500 * KV / GIB, 12))
    (ax,) = sweep_figure(replay, swept).axes
    line, marks, _ = ax.get_lines()
    assert len(marks.get_xdata()) == 12
    assert ax.get_legend() is None and len(ax.figure.legends) == 1  # outside the axes
    assert np.allclose(marks.get_ydata(), [p["hit_rate"] * 100 for p in swept["points"]])
    linear = sweep_figure(replay, swept, linear=True).axes[0]
    assert linear.get_xscale() == "linear"


def test_sweep_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    svg = tmp_path / "sweep.svg"
    code = main(["sweep", "-i", str(FIXTURE), "--min-capacity-gib", repr(2 * KV / GIB),
                 "--max-capacity-gib", repr(300 * KV / GIB), "--points", "7",
                 "--touch-order", "head-first", "-o", str(svg)])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = out.splitlines()
    table = lines[lines.index(f"{'Capacity (GiB)':>18}  {'Hit rate':>10}") + 2 :][:7]
    assert len(table) == 7 and all(line.strip().endswith("%") for line in table)
    assert "<svg" in svg.read_text()
    code = main(["sweep", "-i", str(FIXTURE), "--points", "5", "--json", "--no-plot"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and len(data["points"]) == 5
    assert data["input"]["touch_order"] == "tail-first"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["simulate", "--capacity-gib", "-5"], "--capacity-gib must be -1 (infinite) "
                                                     "or a finite number of GiB in [0, "),
        (["simulate", "--capacity-gib", "-5"], "got -5.0"),
        (["simulate", "--capacity-gib", "nan"], "got nan"),
        (["simulate", "--capacity-gib", "inf"], "got inf"),
        (["simulate", "--capacity-gib", "1e30"], "got 1e+30"),
        (["simulate", "--capacity-gib", "1", "-o", "x.bmp"],
         "-o/--output 'x.bmp' has extension '.bmp'; the plot format follows it: .png, .svg"),
        (["sweep", "-o", "x"], "-o/--output 'x' has no extension"),
        (["sweep", "--max-capacity-gib", "1e30"], "--max-capacity-gib must be at most"),
        (["simulate", "--capacity-gib", "1", "-n", "-3"], "-n/--max-samples must be >= 0"),
        (["simulate", "--capacity-gib", "1", "--instance", "nope", "--no-plot"], "nope"),
        (["sweep", "--min-capacity-gib", "0"], "--min-capacity-gib must be finite and > 0"),
        (["sweep", "--min-capacity-gib", "9", "--max-capacity-gib", "2"], "must not be below"),
        (["sweep", "--points", "0"], "--points must be >= 1, got 0"),
        (["sweep", "--trace-format", "mooncake", "--no-plot"], "--kv-bytes-per-chunk is required"),
    ],
)  # fmt: skip
def test_bad_options_are_usage_errors(argv, message, tmp_path, capsys):
    code = main([*argv[:1], "-i", str(FIXTURE), *argv[1:]])
    err = capsys.readouterr().err
    assert code == 2 and message in err
    assert not list(tmp_path.iterdir())


def test_mooncake_and_standard_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """Any trace format through the same report: a standard trace of the fixture's
    requests gives the LMCache log's numbers."""
    events = [
        {"type": "get", "instance_id": "tiny-model", "timestamp_ns": int(ts * 1e9), "keys":
         [k - 2**64 if k >= 2**63 else k for k in keys], "input_len": n}
        for ts, keys, n in fixture_requests()
    ]  # fmt: skip
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps(e) + "\n" for e in events))
    args = ["--capacity-gib", repr(25 * KV / GIB), "--json", "--no-plot", "--touch-order",
            "head-first"]  # fmt: skip
    assert main(["simulate", "-i", str(FIXTURE), *args]) == 0
    from_log = json.loads(capsys.readouterr().out)
    assert main(["simulate", "-i", str(trace), "--trace-format", "standard", "--block-size",
                 str(CHUNK), "--kv-bytes-per-chunk", str(KV), *args]) == 0  # fmt: skip
    from_standard = json.loads(capsys.readouterr().out)
    for key in ("aggregate", "per_request_hit_rate", "chunk_reuse", "cache_position", "curve"):
        assert from_standard[key] == from_log[key], key
