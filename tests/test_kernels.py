"""Compiled kernels as commands meet them (``litehit_service.offline.kernels``): the
compile notice while a family compiles, the compile time apart in the run line, and
``litehit warm-up``."""

from __future__ import annotations

import io
import json
import os
import time
from pathlib import Path

import pytest
from conftest import mooncake_trace, run_cli

from litehit_core import prefix_chain
from litehit_core.engine import KERNEL_FAMILIES
from litehit_service.cli import main
from litehit_service.offline.kernels import compile_notice, load_kernels
from litehit_service.offline.outputs import run_line


def test_a_slow_load_is_announced_while_it_runs_and_timed(monkeypatch) -> None:
    """Catches a compile that goes unannounced (a silent first run of 10+ s), or a notice
    printed only after the compile ended."""
    seen_during = []
    out = io.StringIO()

    def slow() -> float:
        time.sleep(0.6)
        seen_during.append(out.getvalue())
        return 0.6

    monkeypatch.setattr(prefix_chain, "warm_up", slow)
    seconds = load_kernels("prefix-chain", after_s=0.05, stream=out)
    assert seconds >= 0.6
    assert seen_during == [compile_notice("prefix-chain") + "\n"]  # printed while it ran
    lines = out.getvalue().splitlines()
    assert lines[0] == (
        "litehit: compiling the prefix-chain kernels, once after an install (about 1 s on 2 "
        "cores; later runs load them from numba's cache in ~0.1 s; 'litehit warm-up' "
        "compiles every kernel ahead)"
    )
    assert lines[1].startswith("litehit: prefix-chain kernels compiled in 0.")
    assert len(lines) == 2


def test_a_fast_load_says_nothing() -> None:
    """Catches a notice on every run (a cached load takes ~0.1 s and is no compile)."""
    out = io.StringIO()
    assert load_kernels("prefix-chain", after_s=5.0, stream=out) < 5.0
    assert out.getvalue() == ""


def test_the_run_line_names_a_compile_apart_and_keeps_it_out_of_the_rate() -> None:
    """Catches "15.486 s, 777 reads/s" for a run that compiled for 14 s (the rate a warm
    run gives is what the line must show)."""
    assert run_line("optimize", 12000, "reads", "1 instances", 13.0, "out", 12.0) == (
        "optimize: 12000 reads, 1 instances, 13.000 s (12.0 s compiling kernels, once after "
        "an install), 12,000 reads/s -> out"
    )
    assert run_line("optimize", 100, "reads", "1 instances", 2.0, "out", 0.1) == (
        "optimize: 100 reads, 1 instances, 2.000 s, 50 reads/s -> out"
    )


def test_warm_up_loads_every_family(capsys) -> None:
    """``litehit warm-up`` goes through every family of the registry's table (a family
    added there is warmed without another change), one line each, then the total."""
    assert main(["warm-up"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 * len(KERNEL_FAMILIES) + 1
    for i, family in enumerate(KERNEL_FAMILIES.values()):
        assert err[2 * i] == f"warm-up: {family.what} kernels ({family.used_by}) ..."
        assert err[2 * i + 1].startswith(f"warm-up: {family.what} kernels ready in ")
    assert err[-1].startswith(f"warm-up: {len(KERNEL_FAMILIES)} kernel families ready in ")


def test_a_cold_optimize_speaks_before_it_compiles(tmp_path: Path) -> None:
    """A real first run after an install (numba's cache empty): the notice is the first
    line on stderr, then the compile's time, the summary and a run line naming the compile
    apart. (The time it takes is measured in bench/bench_first_run.py, not here.)"""
    trace = mooncake_trace()
    config = tmp_path / "policy.json"
    shipped = json.loads((Path(__file__).resolve().parents[1] / "docs/policy.json").read_text())
    config.write_text(json.dumps({**shipped, "trace_file_path": str(trace),
                                  "output_result_path": str(tmp_path / "out")}))  # fmt: skip
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba-cache")}
    done = run_cli("optimize", str(config), env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    err = done.stderr.splitlines()
    assert err[0] == compile_notice("policy-replay")
    assert err[1].startswith("litehit: policy-replay kernels compiled in ")
    assert err[-1].startswith("optimize: 12031 reads, 1 instances, ")
    assert " s compiling kernels, once after an install), " in err[-1]
    assert done.stdout.splitlines()[1].startswith("conv ")
    warm = run_cli("optimize", str(config), env=env, timeout=300)  # now cached
    assert warm.returncode == 0 and warm.stderr.splitlines()[0].startswith("optimize: ")


@pytest.mark.parametrize("name", sorted(KERNEL_FAMILIES))
def test_every_family_names_a_module_with_a_warm_up(name: str) -> None:
    import importlib

    family = KERNEL_FAMILIES[name]
    assert callable(importlib.import_module(family.module).warm_up)
    assert family.compile_s > 0 and family.used_by
