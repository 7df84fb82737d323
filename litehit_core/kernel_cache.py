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
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

__all__ = ["STAMP_FILE", "drop_stale_kernels", "sources_stamp"]

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
