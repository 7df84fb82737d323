"""numba's disk cache of the compiled kernels, kept in step with every source it depends on.

numba keys a cached kernel by its own file's modification time and size only, so a change
to a function it calls from *another* file (the eviction in ``policy_replay/quota.py``,
compiled into ``policy_replay/loop.py``'s ``replay_chunk``) leaves the caller's cached
machine code in place: the old code runs, silently -- after a ``git pull`` or a partial
copy over a checkout, say (a fresh install rewrites every file, so every entry is already
stale). :func:`drop_stale_kernels` runs when :mod:`litehit_core` is imported, before any
kernel is loaded: it compares a stamp of every ``litehit_core`` source (path, size,
modification time) with the one stored beside the caches and, when they differ, deletes
every cached kernel of the package (each recompiles on first use, which the commands
announce) and stores the new stamp. Cost: one ``stat`` per source file (~60) per process.

Only the caches in the package's own ``__pycache__`` folders are managed (numba's default
when they are writable; elsewhere, as under a read-only install, files only change by a
reinstall, which numba notices).

:func:`ensure_cache_location` runs first, before any kernel module is imported: numba
decorates every ``cache=True`` kernel at import and raises ``RuntimeError: cannot cache
function`` when it finds no writable place -- a read-only install (site-packages owned by
another user) run by a user whose home is not writable (a sandbox, a CI runner, a
container with ``HOME=/nonexistent``): every module with a kernel then fails to import. In
that case, and only then, it points ``NUMBA_CACHE_DIR`` at a private folder of this user
in the temporary directory (mode 0700, refused if another user owns it or can write it;
else a fresh ``mkdtemp``). Cost: two directory probes per process.
"""

from __future__ import annotations

import hashlib
import os
import stat
import sys
import tempfile
from pathlib import Path

__all__ = ["STAMP_FILE", "drop_stale_kernels", "ensure_cache_location", "sources_stamp"]

STAMP_FILE = "litehit-kernel-sources.stamp"
"""The stamp's name in ``litehit_core/__pycache__``."""
_PACKAGE = Path(__file__).resolve().parent


def sources_stamp(package: Path = _PACKAGE) -> str:
    """A digest of every ``.py`` file under ``package``: relative path, size and
    modification time (ns). O(files) stats."""
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        st = path.stat()
        digest.update(f"{path.relative_to(package)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def drop_stale_kernels(package: Path = _PACKAGE) -> bool:
    """Delete the package's cached kernels (``*.nbi``/``*.nbc``) when its sources changed
    since the stamp was written, and write the new stamp. True when it deleted (or there
    was no stamp yet). Never raises: a folder it cannot write is left as it is."""
    try:
        stamp = sources_stamp(package)
        cache = package / "__pycache__"
        marker = cache / STAMP_FILE
        try:
            if marker.read_text(encoding="ascii") == stamp:
                return False
        except (OSError, UnicodeDecodeError):
            pass
        for folder in package.rglob("__pycache__"):
            for entry in folder.iterdir():
                if entry.suffix in (".nbi", ".nbc"):
                    entry.unlink(missing_ok=True)
        cache.mkdir(exist_ok=True)
        tmp = cache / f"{STAMP_FILE}.{os.getpid()}.tmp"
        tmp.write_text(stamp, encoding="ascii")
        os.replace(tmp, marker)
        return True
    except OSError:
        return False


def _writable(folder: Path) -> bool:
    """Whether numba could cache in ``folder``: created if missing, a file written in it
    (numba's own probe)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()
        return True
    except OSError:
        return False


def _user_cache() -> Path | None:
    """numba's user-wide cache folder (``$XDG_CACHE_HOME/numba`` or ``~/.cache/numba`` on
    Linux, as its ``AppDirs``), None without a home."""
    if sys.platform == "darwin":
        base = "~/Library/Caches"
    elif sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA", "~")
    else:
        base = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    try:
        return Path(base).expanduser() / "numba"
    except RuntimeError:  # no home directory at all
        return None


def _private_folder() -> Path:
    """This user's folder for kernels in the temporary directory, created 0700; a fresh
    ``mkdtemp`` when the shared name is taken by another user or open to others."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    folder = Path(tempfile.gettempdir()) / f"litehit-numba-cache-{uid}"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        st = folder.lstat()
        mine = not hasattr(os, "getuid") or st.st_uid == uid
        if stat.S_ISDIR(st.st_mode) and mine and not st.st_mode & 0o022 and _writable(folder):
            return folder
    except OSError:
        pass
    return Path(tempfile.mkdtemp(prefix="litehit-numba-cache-"))


def ensure_cache_location(package: Path = _PACKAGE) -> str | None:
    """Give numba a writable cache folder when it would find none (module docstring);
    the folder set, or None when ``NUMBA_CACHE_DIR`` is already set or numba's own places
    (the package's ``__pycache__``, the user's cache) are writable. Never raises."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return None
    user = _user_cache()
    if _writable(package / "__pycache__") or (user is not None and _writable(user)):
        return None
    try:
        folder = str(_private_folder())
    except OSError:
        return None
    os.environ["NUMBA_CACHE_DIR"] = folder
    numba_config = sys.modules.get("numba.core.config")
    if numba_config is not None:  # numba read its environment already
        numba_config.CACHE_DIR = folder  # type: ignore[attr-defined]
    return folder
