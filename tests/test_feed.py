"""``litehit feed``: a trace streamed into a real server (port 0) by the CLI as a
subprocess leaves exactly the counters ``litehit replay`` computes offline from the same
trace and config; its summary, its errors and its pacing (with an injected clock)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from conftest import (
    cli_argv,
    lru_instance,
    mooncake_trace,
    reserved_port,
    run_cli,
    write_replay_config,
)
from serve_process import serve_env
from terminal import run_on_terminal

from litehit_core import InvalidRequestError
from litehit_service.litehit.feed import Pacer, check_rate

GIB = 1024**3


def standard_trace(path: Path, requests: int = 400, seed: int = 7) -> Path:
    """Requests of 4-token keys for instances ``a`` and ``b`` sharing prefixes, with a
    partial tail block of tokens now and then, and a few write events."""
    rng = random.Random(seed)
    prefixes = [[rng.randrange(1 << 40) for _ in range(rng.randrange(1, 12))] for _ in range(30)]
    lines = []
    for i in range(requests):
        keys = rng.choice(prefixes)[: rng.randrange(1, 13)]
        keys = keys + [rng.randrange(1 << 40) for _ in range(rng.randrange(0, 4))]
        kind = "write" if i % 37 == 5 else "request"
        lines.append(
            {
                "type": kind,
                "instance_id": "ab"[rng.randrange(2)],
                "trace_id": str(i),
                "timestamp_ns": 1000 * (i + 1),
                "keys": keys,
                "input_len": 4 * len(keys) + rng.randrange(4),
            }
        )
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return path


def counters(listing: list) -> dict[str, tuple]:
    """Per instance: (queries, input tokens, hit tokens per slot, theoretical hit tokens)."""
    return {
        s.instance_id: (
            s.total_queries,
            s.total_input_tokens,
            [c.total_hits * s.debug_info.block_size for c in s.capacity_summaries],
            s.theoretical_summary.total_max_hits * s.debug_info.block_size,
        )
        for s in listing
    }


def replayed(config: Path) -> dict[str, tuple]:
    """The same counters from ``litehit replay --json CONFIG``."""
    done = run_cli("replay", "--json", str(config))
    assert done.returncode == 0, done.stderr
    return {
        i["instance_id"]: (
            i["requests"],
            i["input_tokens"],
            [c["hit_tokens"] for c in i["capacities"]],
            i["theoretical_hit_tokens"],
        )
        for i in json.loads(done.stdout)["instances"]
    }


def feed(*args: str):
    return run_cli("feed", *args)


GROUPS = [
    {"name": "g", "capacity_gb": [64 / GIB * 1024, 256 / GIB * 1024, 1.0],
     "enable_theoretical_max_cache": True},
    {"name": "h", "capacity_gb": [32 / GIB * 1024, 1.0], "enable_prefix_hash": True,
     "enable_theoretical_max_cache": True},
]  # fmt: skip


def test_feed_of_a_standard_trace_equals_the_offline_replay(tmp_path, start_server):
    """Two instances named by the trace, one of them coarsened from 4- to 8-token blocks
    with prefix hashing, write events skipped: the server's counters are the replay's."""
    trace = standard_trace(tmp_path / "trace.jsonl")
    config = write_replay_config(
        tmp_path / "config.json",
        trace,
        groups=GROUPS,
        instances=[lru_instance("a", "g", 4), lru_instance("b", "h", 8)],
    )
    server = start_server()
    done = feed("--server", server.target, str(trace), "--register-from", str(config),
                "--batch", "7")  # fmt: skip
    assert done.returncode == 0, done.stderr
    with server.client() as client:
        live = counters(client.list_instances().instances)
    offline = replayed(config)
    assert live == offline
    assert live["a"][0] + live["b"][0] == 400 - len(range(5, 400, 37))
    # the summary: one line per instance with the server's rates, then the run line
    out = done.stdout.splitlines()
    assert [line.split(" (")[0] for line in out] == ["  a", "  b"]
    assert f"group g, block 4 tokens, {live['a'][0]} queries on the server" in out[0]
    assert "token hit rate 6.10352e-05 GiB " in out[0] and ", inf " in out[0]
    queries = live["a"][0] + live["b"][0]
    assert done.stderr.startswith(f"feed: {queries} queries, {queries} requests, 2 instances, ")
    assert done.stderr.rstrip().endswith(f"queries/s -> {server.target}")


def test_feed_of_a_mooncake_trace_fanned_out_equals_the_offline_replay(tmp_path, start_server):
    """Mooncake lines (no instance ids) fanned out to two instances of 512- and 1024-token
    blocks, fed twice in two runs of halves: the counters are one replay's of the whole."""
    lines = mooncake_trace().read_text(encoding="utf-8").splitlines(keepends=True)[:600]
    whole = tmp_path / "mooncake.jsonl"
    whole.write_text("".join(lines), encoding="utf-8")
    halves = [tmp_path / "first.jsonl", tmp_path / "second.jsonl"]
    halves[0].write_text("".join(lines[:250]), encoding="utf-8")
    halves[1].write_text("".join(lines[250:]), encoding="utf-8")
    config = write_replay_config(
        tmp_path / "config.json",
        whole,
        block_size=512,
        trace_format="mooncake",
        fanout_all_instances=True,
        groups=GROUPS,
        instances=[lru_instance("m512", "g", 512), lru_instance("m1024", "h", 1024)],
    )
    server = start_server()
    for half in halves:
        done = feed("--server", server.target, str(half), "--register-from", str(config))
        assert done.returncode == 0, done.stderr
    with server.client() as client:
        live = counters(client.list_instances().instances)
    assert live == replayed(config)
    assert live["m512"][0] == live["m1024"][0] == 600
    assert live["m512"][2][-1] > 0


