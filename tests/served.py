"""``litehit serve`` on any listen host (0.0.0.0 included) with a client: a
:class:`~serve_process.ServeProcess` that reaches its gRPC port through 127.0.0.1 (only
loopback is ever contacted), with its log readable while it runs.
"""

from __future__ import annotations

import time
from pathlib import Path

import grpc
from serve_process import ServeProcess

from litehit_service.client import OptimizerClient
from litehit_service.model import InstanceGroup


class Served(ServeProcess):
    """A :class:`~serve_process.ServeProcess` on ``listen_host`` with a 1 s grace (unless
    ``args`` say otherwise) and a client for it. ``tls_ca`` makes :meth:`client` speak
    TLS. :meth:`stop` (SIGTERM) returns the exit code and keeps the whole log in ``log``.
    """

    def __init__(
        self,
        listen_host: str,
        *args: str,
        env: dict[str, str] | None = None,
        tls_ca: str | Path | None = None,
    ) -> None:
        super().__init__("--grace-seconds", "1", *args, host=listen_host, env=env)
        self.announced = self.grpc
        self.tls_ca = tls_ca
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
        """SIGTERM, wait (see :meth:`terminate`); keeps the whole log in ``log`` and
        returns the exit code."""
        if self.code is None:
            self.code = self.terminate()
            self.log = "".join(self._errors)
        return self.code
