"""``litehit convert`` end to end through the real CLI entry point."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from terminal import run_on_terminal

from litehit_service.cli import main
from litehit_service.traces.convert.pipeline import trace_events
from litehit_service.traces.readers import read_mooncake, read_standard

ROOT = Path(__file__).resolve().parents[1]

MOONCAKE_SAMPLE = [
    '{"timestamp": 0, "input_length": 10, "output_length": 3, "hash_ids": [7, 8, 9]}',
    "",
    '{"timestamp": 5, "input_length": 8, "output_length": 1, "hash_ids": [7, 8]}',
    '{"timestamp": 5, "input_length": 3, "output_length": 1, "hash_ids": [-5]}',
]


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def lm(ts: float, rid: str, model: str, hashes: list[str], seq_len: int, **extra: object) -> str:
    obj = {
        "timestamp": ts,
        "request_id": rid,
        "model_name": model,
        "chunk_size": 4,
        "seq_len": seq_len,
        "dtypes": ["torch.bfloat16"],
        "shapes": [[2, 2, 4, 2, 8]],  # 256 elements x 2 bytes = 512 bytes per chunk
        "chunk_hashes": hashes,
    }
    obj.update(extra)
    return json.dumps(obj)


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def summary_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert lines, "no summary on stderr"
    return lines[-1]


def test_convert_mooncake_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = write_lines(tmp_path / "mc.jsonl", MOONCAKE_SAMPLE)
    out = tmp_path / "out" / "trace.jsonl"
    out.parent.mkdir()
    code = main(
        ["convert", "--from", "mooncake", str(src), "-o", str(out), "--block-size", "4",
         "--instance", "pod-1"]
    )  # fmt: skip
    assert code == 0
    assert out.read_text(encoding="utf-8") == (
        '{"type":"request","instance_id":"pod-1","trace_id":"1","timestamp_ns":1000000,'
        '"keys":[7,8],"input_len":10}\n'
        '{"type":"request","instance_id":"pod-1","trace_id":"3","timestamp_ns":6000000,'
        '"keys":[7,8],"input_len":8}\n'
        '{"type":"request","instance_id":"pod-1","trace_id":"4","timestamp_ns":6000000,'
        '"keys":[],"input_len":3}\n'
    )
    assert leftovers(out.parent) == ["trace.jsonl"]
    err = capsys.readouterr().err
    line = summary_line(err)
    assert line.startswith("convert: 3 events, 1 instances, ")
    assert line.endswith(f" events/s -> {out}")
    assert len(err.splitlines()) == 1
    # The output is a valid standard trace.
    assert [e.timestamp_ns for e in read_standard(out)] == [1_000_000, 6_000_000, 6_000_000]


def test_convert_time_offset_zero_rejects_zero_timestamp(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = write_lines(tmp_path / "mc.jsonl", MOONCAKE_SAMPLE)
    out = tmp_path / "trace.jsonl"
    code = main(
        ["convert", "--from", "mooncake", str(src), "-o", str(out), "--block-size", "4",
         "--time-offset-ns", "0"]
    )  # fmt: skip
    assert code == 2
    assert capsys.readouterr().err == (
        f"{src}:1: timestamp_ns 0 + --time-offset-ns 0 = 0 is outside [1, 2**63-1]\n"
    )
    assert leftovers(tmp_path) == ["mc.jsonl"]


def test_convert_mooncake_emit_config_placeholder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = write_lines(tmp_path / "mc.jsonl", MOONCAKE_SAMPLE)
    out = tmp_path / "trace.jsonl"
    cfg = tmp_path / "config.json"
    code = main(
        ["convert", "--from", "mooncake", str(src), "-o", str(out), "--block-size", "4",
         "--emit-config", str(cfg)]
    )  # fmt: skip
    assert code == 0
    assert json.loads(cfg.read_text(encoding="utf-8")) == {
        "trace_file_path": "trace.jsonl",  # relative to the config's folder: they move together
        "output_result_path": "trace_results",
        "block_size": 4,
        "instance_groups": [
            {
                "name": "default",
                "eviction_policy": "lru",
                "capacity_gb": [16, 64, 256, 1024, 4096],
                "ttl_seconds": 0,
                "enable_prefix_hash": False,
                "enable_theoretical_max_cache": True,
            }
        ],
        "instances": [
            {
                "instance_id": "default",
                "instance_group": "default",
                "block_size": 4,
                "location_spec_infos": [{"name": "kv", "size": 4 * 131_072}],
                "location_spec_groups": [{"name": "full", "spec_names": ["kv"]}],
                "optimizer_state_info": {"full_location_spec_group_name": "full"},
                "linear_step": 0,
            }
        ],
    }
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2
    assert err[0] == (
        f"note: {cfg}: location spec size 524288 bytes per block is a placeholder "
        "(131072 bytes per token x block_size 4, Llama-3.1-8B bf16); set your model's KV "
        "bytes per block (or pass --kv-bytes-per-chunk); until then, 'litehit curve "
        "--block-bytes-unknown' draws capacities in blocks"
    )
    assert err[1].startswith("convert: 3 events, 1 instances, ")
    assert leftovers(tmp_path) == ["config.json", "mc.jsonl", "trace.jsonl"]


def test_an_emitted_config_keeps_working_when_its_folder_moves(tmp_path: Path) -> None:
    """Catches absolute paths in --emit-config's file (a moved or copied folder replayed
    the old trace, or failed): the config lives in another folder than the trace, and the
    folder holding both is moved before the replay."""
    src = write_lines(tmp_path / "mc.jsonl", MOONCAKE_SAMPLE)
    (tmp_path / "run" / "configs").mkdir(parents=True)
    out, cfg = tmp_path / "run" / "trace.jsonl", tmp_path / "run" / "configs" / "c.json"
    assert main(["convert", str(src), "-o", str(out), "--block-size", "4",
                 "--emit-config", str(cfg)]) == 0  # fmt: skip
    data = json.loads(cfg.read_text(encoding="utf-8"))
    assert (data["trace_file_path"], data["output_result_path"]) == (
        "../trace.jsonl",
        "../trace_results",
    )
    moved = tmp_path / "moved"
    (tmp_path / "run").rename(moved)
    assert main(["replay", str(moved / "configs" / "c.json"), "--quiet"]) == 0
    assert (moved / "trace_results" / "litehit_facts.csv").read_text().count("\n") == 4


def test_convert_mooncake_emit_config_with_explicit_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = write_lines(tmp_path / "mc.jsonl", MOONCAKE_SAMPLE)
    out, cfg = tmp_path / "trace.jsonl", tmp_path / "config.json"
    code = main(
        ["convert", "--from", "mooncake", str(src), "-o", str(out), "--block-size", "4",
         "--emit-config", str(cfg), "--kv-bytes-per-chunk", "2048"]
    )  # fmt: skip
    assert code == 0
    config = json.loads(cfg.read_text(encoding="utf-8"))
    assert config["instances"][0]["location_spec_infos"] == [{"name": "kv", "size": 2048}]
    assert len(capsys.readouterr().err.splitlines()) == 1  # no placeholder note


def test_convert_lmcache_directory_with_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    write_lines(
        logs / "lookup_hashes_a.jsonl",
        [lm(10.5, "r1", "llama", ["0xa", "0xffffffffffffffff"], 9),
         lm(12.0, "r3", "qwen", ["1"], 4, shapes=[[4, 4]], dtypes=["float32"])],
    )  # fmt: skip
    write_lines(logs / "lookup_hashes_b.jsonl", [lm(11.25, "r2", "llama", [], 3)])
    out, cfg = tmp_path / "trace.jsonl", tmp_path / "config.json"
    code = main(
        ["convert", "--from", "lmcache", str(logs), "-o", str(out), "--emit-config", str(cfg)]
    )
    assert code == 0
    assert out.read_text(encoding="utf-8") == (  # LMCache's clock: kept as it is
        '{"type":"request","instance_id":"llama","trace_id":"r1","timestamp_ns":10500000000,'
        '"keys":[10,-1],"input_len":9}\n'
        '{"type":"request","instance_id":"llama","trace_id":"r2","timestamp_ns":11250000000,'
        '"keys":[],"input_len":3}\n'
        '{"type":"request","instance_id":"qwen","trace_id":"r3","timestamp_ns":12000000000,'
        '"keys":[1],"input_len":4}\n'
    )
    config = json.loads(cfg.read_text(encoding="utf-8"))
    assert config["block_size"] == 4
    assert [
        (i["instance_id"], i["block_size"], i["location_spec_infos"]) for i in config["instances"]
    ] == [
        ("llama", 4, [{"name": "kv", "size": 512}]),
        ("qwen", 4, [{"name": "kv", "size": 64}]),
    ]
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1
    assert err[0].startswith("convert: 3 events, 2 instances, ")


def test_convert_lmcache_model_filter_and_override(tmp_path: Path) -> None:
    src = write_lines(
        tmp_path / "log.jsonl",
        [lm(1.0, "r1", "llama", ["a"], 4, dtypes=["exotic"]),
         lm(2.0, "r2", "qwen", ["b"], 4, dtypes=["exotic"])],
    )  # fmt: skip
    out, cfg = tmp_path / "trace.jsonl", tmp_path / "config.json"
    code = main(
        ["convert", "--from", "lmcache", str(src), "-o", str(out), "--instance", "qwen",
         "--kv-bytes-per-chunk", "999", "--emit-config", str(cfg), "--time-offset-ns", "0"]
    )  # fmt: skip
    assert code == 0
    assert out.read_text(encoding="utf-8") == (
        '{"type":"request","instance_id":"qwen","trace_id":"r2","timestamp_ns":2000000000,'
        '"keys":[11],"input_len":4}\n'
    )
    instances = json.loads(cfg.read_text(encoding="utf-8"))["instances"]
    assert [(i["instance_id"], i["location_spec_infos"][0]["size"]) for i in instances] == [
        ("qwen", 999)
    ]


def test_convert_lmcache_unknown_dtype_fails_cleanly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = write_lines(tmp_path / "log.jsonl", [lm(1.0, "r1", "m", ["a"], 4, dtypes=["exotic"])])
    out = tmp_path / "trace.jsonl"
    assert main(["convert", "--from", "lmcache", str(src), "-o", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"{src}:1: field 'dtypes[0]' is an unknown dtype \"exotic\"; give the KV bytes per "
        "chunk explicitly (kv_bytes_per_chunk / --kv-bytes-per-chunk)\n"
    )
    assert leftovers(tmp_path) == ["log.jsonl"]


def test_convert_lmcache_mixed_chunk_sizes_cannot_emit_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = write_lines(
        tmp_path / "log.jsonl",
        [lm(1.0, "r1", "a", ["1"], 4), lm(2.0, "r2", "b", ["2"], 8, chunk_size=8)],
    )
    out, cfg = tmp_path / "trace.jsonl", tmp_path / "config.json"
    args = ["convert", "--from", "lmcache", str(src), "-o", str(out)]
    assert main([*args, "--emit-config", str(cfg)]) == 2
    assert capsys.readouterr().err == (
        f"{src}:0: --emit-config needs one chunk_size but the models differ (a=4, b=8); "
        "pick one with --model\n"
    )
    assert leftovers(tmp_path) == ["log.jsonl"]
    assert main(args) == 0  # without a config the trace itself converts
    assert len(out.read_text(encoding="utf-8").splitlines()) == 2


def test_convert_standard_round_trip_and_offset(tmp_path: Path) -> None:
    lines = [
        '{"type":"get","instance_id":"a","trace_id":"x","timestamp_ns":5,"keys":[1,2],'
        '"input_len":9}',
        '{"type":"write","instance_id":"b","trace_id":"2","timestamp_ns":5,"keys":[3],'
        '"input_len":0}',
        '{"type":"request","instance_id":"a","trace_id":"3","timestamp_ns":7,"keys":[],'
        '"input_len":1}',
    ]
    src = write_lines(tmp_path / "std.jsonl", lines)
    same, shifted = tmp_path / "same.jsonl", tmp_path / "shifted.jsonl"
    # a standard trace's values stay as they are (only a clock starting at 0 is shifted)
    assert main(["convert", "--from", "standard", str(src), "-o", str(same)]) == 0
    assert same.read_bytes() == src.read_bytes()
    args = ["convert", "--from", "standard", str(src), "-o", str(shifted)]
    assert main([*args, "--time-offset-ns", "1000000"]) == 0
    assert shifted.read_text(encoding="utf-8").splitlines() == [
        line.replace('"timestamp_ns":5,', '"timestamp_ns":1000005,').replace(
            '"timestamp_ns":7,', '"timestamp_ns":1000007,'
        )
        for line in lines
    ]


def test_convert_standard_error_leaves_existing_output_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = write_lines(
        tmp_path / "std.jsonl",
        [
            '{"type":"get","instance_id":"a","timestamp_ns":5,"keys":[1],"input_len":4}',
            '{"type":"get","instance_id":"a","timestamp_ns":6,"keys":[1,true],"input_len":8}',
        ],
    )
    out = tmp_path / "trace.jsonl"
    out.write_text("previous\n", encoding="utf-8")
    assert main(["convert", "--from", "standard", str(src), "-o", str(out)]) == 2
    assert capsys.readouterr().err == f"{src}:2: keys[1] must be an int64 integer; got true\n"
    assert out.read_text(encoding="utf-8") == "previous\n"
    assert leftovers(tmp_path) == ["std.jsonl", "trace.jsonl"]


def test_convert_rejects_backwards_timestamps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = write_lines(
        tmp_path / "mc.jsonl",
        [
            '{"timestamp": 9, "input_length": 4, "hash_ids": [1]}',
            '{"timestamp": 8, "input_length": 4, "hash_ids": [1]}',
        ],
    )
    out = tmp_path / "trace.jsonl"
    args = ["convert", "--from", "mooncake", str(src), "-o", str(out), "--block-size", "4"]
    assert main(args) == 2
    assert capsys.readouterr().err == (
        f"{src}:2: timestamp goes backwards: 8000000 ns is before the previous event's "
        "9000000 ns (line 1)\n"
    )
    assert leftovers(tmp_path) == ["mc.jsonl"]


@pytest.mark.parametrize(
    ("fmt", "extra", "message"),
    [
        (
            "standard",
            ["--instance", "i"],
            "--instance applies to --from mooncake / lmcache / qwen-bailian / text only, "
            "not --from standard",
        ),
        (
            "standard",
            ["--model", "m"],  # the old spelling names the option as it is spelled now
            "--instance applies to --from mooncake / lmcache / qwen-bailian / text only, "
            "not --from standard",
        ),
        (
            "lmcache",
            ["--block-size", "4"],
            "--block-size does not apply to --from lmcache (chunk_size comes from the logs)",
        ),
        (
            "standard",
            ["--block-size", "4"],
            "--block-size with --from standard only sets block_size in --emit-config",
        ),
        (
            "mooncake",
            ["--kv-bytes-per-chunk", "4"],
            "--kv-bytes-per-chunk with --from mooncake only sets the spec size in --emit-config",
        ),
        ("mooncake", ["--emit-config", "OUT"], "--emit-config and --output must be different"),
    ],
)
def test_convert_option_misuse(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str, extra: list[str], message: str
) -> None:
    src = write_lines(tmp_path / "in.jsonl", MOONCAKE_SAMPLE)
    out = tmp_path / "trace.jsonl"
    extra = [str(out) if arg == "OUT" else arg for arg in extra]
    assert main(["convert", "--from", fmt, str(src), "-o", str(out), *extra]) == 2
    assert capsys.readouterr().err == f"litehit convert: error: {message}\n"
    assert leftovers(tmp_path) == ["in.jsonl"]


def test_convert_bad_numbers_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["convert", "--from", "mooncake", "x", "-o", "y", "--block-size", "0"])
    assert info.value.code == 2
    assert "argument --block-size: must be an integer > 0, got '0'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["convert", "--from", "mooncake", "x", "-o", "y", "--time-offset-ns", "-1"])
    assert "argument --time-offset-ns: must be an integer >= 0, got '-1'" in capsys.readouterr().err


def test_convert_missing_and_empty_inputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "trace.jsonl"
    missing = tmp_path / "nope.jsonl"
    assert main(["convert", "--from", "mooncake", str(missing), "-o", str(out)]) == 2
    assert (
        capsys.readouterr().err
        == f"{missing}:0: cannot read the trace: No such file or directory\n"
    )
    src = write_lines(tmp_path / "mc.jsonl", MOONCAKE_SAMPLE)
    no_dir = tmp_path / "no-such-dir" / "trace.jsonl"
    assert main(["convert", "--from", "mooncake", str(src), "-o", str(no_dir)]) == 1  # runtime
    assert capsys.readouterr().err == (
        f"litehit convert: error: {no_dir}: No such file or directory\n"
    )
    src.unlink()
    empty = write_lines(tmp_path / "empty.jsonl", ["", "  "])
    assert main(["convert", "--from", "standard", str(empty), "-o", str(out)]) == 2
    assert capsys.readouterr().err == f"{empty}:0: no events to convert\n"
    assert leftovers(tmp_path) == ["empty.jsonl"]
    assert not list(tmp_path.glob("*.tmp"))


def test_convert_real_mooncake_trace(
    mooncake: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "trace.jsonl"
    assert main(["convert", "--from", "mooncake", str(mooncake), "-o", str(out)]) == 0
    events = list(read_standard(out))
    assert len(events) == 12_031
    assert sum(len(e.keys) for e in events) == 276_491
    assert events[0].timestamp_ns == 1_000_000
    assert events[-1].timestamp_ns == 3_536_999_000_000 + 1_000_000
    assert summary_line(capsys.readouterr().err).startswith("convert: 12031 events, 1 instances, ")


# ---------------------------------------------------------------- progress bar


def mooncake_lines(n: int) -> list[str]:
    """``n`` valid Mooncake lines (4-token blocks), timestamps rising, a blank line in."""
    lines = [
        json.dumps({"timestamp": i, "input_length": 8, "output_length": 1, "hash_ids": [i, i + 1]})
        for i in range(n)
    ]
    lines.insert(n // 2, "")
    return lines


@pytest.mark.parametrize("fmt", ["mooncake", "standard"])
def test_trace_events_feed_the_bar_every_byte_and_match_the_readers(
    tmp_path: Path, fmt: str
) -> None:
    src = write_lines(tmp_path / "in.jsonl", mooncake_lines(40_000))  # > 1 MiB: several chunks
    if fmt == "standard":
        assert main(["convert", "--from", "mooncake", str(src), "-o", str(tmp_path / "s.jsonl"),
                     "--block-size", "4"]) == 0  # fmt: skip
        src = tmp_path / "s.jsonl"
        expected = list(read_standard(src))
    else:
        expected = list(read_mooncake(src, 4, "pod"))
    advanced: list[int] = []
    events = list(trace_events(fmt, str(src), 4, "pod", 1 << 20, advanced.append))
    assert events == expected and len(events) == 40_000
    assert sum(advanced) == src.stat().st_size and len(advanced) >= 2


def test_trace_events_checks_its_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"^block_size must be an integer > 0, got 0$"):
        trace_events("mooncake", str(tmp_path / "x"), 0, "pod", 100, print)
    with pytest.raises(ValueError, match=r"^max_line_bytes must be an integer > 0, got 0$"):
        trace_events("mooncake", str(tmp_path / "x"), 4, "pod", 0, print)


def test_convert_progress_bar_only_on_a_terminal(tmp_path: Path) -> None:
    src = write_lines(tmp_path / "mc.jsonl", mooncake_lines(5_000))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def argv(out: str) -> list[str]:
        return [sys.executable, "-m", "litehit_service", "convert", "--from", "mooncake",
                str(src), "-o", str(tmp_path / out), "--block-size", "4"]  # fmt: skip

    plain = subprocess.run(argv("plain.jsonl"), capture_output=True, text=True, env=env, timeout=60)
    assert plain.returncode == 0
    assert plain.stderr.count("\n") == 1 and "\r" not in plain.stderr  # the summary only
    assert plain.stderr.startswith("convert: 5000 events, 1 instances, ")

    code, tty_err = run_on_terminal(argv("tty.jsonl"), env)
    assert code == 0
    # tqdm's bar over the input's bytes: "convert:   0%|     | 0.00/171k [00:00<?, ?B/s]"
    assert re.search(r"\rconvert:\s+0%\|\s*\| 0\.00/\S+ \[00:00<\?, \?B/s\]", tty_err), tty_err
    assert "convert: 5000 events, 1 instances, " in tty_err
    assert (tmp_path / "tty.jsonl").read_bytes() == (tmp_path / "plain.jsonl").read_bytes()
