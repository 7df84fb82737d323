"""Static checks of the shipping files: Dockerfile, .dockerignore, docker-compose.yml,
deploy/prometheus.yml, Grafana provisioning and the dashboard JSON.

No Docker engine runs here, so the compose stack is validated without starting it:
YAML structure, every referenced file exists, and ``docker-compose config`` /
``docker compose config`` when such a client is installed. ``promtool`` (Debian package
``prometheus``) checks the Prometheus config and every dashboard expression when on PATH.
The live check of dashboard metric names against a running server's /metrics uses
``tests/dashboard_names.py`` (loaded by path, as below).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from conftest import require, require_binary
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

TESTS_DIR = Path(__file__).resolve().parent
REPO = TESTS_DIR.parent
COMPOSE_FILE = REPO / "docker-compose.yml"
PROMETHEUS_FILE = REPO / "deploy" / "prometheus.yml"
DATASOURCE_FILE = REPO / "deploy" / "grafana" / "provisioning" / "datasources" / "prometheus.yml"
DASHBOARD_PROVIDER_FILE = (
    REPO / "deploy" / "grafana" / "provisioning" / "dashboards" / "litehit.yml"
)
DASHBOARD_FILE = REPO / "deploy" / "grafana" / "dashboards" / "litehit.json"


def _load_dashboard_names() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "litehit_tests_dashboard_names", TESTS_DIR / "dashboard_names.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


dashboard_names = _load_dashboard_names()
dashboard_metric_names = dashboard_names.dashboard_metric_names
promql_metric_names = dashboard_names.promql_metric_names
exposed_metric_names = dashboard_names.exposed_metric_names

EXPECTED_DASHBOARD_METRICS = {
    "litehit_hit_tokens_total",
    "litehit_input_tokens_total",
    "litehit_theoretical_hit_tokens_total",
    "litehit_trace_queries_total",
    "litehit_errors_total",
    "litehit_trace_query_duration_seconds",
    "litehit_unique_blocks",
    "litehit_memory_bytes",
    "process_resident_memory_bytes",
    "litehit_instances",
    "litehit_kv_cache_usage_bytes",
    "litehit_ttl_expired_blocks_total",
    "litehit_curve_hit_tokens_total",
    "litehit_capacity_for_target_bytes",
}

# Panel title -> unit. Exactly these panels (row panels aside) must exist.
EXPECTED_PANEL_UNITS = {
    "Token hit rate per capacity (windowed)": "percentunit",
    "Token hit rate per capacity (cumulative)": "percentunit",
    "Token hit rate vs capacity (selected range)": "percentunit",
    "Capacity for 90% of the theoretical hits": "bytes",
    "Queries/s": "reqps",
    "Errors/s by code": "reqps",
    "TraceQuery latency p50 / p99": "s",
    "Unique blocks": "short",
    "Memory: process RSS and engine state": "bytes",
    "KV cache usage bytes": "bytes",
    "TTL-expired blocks/s": "cps",
}

# Metrics without instance labels (direct instruments of the servicer).
# errors are per method and code only; litehit_instances selects the LiteHit processes
UNSCOPED_METRICS = {"litehit_errors_total", "litehit_instances"}
INSTANCE_FILTER = ('instance_group=~"$instance_group"', 'instance_id=~"$instance_id"')


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = _yaml(COMPOSE_FILE)
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD_FILE.read_text(encoding="utf-8"))


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Non-row panels, including those nested in rows."""
    out: list[dict[str, Any]] = []
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            out.extend(panel.get("panels", []))
        else:
            out.append(panel)
    return out


def _panel(dashboard: dict[str, Any], title: str) -> dict[str, Any]:
    (panel,) = [p for p in _panels(dashboard) if p["title"] == title]
    return panel


def _mounts(service: dict[str, Any]) -> dict[str, str]:
    """Container path -> source (host path or volume name) of a compose service's volumes."""
    out = {}
    for entry in service.get("volumes", []):
        if isinstance(entry, dict):
            out[entry["target"]] = entry["source"]
        else:
            source, target = entry.split(":")[:2]
            out[target] = source
    return out


def _dockerfile_instructions() -> list[tuple[str, str]]:
    text = (REPO / "Dockerfile").read_text(encoding="utf-8").replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            out.append((keyword.upper(), " ".join(rest.split())))
    return out


