"""Compiled kernels as commands meet them (``litehit_service.offline.kernels``): a compile
announced on stderr as it starts (numba's compile events: a cache load says nothing), its
time named apart in the run line, and ``litehit warm-up``."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from conftest import mooncake_trace, run_cli

from litehit_core.engine import KERNEL_FAMILIES
from litehit_service.cli import main
from litehit_service.offline.kernels import CompileWatch, compile_notice, family_of
from litehit_service.offline.outputs import run_line


def test_a_compile_is_announced_once_as_it_starts_and_timed() -> None:
    """Catches a compile that goes unannounced (a silent first run of 10+ s), a notice per
    compiled function instead of one, and compile time that is not counted. Real numba
    events: two fresh functions (no cache), the second calling the first."""
    from numba import njit
    from numba.core import event

    out = io.StringIO()
    watch = CompileWatch(out)

    @njit
    def inner(x: int) -> int:
        return x + 1

    @njit
    def outer(x: int) -> int:
        return inner(x) * 2

    with event.install_listener("numba:compile", watch.listener()):
        seen_before_end = []
        assert outer(3) == 8
        seen_before_end.append(out.getvalue())
        assert inner(1.5) == 2.5  # a second compile of an already announced family
    assert out.getvalue() == compile_notice("") + "\n"  # once, for both compiles
    assert compile_notice("") == (
        "litehit: compiling kernels, once after an install (later runs load them from "
        "numba's cache in ~0.1 s; 'litehit warm-up' compiles every kernel ahead)"
    )
    assert watch.seconds > 0 and watch.depth == 0


def test_a_cached_load_says_nothing() -> None:
    """Catches a notice on every run: loading kernels from numba's cache (every family is
    loaded at the session's start) triggers no compile event."""
    from numba.core import event

    from litehit_service.offline.kernels import load_kernels

    out = io.StringIO()
    watch = CompileWatch(out)
    with event.install_listener("numba:compile", watch.listener()):
        for name in KERNEL_FAMILIES:
            load_kernels(name)
    assert (out.getvalue(), watch.seconds) == ("", 0.0)


def test_families_are_found_by_module() -> None:
    assert family_of("litehit_core.policy_replay.loop") == "policy-replay"
    assert family_of("litehit_core.compact_kernels") == "full-attention"
    assert family_of("litehit_core.hybrid_kernels") == "hybrid"
    assert family_of("litehit_core.prefix_chain") == "prefix-chain"
    assert family_of("tests.test_kernels") == ""
    assert compile_notice("policy-replay") == (
        "litehit: compiling the policy-replay kernels, once after an install (about 11 s on "
        "2 cores; later runs load them from numba's cache in ~0.1 s; 'litehit warm-up' "
        "compiles every kernel ahead)"
    )


def test_the_run_line_names_a_compile_apart_and_keeps_it_out_of_the_rate() -> None:
    """Catches "15.486 s, 777 reads/s" for a run that compiled for 14 s (the rate a warm
    run gives is what the line must show)."""
    assert run_line("optimize", 12000, "reads", "1 instances", 13.0, "out", 12.0) == (
        "optimize: 12000 reads, 1 instances, 13.000 s (12.0 s compiling kernels, once after "
        "an install), 12,000 reads/s -> out"
    )
    assert run_line("optimize", 100, "reads", "1 instances", 2.0, "out", 0.0) == (
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
    line on stderr, the summary follows, the run line names the compile apart; the second
    run loads from the cache and says nothing of it. (How long it takes is measured in
    bench/bench_first_run.py, not here.)"""
    trace = mooncake_trace()
    config = tmp_path / "policy.json"
    shipped = json.loads((Path(__file__).resolve().parents[1] / "docs/policy.json").read_text())
    config.write_text(json.dumps({**shipped, "trace_file_path": str(trace),
                                  "output_result_path": str(tmp_path / "out")}))  # fmt: skip
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba-cache")}
    done = run_cli("optimize", str(config), env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    err = done.stderr.splitlines()
    assert err == [compile_notice("policy-replay"), compile_notice("text"), err[-1]]
    assert err[-1].startswith("optimize: 12031 reads, 1 instances, ")
    assert " s compiling kernels, once after an install), " in err[-1]
    assert done.stdout.splitlines()[1].startswith("conv ")
    warm = run_cli("optimize", str(config), env=env, timeout=300)
    assert warm.returncode == 0 and len(warm.stderr.splitlines()) == 1
    assert "compiling" not in warm.stderr


@pytest.mark.parametrize("name", sorted(KERNEL_FAMILIES))
def test_every_family_names_a_module_with_a_warm_up(name: str) -> None:
    import importlib

    family = KERNEL_FAMILIES[name]
    assert callable(importlib.import_module(family.module).warm_up)
    assert family.compile_s > 0 and family.used_by
    assert family_of(family.module) == name  # its warm-up's own compiles are its own


def test_the_import_hook_leaves_numba_a_whole_loader(tmp_path: Path) -> None:
    """Catches the one-shot hook breaking what numba's loader answers (source, file,
    package) in a process where the CLI watched numba's import, and a compile then going
    unannounced."""
    from fresh import run_python

    code = (
        "import inspect\n"
        "from litehit_service.offline.kernels import watch_compiles, compiled_seconds\n"
        "watch_compiles()\n"
        "import numba\n"
        "loader = numba.__spec__.loader\n"
        "print(loader.is_package('numba'), loader.get_filename('numba').endswith('__init__.py'),"
        " len(inspect.getsource(numba)) > 100)\n"
        "f = numba.njit(lambda x: x + 1)\n"
        "print(f(1), compiled_seconds() > 0)\n"
    )
    proc = run_python(tmp_path, code=code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["True True True", "2 True"]
    assert proc.stderr.splitlines() == [compile_notice("")]
