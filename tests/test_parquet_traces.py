"""Parquet traces (``litehit_service.traces.readers.parquet``): ``convert -o x.parquet``
writes the standard schema, and every reading command gives from it exactly what it gives
from the JSONL it came from; a bad value is the same located error (``path:row``), nothing
written."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import lru_instance, write_replay_config

from litehit_service.cli import main
from litehit_service.traces.readers.compressed import container_of
from litehit_service.traces.readers.parquet import COLUMNS, schema

DATA = Path(__file__).resolve().parent / "data"


def rich_trace(path: Path, seed: int = 11, n: int = 600) -> Path:
    """Seeded standard records of every kind: gets with integer and list masks, requests,
    writes with TTLs, two instances sharing prefixes, trace ids and none."""
    rng = random.Random(seed)
    lines = []
    for i in range(n):
        keys = [100 * rng.randrange(3) + k for k in range(rng.randint(1, 6))]
        kind = rng.choice(["get", "get", "request", "write"])
        record: dict = {"type": kind, "instance_id": rng.choice("ab"),
                        "timestamp_ns": 1000 * (i + 1), "keys": keys}  # fmt: skip
        if rng.random() < 0.7:
            record["trace_id"] = f"r{i}"
        if kind != "write":
            record["input_len"] = 4 * len(keys) + rng.randrange(4)
        if kind == "get" and rng.random() < 0.3:
            record["block_mask"] = (rng.randrange(len(keys) + 1) if rng.random() < 0.5
                                    else [rng.random() < 0.5 for _ in keys])  # fmt: skip
        if kind != "get" and rng.random() < 0.3:
            record["ttl_us"] = rng.choice([-1, 0, 5, 50_000])
        lines.append(json.dumps(record))
    path.write_text("\n".join(lines) + "\n")
    return path


def as_parquet(trace: Path) -> Path:
    out = trace.with_suffix(".parquet")
    assert main(["convert", str(trace), "-o", str(out)]) == 0
    return out


def optimizer_config(path: Path, trace: Path, out: Path) -> Path:
    path.write_text(json.dumps({
        "trace_file_path": str(trace), "output_result_path": str(out),
        "eviction_params": {"eviction_mode": 3, "eviction_batch_size_per_instance": 2},
        "instance_groups": [{"group_name": "g", "quota_capacity": 0.0002,
                             "default_block_ttl_seconds": 1,
                             "instances": [{"instance_id": i, "block_size": 4,
                                            "bytes_per_token": 64,
                                            "eviction_policy_type": p}
                                           for i, p in (("a", "lru"), ("b", "ttl"))]}],
    }))  # fmt: skip
    return path


def test_convert_writes_the_documented_schema_in_row_groups(tmp_path: Path) -> None:
    """Catches a column of another type or order, or masks not as list<bool>."""
    parquet = as_parquet(rich_trace(tmp_path / "t.jsonl"))
    assert container_of(parquet) == "parquet"
    table = pq.read_table(parquet)
    assert table.schema.equals(schema()) and tuple(table.schema.names) == COLUMNS
    rows = table.to_pylist()
    plain = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert len(rows) == len(plain)
    for row, obj in zip(rows, plain, strict=True):
        mask = obj.get("block_mask")
        if type(mask) is int:  # an integer mask n: n leading trues, then falses
            mask = [k < mask for k in range(len(obj["keys"]))]
        assert row == {
            "type": obj["type"], "instance_id": obj["instance_id"],
            "trace_id": obj.get("trace_id", str(plain.index(obj) + 1)),
            "timestamp_ns": obj["timestamp_ns"], "keys": obj["keys"],
            "input_len": obj.get("input_len"), "block_mask": mask,
            "ttl_us": obj.get("ttl_us") or None,  # 0 is the group's TTL: left out, null
        }  # fmt: skip


def test_optimize_export_tree_and_lifecycle_give_the_same_files(tmp_path: Path) -> None:
    """Catches a Parquet trace read differently from its JSONL: masks, TTLs, writes."""
    trace = rich_trace(tmp_path / "t.jsonl")
    sources = {"jsonl": trace, "parquet": as_parquet(trace)}
    files = {}
    for name, source in sources.items():
        out = tmp_path / name
        config = optimizer_config(tmp_path / f"{name}.json", source, out)
        for command in (["optimize", "--max-workers", "1"], ["export-tree"], ["lifecycle"]):
            assert main([*command, str(config)]) == 0
        files[name] = {
            str(p.relative_to(out)): p.read_bytes()
            for p in out.rglob("*") if p.is_file() and p.suffix != ".png"
        }  # fmt: skip
    assert len(files["jsonl"]) >= 6 and files["parquet"] == files["jsonl"]


def test_replay_simulate_and_a_round_trip_read_parquet(tmp_path: Path, capsys) -> None:
    trace = rich_trace(tmp_path / "t.jsonl")
    parquet = as_parquet(trace)
    ledgers = {}
    for name, source in (("jsonl", trace), ("parquet", parquet)):
        config = write_replay_config(
            tmp_path / f"{name}.json", source, output=tmp_path / f"r-{name}",
            instances=[lru_instance(i) for i in "ab"],
        )  # fmt: skip
        assert main(["replay", str(config), "--quiet"]) == 0
        ledgers[name] = (tmp_path / f"r-{name}" / "litehit_facts.csv").read_bytes()
    assert ledgers["jsonl"].count(b"\n") > 400 and ledgers["parquet"] == ledgers["jsonl"]
    reports = []
    for source in (trace, parquet):
        assert main(["simulate", "-i", str(source), "--kv-bytes-per-chunk", "64",
                     "--capacity-gib", "0.0000001", "--no-plot", "--json"]) == 0  # fmt: skip
        report = json.loads(capsys.readouterr().out)
        report["input"].pop("sources")
        reports.append(report)
    assert reports[0] == reports[1]
    back = tmp_path / "back.jsonl"  # Parquet -> JSONL: the same records
    assert main(["convert", str(parquet), "-o", str(back)]) == 0
    again = tmp_path / "again.parquet"
    assert main(["convert", str(back), "-o", str(again)]) == 0
    assert pq.read_table(again).equals(pq.read_table(parquet))


def test_to_forces_the_container_and_gzip_output_reads_back(tmp_path: Path) -> None:
    trace = rich_trace(tmp_path / "t.jsonl")
    forced = tmp_path / "t.data"
    assert main(["convert", str(trace), "-o", str(forced), "--to", "parquet"]) == 0
    assert container_of(forced) == "parquet"
    packed = tmp_path / "t2.jsonl.gz"
    assert main(["convert", str(trace), "-o", str(packed)]) == 0
    assert container_of(packed) == "gzip"
    back = tmp_path / "back.jsonl"
    assert main(["convert", str(packed), "-o", str(back)]) == 0
    canonical = tmp_path / "canonical.jsonl"
    assert main(["convert", str(trace), "-o", str(canonical)]) == 0
    assert back.read_bytes() == canonical.read_bytes()


def _write_table(path: Path, rows: list[dict], drop: tuple[str, ...] = ()) -> Path:
    table = pa.Table.from_pylist(rows, schema=schema())
    pq.write_table(table.drop_columns(list(drop)), path)
    return path


GOOD = {"type": "get", "instance_id": "a", "trace_id": None, "timestamp_ns": 5,
        "keys": [1, 2], "input_len": 9, "block_mask": None, "ttl_us": None}  # fmt: skip


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ({"type": "put"}, "field 'type' must be one of 'get', 'request', 'write'; got \"put\""),
        ({"input_len": 0}, "field 'input_len' must be an integer > 0; got 0"),
        ({"instance_id": ""}, "field 'instance_id' must be a non-empty string; got \"\""),
        ({"block_mask": [True]}, "field 'block_mask'"),
    ],
)
def test_a_bad_value_is_located_at_its_row_and_nothing_is_written(
    tmp_path: Path, capsys, bad: dict, reason: str
) -> None:
    """Catches a Parquet value that slips past the checks JSONL gets, or an error without
    its row."""
    source = _write_table(tmp_path / "t.parquet", [GOOD, {**GOOD, **bad, "timestamp_ns": 6}])
    out = tmp_path / "out.jsonl"
    assert main(["convert", "--from", "standard", str(source), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{source}:2: {reason}"), err
    assert not out.exists()


def test_a_missing_column_or_a_broken_file_is_refused_naming_it(tmp_path: Path, capsys) -> None:
    source = _write_table(tmp_path / "t.parquet", [GOOD], drop=("keys",))
    assert main(["convert", "--from", "standard", str(source), "-o", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err == (
        f"{source}:0: a Parquet trace needs the columns ['type', 'instance_id', "
        "'timestamp_ns', 'keys']; ['keys'] missing\n"
    )
    broken = tmp_path / "b.parquet"
    broken.write_bytes(b"PAR1" + b"\0" * 40)
    assert main(["convert", "--from", "standard", str(broken), "-o", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.startswith(f"{broken}:0: not a readable Parquet file: ")


def test_gen_dataset_asks_for_plain_jsonl(tmp_path: Path, capsys) -> None:
    source = _write_table(tmp_path / "t.parquet", [GOOD])
    code = main(["gen-dataset", "-i", str(source), "--tokenizer", str(DATA / "tokenizer"),
                 "-o", str(tmp_path / "d.jsonl")])  # fmt: skip
    assert code == 2
    assert "a parquet file: gen-dataset reads its inputs twice" in capsys.readouterr().err


def _loaded(config_path: Path) -> object:
    from litehit_service.optimizer.optimize.config import load_optimize_config
    from litehit_service.optimizer.optimize.trace import load_trace

    return load_trace(load_optimize_config(config_path), max_line_bytes=1 << 20)


def _row_load(config_path: Path, trace: Path) -> object:
    """The row path alone: every line through the standard line parser, then routed."""
    from litehit_service.optimizer.optimize.columns import event_batch
    from litehit_service.optimizer.optimize.config import load_optimize_config
    from litehit_service.optimizer.optimize.trace import open_trace_batches, sorted_trace
    from litehit_service.traces.readers.standard import read_standard

    config = load_optimize_config(config_path)
    routing, _, _ = open_trace_batches(config, max_line_bytes=1 << 20)
    whole = event_batch(read_standard(trace), routing)
    return sorted_trace(whole, routing.ttl_values, str(trace), "standard")


def test_the_columnar_load_equals_the_row_load_array_for_array(tmp_path: Path) -> None:
    """Differential: JSONL and Parquet traces load through columns (no row objects) into
    exactly the arrays the row path builds from the JSONL's lines: kinds, instances, times,
    keys, local masks, TTL buckets and values, prompt lengths."""
    trace = rich_trace(tmp_path / "t.jsonl", seed=23, n=2000)
    parquet = as_parquet(trace)
    rows = _row_load(optimizer_config(tmp_path / "r.json", trace, tmp_path / "o"), trace)
    for source, name in ((trace, "j.json"), (parquet, "p.json")):
        cols = _loaded(optimizer_config(tmp_path / name, source, tmp_path / "o"))
        for field in ("kinds", "insts", "times", "key_off", "keys", "local", "buckets"):
            got, want = getattr(cols.records, field), getattr(rows.records, field)
            assert np.array_equal(got, want), (source, field)
        assert np.array_equal(cols.input_lens, rows.input_lens)
        assert cols.ttl_values == rows.ttl_values and len(rows.ttl_values) >= 2
    assert int(rows.records.local.sum()) > 0  # masks were in the trace


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ({"input_len": None}, "missing required field 'input_len' (required for type 'get')"),
        ({"keys": [1, 2, 3]}, "keys: 3 keys but input_len 9 holds 2 complete blocks of 4 "
         "tokens"),
        ({"ttl_us": 5}, "field 'ttl_us' must be absent on a get (a get writes nothing); got 5"),
        ({"instance_id": "zz"}, "instance_id: instance 'zz' is not configured"),
        ({"type": "write", "block_mask": [True, False]}, "field 'block_mask' must be absent "
         "on a write"),
    ],
)  # fmt: skip
def test_a_doubtful_row_goes_to_the_row_path_and_its_error(
    tmp_path: Path, capsys, bad: dict, reason: str
) -> None:
    """Catches the columnar load accepting what the row path refuses (or refusing it with
    another message): every doubt hands the file to the row checks, which name the row."""
    source = _write_table(tmp_path / "t.parquet", [GOOD, {**GOOD, **bad, "timestamp_ns": 6}])
    config = optimizer_config(tmp_path / "c.json", source, tmp_path / "o")
    assert main(["optimize", str(config), "--max-workers", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{source}:2: {reason}"), err
    assert not (tmp_path / "o").exists()


def test_an_empty_instance_id_is_refused_even_when_routed(tmp_path: Path, capsys) -> None:
    """Catches the columnar load skipping the instance-id check under --instance (the row
    path parses every field, routed or not)."""
    source = _write_table(tmp_path / "t.parquet",
                          [GOOD, {**GOOD, "instance_id": "", "timestamp_ns": 6}])  # fmt: skip
    config = optimizer_config(tmp_path / "c.json", source, tmp_path / "o")
    assert main(["optimize", str(config), "--max-workers", "1", "--instance", "a"]) == 2
    assert capsys.readouterr().err.startswith(
        f"{source}:2: field 'instance_id' must be a non-empty string; got \"\""
    )


def _expected_rows(jsonl: Path) -> list[dict]:
    """What a Parquet trace holds for each record of ``jsonl``, read literally from the
    schema's documentation (blank lines skipped, their numbers kept for default ids)."""
    out = []
    for n, line in enumerate(jsonl.read_text().split("\n"), 1):
        if not line.strip():
            continue
        obj = json.loads(line)
        mask = obj.get("block_mask")
        if type(mask) is int:
            mask = [k < mask for k in range(len(obj["keys"]))]
        out.append({"type": obj["type"], "instance_id": obj["instance_id"],
                    "trace_id": obj.get("trace_id", str(n)),
                    "timestamp_ns": obj["timestamp_ns"], "keys": obj["keys"],
                    "input_len": None if obj["type"] == "write" else obj.get("input_len"),
                    "block_mask": mask, "ttl_us": obj.get("ttl_us") or None})  # fmt: skip
    return out


