"""``litehit tradeoff`` streamed (:mod:`litehit_service.optimizer.tradeoff.stream`): with
the trace read in many tiny batches by every task, the files and the summary (text and
JSON) equal, byte for byte, those of the decoded run -- several instances and policies,
shared groups, masks, TTLs, a §7b configuration (LiteHit's exact curve) and the two ways
the trace's facts refuse §7b (a key under two parents, a masked block); forked workers and
inline; the mode rule (``PLAN_BYTES``, not under Ray); a bad record late in the trace and a
record beyond the reorder window write nothing; the streamed prefix check equals the
whole-trace one; and a streamed run's peak RSS does not follow the trace's length (a
subprocess, ``wait4``)."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import numpy as np
import pytest

from litehit_core.prefix_hash import PrefixCheck, keys_name_their_prefix
from litehit_service.cli import main
from litehit_service.offline import outputs
from tests.test_optimize_parallel import files, group, inst, seeded_records, write_config

_COLUMNS = "litehit_service.traces.readers.columns"
_SECONDS = re.compile(r"\d+\.\d+ s\b")
_JSON_SECONDS = re.compile(r'("seconds": )[0-9.e+-]+')


def mixed_records(seed: int, n: int, ids: str) -> list[dict]:
    """Get/write/request records over shared prefixes (several at one timestamp), block
    masks on some reads, TTLs on some writes."""
    return seeded_records(seed, n, ids, masks=True)


def chained_requests(seed: int, n: int, ids: str) -> list[dict]:
    """Requests only, keys prefix-chained (one id per distinct path): spec §7b's input."""
    rng = random.Random(seed)
    paths: dict[tuple[int, ...], int] = {}
    out = []
    for t in range(1, n + 1):
        tokens = [-rng.randrange(6)] + [rng.randrange(30) for _ in range(rng.randint(0, 5))]
        keys = [
            paths.setdefault(tuple(tokens[: j + 1]), len(paths) + 1) for j in range(len(tokens))
        ]
        out.append({"type": "request", "instance_id": rng.choice(ids), "timestamp_ns": 10 * t,
                    "keys": keys, "input_len": 16 * len(keys) + 3})  # fmt: skip
    return out


def mixed_case(tmp: Path) -> Path:
    """LRU + RandomLRU sharing a quota, a TTL group, a leaf-aware one; mode 2."""
    groups = [
        group("shared", 14, inst("a", "lru"), inst("b", "random_lru", sample_rate=0.5)),
        group("ttl", 10, inst("c", "ttl"), default_block_ttl_seconds=2e-7),
        group("leaf", 8, inst("d", "leaf_aware_lru")),
    ]
    return write_config(tmp, groups, mixed_records(11, 700, "abcd"), mode=2)


def exact_case(tmp: Path, records: list[dict]) -> Path:
    """Spec §7b's configuration: ``lru``, mode 3, no delay, one instance per group."""
    groups = [group("g1", 20, inst("a", "lru")), group("g2", 30, inst("c", "lru"))]
    return write_config(tmp, groups, records, mode=3)


def run(path: Path, out: Path, *flags: str) -> tuple[int, dict[str, bytes], str]:
    """``litehit tradeoff`` in this process: exit code, every file written, stdout with
    the seconds blanked."""
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(["tradeoff", str(path), "-o", str(out), *flags])
    written = files(out) if out.exists() else {}
    text = _JSON_SECONDS.sub(r"\g<1>0", _SECONDS.sub("S s", buf.getvalue()))
    text = text.replace(str(out), "OUT")
    return code, {n: b for n, b in written.items() if not n.endswith(".png")}, text


def both_modes(monkeypatch, path: Path, tmp: Path, chunk: int, *flags: str):
    """The decoded run's and the streamed run's (``chunk``-byte JSON chunks) results."""
    monkeypatch.setattr(outputs, "PLAN_BYTES", 1 << 60)  # decoded
    decoded = run(path, tmp / "decoded", *flags)
    monkeypatch.setattr(outputs, "PLAN_BYTES", 0)  # streamed
    monkeypatch.setattr(f"{_COLUMNS}.CHUNK_BYTES", chunk)
    streamed = run(path, tmp / "streamed", *flags)
    return decoded, streamed


