"""The Python API (:mod:`litehit_service.optimizer.api`): the example of docs/optimizer.md
("Python API") runs as written and prints what it says; its numbers agree with a naive
LRU; ``AnalyzeResults`` writes the command's files byte for byte; ``ExportRadixTrees``
gives the tree of a hand-built trace; errors carry the command's messages and the verbs
their order.

Each test names in a comment the bug it catches (each was planted once to see it fail).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import tempfile
import traceback
from collections import OrderedDict
from pathlib import Path

import pytest
from conftest import run_cli
from doc_pages import ROOT, text_of

from litehit_service.optimizer import (
    InvalidRequestError,
    LocatedError,
    OptimizerConfigLoader,
    OptimizerManager,
    VerbOrderError,
)
from litehit_service.optimizer.api import optimize, tradeoff

BLOCK_TOKENS = 16
BLOCK_BYTES = 16 * 64


def example_code() -> str:
    """The first python block of docs/optimizer.md's "Python API" section."""
    text = text_of(ROOT / "docs" / "optimizer.md")
    start = text.index("\n### Python API\n")
    m = re.compile(r"```python\n(.*?)```", re.S).search(text, start)
    assert m is not None
    return m.group(1)


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """The example run once (its temporary folder under pytest's): its namespace, plus
    ``stdout``."""
    code = example_code()
    out = io.StringIO()
    namespace: dict[str, object] = {"__name__": "docs_example"}
    old = tempfile.tempdir
    tempfile.tempdir = str(tmp_path_factory.mktemp("example"))
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, "docs/optimizer.md (Python API)", "exec"), namespace)
    finally:
        tempfile.tempdir = old
    namespace["stdout"] = out.getvalue()
    return namespace


def lru_hit_blocks(requests: list[tuple[int, list[int]]], capacity: int) -> list[int]:
    """The oracle: an OrderedDict LRU of block paths (oldest first), read and written
    head first as spec §3-4 say for ``request`` records (eviction mode 3, no delay): a
    read hits the longest cached prefix and touches it, the write touches or inserts
    every block in order, then the oldest go until ``capacity`` blocks remain."""
    cache: OrderedDict[tuple[int, ...], None] = OrderedDict()
    hits = []
    for _, keys in requests:
        paths = [tuple(keys[: i + 1]) for i in range(len(keys))]
        n = 0
        while n < len(paths) and paths[n] in cache:
            n += 1
        hits.append(n)
        for p in paths[:n]:
            cache.move_to_end(p)
        for p in paths:
            cache[p] = None
            cache.move_to_end(p)
        while len(cache) > capacity:
            cache.popitem(last=False)
    return hits


def test_the_example_prints_what_the_page_says(example) -> None:
    # Catches: the page's printed numbers drifting from what the code prints (planted:
    # ExportRadixTrees listing every block as cached).
    shown = [line[4:] for line in example_code().splitlines() if line.startswith("# > ")]
    assert example["stdout"].splitlines() == shown


def test_the_example_agrees_with_a_naive_lru(example) -> None:
    # Catches: a replay that is not the configured one (planted: optimize() replaying at
    # infinite quota) and tables or curve points attributed to the wrong reads.
    requests = example["requests"]
    result = example["result"]
    table = result["chat"]
    hits = lru_hit_blocks(requests, capacity=4)
    assert table.column("HitTokens").to_pylist() == [h * BLOCK_TOKENS for h in hits]
    inputs = [BLOCK_TOKENS * len(keys) + 8 for _, keys in requests]
    assert table.column("InputTokens").to_pylist() == inputs
    assert result.hit_rate == pytest.approx(sum(hits) * BLOCK_TOKENS / sum(inputs))
    csv = Path(example["folder"], "results", "chat_hit_rates.csv").read_text().splitlines()
    column = csv[0].split(",").index("HitTokens")
    assert [int(line.split(",")[column]) for line in csv[1:]] == [h * 16 for h in hits]
    for row in example["curve"].to_pylist():
        if row["kind"] in ("point", "theoretical"):
            blocks = row["capacity_bytes"] // BLOCK_BYTES
            expected = sum(lru_hit_blocks(requests, capacity=blocks)) * BLOCK_TOKENS
            assert row["hit_tokens"] == expected, row
    assert [r["capacity_bytes"] for r in example["curve"].to_pylist() if r["kind"] == "p99"] == [
        6 * BLOCK_BYTES  # the smallest capacity holding every hit: the oracle's
    ]
    assert sum(lru_hit_blocks(requests, 5)) < sum(lru_hit_blocks(requests, 6))


