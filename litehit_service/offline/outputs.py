"""Command outputs: all-or-nothing file publishing and terminal-only progress bars.

Every command that writes files writes ``<path>.<pid>.tmp`` first and renames it onto
``path`` only when the whole run succeeded; on any error (also SIGINT, SIGTERM) the
temporaries are deleted and existing files are untouched. Temporaries a killed run left
are deleted by the next run that writes the same path. The naming and the sweep are the
core's (:mod:`litehit_core.temporaries`), shared with :class:`litehit_core.FactsWriter`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar

from litehit_core.temporaries import not_a_folder, remove_stale_temps, temp_path

if TYPE_CHECKING:
    from matplotlib.figure import Figure

T = TypeVar("T")
PathLike = str | os.PathLike[str]


def tmp_path(path: PathLike) -> str:
    """Where this process writes ``path`` before publishing it: ``<path>.<pid>.tmp``."""
    return temp_path(path)


@contextmanager
def atomic_outputs(paths: Sequence[PathLike]) -> Iterator[list[str]]:
    """Yield the temporary paths to write; publish them all if the block succeeds.

    First the temporaries of ``paths`` left by dead processes are deleted. On success each
    ``<path>.<pid>.tmp`` is renamed onto ``path`` (atomic per file); on any exception (a
    ``BaseException`` too) every temporary is removed and the exception propagates.
    O(files), plus one directory listing per file.
    """
    for path in paths:
        remove_stale_temps(path)
    tmps = [tmp_path(p) for p in paths]
    try:
        yield tmps
        for tmp, final in zip(tmps, paths, strict=True):
            os.replace(tmp, final)
    except BaseException:
        for tmp in tmps:
            try:
                os.remove(tmp)
            except FileNotFoundError:
                pass
        raise


def publish_files(
    out_dir: str,
    texts: Sequence[tuple[str, str | Iterable[str]]],
    figures: Sequence[tuple[str, Figure]] = (),
    *,
    dpi: int = 110,
) -> list[str]:
    """Write each ``(relative path, text)`` (a string, or its pieces in order) and
    ``(relative path, figure)`` (PNG) under
    ``out_dir``, creating folders as needed, all or nothing: on any error the temporaries
    and the folders this call created are removed. The paths written. O(bytes)."""
    paths = [os.path.join(out_dir, name) for name, _ in [*texts, *figures]]
    with new_dirs([os.path.dirname(p) for p in paths]), atomic_outputs(paths) as tmps:
        for tmp, (_, text) in zip(tmps, texts, strict=False):
            with open(tmp, "w", encoding="utf-8", newline="") as fh:
                if isinstance(text, str):
                    fh.write(text)
                else:  # written piece by piece, never held whole
                    for piece in text:
                        fh.write(piece)
        for tmp, (_, figure) in zip(tmps[len(texts) :], figures, strict=True):
            figure.savefig(tmp, format="png", dpi=dpi)
    return paths


@contextmanager
def new_dirs(folders: Sequence[str]) -> Iterator[list[str]]:
    """Create the missing ``folders`` (:func:`make_dirs`) for the block; if it raises,
    remove those it created (while empty) and re-raise. Yields the created ones."""
    created = make_dirs(folders)
    try:
        yield created
    except BaseException:
        for folder in reversed(created):
            try:
                os.rmdir(folder)
            except OSError:
                pass
        raise


def make_dirs(folders: Sequence[str]) -> list[str]:
    """Create the missing ``folders`` (and parents); those created, parents first.
    O(folders x depth)."""
    created: list[str] = []
    for folder in dict.fromkeys(folders):
        missing = []
        path = os.path.abspath(folder)
        while not os.path.isdir(path):
            if os.path.lexists(path):  # a file where a folder must go: the user's path
                raise not_a_folder(path)
            missing.append(path)
            path = os.path.dirname(path)
        for path in reversed(missing):
            os.mkdir(path)
            created.append(path)
    return created


def progress(items: Iterable[T], unit: str, total: int | None = None) -> Iterable[T]:
    """``items`` behind a tqdm bar on stderr when stderr is a terminal; else unchanged."""
    if not sys.stderr.isatty():
        return items
    from tqdm import tqdm

    return tqdm(items, total=total, unit=unit, file=sys.stderr, leave=False, mininterval=0.5)


@contextmanager
def byte_progress(total_bytes: int | None, desc: str) -> Iterator[Callable[[int], object]]:
    """Yield ``advance(nbytes)``: a tqdm bar of ``total_bytes`` (None: unknown) on stderr
    when stderr is a terminal (percent, rate and ETA, as ``litehit replay`` shows), else a
    no-op. The bar is closed (and erased) when the block ends. O(1) per call."""
    if not sys.stderr.isatty():
        yield _ignore
        return
    from tqdm import tqdm

    bar = tqdm(
        total=total_bytes,
        unit="B",
        unit_scale=True,
        file=sys.stderr,
        leave=False,
        mininterval=0.5,
        desc=desc,
    )
    try:
        yield bar.update
    finally:
        bar.close()


@contextmanager
def progress_bar(total: int | None, unit: str, desc: str) -> Iterator[Callable[[int], object]]:
    """Yield ``advance(n)``: a tqdm bar of ``total`` ``unit`` on stderr when stderr is a
    terminal (closed and erased when the block ends), else a no-op. O(1) per call."""
    if not sys.stderr.isatty():
        yield _ignore
        return
    from tqdm import tqdm

    bar = tqdm(total=total, unit=unit, file=sys.stderr, leave=False, mininterval=0.5, desc=desc)
    try:
        yield bar.update
    finally:
        bar.close()


def _ignore(nbytes: int) -> None:
    """The ``advance`` of :func:`byte_progress` without a terminal."""


def file_size(path: PathLike) -> int | None:
    """``path``'s size in bytes (a bar's total), or None when it cannot be read."""
    try:
        return os.path.getsize(path)
    except OSError:
        return None


PLAN_BYTES = 256 << 20
"""From this much JSONL (or a container holding about as much) a command says its plan."""


def plan_line(
    command: str, path: str, size: int, jsonl_bytes: int, mb_per_s: float, destination: str
) -> str | None:
    """The line a long run prints first, on stderr, or None for a trace under
    :data:`PLAN_BYTES` of JSONL::

        optimize: t.parquet: 1.1 GB (about 8.7 GB of JSONL); about 3 min at ~45 MB/s of
        JSONL on a 2-core machine -> out

    ``size``: the file's bytes; ``jsonl_bytes``: about how much JSONL it holds (its size,
    or a container's times its usual expansion); ``mb_per_s``: the command's measured rate
    (bench/README.md). O(1)."""
    if jsonl_bytes < PLAN_BYTES:
        return None
    what = _bytes(size)
    if jsonl_bytes != size:
        what += f" (about {_bytes(jsonl_bytes)} of JSONL)"
    seconds = jsonl_bytes / 1e6 / mb_per_s
    took = f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"
    return (
        f"{command}: {path}: {what}; about {took} at ~{mb_per_s:.0f} MB/s of JSONL on a "
        f"2-core machine -> {destination}"
    )


def _bytes(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def run_line(
    command: str,
    count: int,
    unit: str,
    parts: str,
    elapsed_s: float,
    destination: str,
    compile_s: float | None = None,
) -> str:
    """The one summary line every offline command ends with, on stderr::

        query: 5 requests, 1 instances, 0.012 s, 416 requests/s -> out.jsonl

    ``parts`` is what comes between the count and the time (``"1 instances"``).
    ``compile_s`` (of ``elapsed_s``; default: what this process compiled,
    :func:`~litehit_service.offline.kernels.compiled_seconds`) is named apart when there
    was a compile and left out of the rate::

        optimize: 12031 reads, 1 instances, 12.1 s (11.3 s compiling kernels, once after an
        install), 15,040 reads/s -> out

    O(1).
    """
    if compile_s is None:
        from litehit_service.offline.kernels import compiled_seconds

        compile_s = compiled_seconds()
    work_s = elapsed_s - compile_s
    rate = count / work_s if work_s > 0 else 0.0
    took = f"{elapsed_s:.3f} s"
    if compile_s > 0:
        took += f" ({compile_s:.1f} s compiling kernels, once after an install)"
    return f"{command}: {count} {unit}, {parts}, {took}, {rate:,.0f} {unit}/s -> {destination}"
