"""Every `litehit serve` flag, given on the command line of a real server, has its effect.

:func:`test_every_serve_flag_has_a_case` walks the real ``serve`` parser (built by
``litehit_service.cli.build_parser``): a flag without an entry in :data:`CASES` fails it, and
so does an entry for a flag that is gone. Each case names the server it runs against; that
server was started (once per module, see :data:`SERVERS`) with the flag on its command line,
and the case checks what the flag does there. Four servers cover every flag.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from conftest import require_binary, scrape
from served import Served
from test_server_integration import GROUPS_YAML

from litehit_service import messages as pb2
from litehit_service.access import ADMIN_TOKEN_FILE
from litehit_service.cli import build_parser
from litehit_service.client import OptimizerClient
from litehit_service.model import (
    InstanceGroup,
    InstanceRegistration,
    LocationSpec,
    LocationSpecGroup,
)

ADMIN, ADMIN_FROM_FILE = "admin-on-the-command-line", "admin-from-a-file"
QUERY_FROM_FILE, QUERY = "query-from-a-file", "query-on-the-command-line"
GROUP = InstanceGroup("g", (1.0,), enable_theoretical_max_cache=True)


def registration(instance_id: str = "inst") -> InstanceRegistration:
    return InstanceRegistration(
        instance_id,
        "g",
        4,
        (LocationSpec("kv", 1024),),
        (LocationSpecGroup("full", ("kv",)),),
        full_location_spec_group_name="full",
    )


# ------------------------------------------------------------------ the servers

# name -> (listen host, flags); "{tmp}" is the module's temporary folder.
SERVERS: dict[str, tuple[str, list[str]]] = {
    "limits": ("127.0.0.1", [
        "--data-dir", "{tmp}/limits",
        "--groups", "{tmp}/groups.yaml",
        "--admin-token", ADMIN,
        "--query-token-file", "{tmp}/query-token",
        "--max-message-bytes", "4096",
        "--max-block-keys", "2",
        "--max-streams", "1",
        "--max-instances", "1",
        "--max-tracked-blocks", "64",
        "--max-clock-skew-seconds", "5",
        "--curve-grid-points", "3",
        "--snapshot-interval-seconds", "0.2",
    ]),
    "secure": ("127.0.0.1", [
        "--data-dir", "{tmp}/secure",
        "--tls-cert", "{tmp}/cert.pem",
        "--tls-key", "{tmp}/key.pem",
        "--admin-token-file", "{tmp}/admin-token",
        "--query-token", QUERY,
        "--stream-idle-seconds", "0.5",
    ]),
    "open": ("0.0.0.0", [
        "--data-dir", "{tmp}/open",
        "--listen", "0.0.0.0:0",
        "--metrics-listen", "127.0.0.1:0",
        "--open-admin",
        "--engine", "python",
    ]),
    "stopped": ("127.0.0.1", [
        "--data-dir", "{tmp}/stopped",
        "--engine", "compact",
        "--log-format", "json",
        "--grace-seconds", "7",
    ]),
}  # fmt: skip

KEYS_FOR_MEMORY = 20_000
"""Distinct blocks 40 queries make an instance track (the engine case compares memory)."""


def _command_line(name: str, tmp: Path) -> tuple[str, list[str]]:
    host, flags = SERVERS[name]
    return host, [flag.replace("{tmp}", str(tmp)) for flag in flags]


def _prepare_files(tmp: Path) -> None:
    (tmp / "groups.yaml").write_text(GROUPS_YAML, encoding="utf-8")
    (tmp / "query-token").write_text(QUERY_FROM_FILE + "\n", encoding="utf-8")
    (tmp / "admin-token").write_text(ADMIN_FROM_FILE + "\n", encoding="utf-8")


def _make_certificate(tmp: Path) -> None:
    """A self-signed certificate for 127.0.0.1 (``cert.pem``, ``key.pem``): openssl is a
    prerequisite of the TLS server only (skipped locally without it, a failure under CI)."""
    if (tmp / "cert.pem").exists():
        return
    subprocess.run(
        [require_binary("openssl"), "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(tmp / "key.pem"), "-out", str(tmp / "cert.pem"), "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True,
        capture_output=True,
    )  # fmt: skip


class Servers:
    """The servers of :data:`SERVERS`, each started on first use and stopped at the end."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.running: dict[str, Served] = {}
        self._stopped: dict[str, Any] | None = None

    def __getitem__(self, name: str) -> Served:
        if name not in self.running:
            host, argv = _command_line(name, self.tmp)
            tls_ca = None
            if "--tls-cert" in argv:
                _make_certificate(self.tmp)
                tls_ca = self.tmp / "cert.pem"
            self.running[name] = Served(host, *argv, tls_ca=tls_ca)
        return self.running[name]

    def stopped(self) -> dict[str, Any]:
        """The "stopped" server after a workload and a SIGTERM: its exit code, whole log and
        the memory its engine needs per tracked block."""
        if self._stopped is None:
            served = self["stopped"]
            with served.client() as client:  # loopback: admin RPCs open
                per_block = _memory_per_block(client)
            code = served.stop()
            self._stopped = {"code": code, "log": served.log, "per_block": per_block}
        return self._stopped

    def close(self) -> None:
        for served in self.running.values():
            try:
                served.stop()
            finally:
                served.kill()


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    tmp = tmp_path_factory.mktemp("serve-flags")
    _prepare_files(tmp)
    running = Servers(tmp)
    try:
        yield running
    finally:
        running.close()