# --- Dockerfile ------------------------------------------------------------------------


def _modules_with_warm_up() -> set[str]:
    """Top-level modules and packages of litehit_core whose module defines or exports
    ``warm_up`` (read from the source)."""
    core = Path(__file__).resolve().parents[1] / "litehit_core"
    found = set()
    for path in [*core.glob("*.py"), *core.glob("*/__init__.py")]:
        name = path.parent.name if path.name == "__init__.py" else path.stem
        if re.search(r"^def warm_up\(|^\s+warm_up,$", path.read_text(), re.M):
            found.add(name)
    return found


def test_dockerfile_is_multi_stage_wheel_build_with_non_root_runtime() -> None:
    ins = _dockerfile_instructions()
    froms = [rest for kw, rest in ins if kw == "FROM"]
    assert froms == ["python:3.11-slim AS builder", "python:3.11-slim AS runtime"]
    runs = [rest for kw, rest in ins if kw == "RUN"]
    assert "pip wheel --no-deps --wheel-dir /wheels ." in runs
    assert ("COPY", "--from=builder /wheels/ /tmp/wheels/") in ins
    (install,) = [r for r in runs if r.startswith("pip install /tmp/wheels/*.whl")]
    # the numba kernels are compiled at build time into the runtime user's cache by
    # litehit warm-up, which warms every family of the registry's table; that table names
    # every core module (or package) that offers warm_up()
    assert "&& litehit warm-up" in install
    from litehit_core.engine import KERNEL_FAMILIES

    families = {f.module.rpartition(".")[2] for f in KERNEL_FAMILIES.values()}
    assert families == _modules_with_warm_up() and families >= {"compact_lite_hit", "hybrid"}
    assert "chown -R litehit:litehit /home/litehit/.cache" in install
    envs = " ".join(rest for kw, rest in ins if kw == "ENV")
    assert "NUMBA_CACHE_DIR=/home/litehit/.cache/numba" in envs
    users = [rest for kw, rest in ins if kw == "USER"]
    assert users == ["litehit"]
    assert any(
        "useradd --system --uid 10001" in r and "chown litehit:litehit /data" in r for r in runs
    )
    # USER comes after every RUN (nothing in the final image runs as root at start).
    last_run = max(i for i, (kw, _) in enumerate(ins) if kw == "RUN")
    assert ins.index(("USER", "litehit")) > last_run


def test_dockerfile_runtime_contract() -> None:
    ins = _dockerfile_instructions()
    assert ("VOLUME", '["/data"]') in ins
    assert ("EXPOSE", "50051 9464") in ins
    (entrypoint,) = [json.loads(rest) for kw, rest in ins if kw == "ENTRYPOINT"]
    (cmd,) = [json.loads(rest) for kw, rest in ins if kw == "CMD"]
    assert entrypoint + cmd == [
        "litehit",
        "serve",
        "--listen",
        "0.0.0.0:50051",
        "--metrics-listen",
        "0.0.0.0:9464",
        "--data-dir",
        "/data",
    ]
    (health,) = [rest for kw, rest in ins if kw == "HEALTHCHECK"]
    options, _, command = health.partition(" CMD ")
    assert json.loads(command) == ["litehit", "health", "--server", "127.0.0.1:50051"]
    assert options == "--interval=15s --timeout=5s --start-period=10s --retries=3"


def test_dockerignore_keeps_everything_the_wheel_build_needs() -> None:
    patterns = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for name in ("pyproject.toml", "README.md", "litehit_core", "litehit_service"):
        assert (REPO / name).exists(), name
    for name in (
        "pyproject.toml",
        "README.md",
        "protos",
        "scripts",
        "litehit_core",
        "litehit_service",
    ):
        assert not any(
            Path(name).match(p) or name.startswith(p.rstrip("/") + "/")
            for p in patterns
            if not p.startswith("!")
        ), name
    for junk in (".git", ".venv", "**/__pycache__", "litehit-data", "tests"):
        assert junk in patterns


# --- docker-compose.yml ----------------------------------------------------------------


