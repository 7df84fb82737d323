"""numba's cache kept in step with the sources (:mod:`litehit_core.kernel_cache`): numba
notices a change to a kernel's own file only, so a change in a function it calls from
another file would leave the caller's old machine code running. Any source change deletes
every cached kernel of the package; no change keeps them."""

from __future__ import annotations

from pathlib import Path

from litehit_core.kernel_cache import STAMP_FILE, drop_stale_kernels


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