# ------------------------------------------------------------------ helpers


def _ensure_instance(client: Any, instance_id: str = "inst") -> None:
    """Group "g" and an instance (idempotent: an identical registration keeps the state)."""
    client.create_instance_group(GROUP, check=False)
    client.register_instance(registration(instance_id))


def _memory_per_block(client: Any) -> float:
    """Bytes of engine memory per tracked block, over KEYS_FOR_MEMORY fresh blocks."""
    _ensure_instance(client, "mem")

    def memory() -> int:
        (mem,) = [i for i in client.list_instances().instances if i.instance_id == "mem"]
        return mem.debug_info.memory_usage_bytes

    before = memory()
    step = KEYS_FOR_MEMORY // 40
    for start in range(10**9, 10**9 + KEYS_FOR_MEMORY, step):
        assert client.trace_query("mem", list(range(start, start + step)), 4 * step).total_blocks
    return (memory() - before) / KEYS_FOR_MEMORY


def _query_code(served: Served, token: str | None, instance_id: str = "inst") -> Any:
    """How a TraceQuery ends: the gRPC code when refused, else the header's code."""
    with served.client(token) as client:
        try:
            return client.trace_query(instance_id, [1], 4, check=False).header.status.code
        except grpc.RpcError as exc:
            return exc.code()