def _tree_files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_analyze_results_writes_the_commands_files(example, tmp_path) -> None:
    # Catches: AnalyzeResults writing other files than `litehit optimize -c` (planted: a
    # chart the command does not draw by default) or other bytes, and lifecycle files
    # other than --export-lifecycle's.
    path = example["path"]
    results = Path(example["folder"], "results")
    done = run_cli("optimize", "-c", path, "-o", str(tmp_path / "cli"))
    assert done.returncode == 0, done.stderr
    assert _tree_files(results) == _tree_files(tmp_path / "cli")

    loader = OptimizerConfigLoader()
    assert loader.load(path)
    config = loader.config()
    config.set_output_result_path(tmp_path / "api")
    manager = OptimizerManager(config, enable_lifecycle_tracking=True)
    assert manager.Init()
    manager.DirectRun()
    written = manager.AnalyzeResults()
    done = run_cli("optimize", "-c", path, "-o", str(tmp_path / "cli2"), "--export-lifecycle")
    assert done.returncode == 0, done.stderr
    files = _tree_files(tmp_path / "api")
    assert files == _tree_files(tmp_path / "cli2")
    assert sorted(files) == sorted(str(Path(p).relative_to(tmp_path / "api")) for p in written)
    assert "chat_lifecycle.csv" in files  # the reference's name, beside the hit rates

    # optimize(output_dir=...) writes the same; without it nothing at all
    before = _tree_files(Path(example["folder"]))
    again = optimize(path, output_dir=tmp_path / "fn", export_lifecycle=True)
    assert _tree_files(tmp_path / "fn") == files
    assert sorted(str(Path(p).relative_to(tmp_path / "fn")) for p in again.files) == sorted(files)
    optimize(path)
    assert _tree_files(Path(example["folder"])) == before


def test_tradeoff_is_the_commands_summary(example, tmp_path) -> None:
    # Catches: a table other than the summary CSV `litehit tradeoff` writes (planted: the
    # local rows returned for the total curve), rows or columns in another order.
    path = example["path"]
    done = run_cli("tradeoff", "-c", path, "-o", str(tmp_path / "cli"), "--hit-rate-type", "all")
    assert done.returncode == 0, done.stderr
    table = example["curve"]
    for kind, rows in (("total", table), ("local", tradeoff(path, hit_rate_type="local"))):
        csv = (tmp_path / "cli" / "pareto" / f"pareto_curve_{kind}.csv").read_text()
        lines = csv.splitlines()
        assert lines[0].split(",") == rows.column_names
        assert [line.split(",")[:3] + [line.split(",")[4]] for line in lines[1:]] == [
            [r["policy"], r["kind"], str(r["capacity_bytes"]), str(r["hit_tokens"])]
            for r in rows.to_pylist()
        ]
    assert not (Path(example["folder"]) / "pareto").exists()  # tradeoff() wrote nothing
    with pytest.raises(InvalidRequestError, match="hit_rate_type"):
        tradeoff(path, hit_rate_type="all")


HAND_TRACE = [
    {"type": "write", "timestamp_ns": 1, "keys": [1, 2, 3]},
    {"type": "write", "timestamp_ns": 2, "keys": [1, 2, 4, 5]},
    {"type": "write", "timestamp_ns": 3, "keys": [1, 6]},
    {"type": "write", "timestamp_ns": 4, "keys": [9]},
    {"type": "write", "timestamp_ns": 5, "keys": [8, 3]},  # key 3 again, another path
    {"type": "get", "timestamp_ns": 6, "keys": [1, 2, 4], "input_len": 48},
    {"type": "get", "timestamp_ns": 7, "keys": [1, 6], "input_len": 32},
    {"type": "get", "timestamp_ns": 8, "keys": [9], "input_len": 16},
    {"type": "get", "timestamp_ns": 9, "keys": [8, 3], "input_len": 32},
]
"""Paths 1/2/3, 1/2/4/5, 1/6, 9, 8/3 in an LRU of 6 blocks: the fifth write evicts 1/2 and
1/2/4 (after 1/2/3 went at the fourth), so 1/2/4/5 stays cached below an evicted parent and
key 3 is cached under 8 but not under 1/2."""


def _config(folder: Path, trace: list[dict], blocks: int | None, **group: object) -> Path:
    with open(folder / "trace.jsonl", "w") as f:
        for record in trace:
            f.write(json.dumps({"instance_id": "a", **record}) + "\n")
    quota = -1 if blocks is None else blocks * BLOCK_BYTES / 2**30
    config = {
        "trace_file_path": "trace.jsonl",
        "output_result_path": "out",
        "eviction_params": {"eviction_mode": 3, "eviction_batch_size_per_instance": 1},
        "instance_groups": [{"group_name": "g", "quota_capacity": quota, **group,
                             "instances": [{"instance_id": "a", "block_size": 16,
                                            "bytes_per_token": 64,
                                            "eviction_policy_type": "lru"}]}],
    }  # fmt: skip
    path = folder / "config.json"
    path.write_text(json.dumps(config, indent=1))
    return path


