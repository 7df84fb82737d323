"""Temporary files of all-or-nothing writers: one per writing process, swept once dead.

Every writer that publishes a file atomically (the facts ledger's
:class:`~litehit_core.FactsWriter`, the offline commands' ``atomic_outputs``) writes ``path``
first to ``<path>.<pid>.tmp`` (:func:`temp_path`, ``pid`` = the writing process) and renames
it onto ``path`` only when complete; on an error, SIGINT or SIGTERM the writer deletes it.
A process killed outright (SIGKILL, power loss) cannot, so every writer first calls
:func:`remove_stale_temps` for its own outputs: it deletes the ``<path>.<pid>.tmp`` files
whose ``pid`` is no live process. Two runs writing the same output at once therefore never
touch each other's temporary (each has its own name, and a live writer's file is kept).

Limits: a dead writer's pid reused by an unrelated live process keeps its file until that
process ends; writers in different pid namespaces (containers sharing a folder) cannot see
each other's pids, so a live writer there may look dead. On Windows, where ``os.kill``
cannot probe a process, nothing is swept.
"""

from __future__ import annotations

import errno
import os

__all__ = ["not_a_folder", "pid_alive", "remove_stale_temps", "temp_path"]

_SUFFIX = ".tmp"


def not_a_folder(path: str | os.PathLike[str]) -> NotADirectoryError:
    """The error for an output folder ``path`` that is a file (the user's path to fix: the
    CLI exits 2 for it)."""
    return NotADirectoryError(
        errno.ENOTDIR, "is a file, not a folder (outputs go into a folder)", os.fspath(path)
    )


def temp_path(path: str | os.PathLike[str]) -> str:
    """Where this process writes ``path`` before publishing it: ``<path>.<pid>.tmp``. O(1)."""
    return f"{os.fspath(path)}.{os.getpid()}{_SUFFIX}"


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a running (or zombie) process: ``os.kill(pid, 0)`` succeeds or is
    refused for permission. This process counts as alive. O(1), one system call."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, owned by another user
        return True
    return True


def remove_stale_temps(path: str | os.PathLike[str]) -> list[str]:
    """Delete the temporaries of ``path`` (``<path>.<pid>.tmp``) left by dead processes and
    return their paths. Files whose pid is alive, or that do not match the pattern exactly
    (a decimal pid > 0), are left alone; a folder that does not exist holds none.
    Cost: one directory listing plus one ``os.kill`` per matching file.
    """
    if os.name == "nt":  # os.kill(pid, 0) would terminate the process there
        return []
    folder, name = os.path.split(os.fspath(path))
    prefix = name + "."
    try:
        entries = os.listdir(folder or ".")
    except (FileNotFoundError, NotADirectoryError):
        return []
    removed = []
    for entry in entries:
        if not (entry.startswith(prefix) and entry.endswith(_SUFFIX)):
            continue
        pid_text = entry[len(prefix) : -len(_SUFFIX)]
        if not (pid_text.isascii() and pid_text.isdigit()) or pid_text.startswith("0"):
            continue
        try:
            alive = pid_alive(int(pid_text))
        except OverflowError:  # beyond any pid
            continue
        if alive:
            continue
        stale = os.path.join(folder, entry)
        try:
            os.remove(stale)
        except FileNotFoundError:  # another run swept it first
            continue
        removed.append(stale)
    return removed
