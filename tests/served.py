"""``litehit serve`` as a real subprocess on any listen host (0.0.0.0 included), port 0.

:class:`Served` reads the bound addresses back from the first stdout line and reaches the
gRPC port through 127.0.0.1 (only loopback is ever contacted); stderr (the log) is drained
continuously and readable while the server runs.
"""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
from serve_process import ROOT, serve_env

from litehit_service.client import OptimizerClient
from litehit_service.model import InstanceGroup


class Served:
    """``python -m litehit_service serve --listen HOST:0 --metrics-listen 127.0.0.1:0 ARGS``.

    ``args`` may repeat ``--listen``/``--metrics-listen`` (the last one wins). ``env`` is
    added to :func:`serve_process.serve_env` (no ``LITEHIT_*`` variable). ``tls_ca`` makes
    :meth:`client` speak TLS. :meth:`stop` (SIGTERM) returns the exit code.
    """

    def __init__(
        self,
        listen_host: str,
        *args: str,
        env: dict[str, str] | None = None,
        tls_ca: str | Path | None = None,
    ) -> None:
        environ = serve_env() | (env or {})
        self.argv = ["serve", "--listen", f"{listen_host}:0", "--metrics-listen", "127.0.0.1:0",
                     "--grace-seconds", "1", *args]  # fmt: skip
        self.tls_ca = tls_ca
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "litehit_service", *self.argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environ,
            cwd=ROOT,
        )
        self._errors: list[str] = []
        self._reader = threading.Thread(
            target=lambda: self._errors.extend(self.proc.stderr),  # type: ignore[arg-type]
            daemon=True,
        )
        self._reader.start()
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(
            target=lambda: lines.put(self.proc.stdout.readline()),  # type: ignore[union-attr]
            daemon=True,
        ).start()
        try:
            first = lines.get(timeout=120)
        except queue.Empty:
            first = ""  # printed nothing: killed below
        if not first.startswith("litehit serving grpc="):
            self.kill()
            self._reader.join(timeout=10)
            raise AssertionError(f"litehit serve did not start: {''.join(self._errors)}")
        fields = dict(part.split("=", 1) for part in first.split()[2:])
        self.announced = fields["grpc"]
        self.metrics = fields["metrics"]
        self.data_dir = Path(fields["data_dir"])
        self.target = f"127.0.0.1:{self.announced.rpartition(':')[2]}"
        self.log = ""
        self.code: int | None = None

    def client(self, admin_token: str | None = None, **options: object) -> OptimizerClient:
        """A client without retries (``admin_token`` sent as ``authorization: Bearer``)."""
        options = {"retries": 0, "timeout": 30.0, **options}
        return OptimizerClient(
            self.target,
            admin_token=admin_token,
            tls_ca=self.tls_ca,
            **options,  # type: ignore[arg-type]
        )

    def admin_code(self, admin_token: str | None, name: str) -> grpc.StatusCode:
        """How an admin RPC (CreateInstanceGroup ``name``) ends: OK when it was accepted,
        else the gRPC code it was refused with."""
        with self.client(admin_token) as client:
            try:
                client.create_instance_group(InstanceGroup(name, (1.0,)))
            except grpc.RpcError as exc:
                return exc.code()
        return grpc.StatusCode.OK

    def log_so_far(self) -> str:
        """What the server logged (stderr) until now."""
        return "".join(self._errors)

    def wait_for_log(self, text: str, timeout: float = 60.0) -> str:
        """The log once it contains ``text`` (AssertionError after ``timeout`` s)."""
        deadline = time.monotonic() + timeout
        while text not in (log := self.log_so_far()):
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} not logged; the log:\n{log}")
            time.sleep(0.02)
        return log

    def stop(self) -> int:
        """SIGTERM, wait; keeps the whole log in ``log`` and returns the exit code."""
        if self.code is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.code = self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill()
                self._reader.join(timeout=10)
                raise AssertionError(
                    f"litehit serve did not exit within 60 s of SIGTERM; its log:\n"
                    f"{self.log_so_far()}"
                ) from None
            self._reader.join(timeout=10)
            self.log = "".join(self._errors)
        return self.code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
