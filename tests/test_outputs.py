"""All-or-nothing publishing of command outputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from litehit_service.offline.outputs import atomic_outputs, tmp_path


def test_success_publishes_every_file(tmp_path: Path) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    b.write_text("old")
    with atomic_outputs([a, b]) as (ta, tb):
        assert (ta, tb) == (tmp_path_of(a), tmp_path_of(b))
        Path(ta).write_text("A")
        Path(tb).write_text("B")
        assert not a.exists() and b.read_text() == "old"  # nothing visible before the end
    assert (a.read_text(), b.read_text()) == ("A", "B")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.txt"]


def test_failure_publishes_nothing_and_keeps_old_files(tmp_path: Path) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    b.write_text("old")
    with pytest.raises(ValueError, match="boom"), atomic_outputs([a, b]) as (ta, tb):
        Path(ta).write_text("A")
        Path(tb).write_text("B")
        raise ValueError("boom")
    assert not a.exists() and b.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.txt"]


def tmp_path_of(path: Path) -> str:
    return tmp_path(path)
