"""numba's cache kept in step with the sources (:mod:`litehit_core.kernel_cache`): numba
notices a change to a kernel's own file only, so a change in a function it calls from
another file would leave the caller's old machine code running. Any source change deletes
every cached kernel of the package; no change keeps them. And when numba would find no
writable place at all (a read-only install run without a writable home), a private
folder of this user's in the temporary directory."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
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


# -------------------------------------------- a cache location when numba would have none

KERNEL = "from numba import njit\n\n@njit(cache=True)\ndef bump(x):\n    return x + 1\n"


def unwritable(tmp_path: Path, name: str) -> Path:
    """A folder path no one can create, root included: a regular file is in its way."""
    blocker = tmp_path / f"{name}-is-a-file"
    blocker.write_text("")
    return blocker / name


def run_kernel(
    tmp_path: Path, *, pycache: bool, cache_dir: str, user_cache: str, litehit: bool = True
) -> subprocess.CompletedProcess[str]:
    """A fresh interpreter importing a module with a ``cache=True`` kernel and calling it,
    after ``import litehit_core`` (``litehit``); the module's ``__pycache__`` creatable
    or not (``pycache``), ``NUMBA_CACHE_DIR`` and ``XDG_CACHE_HOME`` as given, the
    temporary directory ``tmp_path / "tmp"``."""
    mod = tmp_path / "mod"
    mod.mkdir(exist_ok=True)
    (mod / "kmod.py").write_text(KERNEL)
    if not pycache:
        (mod / "__pycache__").write_text("")  # a file where numba's in-tree folder goes
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "HOME")}
    env |= {"NUMBA_CACHE_DIR": cache_dir, "XDG_CACHE_HOME": user_cache,
            "TMPDIR": str(tmp_path / "tmp"), "HOME": str(unwritable(tmp_path, "home")),
            "PYTHONPATH": os.pathsep.join([str(mod), *sys.path])}  # fmt: skip
    code = ("import litehit_core; " if litehit else "") + "import kmod; print(kmod.bump(1))"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def indexes(folder: Path) -> list[Path]:
    return list(folder.rglob("*.nbi")) if folder.is_dir() else []


def test_with_no_writable_place_numba_caches_in_a_private_folder(tmp_path: Path) -> None:
    """numba's own three places refused (NUMBA_CACHE_DIR set but not writable, the
    source's __pycache__, the user's cache): without litehit numba refuses the kernel;
    after ``import litehit_core`` it caches it in this user's private folder, 0700.
    Catches: every module with a kernel failing to import ("cannot cache function", the
    collection of a read-only install), the old probe that trusted any NUMBA_CACHE_DIR."""
    nowhere = {"pycache": False, "cache_dir": str(unwritable(tmp_path, "numba")),
               "user_cache": str(unwritable(tmp_path, "cache"))}  # fmt: skip
    bare = run_kernel(tmp_path, litehit=False, **nowhere)  # type: ignore[arg-type]
    assert bare.returncode != 0 and "cannot cache function" in bare.stderr
    done = run_kernel(tmp_path, **nowhere)  # type: ignore[arg-type]
    assert done.returncode == 0 and done.stdout == "2\n", done.stderr
    private = tmp_path / "tmp" / f"litehit-numba-cache-{os.getuid()}"
    assert indexes(private) and stat.S_IMODE(private.stat().st_mode) == 0o700


def test_a_shared_folder_open_to_others_is_not_used(tmp_path: Path) -> None:
    """Catches: loading machine code from a folder another user can write."""
    taken = tmp_path / "tmp" / f"litehit-numba-cache-{os.getuid()}"
    taken.mkdir(parents=True)
    taken.chmod(0o777)
    done = run_kernel(tmp_path, pycache=False, cache_dir="",
                      user_cache=str(unwritable(tmp_path, "cache")))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert not indexes(taken)
    (used,) = [p for p in (tmp_path / "tmp").iterdir() if indexes(p)]
    assert used.name.startswith("litehit-numba-cache-") and used != taken
    assert stat.S_IMODE(used.stat().st_mode) == 0o700


def test_numbas_own_places_are_left_alone(tmp_path: Path) -> None:
    """Catches: the private folder used (or created) while numba has a place of its
    own: a writable NUMBA_CACHE_DIR, the source's __pycache__."""
    chosen = tmp_path / "chosen"
    done = run_kernel(tmp_path, pycache=False, cache_dir=str(chosen),
                      user_cache=str(unwritable(tmp_path, "cache")))  # fmt: skip
    assert done.returncode == 0 and indexes(chosen), done.stderr
    other = tmp_path / "other"
    other.mkdir()
    done = run_kernel(other, pycache=True, cache_dir="",
                      user_cache=str(unwritable(other, "cache")))  # fmt: skip
    assert done.returncode == 0 and indexes(other / "mod" / "__pycache__"), done.stderr
    for base in (tmp_path, other):
        assert not (base / "tmp" / f"litehit-numba-cache-{os.getuid()}").exists()
