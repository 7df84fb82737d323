"""A ``litehit serve`` that fails to start leaves the disk as it found it: no empty SQLite
registry, no lock file, no ``state/``, no data dir (or parent) it created; what existed
stays untouched. Real processes (and one in-process :func:`serve`) on 127.0.0.1."""

from __future__ import annotations

import socket
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from serve_process import ROOT, ServeProcess, serve_env

from litehit_service.service import ServerConfig, serve


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port of 127.0.0.1 another socket listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def litehit_serve(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "litehit_service", "serve", "--data-dir", str(data_dir)]
    argv += ["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", *args]
    return subprocess.run(
        argv, capture_output=True, text=True, env=serve_env(), cwd=ROOT, timeout=120
    )


def tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_grpc_port_taken_leaves_nothing(tmp_path: Path, taken_port: int) -> None:
    result = litehit_serve(tmp_path / "new" / "data", "--listen", f"127.0.0.1:{taken_port}")
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.splitlines()[-1].startswith(
        f"litehit serve: error: cannot listen on 127.0.0.1:{taken_port}: "
    )
    assert tree(tmp_path) == []  # neither the data dir nor the parent it made


def test_grpc_port_taken_is_one_clean_error(tmp_path: Path, taken_port: int) -> None:
    """No raw gRPC core line (``add_port.cc``, ``chttp2``) before the clean error."""
    result = litehit_serve(tmp_path / "data", "--listen", f"127.0.0.1:{taken_port}")
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        f"litehit serve: error: cannot listen on 127.0.0.1:{taken_port}: Address already in use"
    )
    assert "add_port" not in result.stderr and "chttp2" not in result.stderr, result.stderr
    assert "GRPC_VERBOSITY" not in result.stderr


def test_metrics_port_taken_leaves_nothing(tmp_path: Path, taken_port: int) -> None:
    result = litehit_serve(tmp_path / "data", "--metrics-listen", f"127.0.0.1:{taken_port}")
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.splitlines()[-1] == (
        f"litehit serve: error: cannot listen on 127.0.0.1:{taken_port} (metrics): "
        "Address already in use"
    )
    assert tree(tmp_path) == []


def test_bad_flag_values_leave_nothing(tmp_path: Path) -> None:
    result = litehit_serve(tmp_path / "data", "--max-streams", "many")
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        "litehit serve: error: --max-streams: invalid value 'many' "
        "(invalid literal for int() with base 10: 'many')"
    )
    bad = tmp_path / "groups.yaml"
    bad.write_text("instance_groups:\n  - name: g\n    capacity_gb: [-5]\n", encoding="utf-8")
    result = litehit_serve(tmp_path / "data", "--groups", str(bad))  # read after the lock
    assert result.returncode == 2
    assert "capacity_gb[0] of instance group 'g' must be finite and > 0, got -5.0" in (
        result.stderr
    )
    assert tree(tmp_path) == ["groups.yaml"]


def test_a_failed_start_keeps_what_was_there(tmp_path: Path, taken_port: int) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "notes.txt").write_text("mine\n", encoding="utf-8")
    result = litehit_serve(data, "--listen", f"127.0.0.1:{taken_port}")
    assert result.returncode == 1
    assert tree(tmp_path) == ["data", "data/notes.txt"]

    # a data dir of an earlier server (with a group): its files and their content stay
    used = tmp_path / "used"
    groups = tmp_path / "groups.yaml"
    groups.write_text("instance_groups:\n  - name: g\n    capacity_gb: [1]\n", encoding="utf-8")
    server = ServeProcess("--data-dir", str(used), "--groups", str(groups))
    assert server.terminate() == 0
    files, rows = tree(used), dump(used / "litehit.sqlite3")
    assert files == ["clean-stop.json", "counters.json", "litehit.lock", "litehit.sqlite3"]
    assert "'g'" in "".join(rows)
    result = litehit_serve(used, "--metrics-listen", f"127.0.0.1:{taken_port}")
    assert result.returncode == 1
    assert (tree(used), dump(used / "litehit.sqlite3")) == (files, rows)


def dump(registry: Path) -> list[str]:
    """The registry's SQL dump (schema and rows)."""
    conn = sqlite3.connect(registry)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


def test_serve_in_process_cleans_up_on_a_taken_port(tmp_path: Path, taken_port: int) -> None:
    data = tmp_path / "a" / "b"
    config = ServerConfig(
        listen="127.0.0.1:0", metrics_listen=f"127.0.0.1:{taken_port}", data_dir=str(data)
    )
    with pytest.raises(OSError) as info:
        serve(config, stop=threading.Event())
    assert str(info.value) == (
        f"cannot listen on 127.0.0.1:{taken_port} (metrics): Address already in use"
    )
    assert tree(tmp_path) == []
