"""``litehit export-tree`` end to end: per-node gets and latest get on a hand-built trace
(literal values), node and block counts against the distinct paths counted independently
from the trace (the real Mooncake trace at a quota, and a seeded two-instance trace),
``cached_blocks`` against ``litehit optimize``'s CachedBlocks, tiers (a block in two tiers
counts twice), the pictures, the progress bar, and bad flags and configurations (exit 2,
nothing written)."""

from __future__ import annotations

import csv
import json
import random
import re
import sys
from pathlib import Path

import pytest

from tests.conftest import mooncake_trace, run_cli

MIB_PER_TOKEN = 65536  # block_size 16 x 65536 B = 1 MiB a block: quota C/1024 GiB = C blocks
PNG = b"\x89PNG\r\n\x1a\n"


def write_config(
    tmp: Path,
    records: list[dict] | None,
    *,
    policy: str = "lru",
    blocks: int = -1,
    instances: tuple[str, ...] = ("a",),
    group_extra: dict | None = None,
    trace: str = "trace.jsonl",
    block_size: int = 16,
) -> Path:
    """A configuration (and, given ``records``, its trace) in ``tmp``: one group of
    ``blocks`` 1-MiB blocks (-1 infinite), eviction mode 3, batch 1."""
    if records is not None:
        (tmp / trace).write_text("".join(json.dumps(r) + "\n" for r in records))
    group = {
        "group_name": "g",
        "quota_capacity": blocks / 1024 if blocks >= 0 else -1,
        "instances": [
            {
                "instance_id": i,
                "block_size": block_size,
                "bytes_per_token": (1 << 20) // block_size,
                "eviction_policy_type": policy,
            }
            for i in instances
        ],
        **(group_extra or {}),
    }
    config = {
        "trace_file_path": trace,
        "output_result_path": "out",
        "eviction_params": {"eviction_mode": 3, "eviction_batch_size_per_instance": 1},
        "instance_groups": [group],
    }
    path = tmp / "config.json"
    path.write_text(json.dumps(config, indent=1))
    return path


def rec(t: int, keys: list[int], kind: str = "request", inst: str = "a", **extra) -> dict:
    out = {"type": kind, "instance_id": inst, "timestamp_ns": t, "keys": keys}
    if kind != "write":
        out["input_len"] = 16 * len(keys)
    return out | extra


def export(tmp: Path, config: Path, *args: str) -> dict[str, dict]:
    done = run_cli("export-tree", str(config), *args, cwd=tmp)
    assert done.returncode == 0, done.stderr
    folder = tmp / "out" / "radix_tree"
    trees = {}
    for p in folder.glob("*_radix_tree.json"):
        name = p.name[: -len("_radix_tree.json")]
        data = json.loads(p.read_text())
        assert list(data) == [name], "the reference's shape: {instance_id: tree}"
        trees[name] = data[name]
    return trees


