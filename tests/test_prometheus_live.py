"""Real Prometheus scrapes a real ``litehit serve``; values are read back through PromQL.

Needs the ``prometheus`` and ``promtool`` binaries (Debian package ``prometheus``; .ci/run
installs it). Skipped locally when they are missing; under CI (``CI`` set) a missing
binary is a failure (tests/conftest.py ``require``), so the test can never silently vanish
from the pipeline. Prometheus listens on port 0; its bound port is read back from its log.
"""

from __future__ import annotations

import importlib.util
import json
import random
import re
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from conftest import require_binary
from oracle import NaiveLRU, tree_trace
from serve_process import ServeProcess

from litehit_service.client import OptimizerClient
from litehit_service.model import (
    InstanceGroup,
    InstanceRegistration,
    LocationSpec,
    LocationSpecGroup,
)

ROOT = Path(__file__).resolve().parents[1]
GIB = 1024**3


def _need(binary: str) -> str:
    return require_binary(binary)  # .ci/run: apt-get install prometheus


LISTENING = re.compile(r'msg="Listening on" address=(\S+)')


def _listening_address(prom: subprocess.Popen[str], errors: list[str]) -> str:
    """The address Prometheus started on port 0 bound, from its "Listening on" log line
    (stderr, read by a thread into ``errors``)."""
    deadline = time.monotonic() + 60
    while True:
        for line in list(errors):
            found = LISTENING.search(line)
            if found:
                return found.group(1)
        assert prom.poll() is None, "".join(errors)
        assert time.monotonic() < deadline, "Prometheus never said where it listens"
        time.sleep(0.1)