def test_unknown_instance_without_register_from_is_bad_input(tmp_path, start_server):
    trace = standard_trace(tmp_path / "trace.jsonl", 20)
    server = start_server()
    done = feed("--server", server.target, str(trace), "--instance", "ghost")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"litehit feed: error: instance_id 'ghost' is not registered on {server.target} "
        "(pass --register-from CONFIG to register it)"
    )
    with server.client() as client:
        assert not client.list_instances().instances


@pytest.mark.parametrize("rate", ["0", "-5", "abc", "nan", "inf"])
def test_a_bad_rate_is_bad_input_naming_the_value(tmp_path, rate):
    done = feed("--server", "127.0.0.1:1", str(tmp_path / "t.jsonl"), "--rate", rate)
    assert done.returncode == 2
    assert f"argument --rate: must be a number of queries/s > 0, got {rate!r}" in done.stderr


def test_a_bad_trace_line_names_path_line_and_field(tmp_path, start_server):
    trace = standard_trace(tmp_path / "trace.jsonl", 10)
    with trace.open("a", encoding="utf-8") as fh:
        fh.write('{"type":"request","instance_id":"a","timestamp_ns":1,"keys":[1],'
                 '"input_len":"many"}\n')  # fmt: skip
    config = write_replay_config(
        tmp_path / "c.json", trace, groups=GROUPS, instances=[lru_instance("a"), lru_instance("b")]
    )
    server = start_server()
    done = feed("--server", server.target, str(trace), "--register-from", str(config))
    assert done.returncode == 2
    assert done.stderr.startswith(f"{trace}:11: ")
    assert "field 'input_len'" in done.stderr and '"many"' in done.stderr
    with server.client() as client:  # the requests before the bad line were fed
        assert sum(s.total_queries for s in client.list_instances().instances) == 9


def test_mooncake_without_instance_or_config_is_a_usage_error(tmp_path):
    trace = tmp_path / "m.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 600, "hash_ids": [1, 2]}\n')
    done = feed("--server", "127.0.0.1:1", str(trace))
    assert done.returncode == 2
    assert "a mooncake trace names no instance: pass --instance ID" in done.stderr


def test_an_unreachable_server_exits_1(tmp_path):
    trace = standard_trace(tmp_path / "trace.jsonl", 5)
    with reserved_port() as port:
        done = feed("--server", f"127.0.0.1:{port}", str(trace), "--instance", "a",
                    "--timeout", "1")  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.startswith(f"litehit feed: error: 127.0.0.1:{port} unreachable: ")


def test_admin_and_query_tokens_are_sent(tmp_path, start_server):
    trace = standard_trace(tmp_path / "trace.jsonl", 30)
    config = write_replay_config(
        tmp_path / "c.json", trace, groups=GROUPS, instances=[lru_instance("a"), lru_instance("b")]
    )
    server = start_server(admin_token="adm", query_token="qry")
    args = ("--server", server.target, str(trace), "--register-from", str(config))
    refused = feed(*args, "--query-token", "qry")  # registration needs the admin token
    assert refused.returncode != 0
    token_file = tmp_path / "admin-token"
    token_file.write_text("adm\n")
    done = feed(*args, "--admin-token-file", str(token_file), "--query-token", "qry")
    assert done.returncode == 0, done.stderr
    assert "29 requests" in done.stderr  # one of the 30 lines is a write


def test_progress_bar_only_on_a_terminal(tmp_path, start_server):
    trace = standard_trace(tmp_path / "trace.jsonl", 50)
    config = write_replay_config(
        tmp_path / "c.json", trace, groups=GROUPS, instances=[lru_instance("a"), lru_instance("b")]
    )
    server = start_server()
    args = ("feed", "--server", server.target, str(trace), "--register-from", str(config))
    plain = run_cli(*args)
    assert plain.returncode == 0 and "\r" not in plain.stderr
    assert plain.stderr.count("\n") == 1
    code, tty_err = run_on_terminal(cli_argv(*args), serve_env())
    assert code == 0
    assert "feed: " in tty_err and "q [" in tty_err  # tqdm's bar: "49.0q [00:00, ...q/s]"


# ---------------------------------------------------------------- pacing


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_pacer_holds_the_rate_with_an_injected_clock():
    clock = FakeClock()
    pacer = Pacer(50.0, clock, clock.sleep)
    pacer.wait(0)  # the first batch goes at once
    assert clock.slept == []
    pacer.wait(10)  # 10 queries sent: the next ones at start + 0.2 s
    assert clock.slept == [pytest.approx(0.2)]
    clock.now += 1.0  # the sender fell behind: no sleep, no catching up beyond the rate
    pacer.wait(20)
    assert clock.slept == [pytest.approx(0.2)]
    assert pacer.delay(100) == pytest.approx(100 / 50 - 1.2)


def test_pacer_without_rate_never_sleeps():
    clock = FakeClock()
    pacer = Pacer(None, clock, clock.sleep)
    for sent in (0, 10, 10_000):
        pacer.wait(sent)
    assert clock.slept == []


@pytest.mark.parametrize("rate", [0, -1.0, float("nan"), float("inf"), "5", True])
def test_check_rate_names_the_value(rate):
    with pytest.raises(InvalidRequestError, match="rate must be"):
        check_rate(rate)
