"""Compiled kernels as the offline commands meet them: loaded from numba's disk cache in a
fraction of a second, or compiled once after an install (several seconds), which a command
says on stderr as it happens and keeps out of its speed.

- :func:`load_kernels`: load (or compile) one family of
  :data:`~litehit_core.engine.KERNEL_FAMILIES` before a command's work; when that takes
  longer than :data:`NOTICE_AFTER_S` (only a compile does: loading from the cache takes
  ~0.1 s), a notice goes to stderr while it goes on, naming the family, about how long it
  takes and ``litehit warm-up``; returns the seconds, which the command's run line reports
  apart from its replay speed (:func:`~litehit_service.offline.outputs.run_line`).
- :func:`warm_up_all`: every family, one line each (``litehit warm-up``).

Cost: the family's ``warm_up`` (a tiny replay) plus one timer thread.
"""

from __future__ import annotations

import importlib
import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["NOTICE_AFTER_S", "compile_notice", "load_kernels", "warm_up_all"]

NOTICE_AFTER_S = 1.5
"""Seconds of loading after which the notice is printed (a load from numba's cache takes
~0.1 s; a compile takes seconds)."""


def compile_notice(name: str) -> str:
    """The stderr line while family ``name`` compiles."""
    from litehit_core.engine import KERNEL_FAMILIES

    family = KERNEL_FAMILIES[name]
    return (
        f"litehit: compiling the {family.what} kernels, once after an install (about "
        f"{family.compile_s:.0f} s on 2 cores; later runs load them from numba's cache in "
        "~0.1 s; 'litehit warm-up' compiles every kernel ahead)"
    )


def load_kernels(
    name: str, *, after_s: float = NOTICE_AFTER_S, stream: TextIO | None = None
) -> float:
    """Load (or compile) the kernels of family ``name`` of
    :data:`~litehit_core.engine.KERNEL_FAMILIES`; seconds it took. Past ``after_s`` the
    notice (:func:`compile_notice`) is written to ``stream`` (stderr) at once, and when the
    load ends ``litehit: ... kernels compiled in S s``."""
    from litehit_core.engine import KERNEL_FAMILIES

    out = sys.stderr if stream is None else stream
    warm: Callable[[], float] = importlib.import_module(KERNEL_FAMILIES[name].module).warm_up
    announced = threading.Event()

    def announce() -> None:
        announced.set()
        print(compile_notice(name), file=out, flush=True)

    timer = threading.Timer(after_s, announce)
    timer.daemon = True
    start = time.perf_counter()
    timer.start()
    try:
        warm()
    finally:
        timer.cancel()
    seconds = time.perf_counter() - start
    if announced.is_set():
        what = KERNEL_FAMILIES[name].what
        print(f"litehit: {what} kernels compiled in {seconds:.1f} s", file=out, flush=True)
    return seconds


def warm_up_all(stream: TextIO | None = None) -> dict[str, float]:
    """Load (or compile) every family of :data:`~litehit_core.engine.KERNEL_FAMILIES`, one
    stderr line each as it finishes; seconds per family. Idempotent: a second run loads
    everything from numba's cache."""
    from litehit_core.engine import KERNEL_FAMILIES

    out = sys.stderr if stream is None else stream
    taken = {}
    for name, family in KERNEL_FAMILIES.items():
        print(f"warm-up: {family.what} kernels ({family.used_by}) ...", file=out, flush=True)
        warm = importlib.import_module(family.module).warm_up
        start = time.perf_counter()
        warm()
        taken[name] = time.perf_counter() - start
        print(f"warm-up: {family.what} kernels ready in {taken[name]:.1f} s", file=out, flush=True)
    return taken