def test_compose_has_the_three_services(compose: dict[str, Any]) -> None:
    assert set(compose["services"]) == {"litehit", "prometheus", "grafana"}
    assert compose["services"]["prometheus"]["image"].startswith("prom/prometheus:")
    assert compose["services"]["grafana"]["image"].startswith("grafana/grafana:")


def test_compose_litehit_is_built_here_with_a_named_data_volume(compose: dict[str, Any]) -> None:
    litehit = compose["services"]["litehit"]
    assert litehit["build"] == "."
    assert (REPO / "Dockerfile").is_file()
    assert litehit["ports"] == ["127.0.0.1:50051:50051", "127.0.0.1:9464:9464"]
    assert _mounts(litehit) == {"/data": "litehit-data"}
    assert "litehit-data" in compose["volumes"]


def test_compose_publishes_every_port_on_loopback_only(compose: dict[str, Any]) -> None:
    """Walks every service's ports: each is published on 127.0.0.1 (a bare "HOST_PORT:PORT"
    would publish it on every host interface), and the file says how to expose one."""
    published = 0
    for name, service in compose["services"].items():
        for entry in service.get("ports", []):
            assert isinstance(entry, str) and entry.startswith("127.0.0.1:"), (name, entry)
            assert entry.count(":") == 2, (name, entry)
            published += 1
    assert published == 4
    text = COMPOSE_FILE.read_text(encoding="utf-8")
    assert 'To expose one to other machines, drop the\n# "127.0.0.1:" prefix' in text


def test_admin_token_path_and_use_are_documented_where_the_server_is_deployed() -> None:
    """The token a server listening on 0.0.0.0 makes is DATA_DIR/admin-token (the real
    constant and the image's real --data-dir); the Dockerfile, the compose file and the
    README name that path and show how a client passes it, with the metadata key the
    server checks and the keyword the real client takes."""
    import inspect

    from litehit_service.access import ADMIN_TOKEN_FILE, Access, TokenCheck, is_loopback_host
    from litehit_service.client import OptimizerClient

    ins = _dockerfile_instructions()
    (cmd,) = [json.loads(rest) for kw, rest in ins if kw == "CMD"]
    listen = cmd[cmd.index("--listen") + 1]
    assert not is_loopback_host(listen.rpartition(":")[0])  # so the image is protected
    assert "--open-admin" not in cmd
    token_path = f"{cmd[cmd.index('--data-dir') + 1]}/{ADMIN_TOKEN_FILE}"
    assert "admin_token" in inspect.signature(OptimizerClient).parameters
    check = TokenCheck(admin_token="t")
    assert check.allowed(Access.ADMIN, [("authorization", "Bearer t")])
    assert not check.allowed(Access.ADMIN, [])
    from doc_pages import all_text, page_of

    docs = page_of("docker compose")  # the operators' page
    readme = all_text()  # the README and the docs site
    for path, text in (
        (REPO / "Dockerfile", (REPO / "Dockerfile").read_text(encoding="utf-8")),
        (COMPOSE_FILE, COMPOSE_FILE.read_text(encoding="utf-8")),
        (docs, readme),
    ):
        assert token_path in text, path
        assert "admin_token=" in text, path
        assert 'grpcurl -H "authorization: Bearer ' in text, path
    assert "`--open-admin`" in readme and "LITEHIT_OPEN_ADMIN" in readme


def test_compose_every_mount_source_exists(compose: dict[str, Any]) -> None:
    declared = set(compose.get("volumes") or {})
    checked = 0
    for name, service in compose["services"].items():
        build = service.get("build")
        if build is not None:
            context = build if isinstance(build, str) else build.get("context", ".")
            dockerfile = (
                "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
            )
            assert (REPO / context / dockerfile).is_file(), (name, context, dockerfile)
            checked += 1
        for target, source in _mounts(service).items():
            if source.startswith((".", "/")):
                assert (REPO / source).resolve().exists(), (name, source, target)
                assert (REPO / source).resolve().is_relative_to(REPO), (name, source)
            else:
                assert source in declared, (name, source, "named volume not declared")
            checked += 1
    assert checked == 7


