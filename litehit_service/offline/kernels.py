"""Compiled kernels as the commands meet them: loaded from numba's disk cache in a fraction
of a second, or compiled once after an install (seconds), which a command says on stderr
the moment the compile starts, and keeps out of its speed.

- :func:`watch_compiles`: from now on, the first time numba starts compiling a kernel
  family (:data:`~litehit_core.engine.KERNEL_FAMILIES`) in this process (numba's
  ``numba:compile`` event: only a cache miss compiles, a cache hit is a load and says
  nothing), one notice goes to stderr naming the family, about how long it takes, and
  ``litehit warm-up``; the run line then says how long the compiles took. It imports nothing: if
  numba is not loaded yet, it waits for numba's import
  (:func:`~litehit_core.kernel_cache.after_numba`) and
  listens from then on, so a command that never needs numba never loads it.
  :func:`compiled_seconds` is the time spent compiling so far, which a command's run line
  names apart (:func:`~litehit_service.offline.outputs.run_line`).
- :func:`load_kernels`: load (or compile) one family before a command's work (before its
  progress bar, and before it forks workers, which then inherit the kernels).
- :func:`warm_up_all`: every family, one line each (``litehit warm-up``).
- :func:`single_threaded_refcounts`: for a command whose kernels all run on one thread,
  numba's reference counts without atomic instructions (below).

Cost: nothing per kernel call; one event per compiled function while compiling.
"""

from __future__ import annotations

import importlib
import sys
import threading
import time
from typing import Any, TextIO

from litehit_core.kernel_cache import after_numba

__all__ = [
    "CompileWatch",
    "compile_notice",
    "compiled_seconds",
    "family_of",
    "load_kernels",
    "single_threaded_refcounts",
    "warm_up_all",
    "watch_compiles",
]


class CompileWatch:
    """What a compile listener has seen: ``seconds`` compiling (outermost compiles), the
    families ``announced`` (a notice each, on ``stream``: stderr when None). The process has
    one (:func:`watch_compiles`); :meth:`on_compile` takes numba's events. O(1) per event."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream: TextIO | None = stream
        self.registered = False
        self.depth = 0
        self.started = 0.0
        self.seconds = 0.0
        self.announced: set[str] = set()
        self.lock = threading.Lock()

    def on_compile(self, event: Any) -> None:
        """numba's ``numba:compile`` start/end events (nested: callees compile inside a
        caller's compile). The first compile of a family announces it; every outermost
        compile adds its time to :attr:`seconds`."""
        with self.lock:
            if event.is_start:
                self.depth += 1
                if self.depth == 1:
                    self.started = time.perf_counter()
                    dispatcher = event.data.get("dispatcher")
                    module = getattr(getattr(dispatcher, "py_func", None), "__module__", "")
                    family = family_of(module or "")
                    if family not in self.announced:
                        self.announced.add(family)
                        self._say(compile_notice(family))
            else:
                self.depth -= 1
                if self.depth == 0:
                    self.seconds += time.perf_counter() - self.started

    def _say(self, line: str) -> None:
        stream = self.stream if self.stream is not None else sys.stderr
        print(line, file=stream, flush=True)

    def listener(self) -> Any:
        """A ``numba.core.event.Listener`` feeding :meth:`on_compile` (imports numba)."""
        from numba.core import event

        watch = self

        class Listener(event.Listener):
            def on_start(self, ev: Any) -> None:
                watch.on_compile(ev)

            def on_end(self, ev: Any) -> None:
                watch.on_compile(ev)

        return Listener()


_WATCH = CompileWatch()


def _register() -> None:
    """Listen to numba's compile events for good (numba is loaded)."""
    from numba.core import event

    event.register("numba:compile", _WATCH.listener())


def watch_compiles(stream: TextIO | None = None) -> None:
    """Announce every compile of this process on ``stream`` (stderr; module docstring).
    Idempotent. O(1)."""
    _WATCH.stream = stream
    if _WATCH.registered:
        return
    _WATCH.registered = True
    after_numba(_register)