def _get(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read()


def _dashboard_names():
    spec = importlib.util.spec_from_file_location(
        "dashboard_names", Path(__file__).with_name("dashboard_names.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def litehit_server(tmp_path):
    """``litehit serve`` as a subprocess on ephemeral ports: yields (grpc_addr, metrics_addr)."""
    server = ServeProcess("--data-dir", str(tmp_path / "data"))
    try:
        yield server.grpc, server.metrics
        assert server.terminate() == 0
    finally:
        server.kill()


def _run_worked_example(grpc_addr: str) -> None:
    with OptimizerClient(grpc_addr) as client:
        client.wait_until_ready(10)
        group = InstanceGroup(
            name="g",
            capacity_gb=(2048 / GIB, 3072 / GIB),
            enable_theoretical_max_cache=True,
        )
        assert client.create_instance_group(group).header.status.code == 1
        reg = InstanceRegistration(
            instance_id="i1",
            instance_group="g",
            block_size=4,
            location_spec_infos=(LocationSpec("hbm", 1024),),
            location_spec_groups=(LocationSpecGroup("full", ("hbm",)),),
            full_location_spec_group_name="full",
        )
        assert client.register_instance(reg).header.status.code == 1
        a, b, c, d, e = 1, 2, 3, 4, 5
        for keys, tokens in (
            ([a, b, c], 13),
            ([a, b, d], 12),
            ([a, b, c], 13),
            ([a, e], 8),
            ([a, e], 8),
        ):
            assert client.trace_query("i1", keys, tokens).header.status.code == 1
        # one error so the errors counter exists
        assert client.trace_query("nope", [1], 4, check=False).header.status.code == 8


def _query(prom: str, expr: str) -> list[dict]:
    url = f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    body = json.loads(_get(url))
    assert body["status"] == "success", body
    return body["data"]["result"]


def test_prometheus_scrapes_litehit(litehit_server, tmp_path):
    prometheus = _need("prometheus")
    promtool = _need("promtool")
    grpc_addr, metrics_addr = litehit_server
    _run_worked_example(grpc_addr)

    page = _get(f"http://{metrics_addr}/metrics")
    dump = tmp_path / "metrics.txt"
    dump.write_bytes(page)
    check = subprocess.run(
        [promtool, "check", "metrics"], input=page, capture_output=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr

    names = _dashboard_names()
    missing = names.dashboard_metric_names() - names.exposed_metric_names(page.decode())
    assert not missing, f"dashboard uses metrics the service does not export: {missing}"

    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n  - job_name: litehit\n    static_configs:\n"
        f"      - targets: ['{metrics_addr}']\n"
    )
    check = subprocess.run(
        [promtool, "check", "config", str(config)], capture_output=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr
    prom = subprocess.Popen(
        [
            prometheus,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            "--web.listen-address=127.0.0.1:0",  # the bound port is read back from its log
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    errors: list[str] = []
    reader = threading.Thread(target=lambda: errors.extend(prom.stderr), daemon=True)
    reader.start()
    try:
        base = f"http://{_listening_address(prom, errors)}"
        deadline = time.monotonic() + 60
        result: list[dict] = []
        while time.monotonic() < deadline:
            assert prom.poll() is None, "".join(errors)
            try:
                result = _query(base, 'litehit_trace_queries_total{instance_id="i1"}')
            except OSError:
                result = []
            if result:
                break
            time.sleep(0.5)
        assert result, "Prometheus never scraped litehit"
        labels = result[0]["metric"]
        assert labels["instance_group"] == "g" and labels["job"] == "litehit"
        assert float(result[0]["value"][1]) == 5

        def scalar(expr: str) -> float:
            rows = _query(base, expr)
            assert len(rows) == 1, (expr, rows)
            return float(rows[0]["value"][1])

        assert scalar('litehit_input_tokens_total{instance_id="i1"}') == 54
        assert scalar('litehit_queried_blocks_total{instance_id="i1"}') == 13
        assert scalar('litehit_theoretical_hit_tokens_total{instance_id="i1"}') == 32
        hits = _query(base, 'litehit_hit_tokens_total{instance_id="i1"}')
        assert sorted(float(r["value"][1]) for r in hits) == [28, 28]
        assert len({r["metric"]["capacity_gb"] for r in hits}) == 2
        rate = scalar(
            'sum(litehit_theoretical_hit_tokens_total{instance_id="i1"})'
            ' / sum(litehit_input_tokens_total{instance_id="i1"})'
        )
        assert rate == pytest.approx(32 / 54)
        assert scalar('litehit_unique_blocks{instance_id="i1"}') == 5
        assert scalar('litehit_kv_cache_usage_bytes{instance_id="i1"}') == 5 * 1024
        errors = _query(base, "litehit_errors_total")
        assert [(r["metric"]["code"], float(r["value"][1])) for r in errors] == [
            ("INSTANCE_NOT_EXIST", 1.0)
        ]
        latency = scalar('sum(litehit_trace_query_duration_seconds_count{method="TraceQuery"})')
        assert latency == 6
        _check_curve_windows(base, grpc_addr, scalar)
    finally:
        prom.terminate()
        try:
            prom.wait(timeout=20)
        except subprocess.TimeoutExpired:
            prom.kill()


WORKED_KEYS = [[1, 2, 3], [1, 2, 4], [1, 2, 3], [1, 5], [1, 5]]


def _check_curve_windows(base: str, grpc_addr: str, scalar) -> None:
    """Send a second batch of queries; each grid counter of the live curve grows by exactly
    that batch's hits at its capacity (a naive LRU per capacity, continuing from the worked
    example), read through PromQL as the value now minus the value before the batch."""
    grid = [int(r["metric"]["capacity_bytes"]) for r in
            _query(base, 'litehit_curve_hit_tokens_total{instance_id="i1"}')]  # fmt: skip
    assert len(grid) == 16 and min(grid) == 1024  # one block to --max-tracked-blocks
    before = time.time()
    time.sleep(1.5)  # a scrape lands between "before" and the batch
    batch = tree_trace(random.Random(21), 150, max_new=6, min_new=1)
    batch = [[k + 100 for k in keys] for keys in batch]
    with OptimizerClient(grpc_addr) as client:
        for keys in batch:
            client.trace_query("i1", keys, 4 * len(keys))
    deadline = time.monotonic() + 30
    while scalar('litehit_trace_queries_total{instance_id="i1"}') != 5 + len(batch):
        assert time.monotonic() < deadline, "Prometheus never scraped the second batch"
        time.sleep(0.5)
    rows = _query(
        base,
        f'litehit_curve_hit_tokens_total{{instance_id="i1"}}'
        f' - litehit_curve_hit_tokens_total{{instance_id="i1"}} @ {before:.3f}',
    )
    got = {int(r["metric"]["capacity_bytes"]): float(r["value"][1]) for r in rows}
    assert sorted(got) == sorted(grid)
    for nbytes in grid:
        lru = NaiveLRU(nbytes // 1024)
        for keys in WORKED_KEYS:
            lru.request(keys)
        want = sum(lru.request(keys) for keys in batch) * 4
        assert got[nbytes] == want, nbytes
    assert max(got.values()) > 0
    # the dashboard's windowed curve: hit rate per capacity over a window
    window = _query(
        base,
        'rate(litehit_curve_hit_tokens_total{instance_id="i1"}[1m])'
        " / ignoring(capacity_bytes) group_left"
        ' rate(litehit_input_tokens_total{instance_id="i1"}[1m])',
    )
    assert len(window) == 16
    assert all(0 <= float(r["value"][1]) <= 1 for r in window)
    target = scalar('litehit_capacity_for_target_bytes{instance_id="i1", target="0.9"}')
    assert target > 0 and target % 1024 == 0