@pytest.mark.parametrize("workers", ["1", "2"])
def test_streamed_replays_give_the_decoded_files_and_summary(tmp_path, monkeypatch,
                                                             workers) -> None:  # fmt: skip
    """Catches a streamed replay that loses local/remote hits (masks), restarts its totals
    per batch, drops a TTL bucket or a policy's own configuration, or answers another
    capacity: four instances (a shared group, TTLs, masks), three policies, every curve
    type, batches of ~5 records, inline and in forked workers."""
    path = mixed_case(tmp_path)
    flags = ["--eviction-policies", "lru", "ttl", "leaf_aware_lru", "--num-points", "8",
             "--hit-rate-type", "all", "--max-workers", workers]  # fmt: skip
    (code, want, text), (code2, got, text2) = both_modes(monkeypatch, path, tmp_path, 500,
                                                         *flags)  # fmt: skip
    assert code == code2 == 0
    assert got == want and len(want) > 20
    if workers == "1":  # in parallel the replays discarded above the stop vary by timing
        assert text2 == text
    summary = want["pareto/pareto_curve_local.csv"].decode()
    assert {line.split(",")[0] for line in summary.splitlines()[1:]} == {
        "lru", "ttl", "leaf_aware_lru"}  # fmt: skip
    points = [v.decode() for n, v in want.items() if n.startswith("pareto/csv_results/")]
    assert any(p.splitlines()[1].split(",")[10] != "0" for p in points)  # masks were read


def test_streamed_json_summary_equals_the_decoded(tmp_path, monkeypatch) -> None:
    """Catches a field of the JSON summary (marks, weights, peak, stop) that differs."""
    path = mixed_case(tmp_path)
    flags = ["--num-points", "6", "--max-workers", "1", "--json"]
    (_, want, text), (_, got, text2) = both_modes(monkeypatch, path, tmp_path, 500, *flags)
    assert got == want and text2 == text
    assert json.loads(text)["policies"][0]["points"]  # one whole object


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_7b_configuration_reads_the_streamed_exact_curve(tmp_path, monkeypatch,
                                                            workers) -> None:  # fmt: skip
    """Catches streamed facts that miss §7b (points replayed instead of read from
    LiteHit's curve) or streamed exact curves that differ from the decoded ones (an
    instance's engine fed another's reads, a read out of time order)."""
    path = exact_case(tmp_path, chained_requests(3, 900, "ac"))
    flags = ["--num-points", "10", "--max-workers", workers]
    (_, want, text), (_, got, text2) = both_modes(monkeypatch, path, tmp_path, 200, *flags)
    assert got == want and text2 == text
    assert "exact" in want["pareto/pareto_curve_total.csv"].decode()


@pytest.mark.parametrize("spoil", ["two_parents", "mask"])
def test_facts_that_refuse_7b_are_the_decoded_ones(tmp_path, monkeypatch, spoil) -> None:
    """Catches a streamed prefix check that misses a key under two parents when the two
    uses fall in different batches, or a mask not counted: late in the trace, after many
    batches, the §7b configuration loses its exact curve in both modes alike."""
    records = chained_requests(4, 900, "ac")
    late = records[850]
    if spoil == "two_parents":  # an early record's second key, late under another parent
        first = records[0]["keys"][0]
        early = next(r["keys"] for r in records if len(r["keys"]) > 1 and r["keys"][0] != first)
        late["keys"] = [first, early[1]]
        late["input_len"] = 16 * 2
    else:
        late["block_mask"] = [True] + [False] * (len(late["keys"]) - 1)
    path = exact_case(tmp_path, records)
    flags = ["--num-points", "6", "--max-workers", "1"]
    (_, want, text), (_, got, text2) = both_modes(monkeypatch, path, tmp_path, 700, *flags)
    assert got == want and text2 == text
    assert "exact" not in want["pareto/pareto_curve_total.csv"].decode().split("\n", 2)[1]