def _list_masks_trace(path: Path, n: int, blank_at: int | None = None) -> Path:
    """A trace the column path takes whole: list masks, TTLs, ids left out, extras."""
    rng = random.Random(5)
    lines = []
    for i in range(n):
        keys = [rng.randrange(50) for _ in range(rng.randint(1, 5))]
        kind = rng.choice(["get", "request", "write"])
        rec: dict = {"type": kind, "instance_id": rng.choice("ab"), "timestamp_ns": 10 + i,
                     "keys": keys, "extra": [i]}  # fmt: skip
        if rng.random() < 0.5:
            rec["trace_id"] = f"t{i}"
        if kind != "write":
            rec["input_len"] = 4 * len(keys) + 1
            if rng.random() < 0.3:
                rec["block_mask"] = [rng.random() < 0.5 for _ in keys]
        elif rng.random() < 0.5:
            rec["ttl_us"] = rng.choice([-1, 0, 7])
        lines.append(json.dumps(rec))
    if blank_at is not None:
        lines.insert(blank_at, "")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(("chunk", "blank_at"), [(1 << 20, None), (300, None), (300, 37)])
def test_the_column_convert_writes_every_value_as_the_schema_says(
    tmp_path: Path, monkeypatch, chunk: int, blank_at: int | None
) -> None:
    """Catches the column path of ``convert`` (standard -> Parquet) changing a value:
    timestamps shifted, ids left out written differently from the line path (or numbered
    from the row, not the line, after a blank line), masks, TTLs, a write's input_len;
    and row groups of the documented size."""
    monkeypatch.setattr("litehit_service.traces.readers.columns.CHUNK_BYTES", chunk)
    monkeypatch.setattr("litehit_service.traces.convert.columnar.ROW_GROUP_ROWS", 100)
    trace = _list_masks_trace(tmp_path / "t.jsonl", 450, blank_at)
    out = tmp_path / "t.parquet"
    assert main(["convert", str(trace), "-o", str(out)]) == 0
    assert pq.read_table(out).to_pylist() == _expected_rows(trace)
    groups = pq.ParquetFile(out).metadata
    assert [groups.row_group(i).num_rows for i in range(groups.num_row_groups)] == [100] * 4 + [50]


def test_the_column_convert_refuses_time_going_backwards_at_its_line(tmp_path, capsys) -> None:
    """Catches an unsorted trace written as it is (a replay would then sort it anew)."""
    trace = _list_masks_trace(tmp_path / "t.jsonl", 200)
    lines = trace.read_text().splitlines()
    late = json.loads(lines[150])
    late["timestamp_ns"] = 3
    lines[150] = json.dumps(late)
    trace.write_text("\n".join(lines) + "\n")
    assert main(["convert", str(trace), "-o", str(tmp_path / "o.parquet")]) == 2
    assert capsys.readouterr().err.startswith(
        f"{trace}:151: timestamp goes backwards: 3 ns is before the previous event's 159 ns "
        "(line 150); sort the trace by timestamp_ns first"
    )
    assert not (tmp_path / "o.parquet").exists()
