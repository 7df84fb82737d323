"""Bounded logging of repeated events: a flood of bad requests yields a few lines, not one
line per request.

:class:`LogLimiter` keys each event by ``(kind, instance, peer)`` (the peer's host: a
client that reconnects from a new port is still the same client). Within one interval
(10 s by default) of a key:

- the **first** event is logged in full, as the caller wrote it;
- the **repeats** are only counted; once the interval has passed, one summary line says
  ``… 5,337 more like this from ipv4:10.0.0.7 in the last 10 s`` (at the level of the
  events).

The summary is written by the first event of *any* key after the interval (the limiter
sweeps its due keys on every event; the next event of the same key then starts a new
interval and is logged in full), or by :meth:`LogLimiter.flush` (the server calls it every
second, so a flood that stopped is summarised without waiting for another event, and
with ``everything`` when it drains, so nothing counted is left unsaid at a stop). Counters such as
``litehit_errors_total`` are kept by the caller for every event: the limiter only decides
what is written.

Memory is bounded: at most ``max_keys`` keys of at most 3 x :data:`KEY_CHARS` characters
are held; an event of a new key beyond that is
counted in one overflow key (summarised as ``… N more like this from other clients or
instances``). Thread-safe (one lock; the lines are written outside it). ``clock`` (seconds,
monotonic) is injectable for tests.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

DEFAULT_INTERVAL_SECONDS = 10.0
DEFAULT_MAX_KEYS = 1024
KEY_CHARS = 128
"""Each part of a key is cut to this many characters (an instance id is the client's)."""
Key = tuple[str, str, str]
OVERFLOW: Key = ("", "", "")
"""The key the events of new keys are counted under once ``max_keys`` keys are held."""


def peer_host(peer: str) -> str:
    """``ipv4:10.0.0.7:53412`` -> ``ipv4:10.0.0.7``; ``ipv6:[::1]:5000`` -> ``ipv6:[::1]``;
    anything without a port (``unix:/path``, ``""``) as is."""
    head, sep, port = peer.rpartition(":")
    if sep and port.isdigit() and head not in ("ipv4", "ipv6", "unix", ""):
        return head
    return peer


@dataclass
class _Window:
    start: float
    level: int
    peer: str
    repeats: int = 0


class LogLimiter:
    """Logs the first event of a key per interval in full and summarises its repeats (see
    the module docstring). ``logger`` receives every line."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        interval: float = DEFAULT_INTERVAL_SECONDS,
        max_keys: int = DEFAULT_MAX_KEYS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not interval > 0:
            raise ValueError(f"interval must be > 0 seconds, got {interval}")
        if max_keys <= 0:
            raise ValueError(f"max_keys must be > 0, got {max_keys}")
        self.logger = logger
        self.interval = interval
        self.max_keys = max_keys
        self._clock = clock
        self._lock = threading.Lock()
        self._windows: OrderedDict[Key, _Window] = OrderedDict()

    def __len__(self) -> int:
        """How many keys are held (at most ``max_keys`` + the overflow key)."""
        with self._lock:
            return len(self._windows)

    def log(
        self,
        level: int,
        kind: str,
        instance: str,
        peer: str,
        msg: str,
        *args: object,
        extra: Mapping[str, Any] | None = None,
        exc_info: BaseException | None = None,
    ) -> bool:
        """One event of ``(kind, instance, peer_host(peer))``: logs ``msg % args`` (with
        ``extra`` and ``exc_info``) when it is the first of its interval, else counts it.
        True when it was logged in full. O(due keys)."""
        now = self._clock()
        key = (kind[:KEY_CHARS], instance[:KEY_CHARS], peer_host(peer)[:KEY_CHARS])
        with self._lock:
            due = self._sweep(now)
            window = self._windows.get(key)
            held = len(self._windows) - (OVERFLOW in self._windows)
            full = window is None and held < self.max_keys
            if full:
                self._windows[key] = _Window(now, level, key[2])
            else:
                if window is None:  # a new key beyond max_keys: counted as overflow
                    window = self._windows.get(OVERFLOW)
                    if window is None:
                        window = self._windows[OVERFLOW] = _Window(now, level, "")
                window.repeats += 1
        self._write(due)
        if full:
            self.logger.log(level, msg, *args, extra=extra, exc_info=exc_info)
        return full

    def flush(self, *, everything: bool = False) -> int:
        """Write the summaries whose interval has passed (``everything``: all of them, as
        at a stop) and forget those keys. Returns how many summary lines were written."""
        with self._lock:
            due = self._sweep(self._clock(), everything=everything)
        return self._write(due)

    def _sweep(self, now: float, *, everything: bool = False) -> list[tuple[Key, _Window, float]]:
        """Pop the keys whose interval has passed, oldest first (lock held); the ones with
        repeats, with the seconds their interval lasted, are to be summarised."""
        due = []
        while self._windows:
            key, window = next(iter(self._windows.items()))
            if not everything and now - window.start < self.interval:
                break
            del self._windows[key]
            if window.repeats:
                due.append((key, window, now - window.start))
        return due

    def _write(self, due: list[tuple[Key, _Window, float]]) -> int:
        for key, window, elapsed in due:
            kind, instance, _ = key
            if key == OVERFLOW:
                what, source = "events", "other clients or instances"
            else:
                what = f"{kind}, instance {instance!r}" if instance else kind
                source = window.peer or "an unknown peer"
            self.logger.log(
                window.level,
                "… %s more like this (%s) from %s in the last %.0f s",
                f"{window.repeats:,}",
                what,
                source,
                elapsed,
                extra={"peer": window.peer} if window.peer else None,
            )
        return len(due)
