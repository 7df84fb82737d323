"""Compressed traces (gzip, zstd) read transparently by every reading command, with the
same results as the plain file, byte for byte; a corrupt stream is a located error
(exit 2, nothing written). Told by the first bytes, not the name."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest
import zstandard
from conftest import lru_instance, write_replay_config

from litehit_service.cli import main
from litehit_service.traces.readers.compressed import container_of, plain_size

DATA = Path(__file__).resolve().parent / "data"


def standard_trace(path: Path, seed: int = 5, n: int = 400) -> Path:
    """Seeded standard records of two instances sharing prefixes: gets and writes."""
    rng = random.Random(seed)
    lines = []
    for i in range(n):
        inst = rng.choice(["a", "b"])
        keys = [100 * rng.randrange(3) + k for k in range(rng.randint(1, 6))]
        kind = rng.choice(["get", "get", "write"])
        record = {"type": kind, "instance_id": inst, "timestamp_ns": 1000 * (i + 1),
                  "keys": keys, "input_len": 4 * len(keys) + rng.randrange(4)}  # fmt: skip
        if kind == "write":
            del record["input_len"]
        lines.append(json.dumps(record))
    path.write_text("\n".join(lines) + "\n")
    return path


def compressed_copies(plain: Path) -> dict[str, Path]:
    """The same bytes gzip'd and zstd'd, each also under a plain ``.jsonl`` name."""
    data = plain.read_bytes()
    out = {"plain": plain}
    for name, packed in (("gzip", gzip.compress(data)),
                         ("zstd", zstandard.ZstdCompressor().compress(data))):  # fmt: skip
        path = plain.with_name(f"{plain.stem}.{name}.jsonl")  # the name says nothing
        path.write_bytes(packed)
        out[name] = path
    return out


def test_compression_is_told_by_the_first_bytes(tmp_path: Path) -> None:
    copies = compressed_copies(standard_trace(tmp_path / "t.jsonl"))
    assert {k: container_of(p) for k, p in copies.items()} == {
        "plain": None, "gzip": "gzip", "zstd": "zstd",
    }  # fmt: skip
    assert plain_size(copies["plain"]) == copies["plain"].stat().st_size
    assert plain_size(copies["gzip"]) is None  # a progress bar without a total


def test_optimize_reads_compressed_traces_with_identical_files(tmp_path: Path) -> None:
    """Catches a gzip'd trace failing ("not valid UTF-8") or read differently."""
    copies = compressed_copies(standard_trace(tmp_path / "t.jsonl"))
    outputs = {}
    for kind, trace in copies.items():
        config = tmp_path / f"{kind}.json"
        config.write_text(json.dumps({
            "trace_file_path": str(trace), "output_result_path": str(tmp_path / kind),
            "eviction_params": {"eviction_mode": 1, "eviction_batch_size_per_instance": 2},
            "instance_groups": [{"group_name": "g", "quota_capacity": 0.0001,
                                 "instances": [{"instance_id": i, "block_size": 4,
                                                "bytes_per_token": 64,
                                                "eviction_policy_type": "lru"}
                                               for i in "ab"]}],
        }))  # fmt: skip
        assert main(["optimize", str(config), "--max-workers", "1"]) == 0
        outputs[kind] = {p.name: p.read_bytes() for p in (tmp_path / kind).iterdir()}
    assert outputs["plain"] and outputs["gzip"] == outputs["plain"] == outputs["zstd"]


def test_replay_and_convert_read_compressed_traces(tmp_path: Path) -> None:
    copies = compressed_copies(standard_trace(tmp_path / "t.jsonl"))
    ledgers, converted = {}, {}
    for kind, trace in copies.items():
        config = write_replay_config(
            tmp_path / f"{kind}.json", trace, output=tmp_path / f"r-{kind}",
            instances=[lru_instance(i) for i in "ab"],
        )  # fmt: skip
        assert main(["replay", str(config), "--quiet"]) == 0
        ledgers[kind] = (tmp_path / f"r-{kind}" / "litehit_facts.csv").read_bytes()
        out = tmp_path / f"c-{kind}.jsonl"
        assert main(["convert", str(trace), "-o", str(out)]) == 0
        converted[kind] = out.read_bytes()
    assert ledgers["plain"].count(b"\n") > 200
    assert ledgers["gzip"] == ledgers["plain"] == ledgers["zstd"]
    assert converted["gzip"] == converted["plain"] == converted["zstd"]


def test_simulate_and_converted_logs_read_compressed_inputs(tmp_path: Path, capsys) -> None:
    reports = {}
    plain = tmp_path / "l.jsonl"
    plain.write_bytes((DATA / "lookup_hashes_small.jsonl").read_bytes())
    for kind, log in compressed_copies(plain).items():
        assert main(["simulate", "-i", str(log), "--capacity-gib", "0.0001", "--no-plot",
                     "--json"]) == 0  # fmt: skip
        report = json.loads(capsys.readouterr().out)
        report["input"].pop("sources")
        reports[kind] = report
    assert reports["gzip"] == reports["plain"] == reports["zstd"]
    logs = tmp_path / "pub"
    logs.mkdir()
    for f in (DATA / "publisher_log").iterdir():
        (logs / f.name).write_bytes(gzip.compress(f.read_bytes()))
    out = tmp_path / "pub.jsonl"
    args = ["convert", "--from", "publisher-log", "-o", str(out), "--block-size", "16",
            "--instance-map", str(DATA / "publisher_log_map.json")]  # fmt: skip
    assert main([*args, str(DATA / "publisher_log")]) == 0
    plain = out.read_bytes()
    assert main([*args, str(logs)]) == 0
    assert out.read_bytes() == plain


@pytest.mark.parametrize("damage", ["truncated", "garbled"])
@pytest.mark.parametrize("kind", ["gzip", "zstd"])
def test_a_corrupt_stream_is_a_located_error_and_writes_nothing(
    tmp_path: Path, capsys, kind: str, damage: str
) -> None:
    """Catches a traceback (exit 1) for a truncated download or flipped bytes, or a
    partial output."""
    trace = compressed_copies(standard_trace(tmp_path / "t.jsonl"))[kind]
    data = trace.read_bytes()
    if damage == "truncated":
        trace.write_bytes(data[: len(data) // 2])
    else:
        trace.write_bytes(data[:12] + bytes(b ^ 0xFF for b in data[12:40]) + data[40:])
    out = tmp_path / "out.jsonl"
    assert main(["convert", "--from", "standard", str(trace), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"{trace}:0: not a valid {kind} stream: "), err
    assert not out.exists()


def test_gen_dataset_refuses_a_compressed_input_saying_why(tmp_path: Path, capsys) -> None:
    log = tmp_path / "l.jsonl.gz"
    log.write_bytes(gzip.compress((DATA / "lookup_hashes_small.jsonl").read_bytes()))
    code = main(["gen-dataset", "-i", str(log), "--tokenizer", str(DATA / "tokenizer"),
                 "-o", str(tmp_path / "d.jsonl")])  # fmt: skip
    assert code == 2
    assert capsys.readouterr().err == (
        f"{log}:0: a gzip file: gen-dataset reads its inputs twice (an index, then each line "
        "again in time order); give it plain JSONL\n"
    )
