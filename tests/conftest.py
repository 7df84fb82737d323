"""Collection rules and the helpers the test modules share.

- :func:`require`: a prerequisite the suite needs (a binary, a trace, a wheel); skipped
  locally when it is missing, a failure under CI (``CI`` set), where ``.ci/run`` installs
  every one of them: a test can never silently vanish from the pipeline.
- :data:`MOONCAKE_DIR` / :func:`mooncake_trace`: the shared Mooncake traces,
  ``../shared/traces/mooncake/`` beside the checkout (CI lays a copy of shared/ beside its
  fresh clone, so the same relative path works there).
- :func:`run_cli`: ``litehit`` (``python -m litehit_service``) in a subprocess.
- :class:`LiveServer` / the ``start_server`` fixture: a real server in this process
  (``create_server`` on 127.0.0.1 port 0, the bound port read back); ``serve`` fixture:
  ``litehit serve`` as a real subprocess (:class:`serve_process.ServeProcess`, ports 0,
  the bound ports read back from its announcement line).
- :func:`reserved_port`: a port held (bound, not listening) for a server started later on
  it, instead of probing for a free port and reusing it (a race).
- :func:`replay_config` / :func:`write_replay_config`: a ``litehit replay`` config.
- :func:`scrape` / :func:`metric_samples`: ``/metrics`` as ``{(name, labels): value}``.
- Hypothesis runs without deadlines, and derandomized under CI.

The service is imported lazily (inside the helpers), so collecting a module that does not
use them never imports the manager.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

# the clone and tests/ on sys.path however pytest is started (no ini, --import-mode
# importlib): the test modules import `tests.<module>` and their helpers by name
for _path in (str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402
from serve_process import ROOT, ServeProcess, serve_env  # noqa: E402

if TYPE_CHECKING:
    from litehit_service.client import OptimizerClient
    from litehit_service.manager import OnlineOptimizerManager

SHARED = ROOT.parent / "shared"
MOONCAKE_DIR = SHARED / "traces" / "mooncake"
MOONCAKE = MOONCAKE_DIR / "conversation_trace.jsonl"
"""The real Mooncake conversation trace (12,031 requests)."""
ON_CI = bool(os.environ.get("CI"))
GIB = 1024**3

# Hypothesis: no per-example deadline (a wall-clock threshold, flaky on a loaded machine),
# and under CI the same examples on every run (derandomize: a fixed seed per test).
settings.register_profile("litehit", deadline=None, derandomize=ON_CI, print_blob=True)
settings.load_profile("litehit")


@pytest.fixture(scope="session", autouse=True)
def compiled_kernels() -> None:
    """Load (or, in a fresh clone, compile once: ~16 s) every family of compiled kernels
    before the first test runs, so no test's command prints the one-time compile notice
    (:mod:`litehit_service.offline.kernels`) and every stderr is the same on a cold and a
    warm cache; ~0.5 s when cached. A fixture, not a collection hook: collecting the tests
    imports no numba. The notices themselves are tested in test_kernels.py."""
    import importlib.util

    if importlib.util.find_spec("numba") is None:
        return  # not installed: the tests that need it say so themselves
    from litehit_core.engine import KERNEL_FAMILIES
    from litehit_service.offline.kernels import load_kernels

    for name in KERNEL_FAMILIES:
        load_kernels(name)


@pytest.fixture(autouse=True)
def environment_left_as_found() -> Iterator[None]:
    """Every test leaves ``os.environ`` as it found it (deny by default: any variable, set,
    changed or removed). A leaked variable changes every later test and every subprocess
    they start: a ``NUMBA_CACHE_DIR`` left behind once sent the rest of the run's servers
    to a cold kernel cache, and a memory test failed far from its cause."""
    own = "PYTEST_CURRENT_TEST"  # pytest's own, rewritten at every phase
    before = {k: v for k, v in os.environ.items() if k != own}
    yield
    after = {k: v for k, v in os.environ.items() if k != own}
    if after != before:
        changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        for key in changed:
            if key in before:
                os.environ[key] = before[key]
            else:
                os.environ.pop(key, None)
        pytest.fail(f"the test left environment variables changed: {changed}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip, on the compact engine, the tests a module lists in ``LITE_HIT_INTERNALS`` (they
    read :class:`~litehit_core.lite_hit.LiteHit`'s own layout), with the listed reason."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is None or callspec.params.get("lite_hit_engine") != "compact":
            continue
        internals = getattr(item.module, "LITE_HIT_INTERNALS", {})
        name = item.originalname if hasattr(item, "originalname") else item.name
        if name in internals:
            item.add_marker(pytest.mark.skip(reason=f"reads LiteHit's {internals[name]}"))


# ------------------------------------------------------------------ prerequisites


def require(condition: object, what: str) -> None:
    """Go on when ``condition`` holds; otherwise skip the test naming ``what`` is missing,
    or, under CI (``CI`` set: ``.ci/run`` provides every prerequisite), fail it."""
    if condition:
        return
    if ON_CI:
        pytest.fail(f"{what} (CI must provide it: see .ci/run)", pytrace=False)
    pytest.skip(what)


DEBIAN_PACKAGES = {"promtool": "prometheus", "prometheus": "prometheus", "openssl": "openssl",
                   "docker-compose": "docker-compose"}  # fmt: skip
"""The Debian package that provides each command the tests run (``.ci/run`` installs them)."""
RAY_MISSING = "ray is not installed: pip install '.[ray]' (or scripts/test-extras)"
"""The skip reason of every test that needs Ray."""


def require_binary(name: str) -> str:
    """The path of the command ``name`` (see :func:`require`); the skip names the Debian
    package that provides it."""
    import shutil

    path = shutil.which(name)
    package = DEBIAN_PACKAGES.get(name, name)
    require(path is not None, f"the {name} command is not installed: apt-get install {package}")
    assert path is not None
    return path


def mooncake_trace(name: str = "conversation_trace.jsonl") -> Path:
    """A shared Mooncake trace (see :func:`require`)."""
    path = MOONCAKE_DIR / name
    require(
        path.is_file(),
        f"{path} is absent (the shared Mooncake traces): git clone "
        "https://github.com/kvcache-ai/Mooncake && mkdir -p ../shared/traces/mooncake && cp "
        "Mooncake/FAST25-release/traces/*.jsonl ../shared/traces/mooncake/",
    )
    return path


@pytest.fixture
def mooncake() -> Path:
    """The real Mooncake conversation trace (required: see :func:`require`)."""
    return mooncake_trace()


# ------------------------------------------------------------------ the CLI


def cli_argv(*args: str) -> list[str]:
    """The argv of ``litehit ARGS`` run by this interpreter (the venv's)."""
    return [sys.executable, "-m", "litehit_service", *args]


def run_cli(
    *args: str,
    env: dict[str, str] | None = None,
    cwd: str | os.PathLike[str] = ROOT,
    timeout: float = 120,
    input: str | None = None,  # noqa: A002 - subprocess.run's name
) -> subprocess.CompletedProcess[str]:
    """Run ``litehit ARGS`` in a subprocess (environment: :func:`serve_process.serve_env`,
    no LITEHIT_* settings) and return what it did, stdout and stderr as text."""
    return subprocess.run(
        cli_argv(*args),
        capture_output=True,
        text=True,
        env=serve_env() if env is None else env,
        cwd=cwd,
        timeout=timeout,
        input=input,
        check=False,
    )


# ------------------------------------------------------------------ servers


class LiveServer:
    """A real server in this process: ``create_server`` on 127.0.0.1 port 0 (the bound port
    read back) around a real manager (a fresh one by default) with its metrics.

    ``registry``, when given, is closed by :meth:`stop`; ``options`` are
    :class:`~litehit_service.server.ServerOptions` fields.
    """

    def __init__(
        self,
        manager: OnlineOptimizerManager | None = None,
        *,
        registry: Any = None,
        **options: Any,
    ) -> None:
        from litehit_service.manager import OnlineOptimizerManager
        from litehit_service.metrics import ServiceMetrics
        from litehit_service.server import create_server

        self.registry = registry
        self.manager = manager if manager is not None else OnlineOptimizerManager(registry)
        self.metrics = ServiceMetrics(self.manager)
        self.server = create_server(self.manager, self.metrics, "127.0.0.1:0", **options)
        self.port = self.server.start().port
        self.target = f"127.0.0.1:{self.port}"

    def client(self, **kwargs: Any) -> OptimizerClient:
        """A client of this server (timeout 10 s unless given)."""
        from litehit_service.client import OptimizerClient

        kwargs.setdefault("timeout", 10.0)
        return OptimizerClient(self.target, **kwargs)

    def scrape(self) -> dict[tuple[str, tuple], float]:
        """The server's metrics, rendered in process, as :func:`metric_samples`."""
        return metric_samples(self.metrics.render().decode())

    def stop(self) -> None:
        """Stop at once (idempotent) and close the registry."""
        self.server.stop()
        if self.registry is not None:
            self.registry.close()

    def __enter__(self) -> LiveServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@pytest.fixture
def start_server() -> Iterator[Callable[..., LiveServer]]:
    """``start_server(manager=None, **options)``: a started :class:`LiveServer`, stopped
    at the end of the test."""
    started: list[LiveServer] = []

    def start(*args: Any, **kwargs: Any) -> LiveServer:
        server = LiveServer(*args, **kwargs)
        started.append(server)
        return server

    yield start
    for server in reversed(started):
        server.stop()


@pytest.fixture
def serve() -> Iterator[Callable[..., ServeProcess]]:
    """``serve(*args)``: ``litehit serve ARGS`` as a subprocess on ports 0
    (:class:`ServeProcess`); one still running at the end of the test is killed."""
    started: list[ServeProcess] = []

    def start(*args: str) -> ServeProcess:
        server = ServeProcess(*args)
        started.append(server)
        return server

    yield start
    for server in started:
        server.kill()


@contextmanager
def reserved_port() -> Iterator[int]:
    """A port of 127.0.0.1 held for the block: bound with SO_REUSEADDR and never listening,
    so connections to it are refused, while a server that binds with SO_REUSEADDR (every
    gRPC server does) can listen on it meanwhile. Unlike probing for a free port and
    closing it, nobody else can take the port in between."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


# ------------------------------------------------------------------ metrics


def metric_samples(text: str) -> dict[tuple[str, tuple], float]:
    """A Prometheus text page as ``{(sample name, sorted labels): value}``."""
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def scrape(address: str) -> dict[tuple[str, tuple], float]:
    """``http://ADDRESS/metrics`` as :func:`metric_samples`."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        return metric_samples(response.read().decode())


# ------------------------------------------------------------------ replay configs


def lru_instance(
    instance_id: str = "i", group: str = "g", block_size: int = 4, **fields: Any
) -> dict[str, Any]:
    """A full-attention instance entry of a replay config (one location ``kv`` of 1024
    bytes per block); ``fields`` are added or replaced."""
    return {
        "instance_id": instance_id,
        "instance_group": group,
        "block_size": block_size,
        "location_spec_infos": [{"name": "kv", "size": 1024}],
        "location_spec_groups": [{"name": "full", "spec_names": ["kv"]}],
        **fields,
    }


def replay_config(
    trace: str | os.PathLike[str],
    *,
    output: str | os.PathLike[str] = "out",
    block_size: int = 4,
    groups: list[dict[str, Any]] | None = None,
    instances: list[dict[str, Any]] | None = None,
    **top: Any,
) -> dict[str, Any]:
    """A ``litehit replay`` config: ``trace`` and ``output`` (relative paths are read from
    the config's folder), one group ``g`` of 1 GiB and one :func:`lru_instance` unless
    ``groups`` / ``instances`` are given; ``top`` adds or replaces top-level fields."""
    return {
        "trace_file_path": str(trace),
        "output_result_path": str(output),
        "block_size": block_size,
        "instance_groups": groups if groups is not None else [{"name": "g", "capacity_gb": [1.0]}],
        "instances": instances if instances is not None else [lru_instance()],
        **top,
    }


def write_replay_config(path: Path, trace: str | os.PathLike[str], **kwargs: Any) -> Path:
    """Write :func:`replay_config` (``kwargs``) as JSON (indent 2) to ``path``; returns it."""
    path.write_text(json.dumps(replay_config(trace, **kwargs), indent=2), encoding="utf-8")
    return path
