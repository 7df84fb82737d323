"""Every ``litehit`` command line of the README and the docs runs as written (deny by
default): each page's command lines run in order, as real processes, in a fresh folder
holding what a reader of a fresh clone has (``docs/``'s configurations, ``tests/data``'s
samples, the Mooncake conversation trace as ``conversation_trace.jsonl`` and in
``traces/``, where the pages say to put it), and must exit 0. A line that cannot run
there is listed in :data:`EXEMPT` with the reason (and, where one does, the test that runs
it instead); an exemption no line needs any more fails too.
"""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pytest
from conftest import run_cli
from doc_pages import PAGES, ROOT, text_of
from test_readme import documented_command_lines

EXEMPT: dict[str, str] = {
    "litehit optimize policy.json --compare-exact": "the JSON shown above it, with the shared "
    "trace: test_readme_policies runs it and compares every number",
    "litehit optimize fleet.json": "a template: the reader's own configuration of many groups",
    "litehit feed --server": "needs a running server: test_live_curve_walkthrough runs it",
    "litehit curve --server": "needs a running server: test_live_curve_walkthrough runs it",
    "litehit instances --server": "needs a running server: test_live_curve_walkthrough runs it",
}
"""A prefix of a documented command line -> why it does not run here."""


def _exempt(line: str) -> str | None:
    return next((prefix for prefix in EXEMPT if line.startswith(prefix)), None)


def _sandbox(folder: Path, trace: Path) -> Path:
    """What a reader of a fresh clone has, in ``folder``."""
    docs = folder / "docs"
    docs.mkdir(parents=True)
    for config in (ROOT / "docs").glob("*.json"):
        shutil.copy(config, docs / config.name)  # copies: their ../ paths stay in here
    (folder / "tests").mkdir()
    (folder / "tests" / "data").symlink_to(ROOT / "tests" / "data")
    (folder / "traces").mkdir()
    (folder / "traces" / "conversation_trace.jsonl").symlink_to(trace)
    (folder / "conversation_trace.jsonl").symlink_to(trace)
    return folder


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_line_of_the_page_runs(page: Path, tmp_path: Path, mooncake) -> None:
    """Catches an example that no longer runs as written: a renamed option, a file the
    clone does not ship, an output the next line reads that is no longer written."""
    lines = documented_command_lines(text_of(page))
    folder = _sandbox(tmp_path / "clone", mooncake)
    for line in lines:
        if _exempt(line):
            continue
        argv = shlex.split(line, comments=True)[1:]
        done = run_cli(*argv, cwd=folder, timeout=300)
        assert done.returncode == 0, f"{page.name}: {line}\n{done.stderr}"


def test_every_exemption_is_still_needed() -> None:
    lines = [line for page in PAGES for line in documented_command_lines(text_of(page))]
    assert [p for p in EXEMPT if not any(line.startswith(p) for line in lines)] == []
    assert len(lines) > 25