def test_compose_prometheus_and_grafana_mounts(compose: dict[str, Any]) -> None:
    assert _mounts(compose["services"]["prometheus"]) == {
        "/etc/prometheus/prometheus.yml": "./deploy/prometheus.yml",
        "/prometheus": "prometheus-data",
    }
    assert _mounts(compose["services"]["grafana"]) == {
        "/etc/grafana/provisioning": "./deploy/grafana/provisioning",
        "/etc/grafana/dashboards": "./deploy/grafana/dashboards",
        "/var/lib/grafana": "grafana-data",
    }


def test_compose_grafana_auth_defaults(compose: dict[str, Any]) -> None:
    env = compose["services"]["grafana"]["environment"]
    assert env["GF_AUTH_ANONYMOUS_ENABLED"] == "${GRAFANA_ANONYMOUS_ENABLED:-false}"
    # required, no default: "${VAR:?message}" (compose refuses to start without it)
    assert re.fullmatch(
        r"\$\{GRAFANA_ADMIN_PASSWORD:\?[^}]*GRAFANA_ADMIN_PASSWORD[^}]*\}",
        env["GF_SECURITY_ADMIN_PASSWORD"],
    )
    assert env["GF_USERS_ALLOW_SIGN_UP"] == "false"
    assert env["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"] == (
        "/etc/grafana/dashboards/" + DASHBOARD_FILE.name
    )


def _compose_command() -> list[str] | None:
    candidates = []
    if shutil.which("docker-compose"):
        candidates.append(["docker-compose"])
    if shutil.which("docker"):
        candidates.append(["docker", "compose"])
    for cmd in candidates:
        probe = subprocess.run([*cmd, "version"], capture_output=True, timeout=60)
        if probe.returncode == 0:
            return cmd
    return None


def test_compose_config_validates_and_resolves_defaults() -> None:
    cmd = _compose_command()
    require(
        cmd is not None,
        "neither docker-compose nor the docker compose plugin is installed: apt-get install "
        "docker-compose",
    )
    assert cmd is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRAFANA_", "COMPOSE_"))}
    base = [*cmd, "--project-directory", str(REPO), "-f", str(COMPOSE_FILE), "config"]
    refused = subprocess.run([*base, "-q"], capture_output=True, text=True, env=env, timeout=120)
    assert refused.returncode != 0  # no Grafana password, no default: compose refuses
    assert "GRAFANA_ADMIN_PASSWORD" in refused.stderr
    env["GRAFANA_ADMIN_PASSWORD"] = "from-the-environment"
    quiet = subprocess.run([*base, "-q"], capture_output=True, text=True, env=env, timeout=120)
    assert quiet.returncode == 0, quiet.stderr
    full = subprocess.run(base, capture_output=True, text=True, env=env, timeout=120)
    assert full.returncode == 0, full.stderr
    grafana_env = yaml.safe_load(full.stdout)["services"]["grafana"]["environment"]
    assert grafana_env["GF_AUTH_ANONYMOUS_ENABLED"] == "false"
    assert grafana_env["GF_SECURITY_ADMIN_USER"] == "admin"
    assert grafana_env["GF_SECURITY_ADMIN_PASSWORD"] == "from-the-environment"


# --- Prometheus ------------------------------------------------------------------------


def test_prometheus_config_scrapes_litehit_metrics_port(compose: dict[str, Any]) -> None:
    config = _yaml(PROMETHEUS_FILE)
    assert config["global"]["scrape_interval"] == "15s"
    (job,) = config["scrape_configs"]
    assert job["job_name"] == "litehit"
    assert job["metrics_path"] == "/metrics"
    assert job["static_configs"] == [{"targets": ["litehit:9464"]}]
    assert "127.0.0.1:9464:9464" in compose["services"]["litehit"]["ports"]


