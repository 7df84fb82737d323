"""A fresh interpreter for tests that must see what a command imports or leaves behind:
``python -c CODE`` (or ``python ARGS...``) with the checkout first on ``sys.path``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_python(cwd: Path, *args: str, code: str | None = None) -> subprocess.CompletedProcess:
    """Run ``python -c code`` (or ``python *args``) in ``cwd`` with the checkout importable;
    the completed process with text stdout/stderr (any exit code; 120 s at most)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    argv = [sys.executable, *(("-c", code) if code is not None else args)]
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
                          check=False)  # fmt: skip
