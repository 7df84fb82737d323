"""What a start recovers, and what it says about it.

A graceful stop writes ``<data_dir>/clean-stop.json`` (atomically) after its final
snapshots; the next start reads and removes it, so its absence means the previous server
was killed or crashed (SIGKILL, OOM kill, power cut) and the queries acknowledged after
its last periodic snapshot may be missing. :func:`restore_message` turns that and the
manager's :class:`~litehit_service.manager.durable.RestoreSummary` into the one line a
start logs about its restore.

``<data_dir>/counters.json`` holds the service-level counters that are not part of any
instance's snapshot (``litehit_errors_total``): written with every snapshot round and at
stop, read at start, so they survive a restart like the per-instance counters (and, after
a crash, are as old as the last snapshot round).
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from litehit_service.manager.durable import RestoreSummary
from litehit_service.snapshots import write_file_atomically

log = logging.getLogger(__name__)

CLEAN_STOP_FILE = "clean-stop.json"
COUNTERS_FILE = "counters.json"
ERRORS_KEY = "litehit_errors_total"

ErrorCounts = dict[tuple[str, str], float]
"""``litehit_errors_total`` as (method, code) -> value."""


@dataclass(frozen=True, slots=True)
class PreviousStop:
    """How the previous server of a data dir stopped: ``clean`` when it left the marker
    (``data``: the marker's bytes, put back by :meth:`put_back`; ``stopped_unix``: when)."""

    clean: bool
    stopped_unix: float | None = None
    data: bytes = b""

    def put_back(self, data_dir: Path) -> None:
        """Write the marker again (a start that failed after :func:`take_clean_stop`
        leaves the data dir as it found it). No-op after an unclean stop."""
        if not self.clean:
            return
        try:
            write_file_atomically(data_dir / CLEAN_STOP_FILE, self.data)
        except OSError as exc:
            log.warning("could not put the clean-stop marker back in %s: %s", data_dir, exc)


def read_clean_stop(data_dir: Path) -> PreviousStop:
    """The previous stop as the marker in ``data_dir`` tells it (nothing is removed). O(1)."""
    try:
        data = (data_dir / CLEAN_STOP_FILE).read_bytes()
    except FileNotFoundError:
        return PreviousStop(False)
    try:
        stopped = float(json.loads(data)["stopped_unix"])
    except (ValueError, KeyError, TypeError):
        stopped = None  # an unreadable marker still says the stop finished its snapshots
    return PreviousStop(True, stopped, data)


def take_clean_stop(data_dir: Path) -> None:
    """Remove the marker: from now on the data dir's state is not that of a clean stop."""
    (data_dir / CLEAN_STOP_FILE).unlink(missing_ok=True)


def write_clean_stop(data_dir: Path, instances: int) -> None:
    """Write the marker (atomically): the stop finished and every snapshot is written."""
    body = {"stopped_unix": time.time(), "pid": os.getpid(), "instances": instances}
    write_file_atomically(data_dir / CLEAN_STOP_FILE, json.dumps(body).encode() + b"\n")


def restore_message(
    summary: RestoreSummary | None,
    previous: PreviousStop,
    snapshot_interval_seconds: float,
    first_start: bool,
    now: float | None = None,
) -> tuple[int, str]:
    """The log level and the one line a start logs about its restore: instances restored
    and started fresh (with why), the snapshots' age, whether the previous stop was clean
    and, after an unclean one, how many seconds of acknowledged queries may be missing.
    ``first_start``: the data dir had no registry before this start. O(reasons)."""
    now = time.time() if now is None else now
    if first_start:
        return logging.INFO, "restore: nothing to restore (first start with this data dir)"
    summary = summary if summary is not None else RestoreSummary()
    if summary.instances == 0:
        text = "restore: nothing to restore (no instances registered)"
    else:
        text = f"restore: {summary.restored} of {summary.instances} instances restored"
        if summary.oldest_unix is not None and summary.newest_unix is not None:
            old = max(0.0, now - summary.oldest_unix)
            new = max(0.0, now - summary.newest_unix)
            age = f"{old:.1f} s" if old - new < 0.05 else f"{new:.1f}-{old:.1f} s"
            text += f" from snapshots {age} old"
        fresh = summary.instances - summary.restored
        if fresh:
            why = ", ".join(f"{n} {reason}" for reason, n in sorted(summary.fresh.items()))
            text += f", {fresh} started fresh ({why})"
    if previous.clean:
        when = (
            f" {max(0.0, now - previous.stopped_unix):.1f} s ago"
            if previous.stopped_unix is not None
            else ""
        )
        return logging.INFO, f"{text}; the previous stop was clean{when}"
    text += "; the previous stop was NOT clean (killed or crashed: no clean-stop marker)"
    if summary.instances == 0:
        return logging.WARNING, text
    if snapshot_interval_seconds > 0:
        lost = (
            f"up to {snapshot_interval_seconds:g} s (--snapshot-interval-seconds) of "
            "queries acknowledged before it may be missing"
        )
    else:
        lost = (
            "every query it acknowledged may be missing (--snapshot-interval-seconds 0: "
            "snapshots only at a graceful stop)"
        )
    return logging.WARNING, f"{text}: {lost}"


def save_counters(data_dir: Path, errors: ErrorCounts) -> bool:
    """Write the service-level counters to ``counters.json`` (atomically); False (logged
    at ERROR) when that failed. O(series)."""
    rows = [{"method": m, "code": c, "value": v} for (m, c), v in sorted(errors.items())]
    try:
        write_file_atomically(
            data_dir / COUNTERS_FILE, json.dumps({ERRORS_KEY: rows}).encode() + b"\n"
        )
    except OSError as exc:
        log.error("service counters not written to %s: %s", data_dir / COUNTERS_FILE, exc)
        return False
    return True


def load_counters(data_dir: Path) -> ErrorCounts:
    """The service-level counters saved in ``counters.json``; empty when there is none.
    An unreadable file is logged at ERROR and ignored (the counters restart at 0)."""
    path = data_dir / COUNTERS_FILE
    try:
        rows = json.loads(path.read_bytes())[ERRORS_KEY]
        counts = {(str(r["method"]), str(r["code"])): float(r["value"]) for r in rows}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.error("service counters in %s are unusable, starting them at 0: %s", path, exc)
        return {}
    return {key: value for key, value in counts.items() if value > 0}