def test_gets_per_node_on_a_hand_built_trace(tmp_path):
    """Paths 1, 1-2, 1-2-3, 1-2-4, 1-2-4-5 and 7 make four nodes: [1,2] (branches into
    3 and 4), [3], [4,5], [7]. A get counts once per node however many of its blocks it
    hits, local (masked) or remote; a get missing every block of a node does not count."""
    records = [
        rec(10, [1, 2, 3], "write"),
        rec(20, [1, 2, 4, 5], "write"),
        rec(30, [7], "write"),
        rec(40, [1, 2, 3], "get"),
        rec(50, [1, 2, 4, 9], "get"),  # hits [1,2] and [4]; 9 was never written
        rec(60, [7], "get"),
        rec(70, [1, 2, 4, 5], "get"),
        rec(80, [1, 2, 3], "get", block_mask=1),  # 1 local, 2 and 3 remote
        rec(90, [8, 1], "get"),  # a path never written: no hit
    ]
    (tree,) = export(tmp_path, write_config(tmp_path, records)).values()
    # the reference's plotting script reads these fields, in this order, then ours
    assert list(tree["nodes"][0]) == [
        "node_id", "access_count", "last_access_time", "total_blocks", "cached_blocks",
        "is_leaf", "parent_id", "total_block_count", "cached_copies", "first_key", "last_key",
    ]  # fmt: skip
    columns = ("node_id", "parent_id", "total_block_count", "cached_copies", "access_count",
               "last_access_time", "is_leaf", "first_key", "last_key")  # fmt: skip
    assert [tuple(n[c] for c in columns) for n in tree["nodes"]] == [
        (0, None, 2, 2, 4, 80, False, 1, 2),
        (1, 0, 1, 1, 2, 80, True, 3, 3),
        (2, 0, 2, 2, 2, 70, True, 4, 5),
        (3, None, 1, 1, 1, 60, True, 7, 7),
    ]
    assert tree["edges"] == [[0, 1], [0, 2]]
    assert (tree["instance_id"], tree["eviction_policy_type"], tree["tiers"]) == ("a", "lru", [])
    assert (tree["node_count"], tree["block_count"], tree["cached_copies"]) == (4, 6, 6)
    assert tree["end_time_ns"] == 90
    assert [n["total_blocks"] for n in tree["nodes"]] == [[1, 2], [3], [4, 5], [7]]
    assert [n["cached_blocks"] for n in tree["nodes"]] == [[1, 2], [3], [4, 5], [7]]
    (counted,) = export(tmp_path, write_config(tmp_path, records), "--counts-only").values()
    assert [(n["total_blocks"], n["cached_blocks"]) for n in counted["nodes"]] == [
        (2, 2), (1, 1), (2, 2), (1, 1)
    ]  # fmt: skip


def test_cached_blocks_at_the_end_and_evicted_paths_stay(tmp_path):
    """At 3 blocks LRU evicts the oldest: the tree keeps every path written, its
    cached_blocks are the end state, equal to optimize's last CachedBlocks (the trace
    ends with a get) and its summary's cached_blocks."""
    records = [
        rec(10, [1, 2, 3], "write"),
        rec(20, [7], "write"),  # evicts [1]
        rec(30, [1, 2, 3], "get"),  # hits nothing: the walk stops at [1]
        rec(40, [7, 8], "write"),  # evicts [2]
        rec(50, [7], "get"),
    ]
    config = write_config(tmp_path, records, blocks=3)
    (tree,) = export(tmp_path, config).values()
    assert [(n["total_blocks"], n["cached_blocks"], n["access_count"]) for n in tree["nodes"]] == [
        ([1, 2, 3], [3], 0),  # the evicted blocks stay in the tree, not in cached_blocks
        ([7, 8], [7, 8], 1),
    ]
    assert tree["nodes"][0]["last_access_time"] is None  # never hit: null, not a time
    done = run_cli("optimize", str(config), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader((tmp_path / "out" / "a_hit_rates.csv").open()))
    assert int(rows[-1]["CachedBlocks"]) == tree["cached_copies"] == 3
    assert json.loads(done.stdout)["instances"][0]["cached_blocks"] == 3


def _distinct_paths(reads: list[list[int]]) -> tuple[int, int]:
    """(distinct paths, nodes of the compressed trie) counted with Python sets: a path
    starts a node when it is a first block or its parent has other than one child."""
    paths = {tuple(keys[: i + 1]) for keys in reads for i in range(len(keys))}
    children: dict[tuple, int] = {}
    for p in paths:
        children[p[:-1]] = children.get(p[:-1], 0) + 1
    heads = sum(1 for p in paths if len(p) == 1 or children[p[:-1]] != 1)
    return len(paths), heads


