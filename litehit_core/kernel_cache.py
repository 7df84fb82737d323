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
function`` when none of its cache locators finds a writable place -- ``NUMBA_CACHE_DIR``,
the source's ``__pycache__``, the user's cache folder: say a read-only install run by a
user whose home is not writable (a sandbox, a CI runner, a container with
``HOME=/nonexistent``), or a ``NUMBA_CACHE_DIR`` this user cannot write. Every module
with a kernel then fails to import. So it gives numba one more locator, tried only after
all of numba's own: a private folder of this user in the temporary directory (mode 0700,
refused if another user owns it or can write it; else a fresh ``mkdtemp``), chosen once
per process. It imports nothing: if numba is not loaded yet, it waits for numba's import
(:func:`after_numba`, a one-shot import hook), so a process that never needs numba never
loads it. Cost: one string compare per import until numba's.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.util
import os
import stat
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = [
    "STAMP_FILE",
    "after_numba",
    "drop_stale_kernels",
    "ensure_cache_location",
    "sources_stamp",
]

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


_FOLDER: list[Path] = []
"""The private folder once chosen (:func:`_private_folder`)."""


def _private_folder() -> Path:
    """This user's folder for kernels in the temporary directory, created 0700; a fresh
    ``mkdtemp`` when the shared name is taken by another user or open to others. Chosen
    once per process. OSError when the temporary directory is not writable."""
    if _FOLDER:
        return _FOLDER[0]
    uid = os.getuid() if hasattr(os, "getuid") else 0
    folder = Path(tempfile.gettempdir()) / f"litehit-numba-cache-{uid}"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        st = folder.lstat()
        mine = not hasattr(os, "getuid") or st.st_uid == uid
        if not (stat.S_ISDIR(st.st_mode) and mine and not st.st_mode & 0o022 and _writable(folder)):
            folder = Path(tempfile.mkdtemp(prefix="litehit-numba-cache-"))
    except OSError:
        folder = Path(tempfile.mkdtemp(prefix="litehit-numba-cache-"))
    _FOLDER.append(folder)
    return folder


def ensure_cache_location() -> None:
    """Give numba a last cache locator (module docstring), now if numba is loaded, else
    when it is. Idempotent; never raises. O(1)."""
    after_numba(_add_private_locator)


def _add_private_locator() -> None:
    """Append :func:`_private_locator` to numba's locators (once). A numba that keeps its
    locators elsewhere is left as it is."""
    from numba.core import caching

    impl = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl", None)
    base = getattr(caching, "UserProvidedCacheLocator", None) or getattr(
        caching, "_UserProvidedCacheLocator", None
    )
    locators = getattr(impl, "_locator_classes", None)
    if base is None or not isinstance(locators, list):
        return
    if not any(getattr(c, "litehit_private", False) for c in locators):
        locators.append(_private_locator(base))


def _private_locator(base: type) -> type:
    """numba's user-provided locator pointed at :func:`_private_folder` instead of
    ``NUMBA_CACHE_DIR``."""

    class PrivateCacheLocator(base):  # type: ignore[misc, valid-type]
        litehit_private = True

        def __init__(self, py_func: Any, py_file: str) -> None:
            self._py_file = py_file
            self._lineno = py_func.__code__.co_firstlineno
            sub = self.get_suitable_cache_subpath(py_file)
            self._cache_path = os.path.join(_private_folder(), sub)

        @classmethod
        def from_function(cls, py_func: Any, py_file: str) -> Any:
            try:  # the source-backed locators' own check (file exists, path writable)
                return super(base, cls).from_function(py_func, py_file)
            except OSError:  # no writable temporary directory either
                return None

    return PrivateCacheLocator


# ------------------------------------------------------------ after numba's import

_AFTER_NUMBA: list[Callable[[], None]] = []
"""What runs once numba is imported (:func:`after_numba`)."""


def after_numba(callback: Callable[[], None]) -> None:
    """Run ``callback()`` now if numba is loaded, else right after its import (one
    one-shot import hook for every callback). O(1)."""
    if "numba" in sys.modules:
        callback()
        return
    if not _AFTER_NUMBA:
        sys.meta_path.insert(0, _AfterNumbaImport())
    _AFTER_NUMBA.append(callback)


class _AfterNumbaImport(importlib.abc.MetaPathFinder):
    """A one-shot import hook: numba's own loader, then the callbacks of
    :func:`after_numba`."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "numba":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        real = spec.loader

        class Loader(importlib.abc.Loader):
            def create_module(self, spec: Any) -> Any:
                return real.create_module(spec)

            def exec_module(self, module: Any) -> None:
                real.exec_module(module)
                for callback in _AFTER_NUMBA:
                    callback()
                _AFTER_NUMBA.clear()

            def __getattr__(self, name: str) -> Any:  # get_source, get_resource_reader...
                return getattr(real, name)

        spec.loader = Loader()
        return spec
