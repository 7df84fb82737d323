"""`litehit simulate|sweep --touch-order head-first` against LMCache's own cache simulator
(lmcache 0.5.6, standard library only), when its modules are here: an unpacked wheel in
``$LMCACHE_WHEEL_DIR`` or ``.ci-lmcache/wheel`` in the checkout, made by
``scripts/test-extras`` (which ``.ci/run`` calls). Skipped otherwise, failed under CI
(``CI`` set: tests/conftest.py ``require``); the naive oracle in test_simulate.py always runs.

Every line LMCache's report prints must be the line LiteHit prints, at many capacities, on
the checked-in log and on the Mooncake conversation trace (``../shared``).
"""

from __future__ import annotations

import io
import logging
import os
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest
from conftest import require
from test_lmcache_reader import load_bench_trace
from test_simulate import FIXTURE, KV

from litehit_service.lmcache.simulator.simulate import (
    format_report,
    load_workload,
    replay_workload,
    report,
    sweep,
)

ROOT = Path(__file__).resolve().parents[1]
WHEEL = Path(os.environ.get("LMCACHE_WHEEL_DIR", ROOT / ".ci-lmcache" / "wheel"))
"""LMCache 0.5.6's modules, unpacked by ``scripts/test-extras`` (or ``$LMCACHE_WHEEL_DIR``)."""
NO_WHEEL = f"no unpacked lmcache wheel at {WHEEL}: run scripts/test-extras --no-ray"


@pytest.fixture(scope="module")
def lmcache():
    require(
        (WHEEL / "lmcache/tools/cache_simulator/simulator.py").is_file(),
        NO_WHEEL,
    )
    sys.path.insert(0, str(WHEEL))
    logging.disable(logging.WARNING)  # lmcache/__init__ warns that torch is absent
    try:
        from lmcache.tools.cache_simulator import plot_hit_rate, simulator
    finally:
        logging.disable(logging.NOTSET)
    return simulator, plot_hit_rate


def lmcache_text(simulator, log: Path, capacity_bytes: int) -> str:
    events = simulator.load_lookup_events([log])
    results = simulator.simulate(
        events, capacity_bytes, simulator.compute_kv_bytes_per_chunk(events[0])
    )
    out = io.StringIO()
    with redirect_stdout(out):
        simulator.print_statistics(results)
    return out.getvalue()


def assert_same_report(simulator, log: Path, capacities: list[int]) -> None:
    replay = replay_workload(load_workload([log]), "head-first")
    for capacity in capacities:
        theirs = lmcache_text(simulator, log, capacity).splitlines()
        ours = format_report(report(replay, capacity)).splitlines()
        # Ours inserts the exact curve's section before LMCache's closing rule.
        assert ours[: len(theirs) - 1] == theirs[:-1], capacity
        assert ours[-1] == theirs[-1] == "=" * 60


@pytest.mark.parametrize("chunks", [1, 2, 5, 25, 120, 700, 5000])
def test_report_lines_equal_lmcache(lmcache, chunks: int) -> None:
    assert_same_report(lmcache[0], FIXTURE, [chunks * KV, chunks * KV + KV // 2])


def test_sweep_equals_lmcache(lmcache) -> None:
    simulator, plot_hit_rate = lmcache
    events = simulator.load_lookup_events([FIXTURE])
    caps = plot_hit_rate.capacity_range_bytes(KV / 2**30, 3000 * KV / 2**30, 30)
    want = [simulator.simulate(events, c, KV, fast=True)["token_hit_rate"] for c in caps]
    got = sweep(replay_workload(load_workload([FIXTURE]), "head-first"), caps)["points"]
    assert [p["hit_rate"] for p in got] == want


def test_mooncake_report_equals_lmcache(lmcache, mooncake: Path, tmp_path: Path) -> None:
    trace = load_bench_trace()
    log = tmp_path / "lookup_hashes_0.jsonl"
    trace.write_lmcache_log(log, trace.mooncake_requests(mooncake))
    assert_same_report(lmcache[0], log, [64 << 30, 1000 << 20])