def test_counts_on_mooncake_at_a_quota_equal_the_distinct_paths(tmp_path):
    """The real trace at 10000 blocks of 512 tokens (about 22% hit rate; most blocks are
    evicted and many paths written again): every path written is one block of the tree,
    once, and the cached blocks are optimize's at the end."""
    trace = mooncake_trace("conversation_trace.jsonl")
    reads = [
        d["hash_ids"][: d["input_length"] // 512]
        for d in map(json.loads, trace.read_text().splitlines())
    ]
    n_paths, n_nodes = _distinct_paths(reads)
    assert (n_paths, n_nodes) == (170899, 7363)
    config = write_config(tmp_path, None, blocks=10000, block_size=512, trace=str(trace))
    (tree,) = export(tmp_path, config, "--trace-format", "mooncake").values()
    assert (tree["block_count"], tree["node_count"]) == (n_paths, n_nodes), (
        "a path written twice has two node slots: the analysis replay lost a kept node "
        "(see the policy replay's rebuild_table under KEEP)"
    )
    assert tree["cached_copies"] == 10000
    assert sum(len(n["cached_blocks"]) for n in tree["nodes"]) == 10000
    assert tree["nodes"][0]["access_count"] == 12030  # every read but the first hits [0]


def test_seeded_two_instances_with_evictions(tmp_path):
    """Two instances sharing a 40-block quota under leaf-aware LRU: each tree holds
    exactly its own distinct paths; cached blocks sum to optimize's per instance."""
    rng = random.Random(7)
    prefixes = [[rng.randrange(50) for _ in range(rng.randint(1, 4))] for _ in range(8)]
    records, reads = [], {"a": [], "b": []}
    for t in range(1, 3001):
        keys = rng.choice(prefixes) + [rng.randrange(50) for _ in range(rng.randint(0, 5))]
        inst = rng.choice("ab")
        reads[inst].append(keys)
        records.append(rec(t * 10, keys, inst=inst))
    config = write_config(tmp_path, records, blocks=40, instances=("a", "b"),
                          policy="leaf_aware_lru")  # fmt: skip
    trees = export(tmp_path, config)
    done = run_cli("optimize", str(config), "--json", cwd=tmp_path)
    cached = {i["instance_id"]: i["cached_blocks"] for i in json.loads(done.stdout)["instances"]}
    for inst in "ab":
        assert (trees[inst]["block_count"], trees[inst]["node_count"]) == _distinct_paths(
            reads[inst]
        )
        assert trees[inst]["cached_copies"] == cached[inst]
        nodes = trees[inst]["nodes"]
        assert sum(len(n["total_blocks"]) for n in nodes) == trees[inst]["block_count"]
        paths = {tuple(keys[: i + 1]) for keys in reads[inst] for i in range(len(keys))}
        assert sorted(k for n in nodes for k in n["total_blocks"]) == sorted(p[-1] for p in paths)
        parents = {n["node_id"]: n["parent_id"] for n in trees[inst]["nodes"]}
        assert all(p is None or p < c for c, p in parents.items())


TIERS = {
    "tier_strategy": {"hierarchical_eviction_enabled": True, "write_mode": "write_through"},
    "storages": [
        {"unique_name": "hbm", "priority": 0, "capacity": 2 / 1024},
        {"unique_name": "ssd", "priority": 1, "capacity": 10 / 1024},
    ],
}


def test_tiered_block_counts_once_per_tier(tmp_path):
    """write_through puts [1,2,3] into both tiers; hbm (2 blocks) evicts [1]: 5 cached
    replicas of 3 blocks, as optimize's CachedBlocks counts them."""
    records = [rec(10, [1, 2, 3]), rec(20, [1, 2, 3], "get")]
    config = write_config(tmp_path, records, group_extra=TIERS)
    done = run_cli("export-tree", str(config), cwd=tmp_path)
    assert done.returncode == 0, f"tier configurations not accepted yet? {done.stderr}"
    tree = json.loads((tmp_path / "out" / "radix_tree" / "a_radix_tree.json").read_text())["a"]
    assert tree["tiers"] == ["hbm", "ssd"]
    assert [(n["total_block_count"], n["cached_copies"], n["access_count"], n["cached_blocks"])
            for n in tree["nodes"]] == [(3, 5, 1, [1, 2, 3])]  # fmt: skip
    done = run_cli("optimize", str(config), cwd=tmp_path)
    rows = list(csv.DictReader((tmp_path / "out" / "a_hit_rates.csv").open()))
    assert int(rows[-1]["CachedBlocks"]) == 5


def test_pictures_hot_paths_and_progress(tmp_path):
    from terminal import run_on_terminal

    from tests.serve_process import serve_env

    records = [rec(t, [1, 2, 3 + t % 4, t % 3]) for t in range(1, 2001)]
    config = write_config(tmp_path, records, blocks=10)
    done = run_cli("export-tree", str(config), "--show-hot-paths", "--top-k", "2",
                   "-o", str(tmp_path / "o"), cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    folder = tmp_path / "o" / "radix_tree"
    for name in ("a_radix_tree.png", "a_hot_paths.png", "a_radix_tree.json"):
        assert (folder / name).read_bytes()[:8] == PNG or name.endswith(".json")
    lines = done.stdout.splitlines()
    # paths [1], [1,2], 4 x [1,2,k], 12 x [1,2,k,m]: node [1,2], 4 nodes [k], 12 leaves
    assert lines == [
        "a: 17 nodes (1 roots, 12 leaves), 18 blocks, 10 cached, deepest path 4 blocks, "
        "5 nodes hit",
        "a: top 2 nodes by gets (node: gets, latest, path)",
        "  #1 node 0: 1999 gets, latest at 0.000 s, 2 blocks deep: 0(2)",
        "  #2 node 1: 499 gets, latest at 0.000 s, 3 blocks deep: 0(2) > 1(1)",
    ]
    assert done.stderr.startswith("export-tree: 17 nodes, 1 instances, ")
    assert not (tmp_path / "out").exists()
    code, tty = run_on_terminal(
        [sys.executable, "-m", "litehit_service", "export-tree", str(config), "-o",
         str(tmp_path / "t")], serve_env())  # fmt: skip
    assert code == 0
    size = config.with_name("trace.jsonl").stat().st_size  # the bar counts the trace's bytes
    assert re.search(rf"\rexport-tree:\s+0%\|\s*\| 0/{size} \[", tty), tty


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--top-k", "0"), "argument --top-k: must be an integer >= 1, got '0'"),
        (("--trace-format", "nope"), "unknown trace format 'nope'; known formats: 'standard'"),
        (("--instance", "zz"), "--instance 'zz' is not a configured instance (configured: a)"),
        (("-c", "other.json"), "two configurations given: "),
        (("--max-line-bytes", "0"), "must be an integer > 0, got '0'"),
    ],
)
def test_bad_flags(tmp_path, args, message):
    config = write_config(tmp_path, [rec(1, [1])])
    done = run_cli("export-tree", str(config), *args, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_bad_configuration_and_missing_config(tmp_path):
    config = write_config(tmp_path, [rec(1, [1])], policy="lfu")
    done = run_cli("export-tree", "-c", str(config), cwd=tmp_path)
    assert done.returncode == 2
    assert "config.json:" in done.stderr and "eviction_policy_type: must be one of" in done.stderr
    assert "'lfu'" in done.stderr and not (tmp_path / "out").exists()
    done = run_cli("export-tree", cwd=tmp_path)
    assert done.returncode == 2
    assert "give the configuration: CONFIG.json (or -c CONFIG.json)" in done.stderr
    done = run_cli("export-tree", str(tmp_path / "missing.json"), cwd=tmp_path)
    assert done.returncode == 2 and "missing.json" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_reference_flags(tmp_path):
    """The reference's export_radix_tree command line: --hot-nodes (our --top-k),
    --show-blocks/--max-blocks (the hot paths' keys, root first), --stats-only (no
    pictures), --layout/--node-size (accepted, not acted on)."""
    records = [rec(1, [11, 12, 13, 14]), rec(2, [11, 12, 13, 14]), rec(3, [11, 12, 20]),
               rec(4, [11, 12, 20])]  # fmt: skip
    config = write_config(tmp_path, records)
    done = run_cli("export-tree", str(config), "--hot-nodes", "2", "--show-blocks",
                   "--max-blocks", "3", "--stats-only", "--layout", "radial", "--node-size",
                   "9", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "a: 3 nodes (1 roots, 2 leaves), 5 blocks, 5 cached, deepest path 4 blocks, 3 nodes hit",
        "a: top 2 nodes by gets (node: gets, latest, path)",
        "  #1 node 0: 3 gets, latest at 0.000 s, 2 blocks deep: 0(2)",
        "     blocks: 11, 12",
        "  #2 node 1: 1 gets, latest at 0.000 s, 4 blocks deep: 0(2) > 1(2)",
        "     blocks: 11, 12, 13 (+1 more)",
    ]
    folder = tmp_path / "out" / "radix_tree"
    assert sorted(p.name for p in folder.iterdir()) == ["a_radix_tree.json"]
    assert json.loads((folder / "a_radix_tree.json").read_text())["a"]["nodes"][0][
        "total_blocks"
    ] == [11, 12]
