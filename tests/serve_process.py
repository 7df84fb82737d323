"""``litehit serve`` as a real subprocess for tests: ephemeral ports, parsed addresses.

:class:`ServeProcess` starts ``python -m litehit_service serve`` with ``--listen HOST:0``
(127.0.0.1 unless told) and ``--metrics-listen 127.0.0.1:0``, reads the bound addresses
back from its first stdout line and drains stdout (:attr:`ServeProcess.lines`) and stderr
(the log) continuously, so a full pipe never blocks the server. Only loopback is ever
contacted (:attr:`ServeProcess.target`), whatever the listen host.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
START_SECONDS = 120
"""How long a start may take (the first start after an install compiles the kernels)."""
STOP_SECONDS = 60
"""How long a SIGTERM may take to end the process."""


def serve_env() -> dict[str, str]:
    """The environment without LITEHIT_* settings, with the checkout importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LITEHIT_")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


class ServeProcess:
    """``python -m litehit_service serve --listen HOST:0 --metrics-listen 127.0.0.1:0
    ARGS`` (``args`` may repeat either flag: the last one wins). ``env`` is added to
    :func:`serve_env`. After the start: ``grpc`` (the announced address), ``target``
    (127.0.0.1 and its port), ``metrics``, ``data_dir`` (a resolved Path)."""

    def __init__(
        self, *args: str, host: str = "127.0.0.1", env: dict[str, str] | None = None
    ) -> None:
        self.argv = ["serve", "--listen", f"{host}:0", "--metrics-listen", "127.0.0.1:0", *args]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "litehit_service", *self.argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=serve_env() | (env or {}),
            cwd=ROOT,
        )
        lines: queue.Queue[str | None] = queue.Queue()

        def read() -> None:
            for line in self.proc.stdout:  # type: ignore[union-attr]
                lines.put(line)
            lines.put(None)  # end of output: the process is gone

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()
        self.lines = lines
        self._errors: list[str] = []  # stderr, drained continuously (a full pipe would block)
        self._err_reader = threading.Thread(
            target=lambda: self._errors.extend(self.proc.stderr),  # type: ignore[arg-type]
            daemon=True,
        )
        self._err_reader.start()
        try:
            first = lines.get(timeout=START_SECONDS)
        except queue.Empty:
            self.kill()
            raise AssertionError(f"litehit serve printed nothing: {self.stderr()}") from None
        if first is None or not first.startswith("litehit serving grpc="):
            self.proc.wait(timeout=30)
            raise AssertionError(f"litehit serve exited ({self.proc.returncode}): {self.stderr()}")
        fields = dict(part.split("=", 1) for part in first.split()[2:])
        self.grpc = fields["grpc"]
        self.target = f"127.0.0.1:{self.grpc.rpartition(':')[2]}"
        self.metrics = fields["metrics"]
        self.data_dir = Path(fields["data_dir"])

    def stderr(self) -> str:
        """Everything the server wrote to stderr so far (after it exited: all of it)."""
        if self.proc.poll() is not None:
            self._err_reader.join(timeout=10)
        return "".join(self._errors)

    def terminate(self) -> int:
        """SIGTERM; the exit code once the process ended (AssertionError, with the log,
        when it is still running after :data:`STOP_SECONDS`: it is killed)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"litehit serve did not exit within {STOP_SECONDS} s of SIGTERM; its log:\n"
                f"{self.stderr()}"
            ) from None
        self._reader.join(timeout=10)
        self._err_reader.join(timeout=10)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