def test_the_mode_follows_the_trace_size_and_not_ray(tmp_path, monkeypatch) -> None:
    """Catches a large trace decoded whole (or a small one streamed): at PLAN_BYTES of
    JSONL the command reads no decoded trace; one byte below it does."""
    import argparse

    from litehit_service.commands.tradeoff import streams
    from litehit_service.optimizer.optimize.config import load_optimize_config

    path = exact_case(tmp_path, chained_requests(5, 50, "ac"))
    config = load_optimize_config(path)
    size = (tmp_path / "trace.jsonl").stat().st_size
    local, ray = argparse.Namespace(executor="local"), argparse.Namespace(executor="ray")
    monkeypatch.setattr(outputs, "PLAN_BYTES", size)
    assert streams(local, config) and not streams(ray, config)
    monkeypatch.setattr(outputs, "PLAN_BYTES", size + 1)
    assert not streams(local, config)
    # and the command honours it: streamed, no decoded trace is loaded
    monkeypatch.setattr(outputs, "PLAN_BYTES", size)

    def no_load(*args, **kwargs):
        raise AssertionError("the trace was decoded whole")

    monkeypatch.setattr("litehit_service.optimizer.optimize.trace.load_trace", no_load)
    assert run(path, tmp_path / "o", "--num-points", "3", "--max-workers", "1")[0] == 0


def test_a_bad_record_late_in_the_trace_writes_nothing(tmp_path, monkeypatch, capsys) -> None:
    """Catches files published (or a worker's error lost) when a streamed task meets a bad
    record after many batches: exit 2, ``file:line: field``, the old folder untouched."""
    records = mixed_records(12, 600, "abcd")
    bad = next(i for i in range(560, 600) if records[i]["type"] != "write")
    records[bad]["input_len"] = 1
    path = write_config(tmp_path, [group("g", 10, inst("a", "lru"), inst("b", "lru"),
                                         inst("c", "lru"), inst("d", "lru"))], records)  # fmt: skip
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("old")
    monkeypatch.setattr(outputs, "PLAN_BYTES", 0)
    monkeypatch.setattr(f"{_COLUMNS}.CHUNK_BYTES", 400)
    for workers in ("1", "2"):
        assert main(["tradeoff", str(path), "--num-points", "3", "--max-workers", workers]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"{tmp_path / 'trace.jsonl'}:{bad + 1}: keys: "), err
        assert sorted(p.name for p in out.rglob("*")) == ["keep.txt"]


def test_a_record_beyond_the_reorder_window_is_refused(tmp_path, monkeypatch, capsys) -> None:
    """Catches a streamed replay that takes a record out of time order silently: beyond
    ``--reorder-window-ms`` it is named; within it the run equals the sorted trace's."""
    records = [{"type": "request", "instance_id": "a", "timestamp_ns": 1_000_000 * (i + 10),
                "keys": [i % 3, 1000 + i], "input_len": 40} for i in range(300)]  # fmt: skip
    records[200]["timestamp_ns"] = records[199]["timestamp_ns"] - 5_000_000
    path = write_config(tmp_path, [group("g", 4, inst("a", "leaf_aware_lru"))], records)
    monkeypatch.setattr(outputs, "PLAN_BYTES", 0)
    monkeypatch.setattr(f"{_COLUMNS}.CHUNK_BYTES", 2000)
    code = main(["tradeoff", str(path), "--num-points", "3", "--max-workers", "1",
                 "--reorder-window-ms", "1"])  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert f"trace.jsonl:201: timestamp_ns: timestamp_ns {records[200]['timestamp_ns']}" in err
    assert not (tmp_path / "out").exists()
    flags = ["--num-points", "3", "--max-workers", "1"]
    (_, want, _), (code, got, _) = both_modes(monkeypatch, path, tmp_path, 2000, *flags)
    assert code == 0 and got == want  # the default 1 s window sorts it as decoding does


