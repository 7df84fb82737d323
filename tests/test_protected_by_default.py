"""Protected by default: a `litehit serve` listening beyond loopback without an admin token
makes one in its data dir and needs it on every admin RPC (issue 20, deliverable 5).

Every server here is the real ``litehit serve`` process, on port 0 with the bound port read
back from its first line; one listening on 0.0.0.0 is reached through 127.0.0.1.
"""

from __future__ import annotations

import os
import socket
import stat
import threading
from pathlib import Path

import grpc
import pytest
from served import Served

from litehit_service import messages as pb2
from litehit_service.access import ADMIN_TOKEN_FILE, is_loopback_host
from litehit_service.cli import main as litehit_main
from litehit_service.server import ServerOptions
from litehit_service.service import ServerConfig, serve


def _groups(served: Served) -> list[str]:
    with served.client() as client:  # a read: open without a token
        return [g.name for g in client.list_instance_groups().instance_groups]


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("[::1]", True),
        ("::ffff:127.0.0.1", True),
        ("localhost", True),
        ("LocalHost.", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.1.2.3", False),
        ("192.168.0.7", False),
        ("::ffff:10.0.0.1", False),
        ("fe80::1", False),
        ("example.com", False),
        ("localhost.example.com", False),
    ],
)
def test_which_listen_hosts_are_loopback(host: str, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback


def test_beyond_loopback_admin_rpcs_need_the_token_the_server_made(tmp_path: Path) -> None:
    data = tmp_path / "data"
    served = Served("0.0.0.0", "--data-dir", str(data))
    try:
        assert served.announced.startswith("0.0.0.0:")
        path = data / ADMIN_TOKEN_FILE
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        token = path.read_text(encoding="utf-8").strip()
        assert len(token) >= 32
        for wrong in (None, "not-the-token"):
            assert served.admin_code(wrong, "refused") is grpc.StatusCode.UNAUTHENTICATED
        assert _groups(served) == []  # refused: nothing changed; reads stay open
        assert served.admin_code(token, "g") is grpc.StatusCode.OK
        with served.client() as client:  # a query needs no admin token
            status = client.trace_query("nobody", [1], 4, check=False).header.status
            assert status.code == pb2.INSTANCE_NOT_EXIST
    finally:
        assert served.stop() == 0
    assert f"admin RPCs need the admin token in {path.resolve()} (created;" in served.log
    assert token not in served.log

    again = Served("0.0.0.0", "--data-dir", str(data))  # a later start keeps the file
    try:
        assert path.read_text(encoding="utf-8").strip() == token
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert again.admin_code(None, "refused") is grpc.StatusCode.UNAUTHENTICATED
        assert again.admin_code(token, "g2") is grpc.StatusCode.OK
        assert _groups(again) == ["g", "g2"]
    finally:
        assert again.stop() == 0
    assert f"admin RPCs need the admin token in {path.resolve()} (kept from" in again.log
    assert token not in again.log


def test_an_admin_token_file_overrides_the_data_dir_token(tmp_path: Path) -> None:
    data, given = tmp_path / "data", tmp_path / "token"
    given.write_text("operator-chosen\n", encoding="utf-8")
    served = Served("0.0.0.0", "--data-dir", str(data), "--admin-token-file", str(given))
    try:
        assert served.admin_code(None, "refused") is grpc.StatusCode.UNAUTHENTICATED
        assert served.admin_code("operator-chosen", "g") is grpc.StatusCode.OK
    finally:
        assert served.stop() == 0
    assert not (data / ADMIN_TOKEN_FILE).exists()
    assert "operator-chosen" not in served.log


def test_open_admin_keeps_admin_open_and_warns_at_every_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    for how in (["--open-admin"], []):  # the flag, then its variable
        env = {} if how else {"LITEHIT_OPEN_ADMIN": "true"}
        served = Served("0.0.0.0", "--data-dir", str(data), *how, env=env)
        try:
            assert served.admin_code(None, f"open{len(how)}") is grpc.StatusCode.OK
        finally:
            assert served.stop() == 0
        warnings = [line for line in served.log.splitlines() if " WARNING " in line]
        assert any("admin RPCs are open" in w and "(--open-admin)" in w for w in warnings)
        assert not (data / ADMIN_TOKEN_FILE).exists()


def test_a_loopback_server_stays_open(tmp_path: Path) -> None:
    served = Served("127.0.0.1", "--data-dir", str(tmp_path / "data"))
    try:
        assert served.admin_code(None, "g") is grpc.StatusCode.OK
    finally:
        assert served.stop() == 0
    assert not (tmp_path / "data" / ADMIN_TOKEN_FILE).exists()
    assert "admin RPCs" not in served.log


@pytest.mark.parametrize(
    ("args", "env", "named"),
    [
        (["--open-admin", "--admin-token", "t"], {}, "--admin-token"),
        (["--open-admin", "--admin-token-file", "missing"], {}, "--admin-token-file"),
        (["--admin-token", "t"], {"LITEHIT_OPEN_ADMIN": "1"}, "--admin-token"),
        (["--open-admin"], {"LITEHIT_ADMIN_TOKEN": "t"}, "--admin-token"),
    ],
)
def test_open_admin_with_an_admin_token_is_a_usage_error(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    env: dict[str, str],
    named: str,
) -> None:
    for key in [k for k in os.environ if k.startswith("LITEHIT_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    data = tmp_path / "data"
    assert litehit_main(["serve", "--listen", "0.0.0.0:0", "--data-dir", str(data), *args]) == 2
    assert capsys.readouterr().err == (
        f"litehit serve: error: --open-admin contradicts {named}: --open-admin leaves admin "
        "RPCs open, a token closes them; give one or the other\n"
    )
    assert not data.exists()  # refused before anything was made


def test_open_admin_variable_takes_only_true_or_false(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for key in [k for k in os.environ if k.startswith("LITEHIT_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("LITEHIT_OPEN_ADMIN", "maybe")
    assert litehit_main(["serve", "--data-dir", str(tmp_path / "data")]) == 2
    assert capsys.readouterr().err == (
        "litehit serve: error: LITEHIT_OPEN_ADMIN: invalid value 'maybe' (must be true or false)\n"
    )


def test_an_empty_token_file_fails_the_start_and_names_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / ADMIN_TOKEN_FILE).write_text("\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="holds no token") as info:
        Served("0.0.0.0", "--data-dir", str(data))
    assert str(data / ADMIN_TOKEN_FILE) in str(info.value)
    assert (data / ADMIN_TOKEN_FILE).read_text(encoding="utf-8") == "\n"  # never overwritten


def test_a_failed_start_removes_the_token_it_made(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The token file is part of what a failed start removes again (here: the metrics port
    is taken after the token was made); a server beyond loopback, in this process."""
    data = tmp_path / "data"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = ServerConfig(
            listen="0.0.0.0:0", metrics_listen=f"127.0.0.1:{port}", data_dir=str(data)
        )
        with (
            caplog.at_level("INFO", logger="litehit_service.service"),
            pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{port} \\(metrics\\)"),
        ):
            serve(config, stop=threading.Event())
    made = data.resolve() / ADMIN_TOKEN_FILE
    assert f"admin RPCs need the admin token in {made} (created;" in caplog.text
    assert sorted(tmp_path.rglob("*")) == []  # the token made, then removed; no data dir


def test_serve_refuses_open_admin_with_an_admin_token(tmp_path: Path) -> None:
    config = ServerConfig(
        listen="0.0.0.0:0",
        data_dir=str(tmp_path / "data"),
        server=ServerOptions(admin_token="t"),
        open_admin=True,
    )
    with pytest.raises(ValueError, match="open_admin contradicts an admin token"):
        serve(config, stop=threading.Event())
    assert not (tmp_path / "data").exists()
