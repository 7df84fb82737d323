"""The ``litehit`` console script itself: ``--version``."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib.metadata import version

from serve_process import ROOT, serve_env

from litehit_service.cli import version_text


def test_version_prints_the_package_version_on_stdout_and_exits_0() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "litehit_service", "--version"],
        capture_output=True,
        text=True,
        env=serve_env(),
        cwd=ROOT,
        timeout=60,
    )
    assert (result.returncode, result.stdout, result.stderr) == (
        0,
        f"litehit {version('litehit')}\n",
        "",
    )
    # the installed metadata is this checkout's pyproject.toml
    declared = re.search(r'^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(), re.M)
    assert declared is not None and version("litehit") == declared.group(1)


def test_version_text_without_installed_metadata() -> None:
    assert version_text() == f"litehit {version('litehit')}"
    assert version_text("litehit-no-such-distribution") == "litehit unknown (not installed)"
