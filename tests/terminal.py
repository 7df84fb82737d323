"""Run a command with its stderr on a pseudo-terminal (so ``isatty()`` is true there): how
the tests see the progress bars the offline commands draw only on a terminal."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import termios


def run_on_terminal(argv: list[str], env: dict[str, str], timeout: float = 60) -> tuple[int, str]:
    """Run ``argv`` with stderr on a 100-column pty (tqdm draws nothing on a zero-width
    one) and stdout discarded; returns the exit code and everything written to the pty."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    try:
        proc = subprocess.Popen(argv, stderr=slave, stdout=subprocess.DEVNULL, env=env)
        os.close(slave)
        slave = -1
        chunks = []
        while True:
            ready, _, _ = select.select([master], [], [], timeout)
            if not ready:
                break
            try:
                data = os.read(master, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        code = proc.wait(timeout=timeout)
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)
    return code, b"".join(chunks).decode()
