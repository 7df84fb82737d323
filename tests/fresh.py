"""A fresh interpreter for tests that must see what a command imports or leaves behind:
``python -c CODE`` (or ``python ARGS...``) with the checkout importable (the environment of
:func:`serve_process.serve_env`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from serve_process import ROOT, serve_env

__all__ = ["ROOT", "run_python"]


def run_python(cwd: Path, *args: str, code: str | None = None) -> subprocess.CompletedProcess:
    """Run ``python -c code`` (or ``python *args``) in ``cwd``; the completed process with
    text stdout/stderr (any exit code; 120 s at most)."""
    argv = [sys.executable, *(("-c", code) if code is not None else args)]
    return subprocess.run(argv, cwd=cwd, env=serve_env(), capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