def _nodes(export) -> list[tuple]:
    return [(n.node_id, n.parent_id, n.total_blocks, n.cached_blocks, n.access_count,
             n.last_access_time, n.is_leaf) for n in export.nodes]  # fmt: skip


def test_export_radix_trees_on_a_hand_built_trace(tmp_path) -> None:
    # Catches: cached blocks looked up by key rather than by path (planted: key 3 then
    # counts as cached under 1/2 because it is cached under 8), a node's gets counted per
    # block, orphans (a cached block below an evicted parent) lost, nodes differing from
    # `litehit export-tree`'s JSON, and the tree of the lifecycle files' pass missing its
    # hits (planted: that pass not forwarding its batches to the tree's counter).
    path = _config(tmp_path, HAND_TRACE, blocks=6)
    loader = OptimizerConfigLoader()
    assert loader.load(path)
    manager = OptimizerManager(loader.config())
    assert manager.Init()
    manager.DirectRun()
    trees = manager.ExportRadixTrees()
    assert list(trees) == ["a"]
    tree = trees["a"]
    assert tree.instance_id == "a"
    assert _nodes(tree) == [
        (0, None, [1], [1], 2, 7, False),
        (1, 0, [2], [], 0, None, False),
        (2, 1, [3], [], 0, None, True),
        (3, 1, [4, 5], [5], 0, None, True),
        (4, 0, [6], [6], 1, 7, True),
        (5, None, [9], [9], 1, 8, True),
        (6, None, [8, 3], [8, 3], 1, 9, True),
    ]
    assert tree.edges == [(0, 1), (1, 2), (1, 3), (0, 4)]
    assert manager.ExportRadixTrees() is trees  # one analysis replay per DirectRun

    # the lifecycle files' pass gives the tree too (AnalyzeResults, then ExportRadixTrees)
    shared = OptimizerManager(loader.config(), enable_lifecycle_tracking=True)
    assert shared.Init()
    shared.DirectRun()
    assert any(p.endswith("a_lifecycle.csv") for p in shared.AnalyzeResults())
    assert _nodes(shared.ExportRadixTrees()["a"]) == _nodes(tree)

    done = run_cli("export-tree", "-c", str(path), "-o", str(tmp_path / "cli"), "--stats-only")
    assert done.returncode == 0, done.stderr
    shown = json.loads((tmp_path / "cli" / "radix_tree" / "a_radix_tree.json").read_text())
    fields = ("node_id", "parent_id", "total_blocks", "cached_blocks", "access_count",
              "last_access_time", "is_leaf")  # fmt: skip
    assert [tuple(n[f] for f in fields) for n in shown["a"]["nodes"]] == _nodes(tree)
    assert [tuple(e) for e in shown["a"]["edges"]] == tree.edges


def test_a_tiered_block_is_listed_once_and_any_tier_counts(tmp_path) -> None:
    # Catches: cached_blocks taken from tier 0 alone (planted: key_cached from the base
    # slot's flags only) or listing a block once per tier holding it (write_through puts
    # every block into both tiers; hbm keeps 2 of them, ssd all).
    hbm = 2 * BLOCK_BYTES / 2**30
    storages = [
        {"unique_name": "hbm", "storage_type": "hbm", "priority": 0, "capacity": hbm},
        {"unique_name": "ssd", "storage_type": "ssd", "priority": 1, "capacity": 1},
    ]
    path = _config(tmp_path, HAND_TRACE[:2], None, storages=storages,
                   tier_strategy={"hierarchical_eviction_enabled": True})  # fmt: skip
    manager = OptimizerManager(str(path))
    assert manager.Init()
    manager.DirectRun()
    nodes = manager.ExportRadixTrees()["a"].nodes
    assert [(n.total_blocks, n.cached_blocks) for n in nodes] == [
        ([1, 2], [1, 2]), ([3], [3]), ([4, 5], [4, 5])
    ]  # fmt: skip
    tiers = manager.AnalyzeResults()
    assert [Path(p).name for p in tiers] == ["a_hit_rates.csv"]


def _cli_error(*argv: str, cwd: Path) -> str:
    done = run_cli(*argv, cwd=cwd)
    assert done.returncode == 2, done.stderr
    return done.stderr.strip()