def test_the_streamed_prefix_check_is_the_whole_traces() -> None:
    """Catches a key whose two parents sit in different batches, a request's first key not
    taken as a start after a batch boundary, and runs merged without their conflicts:
    random requests (half prefix-chained) split at random, against the whole-trace check."""
    rng = random.Random(1)
    seen = set()
    for trial in range(400):
        reqs = [[rng.randrange(12) for _ in range(rng.randint(0, 5))]
                for _ in range(rng.randint(0, 60))]  # fmt: skip
        if trial % 3:
            ids: dict[tuple[int, ...], int] = {}
            reqs = [[ids.setdefault(tuple(r[: j + 1]), len(ids) + 1) for j in range(len(r))]
                    for r in reqs]  # fmt: skip
        if trial % 3 == 2 and any(len(r) > 1 for r in reqs):  # one key late, another parent
            key = next(r[1] for r in reqs if len(r) > 1)
            reqs.append([rng.choice([99, key - 1, key + 1]), key])
        keys = np.array([k for r in reqs for k in r], np.int64)
        off = np.r_[0, np.cumsum([len(r) for r in reqs])].astype(np.int64)
        want = keys_name_their_prefix(keys, off)
        check, i = PrefixCheck(), 0
        while i < len(reqs):
            n = rng.randint(1, 7)
            part, i = reqs[i : i + n], i + n
            k = np.array([x for r in part for x in r], np.int64)
            check.add(k, np.r_[0, np.cumsum([len(r) for r in part])].astype(np.int64))
        assert check.finish() == want, (trial, reqs)
        seen.add(want)
    assert seen == {True, False}


_STREAMED = (
    "import sys\n"
    "from litehit_service.offline import outputs\n"
    "outputs.PLAN_BYTES = 0\n"
    "from litehit_service.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)
"""A launcher of the CLI with the size threshold at 0: every trace streams."""


def _reused_path_trace(path: Path, requests: int, keys_per: int) -> None:
    """``requests`` requests over 50 paths of ``keys_per`` keys (2,500 distinct blocks
    whatever the length: the caches stay small while the trace grows)."""
    with open(path, "w") as fh:
        for i in range(0, requests, 10_000):
            fh.write("".join(
                f'{{"type":"request","instance_id":"a","timestamp_ns":{1000 + j},"keys":['
                f'{",".join(str((j % 50) * 1000 + k) for k in range(keys_per))}],'
                f'"input_len":{16 * keys_per}}}\n'
                for j in range(i, min(i + 10_000, requests))
            ))  # fmt: skip


def _peak_mib(tmp: Path, requests: int) -> float:
    import os

    from tests.test_lmcache_reader import load_bench_trace

    trace = tmp / f"t{requests}.jsonl"
    _reused_path_trace(trace, requests, 40)
    config = write_config(tmp, [group("g", 500, inst("a", "lru"))], [])  # §7b: facts too
    data = json.loads(config.read_text())
    data["trace_file_path"] = str(trace)
    config.write_text(json.dumps(data))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    argv = ["tradeoff", str(config), "-o", str(tmp / f"o{requests}"), "--num-points", "2",
            "--max-workers", "1"]  # fmt: skip
    _, peak, done = load_bench_trace().peak_run(argv, env=env, timeout=600,
                                                launcher=("-c", _STREAMED))  # fmt: skip
    assert done.returncode == 0, done.stderr
    return peak / 2**20


def test_streamed_peak_memory_follows_the_cache_not_the_trace(tmp_path) -> None:
    """Catches a streamed task that holds the trace (its batches kept, or the whole trace
    decoded anyway): 120,000 then 360,000 requests of 40 keys over 50 paths (4.8 M then
    14.4 M keys; ~150 MB of JSON), the warm-up, the §7b facts and LiteHit's two passes in
    this one process. Measured (2026-12-05): decoded 550 -> 1090 MiB; streamed 370 -> 389
    MiB, where ``optimize`` streaming the same two traces grows 361 -> 375 MiB (the JSON
    reader's and the allocator's, not this command's); so at most 40 MiB."""
    small = _peak_mib(tmp_path, 120_000)
    large = _peak_mib(tmp_path, 360_000)
    assert large - small < 40, (small, large)
