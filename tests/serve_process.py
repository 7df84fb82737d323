"""``litehit serve`` as a real subprocess for tests: ephemeral ports, parsed addresses."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def serve_env() -> dict[str, str]:
    """The environment without LITEHIT_* settings, with the checkout importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LITEHIT_")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


class ServeProcess:
    """``python -m litehit_service serve`` with ports 0; parses the announced addresses."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "litehit_service",
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--metrics-listen",
                "127.0.0.1:0",
                *args,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=serve_env(),
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
            target=lambda: self._errors.extend(self.proc.stderr), daemon=True
        )
        self._err_reader.start()
        try:
            first = lines.get(timeout=60)
        except queue.Empty:
            self.proc.kill()
            raise AssertionError("litehit serve printed nothing") from None
        if first is None or not first.startswith("litehit serving grpc=127.0.0.1:"):
            self.proc.wait(timeout=30)
            raise AssertionError(f"litehit serve exited ({self.proc.returncode}): {self.stderr()}")
        fields = dict(part.split("=", 1) for part in first.split()[2:])
        self.grpc = fields["grpc"]
        self.metrics = fields["metrics"]
        self.data_dir = fields["data_dir"]

    def stderr(self) -> str:
        """Everything the server wrote to stderr so far (after it exited: all of it)."""
        if self.proc.poll() is not None:
            self._err_reader.join(timeout=10)
        return "".join(self._errors)

    def terminate(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=60)
        self._reader.join(timeout=10)
        self._err_reader.join(timeout=10)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
