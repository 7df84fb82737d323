"""The operator's run of issue 21 at CI scale: a real ``litehit serve`` with a data dir,
several gateway processes (``fleet_client.py``) streaming a seeded synthetic trace over
TraceQueryStream and TraceQueryPackedStream, some cancelling mid-stream, one flooding bad
queries; a SIGTERM restart, more traffic, a kill -9 restart after a snapshot round.

Asserted: no ERROR line in any server log; the flood is a few log lines while
``litehit_errors_total`` counts every bad query; each start logs its restore line with the
right instance count, clean after SIGTERM and NOT clean after kill -9;
``process_resident_memory_bytes`` is exported; the counters after the graceful restart are
exactly the queries the clients saw acknowledged (and after the kill -9, exactly those of
the snapshot round that followed the traffic). Every wait and loop is bounded; the trace
is seeded.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import GIB, scrape
from serve_process import ROOT, ServeProcess, serve_env

from litehit_service.client import OptimizerClient
from litehit_service.model import (
    InstanceGroup,
    InstanceRegistration,
    LocationSpec,
    LocationSpecGroup,
)

CLIENT = Path(__file__).with_name("fleet_client.py")
INSTANCES = ("gw0", "gw1", "gw2")
FLOOD = 2000
"""Bad queries sent by the last gateway of each round."""
CLIENT_SECONDS = 120
WAIT_TRIES = 300
"""Polls of a bounded wait (0.1 s apart)."""
SNAPSHOT_INTERVAL = "0.3"


def start(data_dir: Path) -> ServeProcess:
    return ServeProcess(
        "--data-dir",
        str(data_dir),
        "--open-admin",
        "--snapshot-interval-seconds",
        SNAPSHOT_INTERVAL,
        "--grace-seconds",
        "5",
    )


def setup(server: ServeProcess) -> None:
    with OptimizerClient(server.target, timeout=30) as client:
        client.create_instance_group(InstanceGroup("g", (4096 / GIB, 65536 / GIB)))
        for iid in INSTANCES:
            client.register_instance(
                InstanceRegistration(
                    iid, "g", 4, (LocationSpec("kv", 1024),), (LocationSpecGroup("full", ("kv",)),)
                )
            )


def fleet(server: ServeProcess, seed: int) -> list[dict[str, int]]:
    """One round: a gateway process per instance, at once; the last one also floods."""
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(CLIENT),
                server.target,
                iid,
                str(seed * 10 + k),
                str(FLOOD if k == len(INSTANCES) - 1 else 0),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=serve_env(),
            cwd=ROOT,
        )
        for k, iid in enumerate(INSTANCES)
    ]
    results = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=CLIENT_SECONDS)
            assert proc.returncode == 0, (err, server.stderr())
            results.append(json.loads(out.splitlines()[-1]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
    assert [r["rejected"] for r in results] == [0] * (len(INSTANCES) - 1) + [FLOOD]
    assert all(r["cancelled"] > 0 and r["answered"] > 0 for r in results), results
    return results


def sample(server: ServeProcess, name: str, **labels: str) -> float:
    wanted = tuple(sorted(labels.items()))
    return scrape(server.metrics).get((name, wanted), 0.0)


def queries(server: ServeProcess) -> dict[str, int]:
    """total_queries per instance, as ListInstances answers (checked against /metrics)."""
    with OptimizerClient(server.target, timeout=30) as client:
        listed = {s.instance_id: s.total_queries for s in client.list_instances().instances}
    samples = scrape(server.metrics)
    for iid, n in listed.items():
        labels = (("instance_group", "g"), ("instance_id", iid))
        assert samples[("litehit_trace_queries_total", labels)] == n, (iid, samples)
    return listed


def wait_for_snapshot_round(server: ServeProcess) -> None:
    """Bounded: until a whole snapshot round began after this call (each round writes
    every instance, so two rounds' worth of writes)."""
    name = "litehit_snapshots_written_total"
    target = sample(server, name) + 2 * len(INSTANCES)
    for _ in range(WAIT_TRIES):
        if sample(server, name) >= target:
            return
        time.sleep(0.1)
    raise AssertionError(f"no snapshot round within the wait: {server.stderr()}")


def acknowledged(rounds: list[list[dict[str, int]]]) -> dict[str, int]:
    return {
        iid: sum(results[k]["answered"] for results in rounds) for k, iid in enumerate(INSTANCES)
    }


def flood_errors(server: ServeProcess) -> float:
    return sample(
        server, "litehit_errors_total", code="INSTANCE_NOT_EXIST", method="TraceQueryStream"
    )


def check_log(log: str) -> list[str]:
    """No ERROR, the flood a few lines; returns the restore lines."""
    assert " ERROR " not in log, log
    assert "Task exception was never retrieved" not in log, log
    flooded = [line for line in log.splitlines() if "'nope'" in line]
    assert len(flooded) <= 6, log  # the first in full, summaries: not one per query
    return [line for line in log.splitlines() if "restore: " in line]


def test_fleet_across_a_graceful_restart_and_a_kill(tmp_path: Path):
    data_dir = tmp_path / "data"
    servers: list[ServeProcess] = []
    try:
        first = start(data_dir)
        servers.append(first)
        setup(first)
        round1 = fleet(first, seed=1)
        assert queries(first) == acknowledged([round1])
        assert flood_errors(first) == FLOOD
        wait_for_snapshot_round(first)
        assert first.terminate() == 0, first.stderr()
        log1 = first.stderr()
        assert check_log(log1) == [
            line for line in log1.splitlines() if "restore: nothing to restore (first start" in line
        ]
        assert f"… {FLOOD - 1:,} more like this (TraceQueryStream INSTANCE_NOT_EXIST" in log1

        # SIGTERM restart: every acknowledged query is there, errors too
        second = start(data_dir)
        servers.append(second)
        assert queries(second) == acknowledged([round1])
        assert flood_errors(second) == FLOOD
        assert sample(second, "process_resident_memory_bytes") > 0
        round2 = fleet(second, seed=2)
        assert queries(second) == acknowledged([round1, round2])
        assert flood_errors(second) == 2 * FLOOD
        wait_for_snapshot_round(second)
        second.proc.send_signal(signal.SIGKILL)
        second.proc.wait(timeout=30)

        # kill -9 restart: the snapshot round after the traffic holds every query
        third = start(data_dir)
        servers.append(third)
        assert queries(third) == acknowledged([round1, round2])
        assert flood_errors(third) == 2 * FLOOD
        assert sample(third, "process_resident_memory_bytes") > 0
        assert third.terminate() == 0, third.stderr()
    finally:
        for server in servers:
            server.kill()
    [restore2] = check_log(second.stderr())
    assert "restore: 3 of 3 instances restored" in restore2, restore2
    assert "the previous stop was clean" in restore2 and " INFO " in restore2, restore2
    [restore3] = check_log(third.stderr())
    assert "restore: 3 of 3 instances restored" in restore3, restore3
    assert "the previous stop was NOT clean" in restore3 and " WARNING " in restore3, restore3
    assert f"up to {float(SNAPSHOT_INTERVAL):g} s (--snapshot-interval-seconds)" in restore3