def single_threaded_refcounts() -> None:
    """Make numba's reference counts plain (non-atomic) increments for this process: for
    a command whose compiled kernels all run on one thread (the offline commands: their
    parallel work is in processes), never for ``serve``. The policy replay's kernels reach
    every array through one structref, and each read of a field adds and drops a
    reference; as ``lock``-prefixed instructions these took 66 % of a replay on this
    2-core VM (``perf``), plain ones make it 2.5x faster (bench/README.md, issue 38's
    session). numba compiles its two counting functions once, when its runtime starts
    (at the first kernel): they are replaced before that by plain ones with the same
    contract (return the new count). numba's own switch for this
    (``nrtdynmod._disable_atomicity``) returns the old count, so a count reaching 0 never
    frees: memory leaks (it doubled ``optimize``'s peak RSS); it is not used. A numba
    whose runtime is laid out differently keeps atomic counts. O(1)."""
    after_numba(_plain_refcounts)


def _plain_refcounts() -> None:
    from numba.core.runtime import nrt, nrtdynmod

    word = getattr(nrtdynmod, "_word_type", None)
    if nrt.rtsys._init or word is None or not hasattr(nrtdynmod, "_define_atomic_inc_dec"):
        return

    def plain_inc_dec(module: Any, op: str, ordering: str) -> Any:
        from llvmlite import ir

        fn = ir.Function(module, ir.FunctionType(word, [word.as_pointer()]),
                         name=f"nrt_atomic_{op}")  # fmt: skip
        (ptr,) = fn.args
        builder = ir.IRBuilder(fn.append_basic_block())
        new = getattr(builder, op)(builder.load(ptr), ir.Constant(word, 1))
        builder.store(new, ptr)
        builder.ret(new)  # the new count, as the atomic version returns it
        return fn

    nrtdynmod._define_atomic_inc_dec = plain_inc_dec


def compiled_seconds() -> float:
    """Seconds this process has spent compiling kernels since :func:`watch_compiles`."""
    return _WATCH.seconds


def family_of(module: str) -> str:
    """The kernel family (a key of :data:`~litehit_core.engine.KERNEL_FAMILIES`) whose
    sources hold ``module``, or ``""`` for another module's kernel."""
    from litehit_core.engine import KERNEL_FAMILIES

    for name, family in KERNEL_FAMILIES.items():
        if any(module == s or module.startswith(s + ".") for s in family.sources):
            return name
    return ""


def _what(name: str) -> str:
    """``"the policy-replay kernels"``; ``"kernels"`` for no known family."""
    from litehit_core.engine import KERNEL_FAMILIES

    return f"the {KERNEL_FAMILIES[name].what} kernels" if name else "kernels"


def compile_notice(name: str) -> str:
    """The stderr line when family ``name`` (``""``: not known) starts compiling."""
    from litehit_core.engine import KERNEL_FAMILIES

    about = f"about {KERNEL_FAMILIES[name].compile_s:.0f} s on 2 cores; " if name else ""
    return (
        f"litehit: compiling {_what(name)}, once after an install ({about}later runs load "
        "them from numba's cache in ~0.1 s; 'litehit warm-up' compiles every kernel ahead)"
    )


def load_kernels(name: str) -> float:
    """Load (or compile, announced by :func:`watch_compiles` when it watches) the kernels of
    family ``name`` of :data:`~litehit_core.engine.KERNEL_FAMILIES`; seconds it took."""
    from litehit_core.engine import KERNEL_FAMILIES

    start = time.perf_counter()
    importlib.import_module(KERNEL_FAMILIES[name].module).warm_up()
    return time.perf_counter() - start


def warm_up_all(stream: TextIO | None = None) -> dict[str, float]:
    """Load (or compile) every family of :data:`~litehit_core.engine.KERNEL_FAMILIES`, one
    line each on ``stream`` (stderr) as it finishes; seconds per family. Idempotent: a
    second run loads everything from numba's cache."""
    from litehit_core.engine import KERNEL_FAMILIES

    out = sys.stderr if stream is None else stream
    taken = {}
    for name, family in KERNEL_FAMILIES.items():
        print(f"warm-up: {family.what} kernels ({family.used_by}) ...", file=out, flush=True)
        taken[name] = load_kernels(name)
        print(f"warm-up: {family.what} kernels ready in {taken[name]:.1f} s", file=out, flush=True)
    return taken