def _metadata(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def _batch(keys: list[int]) -> pb2.TraceQueryBatchRequest:
    query = pb2.TraceQueryRequest(
        instance_id="inst", block_keys=keys, input_token_len=4 * len(keys)
    )
    return pb2.TraceQueryBatchRequest(queries=[query])


def _held_stream(release: threading.Event) -> Iterator[pb2.TraceQueryBatchRequest]:
    """One batch, then silence until ``release`` (at most a minute)."""
    yield _batch([1, 2])
    release.wait(60)


def _wait(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 60
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached within a minute")
        time.sleep(0.02)


# ------------------------------------------------------------------ one case per flag


def check_listen(servers: Servers) -> None:
    served = servers["open"]  # --listen 0.0.0.0:0: any interface, a free port
    host, _, port = served.announced.rpartition(":")
    assert (host, int(port) > 0) == ("0.0.0.0", True)
    with served.client() as client:
        assert client.list_instance_groups().header.status.code == pb2.OK


def check_metrics_listen(servers: Servers) -> None:
    served = servers["open"]
    host, _, port = served.metrics.rpartition(":")
    assert (host, int(port) > 0) == ("127.0.0.1", True)
    with urllib.request.urlopen(f"http://{served.metrics}/metrics", timeout=30) as response:
        assert "litehit_instances" in response.read().decode()


def check_data_dir(servers: Servers) -> None:
    served = servers["limits"]
    assert served.data_dir == (servers.tmp / "limits").resolve()
    assert (served.data_dir / "litehit.sqlite3").is_file()
    assert (served.data_dir / "litehit.lock").is_file()


def check_groups(servers: Servers) -> None:
    with servers["limits"].client() as client:  # reads: open
        assert "g" in [g.name for g in client.list_instance_groups().instance_groups]
        assert [i.instance_id for i in client.list_instances().instances] == ["inst"]


def check_tls(servers: Servers) -> None:
    served = servers["secure"]
    with served.client() as secure:
        assert secure.list_instance_groups().header.status.code == pb2.OK
    with OptimizerClient(served.target, retries=0, timeout=10) as plain:
        with pytest.raises(grpc.RpcError):
            plain.list_instance_groups()


def check_admin_token(servers: Servers) -> None:
    served = servers["limits"]
    for wrong in (None, QUERY_FROM_FILE):
        assert served.admin_code(wrong, "by-flag") is grpc.StatusCode.UNAUTHENTICATED
    assert served.admin_code(ADMIN, "by-flag") is grpc.StatusCode.OK


def check_admin_token_file(servers: Servers) -> None:
    served = servers["secure"]
    for wrong in (None, QUERY):
        assert served.admin_code(wrong, "by-file") is grpc.StatusCode.UNAUTHENTICATED
    assert served.admin_code(ADMIN_FROM_FILE, "by-file") is grpc.StatusCode.OK
    assert not (served.data_dir / ADMIN_TOKEN_FILE).exists()


def check_open_admin(servers: Servers) -> None:
    served = servers["open"]  # 0.0.0.0 without a token: only --open-admin leaves it open
    assert served.admin_code(None, "open") is grpc.StatusCode.OK
    assert not (served.data_dir / ADMIN_TOKEN_FILE).exists()
    log = served.wait_for_log("(--open-admin)")
    (line,) = [line for line in log.splitlines() if "(--open-admin)" in line]
    assert " WARNING " in line and "admin RPCs are open" in line


def check_query_token(servers: Servers) -> None:
    served = servers["secure"]
    assert _query_code(served, None, "nobody") is grpc.StatusCode.UNAUTHENTICATED
    for token in (QUERY, ADMIN_FROM_FILE):  # the admin token works for queries too
        assert _query_code(served, token, "nobody") == pb2.INSTANCE_NOT_EXIST


def check_query_token_file(servers: Servers) -> None:
    served = servers["limits"]
    for wrong in (None, QUERY):
        assert _query_code(served, wrong) is grpc.StatusCode.UNAUTHENTICATED
    for token in (QUERY_FROM_FILE, ADMIN):
        assert _query_code(served, token) == pb2.OK


def check_max_message_bytes(servers: Servers) -> None:
    with servers["limits"].client(QUERY_FROM_FILE) as client:
        with pytest.raises(grpc.RpcError) as info:
            client.trace_query("inst", list(range(10**12, 10**12 + 1000)), 4000)
        assert info.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert client.trace_query("inst", [1, 2], 8).header.status.code == pb2.OK


def check_max_block_keys(servers: Servers) -> None:
    with servers["limits"].client(QUERY_FROM_FILE) as client:
        status = client.trace_query("inst", [1, 2, 3], 12, check=False).header.status
        assert (status.code, status.message) == (
            pb2.INVALID_ARGUMENT,
            "block_keys has 3 keys, more than max_block_keys 2",
        )
        assert client.trace_query("inst", [1, 2], 8).header.status.code == pb2.OK


def check_max_streams(servers: Servers) -> None:
    served = servers["limits"]
    with served.client() as client:
        stub = pb2.OptimizerServiceStub(client.channel)
        release = threading.Event()
        held = stub.TraceQueryStream(
            _held_stream(release), metadata=_metadata(QUERY_FROM_FILE), timeout=120
        )
        try:
            assert next(held).results[0].total_blocks == 2  # the first stream is open
            with pytest.raises(grpc.RpcError) as info:
                list(stub.TraceQueryStream(iter([_batch([3])]), metadata=_metadata(ADMIN)))
            assert info.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "the limit is 1 (--max-streams)" in info.value.details()
        finally:
            release.set()
        assert list(held) == []  # the held stream ends normally once its client is done


def check_stream_idle_seconds(servers: Servers) -> None:
    served = servers["secure"]
    with served.client(ADMIN_FROM_FILE) as client:
        _ensure_instance(client)
        stub = pb2.OptimizerServiceStub(client.channel)
        release = threading.Event()
        answers = []
        try:
            call = stub.TraceQueryStream(
                _held_stream(release), metadata=_metadata(QUERY), timeout=120
            )
            with pytest.raises(grpc.RpcError) as info:
                for answer in call:
                    answers.append(answer)
        finally:
            release.set()
    assert [a.results[0].total_blocks for a in answers] == [2]
    assert info.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    assert "sent nothing for 0.5 s (--stream-idle-seconds)" in info.value.details()


def check_max_instances(servers: Servers) -> None:
    with servers["limits"].client(ADMIN) as client:
        status = client.register_instance(registration("second"), check=False).header.status
        assert status.code == pb2.REACH_MAX_ENTITY_CAPACITY
        assert "max_instances is 1" in status.message
        assert [i.instance_id for i in client.list_instances().instances] == ["inst"]


def check_max_tracked_blocks(servers: Servers) -> None:
    with servers["limits"].client(QUERY_FROM_FILE) as client:
        for k in range(33):  # 66 fresh blocks, two per query (--max-block-keys 2)
            client.trace_query("inst", [10**6 + 2 * k, 10**6 + 2 * k + 1], 8)
        (inst,) = client.list_instances().instances
    assert inst.debug_info.max_tracked_blocks == 64
    assert inst.debug_info.unique_keys == 64  # the least recent were dropped past 64
    assert inst.debug_info.dropped_blocks >= 2


def check_max_clock_skew_seconds(servers: Servers) -> None:
    ahead = time.time_ns() + 60 * 10**9  # a minute ahead: past 5 s, within the default 300
    with servers["limits"].client(QUERY_FROM_FILE) as client:
        status = client.trace_query("inst", [7], 4, timestamp_ns=ahead, check=False).header.status
        assert status.code == pb2.INVALID_ARGUMENT
        assert "ahead of the server clock" in status.message and "5 s are allowed" in status.message
    with servers["open"].client() as client:  # no --max-clock-skew-seconds: accepted
        _ensure_instance(client)
        assert client.trace_query("inst", [7], 4, timestamp_ns=ahead).header.status.code == pb2.OK


def check_snapshot_interval_seconds(servers: Servers) -> None:
    served = servers["limits"]
    with served.client(QUERY_FROM_FILE) as client:
        assert client.trace_query("inst", [1, 2], 8).header.status.code == pb2.OK
    state = served.data_dir / "state"
    # written while the server runs (without the interval: only at stop)
    _wait(lambda: state.is_dir() and any(p.is_file() for p in state.iterdir()), "a snapshot")


def check_curve_grid_points(servers: Servers) -> None:
    capacities = {
        dict(labels)["capacity_bytes"]
        for name, labels in scrape(servers["limits"].metrics)
        if name == "litehit_curve_hit_tokens_total" and ("instance_id", "inst") in labels
    }
    assert len(capacities) == 3


def check_grace_seconds(servers: Servers) -> None:
    record = servers.stopped()
    assert record["code"] == 0
    messages = [json.loads(line)["message"] for line in record["log"].splitlines() if line]
    assert "stopping: draining for up to 7 s" in messages


def check_log_format(servers: Servers) -> None:
    lines = [line for line in servers.stopped()["log"].splitlines() if line]
    assert lines
    for line in lines:  # every line one JSON object
        record = json.loads(line)
        assert {"time", "level", "logger", "message"} <= set(record), line


def check_engine(servers: Servers) -> None:
    compact = servers.stopped()["per_block"]  # --engine compact
    with servers["open"].client() as client:  # --engine python
        python = _memory_per_block(client)
    # documented: ~25 bytes per tracked block compact, ~95 python (measured 21 and 102)
    assert 0 < compact and 2 * compact < python, (compact, python)


# flag -> (the server started with it, the case checking its effect there)
CASES: dict[str, tuple[str, Callable[[Servers], None]]] = {
    "--listen": ("open", check_listen),
    "--metrics-listen": ("open", check_metrics_listen),
    "--data-dir": ("limits", check_data_dir),
    "--groups": ("limits", check_groups),
    "--tls-cert": ("secure", check_tls),
    "--tls-key": ("secure", check_tls),
    "--admin-token": ("limits", check_admin_token),
    "--admin-token-file": ("secure", check_admin_token_file),
    "--open-admin": ("open", check_open_admin),
    "--query-token": ("secure", check_query_token),
    "--query-token-file": ("limits", check_query_token_file),
    "--max-message-bytes": ("limits", check_max_message_bytes),
    "--max-block-keys": ("limits", check_max_block_keys),
    "--max-streams": ("limits", check_max_streams),
    "--stream-idle-seconds": ("secure", check_stream_idle_seconds),
    "--max-instances": ("limits", check_max_instances),
    "--max-tracked-blocks": ("limits", check_max_tracked_blocks),
    "--max-clock-skew-seconds": ("limits", check_max_clock_skew_seconds),
    "--snapshot-interval-seconds": ("limits", check_snapshot_interval_seconds),
    "--curve-grid-points": ("limits", check_curve_grid_points),
    "--grace-seconds": ("stopped", check_grace_seconds),
    "--engine": ("stopped", check_engine),
    "--log-format": ("stopped", check_log_format),
}


def _serve_parser() -> argparse.ArgumentParser:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]  # noqa: SLF001
    return sub.choices["serve"]


def test_every_serve_flag_has_a_case() -> None:
    """Walks the real parser: every option of `litehit serve` has a case, on a server whose
    command line carries that option, and every case is for a real option."""
    flags = {
        option
        for action in _serve_parser()._actions  # noqa: SLF001
        if not isinstance(action, argparse._HelpAction)  # noqa: SLF001
        for option in action.option_strings
    }
    assert len(flags) >= 23
    missing = sorted(flags - set(CASES))
    assert not missing, f"serve flags without a case in tests/test_serve_flags.py: {missing}"
    assert not sorted(set(CASES) - flags), "cases for flags `litehit serve` no longer has"
    for flag, (server, _) in CASES.items():
        assert flag in SERVERS[server][1], f"server {server!r} is not started with {flag}"


@pytest.mark.parametrize("flag", list(CASES))
def test_serve_flag_from_the_command_line(servers: Servers, flag: str) -> None:
    case = CASES[flag][1]
    case(servers)
