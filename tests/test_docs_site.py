"""The documentation site builds strictly (``mkdocs build --strict``): every page in the
nav, every link and anchor resolving. Needs the docs extra (``pip install '.[docs]'``);
skipped without it, failed under CI."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import yaml
from conftest import require
from doc_pages import PAGES, ROOT


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """Catches a broken link or anchor between pages, and a page missing from the nav."""
    require(importlib.util.find_spec("mkdocs") is not None, "mkdocs is not installed: "
            "pip install '.[docs]'")  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "site" / "optimizer" / "index.html").is_file()


def _nav_pages(nav: list) -> list[str]:
    found = []
    for entry in nav:
        for value in entry.values():
            found += _nav_pages(value) if isinstance(value, list) else [value]
    return found


def test_every_docs_page_is_in_the_nav() -> None:
    """Catches a page written into docs/ that the site's navigation never shows."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    pages = {str(p.relative_to(ROOT / "docs")) for p in PAGES[1:]}
    assert sorted(_nav_pages(config["nav"])) == sorted(pages)
