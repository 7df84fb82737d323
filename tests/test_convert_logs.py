"""``litehit convert --from publisher-log`` and ``--from qwen-bailian`` (spec §10), through
the real CLI entry point: hand-built logs with the expected records written out literally,
a naive full-sort oracle on seeded random logs, the golden prefix-hash chains, errors, and
the converted traces replayed with ``optimize`` and ``replay`` against hits worked by hand.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from pathlib import Path

import pytest
from conftest import cli_argv, lru_instance, write_replay_config
from doc_pages import section
from serve_process import serve_env
from terminal import run_on_terminal
from tiny_tokenizer import write_tokenizer

from litehit_core.prefix_hash import prefix_hash_next
from litehit_service.cli import build_parser, main
from litehit_service.optimizer.optimize.config import load_optimize_config
from litehit_service.optimizer.optimize.run import run_optimize
from litehit_service.optimizer.optimize.trace import load_trace
from litehit_service.traces.logs import CONVERTERS
from litehit_service.traces.readers import READERS, read_standard

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
"""The samples the clone ships (the docs' examples read them)."""
GOLDEN = json.loads((DATA / "prefix_hash.json").read_text())
"""The prefix-hash golden vectors (the project's copy of ``shared/golden/prefix_hash.json``,
so a bare clone tests without ``../shared``; ``test_prefix_hash`` checks the copy)."""


def ev(kind: str, source: str, us: int, **fields: object) -> str:
    return json.dumps({"source": source, "type": kind, "trigger_time_us": us, **fields})


def get(source: str, us: int, keys: list[int], **fields: object) -> str:
    return ev("GetCacheLocation", source, us, keys=keys, **fields)


def start(source: str, us: int, session: str, keys: list[int]) -> str:
    return ev("StartWriteCache", source, us, write_session_id=session, keys=keys, tokens=[])


def finish(source: str, us: int, session: str) -> str:
    return ev("FinishWriteCache", source, us, write_session_id=session, success_block=[])


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def std(kind, inst, tid, ns, keys, input_len, **extra) -> str:
    line = {"type": kind, "instance_id": inst, "trace_id": tid, "timestamp_ns": ns,
            "keys": keys, "input_len": input_len, **extra}  # fmt: skip
    return json.dumps(line, separators=(",", ":"))


def converted(out: Path) -> list[str]:
    return out.read_text(encoding="utf-8").splitlines()


# ------------------------------------------------------------------ every converter

REQUIRED_ARGS = {
    "block_size": ["--block-size", "4"],
    "instance_id": ["--instance", "i"],
    "tokenizer_path": ["--tokenizer-path", "{tokenizer}"],
}


@pytest.mark.parametrize("name", sorted(CONVERTERS))
def test_every_converter_converts_its_example(tmp_path: Path, name: str) -> None:
    converter = CONVERTERS[name]
    src = tmp_path / "example.jsonl"
    src.write_bytes(converter.example)
    out = tmp_path / "t.jsonl"
    required = [arg for option in converter.required for arg in REQUIRED_ARGS[option]]
    if "{tokenizer}" in required:  # text: a real tokenizer (skips without the library)
        tokenizer = str(write_tokenizer(tmp_path / "tokenizer"))
        required = [arg.format(tokenizer=tokenizer) for arg in required]
    assert main(["convert", "--from", name, str(src), "-o", str(out), *required]) == 0
    assert len(list(read_standard(out))) >= 2
    first = json.loads(converter.example.splitlines()[0])
    assert converter.sniff(first)
    assert [reader.name for reader in READERS.values() if reader.sniff(first)] in ([], ["mooncake"])


def test_every_converter_option_is_a_convert_flag() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    dests = {a.dest for a in sub.choices["convert"]._actions}
    assert "instance" in dests  # --instance sets instance_id or model, as the source takes it
    dests |= {"instance_id", "model"}
    for converter in CONVERTERS.values():
        assert set(converter.options) <= dests, converter
        assert set(converter.required) <= set(converter.options) & set(REQUIRED_ARGS)


# ------------------------------------------------------------------ publisher log


def test_every_event_kind_and_pairing_case(tmp_path: Path, capsys) -> None:
    """The shipped sample (tests/data/publisher_log/: every event kind and pairing case,
    two files, a line out of order within the window, an instance map renaming b and
    dropping c) converts to exactly these records and this summary, which the offline
    docs page shows."""
    # pub1.log: g1 (prefix_match, tokens ignored); s1 started; b's get (no id, no
    # query_type); s1 finished -> the write of [1, 2, 3] at 1500; a finish without a start
    # (skipped); a batch_get (not a prefix read: skipped); s2 never finished (lands at
    # 1800 + 100 ms); RemoveCache; a get without keys (skipped). pub2.log: g2 with a mask; c's
    # get out of order within the window (c dropped by the map); b's session s1 (the same
    # id, another source); g3 50 ms out of order; a Heartbeat.
    logs = DATA / "publisher_log"
    imap = DATA / "publisher_log_map.json"
    out = tmp_path / "trace.jsonl"
    args = ["convert", "--from", "publisher-log", str(logs), "-o", str(out), "--block-size",
            "16", "--instance-map", str(imap)]  # fmt: skip
    assert main(args) == 0
    assert converted(out) == [
        std("get", "a", "g1", 1_000_000, [1, 2], 32),
        std("get", "bee", "pub1.log:3", 1_200_000, [5], 32, block_mask=1),  # file order at a tie
        std("get", "a", "g2", 1_200_000, [1, 2, 3, 4], 64, block_mask=[True, False, False, False]),
        std("write", "a", "s1", 1_500_000, [1, 2, 3], 0),
        std("write", "a", "s2", 101_800_000, [1, 2, 3, 4], 0),
        std("get", "a", "g3", 150_000_000, [1, 2, 3, 4, 5], 80),
        std("write", "bee", "s1", 200_000_000, [5, 6], 0),
    ]
    err = capsys.readouterr().err.splitlines()
    assert err[:-1] == [
        "publisher-log: read 15 events (FinishWriteCache 3, GetCacheLocation 7, Heartbeat 1, "
        "RemoveCache 1, StartWriteCache 3)",
        "publisher-log: wrote 4 gets, 2 writes at the finish, "
        "1 writes at start + 100 ms (no finish)",
        "publisher-log: skipped 1 FinishWriteCache without a StartWriteCache, "
        "1 GetCacheLocation with query_type batch_get, 1 GetCacheLocation without keys, "
        "1 events of dropped source c",
        "publisher-log: skipped other event types: 1 Heartbeat, 1 RemoveCache",
        "publisher-log: 2 instances: a (5), bee (2)",
    ]
    shown = section("Real logs: KVCacheManager publisher logs and Qwen Bailian traces")
    assert "\n".join(err[:-1]) in shown  # the docs show this sample's summary
    assert err[-1].startswith("convert: 7 events, 2 instances, ")
    assert list(read_standard(out))[2].block_mask == (True, False, False, False)


def test_a_restarted_session_ends_the_first_as_unfinished(tmp_path: Path) -> None:
    log = write(tmp_path / "p.log", [
        start("a", 10, "s", [1]), start("a", 20, "s", [1, 2]), finish("a", 30, "s"),
        get("a", 40, [1, 2]),
    ])  # fmt: skip
    out = tmp_path / "t.jsonl"
    assert main(["convert", "--from", "publisher-log", str(log), "-o", str(out),
                 "--block-size", "4", "--time-offset-ns", "7"]) == 0  # fmt: skip
    assert converted(out) == [
        std("write", "a", "s", 30_007, [1, 2], 0),
        std("get", "a", "p.log:4", 40_007, [1, 2], 8),
        std("write", "a", "s", 100_010_007, [1], 0),
    ]


def naive_publisher(files: list[list[str]], block_size: int) -> list[str]:
    """Spec §10 read literally: every line of every file, stably sorted by time; pairs;
    unfinished starts at start + 100 ms; the output stably sorted by time."""
    events = [json.loads(line) for lines in files for line in lines]
    events.sort(key=lambda e: e["trigger_time_us"])
    out, pending, late = [], {}, []
    for e in events:
        if e["type"] == "GetCacheLocation" and e["keys"]:
            tid = e.get("id") or "?"
            out.append((e["trigger_time_us"], std("get", e["source"], tid, 0, e["keys"],
                                                  len(e["keys"]) * block_size)))  # fmt: skip
        elif e["type"] == "StartWriteCache":
            if (e["source"], e["write_session_id"]) in pending:
                late.append(pending.pop((e["source"], e["write_session_id"])))
            pending[(e["source"], e["write_session_id"])] = e
        elif e["type"] == "FinishWriteCache":
            s = pending.pop((e["source"], e["write_session_id"]), None)
            if s is not None:
                line = std("write", s["source"], s["write_session_id"], 0, s["keys"], 0)
                out.append((e["trigger_time_us"], line))
    for s in sorted([*late, *pending.values()], key=lambda s: s["trigger_time_us"]):
        line = std("write", s["source"], s["write_session_id"], 0, s["keys"], 0)
        out.append((s["trigger_time_us"] + 100_000, line))
    out.sort(key=lambda pair: pair[0])
    return [line.replace('"timestamp_ns":0', f'"timestamp_ns":{t * 1000}') for t, line in out]


@pytest.mark.parametrize("seed", range(8))
def test_streamed_equals_the_naive_full_sort(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    files = []
    for f in range(rng.randint(1, 3)):
        lines, t = [], 1
        for i in range(rng.randint(20, 120)):
            t += rng.choice([0, 0, 1, 5, 50_000])
            jitter = t - rng.choice([0, 0, 0, 3, 400_000])  # within the 1000 ms window
            src, session = rng.choice("ab"), f"s{rng.randint(0, 6)}"
            keys = list(range(1, rng.randint(0, 4) + 1))
            kind = rng.choice(["get", "start", "finish", "other"])
            if kind == "get":
                lines.append(get(src, max(jitter, 1), keys, id=f"{f}-{i}"))
            elif kind == "start":
                lines.append(start(src, max(jitter, 1), session, keys or [1]))
            elif kind == "finish":
                lines.append(finish(src, max(jitter, 1), session))
            else:
                lines.append(ev("Other", src, max(jitter, 1)))
        files.append(lines)
    paths = [str(write(tmp_path / f"p{i}.log", lines)) for i, lines in enumerate(files)]
    out = tmp_path / "t.jsonl"
    assert main(["convert", "--from", "publisher-log", *paths, "-o", str(out),
                 "--block-size", "8"]) == 0  # fmt: skip
    assert converted(out) == naive_publisher(files, 8)


# ------------------------------------------------------------------ qwen bailian


def bailian(ts, input_length, hash_ids, chat_id=7, **fields) -> str:
    line = {"chat_id": chat_id, "timestamp": ts, "input_length": input_length,
            "output_length": 9, "type": "text", "hash_ids": hash_ids, **fields}  # fmt: skip
    return json.dumps(line)


BAILIAN = (DATA / "qwen_bailian_small.jsonl").read_text(encoding="utf-8").splitlines()
"""The shipped Bailian sample: chats 1 and 3 start at 0 s and 2.25 s (turn 1), chat 2
follows chat 1 at 1.5 s (its 50 tokens: 3 complete 16-token blocks, the partial 4th id
dropped), chat 4 at 3 s; :func:`bailian` made them."""


def test_bailian_keys_are_the_golden_prefix_chains(tmp_path: Path, capsys) -> None:
    chain = GOLDEN["chains"][0]
    assert chain["raw"] == [1, 2, 3]
    k = chain["keys"]
    src = write(tmp_path / "qwen.jsonl", BAILIAN)
    out = tmp_path / "t.jsonl"
    assert main(["convert", "--from", "qwen-bailian", str(src), "-o", str(out),
                 "--instance", "qwen"]) == 0  # fmt: skip
    lines = converted(out)
    assert lines[:3] == [
        std("request", "qwen", "1", 1_000_000, k, 48, chat_id=1, parent_chat_id=-1, turn=1),
        std("request", "qwen", "2", 1_501_000_000, k, 50, chat_id=2, parent_chat_id=1, turn=2),
        std("request", "qwen", "3", 2_251_000_000, k[:2], 40, chat_id=3, parent_chat_id=-1,
            turn=1),
    ]  # fmt: skip
    fourth = json.loads(lines[3])
    assert fourth["keys"][:3] == k and len(fourth["keys"]) == 4 and fourth["chat_id"] == 4
    assert [e.keys for e in read_standard(out)][0] == k  # readers ignore the chat fields
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "qwen-bailian: read 4 lines -> requests of 'qwen', 3 partial-block ids dropped"


def test_bailian_get_write_and_rounding(tmp_path: Path) -> None:
    src = write(tmp_path / "q.jsonl", [bailian(0.1234567894, 16, [5], chat_id=None)])
    out = tmp_path / "t.jsonl"
    assert (
        main(
            [
                "convert",
                "--from",
                "qwen-bailian",
                str(src),
                "-o",
                str(out),
                "--instance",
                "x",
                "--emit",
                "get-write",
                "--time-offset-ns",
                "0",
            ]
        )
        == 0
    )
    first = [prefix_hash_next(0, 5)]
    assert converted(out) == [
        std("get", "x", "q.jsonl:1", 123_456_789, first, 16),
        std("write", "x", "q.jsonl:1", 123_456_789, first, 0),
    ]


# ------------------------------------------------------------------ replays


def optimize_hits(tmp: Path, trace: Path, instances: dict[str, int]) -> dict[str, list[int]]:
    config = {
        "trace_file_path": str(trace),
        "output_result_path": str(tmp / "out"),
        "eviction_params": {"eviction_mode": 3, "eviction_batch_size_per_instance": 1},
        "trace_replay": {"write_delay_ns": 0},
        "instance_groups": [{
            "group_name": "g", "quota_capacity": -1, "used_percentage": 1.0,
            "instances": [{"instance_id": i, "block_size": bs, "bytes_per_token": 64,
                           "eviction_policy_type": "lru"} for i, bs in instances.items()],
        }],
    }  # fmt: skip
    path = tmp / "optimize.json"
    path.write_text(json.dumps(config))
    cfg = load_optimize_config(path)
    result = run_optimize(cfg, load_trace(cfg, max_line_bytes=1 << 20), check=True)
    return {r.instance_id: (r.rows.local_hits + r.rows.remote_hits).tolist()
            for r in result.instances}  # fmt: skip


def litehit_hits(tmp: Path, trace: Path, block_size: int, capsys) -> tuple[int, int]:
    """Hit and input tokens of ``litehit replay`` at 1 GiB (a million 1 KiB blocks)."""
    cfg = write_replay_config(tmp / "replay.json", trace, block_size=block_size,
                              output=tmp / "facts",
                              instances=[lru_instance(block_size=block_size)])  # fmt: skip
    capsys.readouterr()
    assert main(["replay", str(cfg), "--json", "--quiet"]) == 0
    [inst] = json.loads(capsys.readouterr().out)["instances"]
    return inst["capacities"][0]["hit_tokens"], inst["input_tokens"]


def test_a_converted_publisher_log_replays(tmp_path: Path, capsys) -> None:
    log = write(tmp_path / "p.log", [
        get("i", 10, [1, 2]),
        start("i", 20, "s", [1, 2, 3]), finish("i", 30, "s"),
        get("i", 40, [1, 2, 3, 4]),
        start("i", 50, "u", [1, 2, 3, 4, 5]),  # no finish: lands at 100,050 us
        get("i", 200_000, [1, 2, 3, 4, 5]),
    ])  # fmt: skip
    out = tmp_path / "t.jsonl"
    assert main(["convert", "--from", "publisher-log", str(log), "-o", str(out),
                 "--block-size", "4"]) == 0  # fmt: skip
    # optimize: a get hits what the writes put there: 0, then [1,2,3], then all five.
    assert optimize_hits(tmp_path, out, {"i": 4}) == {"i": [0, 3, 5]}
    # replay (LiteHit) takes the gets as requests: 0, then [1,2], then [1,2,3,4].
    assert litehit_hits(tmp_path, out, 4, capsys) == ((0 + 2 + 4) * 4, (2 + 4 + 5) * 4)


@pytest.mark.parametrize("emit", ["request", "get-write"])
def test_a_converted_bailian_trace_replays(tmp_path: Path, capsys, emit: str) -> None:
    src = write(tmp_path / "q.jsonl", BAILIAN)
    out = tmp_path / "t.jsonl"
    assert main(["convert", "--from", "qwen-bailian", str(src), "-o", str(out),
                 "--instance", "i", "--emit", emit]) == 0  # fmt: skip
    # hits in blocks: 0; [1,2,3]; [1,2]; [1,2,3] of [1,2,3,4]
    assert optimize_hits(tmp_path, out, {"i": 16}) == {"i": [0, 3, 2, 3]}
    if emit == "request":
        assert litehit_hits(tmp_path, out, 16, capsys) == (8 * 16, 48 + 50 + 40 + 70)


# ------------------------------------------------------------------ errors


PUB_ERRORS = [
    ('{"type":"GetCacheLocation","trigger_time_us":5,"keys":[1]}',
     "p.log:1: missing required field 'source'"),
    (get("a", 5, "x"), "p.log:1: field 'keys' must be an array of int64 integers; got \"x\""),
    (get("a", 5, [1, 2], block_mask=5),
     "p.log:1: field 'block_mask' must be an integer in [0, 2] or an array of 2 booleans "
     "(one per key); got 5"),
    (get("a", 0, [1]), "p.log:1: field 'trigger_time_us' must be an integer in "
     "[1, 9223372036754775]; got 0"),
    (json.dumps({"type": "StartWriteCache", "source": "a", "trigger_time_us": 5, "keys": [1]}),
     "p.log:1: missing required field 'write_session_id'"),
    ('{"source":"a"}', "p.log:1: missing required field 'type'"),
    ("{nope", "p.log:1: invalid JSON: Expecting property name enclosed in double quotes at "
     "column 2"),
]  # fmt: skip


@pytest.mark.parametrize(("line", "message"), PUB_ERRORS)
def test_bad_publisher_lines(tmp_path: Path, capsys, line: str, message: str) -> None:
    log = write(tmp_path / "p.log", [line])
    out = tmp_path / "t.jsonl"
    assert main(["convert", "--from", "publisher-log", str(log), "-o", str(out),
                 "--block-size", "4"]) == 2  # fmt: skip
    assert capsys.readouterr().err.strip().endswith(message)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.log"]


def test_a_line_beyond_the_reorder_window(tmp_path: Path, capsys) -> None:
    log = write(tmp_path / "p.log", [
        get("a", 5_000_000, [1]), get("a", 7_000_000, [1]), get("a", 1000, [1]),
    ])  # fmt: skip
    out = tmp_path / "t.jsonl"
    base = ["convert", "--from", "publisher-log", str(log), "-o", str(out), "--block-size", "4"]
    assert main(base) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith(
            "p.log:3: trigger_time_us 1000 is earlier than trigger_time_us 5000000 of line 1, "
            "more than the reorder window (1000 ms) out of order; widen --reorder-window-ms"
        )
    )
    assert not out.exists()
    assert main([*base, "--reorder-window-ms", "6000"]) == 0
    times = [json.loads(line)["timestamp_ns"] for line in converted(out)]
    assert times == [10**6, 5 * 10**9, 7 * 10**9]


BAILIAN_ERRORS = [
    (bailian("x", 16, [1]), "q.jsonl:1: field 'timestamp' must be a number of seconds >= 0; "
     'got "x"'),
    (bailian(1.0, 0, [1]), "q.jsonl:1: field 'input_length' must be an integer > 0; got 0"),
    (bailian(1.0, 16, [1.5]), "q.jsonl:1: hash_ids[0] must be an int64 integer; got 1.5"),
    (bailian(1.0, 16, [1], turn=[1]),
     "q.jsonl:1: field 'turn' must be an integer or a string; got [1]"),
]  # fmt: skip


@pytest.mark.parametrize(("line", "message"), BAILIAN_ERRORS)
def test_bad_bailian_lines(tmp_path: Path, capsys, line: str, message: str) -> None:
    src = write(tmp_path / "q.jsonl", [BAILIAN[0], line])
    out = tmp_path / "t.jsonl"
    assert main(["convert", "--from", "qwen-bailian", str(src), "-o", str(out),
                 "--instance", "i"]) == 2  # fmt: skip
    assert capsys.readouterr().err.strip().endswith(message.replace(":1:", ":2:"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q.jsonl"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--from", "qwen-bailian"], "--from qwen-bailian needs --instance ID"),
        (["--from", "publisher-log"], "--from publisher-log needs --block-size TOKENS"),
        (["--from", "publisher-log", "--block-size", "4", "--emit", "get-write"],
         "--emit applies to --from qwen-bailian only, not --from publisher-log"),
        (["--from", "qwen-bailian", "--instance", "i", "--instance-map", "m.json"],
         "--instance-map applies to --from publisher-log only, not --from qwen-bailian"),
        (["EXTRA", "--from", "mooncake"], "--from mooncake takes one INPUT, got 2"),
        (["--from", "standard", "--reorder-window-ms", "5"],
         "--reorder-window-ms applies to --from publisher-log / qwen-bailian / text only, "
         "not --from standard"),
    ],
)  # fmt: skip
def test_bad_options(tmp_path: Path, capsys, args: list[str], message: str) -> None:
    src = write(tmp_path / "in.jsonl", [BAILIAN[0]])
    assert main(["convert", str(src), *args, "-o", str(tmp_path / "o.jsonl")]) == 2
    assert capsys.readouterr().err.strip().endswith(message)


