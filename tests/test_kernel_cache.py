"""numba's cache kept in step with the sources (:mod:`litehit_core.kernel_cache`): numba
notices a change to a kernel's own file only, so a change in a function it calls from
another file would leave the caller's old machine code running. Any source change deletes
every cached kernel of the package; no change keeps them. And when numba would find no
writable place at all (a read-only install run without a writable home), a private
folder of this user's in the temporary directory."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

from litehit_core.kernel_cache import STAMP_FILE, drop_stale_kernels, ensure_cache_location


def _package(root: Path) -> Path:
    pkg = root / "pkg"
    (pkg / "sub" / "__pycache__").mkdir(parents=True)
    (pkg / "__pycache__").mkdir()
    (pkg / "loop.py").write_text("def replay_chunk(): pass\n")
    (pkg / "sub" / "quota.py").write_text("def evict(): pass\n")
    return pkg


def _caches(pkg: Path) -> list[str]:
    for folder in (pkg / "__pycache__", pkg / "sub" / "__pycache__"):
        for name in ("k.f-1.py311.nbi", "k.f-1.py311.1.nbc"):
            (folder / name).write_bytes(b"x")
    (pkg / "__pycache__" / "loop.cpython-311.pyc").write_bytes(b"bytecode")
    return sorted(p.name for p in pkg.rglob("*") if p.suffix in (".nbi", ".nbc", ".pyc"))


def test_a_change_in_any_source_drops_every_cached_kernel(tmp_path: Path) -> None:
    pkg = _package(tmp_path)
    _caches(pkg)
    assert drop_stale_kernels(pkg)  # no stamp yet: the caches are of unknown sources
    left = sorted(p.name for p in pkg.rglob("*") if p.suffix in (".nbi", ".nbc", ".pyc"))
    assert left == ["loop.cpython-311.pyc"]  # bytecode is Python's business
    assert (pkg / "__pycache__" / STAMP_FILE).exists()

    _caches(pkg)
    assert not drop_stale_kernels(pkg)  # nothing changed: the kernels stay
    assert len(list(pkg.rglob("*.nbi"))) == 2

    quota = pkg / "sub" / "quota.py"  # the callee, in another file than the caller
    quota.write_text("def evict(): return 1\n")
    assert drop_stale_kernels(pkg)
    assert not list(pkg.rglob("*.nbi")) and not list(pkg.rglob("*.nbc"))


# -------------------------------------------- a cache location when numba would have none


def unwritable(tmp_path: Path, name: str) -> Path:
    """A folder nobody can create, root included: its parent is a regular file."""
    blocker = tmp_path / f"{name}-is-a-file"
    blocker.write_text("")
    return blocker / name


@pytest.fixture
def nowhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No NUMBA_CACHE_DIR, a user cache numba cannot create, the temporary directory in
    tmp_path; numba's config restored afterwards."""
    import numba.core.config

    # set (to empty: "unset" for the code) so that monkeypatch restores the variable the
    # code under test writes: a leaked NUMBA_CACHE_DIR would send every later subprocess
    # of the run to a cold cache (compiling kernels, growing a server's RSS)
    monkeypatch.setenv("NUMBA_CACHE_DIR", "")
    monkeypatch.setenv("XDG_CACHE_HOME", str(unwritable(tmp_path, "cache")))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(numba.core.config, "CACHE_DIR", numba.core.config.CACHE_DIR)
    return unwritable(tmp_path, "site-packages") / "litehit_core"


def test_a_read_only_install_without_a_home_caches_in_a_private_folder(nowhere, tmp_path):
    """Catches: numba left with no writable place (every module with a kernel then fails
    to import: "cannot cache function"), a folder open to other users, numba's already
    loaded configuration not told."""
    import numba.core.config

    folder = ensure_cache_location(nowhere)
    assert folder == str(tmp_path / f"litehit-numba-cache-{os.getuid()}")
    assert os.environ["NUMBA_CACHE_DIR"] == folder == numba.core.config.CACHE_DIR
    assert stat.S_IMODE(Path(folder).stat().st_mode) == 0o700


def test_a_shared_folder_open_to_others_is_not_used(nowhere, tmp_path):
    """Catches: loading machine code from a folder another user can write."""
    taken = tmp_path / f"litehit-numba-cache-{os.getuid()}"
    taken.mkdir()
    taken.chmod(0o777)
    folder = ensure_cache_location(nowhere)
    assert folder is not None and Path(folder) != taken and Path(folder).parent == tmp_path
    assert stat.S_IMODE(Path(folder).stat().st_mode) == 0o700


def test_numbas_own_places_are_left_alone(nowhere, tmp_path, monkeypatch):
    """Catches: NUMBA_CACHE_DIR overridden, or set while the package's own __pycache__
    (numba's default) or the user's cache is writable."""
    assert ensure_cache_location(tmp_path / "pkg") is None  # a writable package
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home-cache"))
    assert ensure_cache_location(nowhere) is None  # a writable user cache
    monkeypatch.setenv("NUMBA_CACHE_DIR", "/chosen")
    monkeypatch.setenv("XDG_CACHE_HOME", str(unwritable(tmp_path, "c2")))
    assert ensure_cache_location(nowhere) is None and os.environ["NUMBA_CACHE_DIR"] == "/chosen"