def test_promtool_accepts_prometheus_config() -> None:
    promtool = require_binary("promtool")  # Debian's prometheus package (.ci/run)
    result = subprocess.run(
        [promtool, "check", "config", str(PROMETHEUS_FILE)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


# --- Grafana provisioning --------------------------------------------------------------


def test_grafana_datasource_provisioning() -> None:
    config = _yaml(DATASOURCE_FILE)
    assert config["apiVersion"] == 1
    (source,) = config["datasources"]
    assert source["uid"] == "prometheus"
    assert source["type"] == "prometheus"
    assert source["url"] == "http://prometheus:9090"
    assert source["isDefault"] is True
    # $__rate_interval is derived from this; it must equal the real scrape interval.
    assert source["jsonData"]["timeInterval"] == _yaml(PROMETHEUS_FILE)["global"]["scrape_interval"]


def test_grafana_dashboard_provider_points_to_the_mounted_dashboard_dir(
    compose: dict[str, Any],
) -> None:
    config = _yaml(DASHBOARD_PROVIDER_FILE)
    assert config["apiVersion"] == 1
    (provider,) = config["providers"]
    assert provider["type"] == "file"
    container_dir = provider["options"]["path"]
    host_dir = _mounts(compose["services"]["grafana"])[container_dir]
    assert (REPO / host_dir).resolve() == DASHBOARD_FILE.parent
    assert sorted(p.name for p in DASHBOARD_FILE.parent.iterdir()) == [DASHBOARD_FILE.name]
    # and the provisioning files are where the mounted provisioning dir expects them
    provisioning = REPO / _mounts(compose["services"]["grafana"])["/etc/grafana/provisioning"]
    assert (provisioning / "datasources" / DATASOURCE_FILE.name).resolve() == DATASOURCE_FILE
    assert (provisioning / "dashboards" / DASHBOARD_PROVIDER_FILE.name).resolve() == (
        DASHBOARD_PROVIDER_FILE
    )


# --- Dashboard -------------------------------------------------------------------------


def test_dashboard_template_variables(dashboard: dict[str, Any]) -> None:
    names = [v["name"] for v in dashboard["templating"]["list"]]
    assert names == ["datasource", "instance_group", "instance_id"]  # the data source first
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    source = variables.pop("datasource")
    assert (source["type"], source["query"]) == ("datasource", "prometheus")
    assert (source["multi"], source["includeAll"]) == (False, False)
    # its default is the provisioned data source (by uid, and by name for the picker)
    (provisioned,) = _yaml(DATASOURCE_FILE)["datasources"]
    assert source["current"]["value"] == provisioned["uid"]
    assert source["current"]["text"] == provisioned["name"]
    assert variables["instance_group"]["query"] == (
        "label_values(litehit_trace_queries_total, instance_group)"
    )
    assert variables["instance_id"]["query"] == (
        'label_values(litehit_trace_queries_total{instance_group=~"$instance_group"}, instance_id)'
    )
    for variable in variables.values():
        assert variable["type"] == "query"
        assert variable["multi"] is True
        assert variable["includeAll"] is True
        assert variable["allValue"] == ".*"


def test_dashboard_has_the_listed_panels_with_units(dashboard: dict[str, Any]) -> None:
    units = {p["title"]: p["fieldConfig"]["defaults"]["unit"] for p in _panels(dashboard)}
    assert units == EXPECTED_PANEL_UNITS
    ids = [p["id"] for p in dashboard["panels"]] + [
        p["id"] for row in dashboard["panels"] for p in row.get("panels", [])
    ]
    assert len(ids) == len(set(ids))


def test_dashboard_panels_do_not_overlap(dashboard: dict[str, Any]) -> None:
    cells: dict[tuple[int, int], str] = {}
    for panel in dashboard["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, (panel["title"], cells.get((x, y)))
                cells[(x, y)] = panel["title"]


def test_dashboard_reads_through_the_datasource_variable(dashboard: dict[str, Any]) -> None:
    text = DASHBOARD_FILE.read_text(encoding="utf-8")
    assert "${DS_" not in text and "__inputs" not in dashboard
    queries = [v for v in dashboard["templating"]["list"] if v["type"] == "query"]
    refs = [v["datasource"] for v in queries]
    for panel in _panels(dashboard):
        refs.append(panel["datasource"])
        refs.extend(t["datasource"] for t in panel["targets"])
    assert len(refs) == 2 + 11 + 15
    assert all(ref == {"type": "prometheus", "uid": "${datasource}"} for ref in refs)
    # the provisioned uid appears only as the variable's default, never hard-coded
    uid = _yaml(DATASOURCE_FILE)["datasources"][0]["uid"]
    assert text.count(f'"uid": "{uid}"') == 0 and text.count(f'"value": "{uid}"') == 1


def test_dashboard_says_gib(dashboard: dict[str, Any]) -> None:
    text = DASHBOARD_FILE.read_text(encoding="utf-8")
    assert re.findall(r"\bGB\b", text) == []  # capacity_gb labels are binary GiB
    legends = [
        t["legendFormat"]
        for title in (
            "Token hit rate per capacity (windowed)",
            "Token hit rate per capacity (cumulative)",
        )
        for t in _panel(dashboard, title)["targets"]
        if "capacity_gb" in t["legendFormat"]
    ]
    assert legends == ["{{instance_id}} @ {{capacity_gb}} GiB"] * 2


def test_dashboard_hit_rate_panels(dashboard: dict[str, Any]) -> None:
    sel = '{instance_group=~"$instance_group", instance_id=~"$instance_id"}'
    windowed = [
        t["expr"] for t in _panel(dashboard, "Token hit rate per capacity (windowed)")["targets"]
    ]
    assert windowed == [
        f"sum by (instance_id, capacity_gb) (rate(litehit_hit_tokens_total{sel}"
        "[$__rate_interval]))\n/ on (instance_id) group_left\n"
        f"sum by (instance_id) (rate(litehit_input_tokens_total{sel}[$__rate_interval]))",
        f"sum by (instance_id) (rate(litehit_theoretical_hit_tokens_total{sel}"
        "[$__rate_interval]))\n/ on (instance_id)\n"
        f"sum by (instance_id) (rate(litehit_input_tokens_total{sel}[$__rate_interval]))",
    ]
    cumulative = [
        t["expr"] for t in _panel(dashboard, "Token hit rate per capacity (cumulative)")["targets"]
    ]
    assert cumulative == [
        f"sum by (instance_id, capacity_gb) (litehit_hit_tokens_total{sel})\n"
        f"/ on (instance_id) group_left\nsum by (instance_id) (litehit_input_tokens_total{sel})",
        f"sum by (instance_id) (litehit_theoretical_hit_tokens_total{sel})\n"
        f"/ on (instance_id)\nsum by (instance_id) (litehit_input_tokens_total{sel})",
    ]


def test_dashboard_live_curve_panels(dashboard: dict[str, Any]) -> None:
    sel = '{instance_group=~"$instance_group", instance_id=~"$instance_id"}'
    curve = _panel(dashboard, "Token hit rate vs capacity (selected range)")
    (target,) = curve["targets"]
    assert target["expr"] == (
        f"sum by (instance_id, capacity_bytes) (increase(litehit_curve_hit_tokens_total{sel}"
        "[$__range]))\n/ on (instance_id) group_left\n"
        f"sum by (instance_id) (increase(litehit_input_tokens_total{sel}[$__range]))"
    )
    assert (target["instant"], target["format"]) == (True, "table")
    assert curve["options"]["xField"] == "capacity_bytes"
    assert [t["id"] for t in curve["transformations"]] == [
        "groupingToMatrix",
        "convertFieldType",
        "organize",
        "sortBy",
    ]
    (needed,) = _panel(dashboard, "Capacity for 90% of the theoretical hits")["targets"]
    assert needed["expr"] == (
        "max by (instance_id) (litehit_capacity_for_target_bytes{instance_group=~"
        '"$instance_group", instance_id=~"$instance_id", target="0.9"})'
    )


def test_dashboard_latency_quantiles(dashboard: dict[str, Any]) -> None:
    panel = _panel(dashboard, "TraceQuery latency p50 / p99")
    inner = (
        "sum by (le, method) (rate(litehit_trace_query_duration_seconds_bucket"
        '{instance_group=~"$instance_group", instance_id=~"$instance_id"}[$__rate_interval]))'
    )
    assert [(t["expr"], t["legendFormat"]) for t in panel["targets"]] == [
        (f"histogram_quantile(0.5, {inner})", "p50 {{method}}"),
        (f"histogram_quantile(0.99, {inner})", "p99 {{method}}"),
    ]


def test_dashboard_instance_metrics_follow_the_template_variables(
    dashboard: dict[str, Any],
) -> None:
    selectors = re.compile(r"\b(litehit_[a-z_]+)(\{[^}]*\})?")
    seen = 0
    for expr in dashboard_names.dashboard_expressions(dashboard)[:-2]:  # panels only
        for name, matchers in selectors.findall(expr):
            seen += 1
            if name in UNSCOPED_METRICS:
                assert not matchers, expr
            else:
                assert all(f in matchers for f in INSTANCE_FILTER), expr
    assert seen == 20


def test_dashboard_memory_panel_shows_process_rss_beside_the_engine_state(
    dashboard: dict[str, Any],
) -> None:
    """litehit_memory_bytes is the tracked engine state, not the process: the panel says
    so and plots the process's resident memory (of LiteHit's targets only) beside it."""
    panel = _panel(dashboard, "Memory: process RSS and engine state")
    legends = {t["refId"]: (t["expr"], t["legendFormat"]) for t in panel["targets"]}
    assert legends["A"][1] == "engine state {{instance_id}}"
    assert promql_metric_names(legends["A"][0]) == {"litehit_memory_bytes"}
    assert legends["B"] == (
        "process_resident_memory_bytes and on (job, instance) litehit_instances",
        "process RSS {{instance}}",
    )
    assert "engine state only" in panel["description"]
    assert "process_resident_memory_bytes" in panel["description"]


def test_dashboard_metric_names_are_exactly_the_exported_ones() -> None:
    assert dashboard_metric_names() == EXPECTED_DASHBOARD_METRICS
    assert dashboard_metric_names(DASHBOARD_FILE) == EXPECTED_DASHBOARD_METRICS


def test_every_dashboard_expression_is_valid_promql(
    dashboard: dict[str, Any], tmp_path: Path
) -> None:
    promtool = require_binary("promtool")  # Debian's prometheus package (.ci/run)
    exprs = dashboard_names.dashboard_expressions(dashboard)
    assert len(exprs) == 17
    rules = [
        {
            "record": f"dashboard:expr_{i}",
            "expr": expr.replace("$__rate_interval", "1m")
            .replace("$__range", "1h")
            .replace("$instance_group", ".*")
            .replace("$instance_id", ".*"),
        }
        for i, expr in enumerate(exprs)
    ]
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 17 rules found" in result.stdout


# --- the name-extraction helpers themselves --------------------------------------------


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('sum by (le, method) (rate(a_seconds_bucket{method="x"}[5m]))', {"a_seconds"}),
        ("rate(b_sum[1m]) / rate(b_count[1m])", {"b"}),
        (
            "x_total / ignoring(capacity_gb) group_left sum without (job) (y_total)",
            {"x_total", "y_total"},
        ),
        ('count(up{job="sum"}) > bool 2e3 and on (instance) z offset 5m', {"up", "z"}),
        ('{__name__="named_metric", label="rate(fake_metric)"}', {"named_metric"}),
        ("histogram_quantile(0.99, h_bucket) @ start()", {"h"}),
        ('topk($k, m{i=~"$instance_id"}[$__rate_interval:${step}])', {"m"}),
        ('label_replace(g, "dst", "$1", "src", "(.*)")', {"g"}),
        ("vector(1) + time() - 0x1f", set()),
    ],
)
def test_promql_metric_names(expr: str, names: set[str]) -> None:
    assert promql_metric_names(expr) == names


def test_variable_queries_contribute_their_selector_metric() -> None:
    board = {
        "panels": [{"type": "row", "panels": [{"targets": [{"expr": "rate(p_total[1m])"}]}]}],
        "templating": {
            "list": [
                {"type": "query", "query": 'label_values(v1{a="$b"}, instance_id)'},
                {"type": "query", "query": {"query": "query_result(max(v2))", "refId": "A"}},
                {"type": "query", "query": "label_values(instance_group)"},
                {"type": "custom", "query": "not_a_metric"},
            ]
        },
    }
    assert dashboard_metric_names(board) == {"p_total", "v1", "v2"}


def test_exposed_metric_names_from_a_real_prometheus_client_page() -> None:
    registry = CollectorRegistry()
    Counter("demo_errors", "errors", ["code"], registry=registry).labels("X").inc()
    Gauge("demo_blocks", "blocks", registry=registry).set(3)
    Histogram("demo_duration_seconds", "latency", registry=registry).observe(0.2)
    Counter("demo_unused", "declared with labels, no child yet", ["a"], registry=registry)
    text = generate_latest(registry).decode()
    assert exposed_metric_names(text) == {
        "demo_errors_total",
        "demo_blocks",
        "demo_duration_seconds",
    }