def test_errors_carry_the_commands_messages(tmp_path, capsys) -> None:
    # Catches: a message other than the command's (planted: the loader keeping the reason
    # without its file:line), an error escaping as a traceback from deep inside
    # (planted: optimize() without its error boundary) and Init() raising instead of
    # returning False.
    bad = tmp_path / "bad.json"
    bad.write_text('{"trace_file_path": "t.jsonl", "output_result_path": "o",\n "nope": 1}\n')
    expected = _cli_error("optimize", "-c", str(bad), cwd=tmp_path)
    assert f"{bad}:2: nope: unknown field" in expected.splitlines()[-1]
    loader = OptimizerConfigLoader()
    assert loader.load(bad) is False
    assert loader.error == expected
    assert capsys.readouterr().err.strip() == expected
    with pytest.raises(VerbOrderError, match=r"load\(path\)"):
        loader.config()

    with pytest.raises(LocatedError) as caught:
        optimize(bad)
    assert str(caught.value) == expected
    frames = traceback.extract_tb(caught.value.__traceback__)
    assert not any("optimize/config" in f.filename for f in frames)
    assert not any("config_files" in f.filename for f in frames)

    with pytest.raises(LocatedError, match="eviction_mode"):
        optimize({"trace_file_path": "t", "output_result_path": "o",
                  "eviction_params": {"eviction_mode": 7,
                                      "eviction_batch_size_per_instance": 1},
                  "instance_groups": []})  # fmt: skip
    with pytest.raises(TypeError, match="config_or_path"):
        optimize(42)  # type: ignore[arg-type]

    # a record naming an unknown instance: DirectRun raises the command's message
    path = _config(tmp_path, HAND_TRACE[:1], blocks=6)
    lines = path.with_name("trace.jsonl").read_text().replace('"a"', '"b"')
    path.with_name("trace.jsonl").write_text(lines)
    expected = _cli_error("optimize", "-c", str(path), cwd=tmp_path).splitlines()[-1]
    manager = OptimizerManager(str(path))
    assert manager.Init()
    with pytest.raises(LocatedError) as caught:
        manager.DirectRun()
    assert str(caught.value) == expected
    assert "instance 'b' is not configured" in expected

    # a missing trace: Init() says so and returns False
    path.with_name("trace.jsonl").unlink()
    expected = _cli_error("optimize", "-c", str(path), cwd=tmp_path)
    capsys.readouterr()
    manager = OptimizerManager(str(path))
    assert manager.Init() is False
    assert manager.error == expected
    assert capsys.readouterr().err.strip() == expected
    with pytest.raises(VerbOrderError, match="Init"):
        manager.DirectRun()

    with pytest.raises(InvalidRequestError, match="policies: must be among"):
        tradeoff(example_config(tmp_path), policies=["fifo"])
    with pytest.raises(InvalidRequestError, match="num_points"):
        tradeoff(example_config(tmp_path), num_points=0)


def example_config(folder: Path) -> Path:
    return _config(folder, HAND_TRACE, blocks=6)


def test_verbs_out_of_order_name_the_verb_to_call_first(tmp_path) -> None:
    # Catches: a verb run out of order failing on a missing attribute (planted: DirectRun
    # without its check) or silently writing nothing.
    manager = OptimizerManager(str(example_config(tmp_path)))
    with pytest.raises(VerbOrderError, match=r"DirectRun\(\) needs Init\(\) first"):
        manager.DirectRun()
    with pytest.raises(VerbOrderError, match=r"AnalyzeResults\(\) needs Init\(\) first"):
        manager.AnalyzeResults()
    assert manager.Init()
    with pytest.raises(VerbOrderError, match=r"AnalyzeResults\(\) needs DirectRun\(\) first"):
        manager.AnalyzeResults()
    with pytest.raises(VerbOrderError, match=r"ExportRadixTrees\(\) needs DirectRun\(\)"):
        manager.ExportRadixTrees()
    assert not (tmp_path / "out").exists()


def test_one_config_three_ways(tmp_path) -> None:
    # Catches: a dict or a loaded configuration replayed differently from its file
    # (relative paths, defaults), and the re-exported reference objects differing from
    # the api module's.
    import litehit_service.optimizer as package
    import litehit_service.optimizer.api as api

    assert package.OptimizerManager is api.OptimizerManager
    path = example_config(tmp_path)
    loader = OptimizerConfigLoader()
    assert loader.load(path)
    data = json.loads(path.read_text())
    data["trace_file_path"] = str(tmp_path / "trace.jsonl")
    assert OptimizerConfigLoader().Load(path).trace_file_path() == loader.config().trace_file_path()
    assert OptimizerConfigLoader().Load(tmp_path / "missing.json") is None  # the README's Load
    tables = [optimize(c)["a"] for c in (path, loader.config(), data)]
    assert tables[0].equals(tables[1]) and tables[0].equals(tables[2])
    assert optimize(path).summary.column("reads").to_pylist() == [4]


def test_the_package_reexports_exactly_the_apis_names_but_the_two_functions():
    """The two lists stay static (ruff and editors read them); this catches them drifting
    apart: a name added to the API and not re-exported, or re-exported and gone."""
    import litehit_service.optimizer as package
    from litehit_service.optimizer import api

    assert set(package.__all__) == set(api.__all__) - {"optimize", "tradeoff"}
    for name in package.__all__:
        assert getattr(package, name) is getattr(api, name)