@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        ("[1]", "m.json:0: the instance map must be a JSON object source -> instance"),
        ('{"a": 5}', 'm.json:0: ["a"]: must be an instance id, null (drop) or an object '
         "with 'instance_id' and 'block_size'; got 5"),
        ('{"a": {"block_size": 0}}', 'm.json:0: ["a"].block_size: must be an integer > 0; got 0'),
        ("{", "m.json:0: the instance map is not valid JSON: "),
    ],
)  # fmt: skip
def test_bad_instance_map(tmp_path: Path, capsys, mapping: str, message: str) -> None:
    log = write(tmp_path / "p.log", [get("a", 5, [1])])
    (tmp_path / "m.json").write_text(mapping)
    out = tmp_path / "t.jsonl"
    assert (
        main(
            [
                "convert",
                "--from",
                "publisher-log",
                str(log),
                "-o",
                str(out),
                "--block-size",
                "4",
                "--instance-map",
                str(tmp_path / "m.json"),
            ]
        )
        == 2
    )
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_progress_bar_on_a_terminal(tmp_path: Path) -> None:
    log = write(tmp_path / "p.log", [get("a", 10 + i, [1, 2, 3]) for i in range(20000)])
    out = tmp_path / "t.jsonl"
    argv = cli_argv("convert", "--from", "publisher-log", str(log), "-o", str(out),
                    "--block-size", "4")  # fmt: skip
    code, tty_err = run_on_terminal(argv, serve_env())
    assert code == 0
    # tqdm's bar over the input's bytes, then the summary
    assert re.search(r"\rconvert:\s+0%\|\s*\| 0\.00/\S+ \[00:00<\?, \?B/s\]", tty_err), tty_err
    assert "convert: 20000 events, 1 instances, " in tty_err
    assert len(converted(out)) == 20000


def test_emit_config_for_a_converted_log(tmp_path: Path, capsys) -> None:
    log = write(tmp_path / "p.log", [get("a", 10, [1, 2]), get("b", 20, [1])])
    out, cfg = tmp_path / "t.jsonl", tmp_path / "c.json"
    base = ["convert", "--from", "publisher-log", str(log), "-o", str(out), "--block-size", "16",
            "--emit-config", str(cfg)]  # fmt: skip
    assert main(base) == 0
    config = json.loads(cfg.read_text())
    assert config["block_size"] == 16
    assert [(i["instance_id"], i["block_size"]) for i in config["instances"]] == [
        ("a", 16),
        ("b", 16),
    ]
    imap = tmp_path / "m.json"
    imap.write_text(json.dumps({"b": {"block_size": 32}}))
    cfg.unlink()
    out.unlink()
    capsys.readouterr()
    assert main([*base, "--instance-map", str(imap)]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith(
            "p.log:0: --emit-config needs one block size but the instances have a=16, b=32 "
            "(--block-size 16); convert them separately"
        )
    )
    assert not out.exists() and not cfg.exists()
