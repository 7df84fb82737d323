"""The README's "Comparing eviction policies" section holds: its configuration runs as
written on the Mooncake trace and prints the line shown, and every cell of its "Which LRU?"
table is what the replay (and LiteHit's exact curves) give."""

from __future__ import annotations

import json
import re

from conftest import mooncake_trace, run_cli
from doc_pages import section

from litehit_service.optimizer.optimize.config import optimize_config_from_dict
from litehit_service.optimizer.optimize.exact import exact_rates
from litehit_service.optimizer.optimize.run import run_optimize
from litehit_service.optimizer.optimize.trace import load_trace

SECTION = section("Comparing eviction policies")
CONFIG = json.loads(re.search(r"```json\n(.*?)```", SECTION, re.S).group(1))


def test_the_example_runs_and_prints_what_the_readme_shows(tmp_path):
    trace = mooncake_trace("conversation_trace.jsonl")
    (tmp_path / "policy.json").write_text(json.dumps({**CONFIG, "trace_file_path": str(trace)}))
    command = re.search(r"```bash\n(litehit optimize [^\n]*)\n```", SECTION).group(1).split()
    done = run_cli(*command[1:], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    shown = re.search(r"```\n(conv: at [^\n]*)\n```", SECTION).group(1)
    assert shown in done.stdout.splitlines()
    assert (tmp_path / "policy_results" / "conv_hit_rates.csv").is_file()
    assert (
        tmp_path / "policy_results" / "timeseries" / "multi_instance_cache_analysis.png"
    ).is_file()


def test_which_lru_table(tmp_path):
    trace = mooncake_trace("conversation_trace.jsonl")
    rows = re.findall(
        r"^\| (\d+) \| ([\d.]+)% \| ([\d.]+)% \| ([\d.]+)% \| ([\d.]+)% \| ([\d.]+)% \|$",
        SECTION,
        re.M,
    )
    assert len(rows) == 6
    loaded = None
    for blocks, *cells in rows:
        got = []
        for policy in ("lru", "leaf_aware_lru", "random_lru"):
            instance = {
                **CONFIG["instance_groups"][0]["instances"][0],
                "eviction_policy_type": policy,
                "eviction_policy_params": {"sample_rate": 0.1} if policy == "random_lru" else {},
            }
            group = {
                **CONFIG["instance_groups"][0],
                "quota_capacity": int(blocks) * 2 / 1024,
                "instances": [instance],
            }
            config = optimize_config_from_dict(
                {**CONFIG, "trace_file_path": str(trace), "instance_groups": [group]}
            )
            loaded = loaded or load_trace(config, max_line_bytes=1 << 26)
            result = run_optimize(config, loaded)
            assert result.instances[0].capacity_blocks == int(blocks)
            got.append(f"{result.instances[0].hit_rate * 100:.2f}")
            if policy == "lru":
                exact = exact_rates(config, loaded, result)[0]
        got += [f"{exact.by_touch_order[o] * 100:.2f}" for o in ("head-first", "tail-first")]
        assert got == cells, blocks
