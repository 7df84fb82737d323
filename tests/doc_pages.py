"""The project's documents as the tests read them: the README (the landing page) and the
docs site's pages (``docs/**/*.md``), found by their headings wherever they live.

- :data:`PAGES`: every document, README first;
- :func:`all_text`: all of them, one after another (for walks over every example);
- :func:`section`: the text of one section, from its heading (``## Title`` or deeper) to
  the next heading of the same or a higher level, in whichever document holds it.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")))
"""Every document: the README, then the docs pages in path order."""


@cache
def text_of(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def all_text() -> str:
    """Every document's text, README first, separated by blank lines."""
    return "\n\n".join(text_of(p) for p in PAGES)


def section(title: str, page: Path | None = None) -> str:
    """The section headed ``title`` (exactly, at any level below the page title), from its
    heading line to the next heading of the same or a higher level, in ``page`` or in the
    one document holding it (AssertionError when none or several do)."""
    found = []
    for path in PAGES if page is None else (page,):
        text = text_of(path)
        m = re.search(rf"^(#{{2,6}}) {re.escape(title)}\n", text, re.M)
        if m is None:
            continue
        level = len(m.group(1))
        rest = text[m.end() :]
        end = re.search(rf"^#{{1,{level}}} ", rest, re.M)
        found.append(text[m.start() : m.end() + (end.start() if end else len(rest))])
    assert len(found) == 1, f"{title!r} is a section of {len(found)} documents"
    return found[0]


def page_of(title: str) -> Path:
    """The document holding the section headed ``title``."""
    paths = [p for p in PAGES if re.search(rf"^#+ {re.escape(title)}\n", text_of(p), re.M)]
    assert len(paths) == 1, (title, paths)
    return paths[0]
