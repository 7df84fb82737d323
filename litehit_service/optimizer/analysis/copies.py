"""``global_duplicate_blocks.csv``: how much cache a fleet spends on the same block twice.

With several instances, the same block key is often cached by more than one of them (a
shared system prompt in every instance). From the block lives of one analysis replay
(:mod:`.lifecycle`), per moment: ``TotalBlockCopies`` (pairs (instance, key) with the
instance holding the key in some tier: a block in two tiers of one instance is one
copy), ``TotalUniqueKeys`` (keys held by at least one instance) and
``DuplicateBlockCopies`` (their difference: copies beyond the first). The columns and
the file name are the reference optimizer's (its ``GlobalRegistry`` writes one row per
register/deregister call); here there is one row per µs in which some instance began or
ceased to hold some key (a copy moving between the tiers of one instance is no change),
with the state at the end of that µs (``TimestampUs``: the replay's ns floored to µs), which
draws the same step curve and does not depend on the order of changes within a µs.

Cost: O(lives log lives) numpy, no Python loop per life; memory 32 bytes per life while
the replay streams (the lives are gathered, then swept once).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from litehit_service.offline.text_columns import table_text

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["COPIES_CSV", "COPIES_HEADER", "COPIES_PNG", "CopyCounter", "Copies", "copies_figure"]

COPIES_CSV = "global_duplicate_blocks.csv"
"""The file's name (the reference's), beside the hit-rate CSVs."""
COPIES_PNG = "global_duplicate_blocks.png"
"""The picture's name (the reference's)."""
COPIES_HEADER = "TimestampUs,TotalUniqueKeys,TotalBlockCopies,DuplicateBlockCopies"
"""The CSV's columns, the reference's."""


class Copies:
    """The swept table (int64 arrays, one entry per row): ``timestamp_us``,
    ``unique_keys``, ``copies``; ``duplicates`` derived."""

    def __init__(self, timestamp_us: np.ndarray, unique_keys: np.ndarray, copies: np.ndarray):
        self.timestamp_us = timestamp_us
        self.unique_keys = unique_keys
        self.copies = copies

    @property
    def duplicates(self) -> np.ndarray:
        """Copies beyond the first of each key (int64)."""
        return self.copies - self.unique_keys

    def csv_text(self) -> str:
        """The CSV (:data:`COPIES_HEADER` and one line per row). O(rows), one compiled
        formatting call."""
        columns = [self.timestamp_us, self.unique_keys, self.copies, self.duplicates]
        return COPIES_HEADER + "\n" + table_text(columns, [0, 0, 0, 0])


class CopyCounter:
    """Gathers block lives (:meth:`add`, per instance) and sweeps them into
    :class:`Copies` (:meth:`table`)."""

    def __init__(self) -> None:
        self._parts: list[np.ndarray] = []

    def add(self, key: np.ndarray, instance: int, birth: np.ndarray, death: np.ndarray) -> None:
        """Lives of one instance: block keys, birth ns and death ns (-1: alive at the
        end). O(lives)."""
        if len(key):
            inst = np.full(len(key), instance, dtype=np.int64)
            self._parts.append(np.column_stack((key, inst, birth, death)).astype(np.int64))

    def table(self) -> Copies:
        """The sweep (module docstring). O(lives log lives)."""
        if not self._parts:
            empty = np.zeros(0, dtype=np.int64)
            return Copies(empty, empty, empty)
        lives = np.concatenate(self._parts)
        key, inst, birth, death = lives.T
        ended = death >= 0
        # tier copies of one (instance, key): +1 at a birth, -1 at a death
        ev_key = np.concatenate((key, key[ended]))
        ev_inst = np.concatenate((inst, inst[ended]))
        ev_t = np.concatenate((birth, death[ended]))
        ev_d = np.concatenate((np.ones(len(key), np.int64), -np.ones(int(ended.sum()), np.int64)))
        held_t, held_key, held_d = _transitions((ev_inst, ev_key), ev_t, ev_d, ev_key)
        # instances holding a key: the key is unique-held while more than none
        uniq_t, _, uniq_d = _transitions((held_key,), held_t, held_d, held_key)
        t = np.concatenate((held_t, uniq_t))
        d_copies = np.concatenate((held_d, np.zeros(len(uniq_t), np.int64)))
        d_unique = np.concatenate((np.zeros(len(held_t), np.int64), uniq_d))
        order = np.argsort(t, kind="stable")
        us = t[order] // 1000
        copies = np.cumsum(d_copies[order])
        unique = np.cumsum(d_unique[order])
        last = np.flatnonzero(np.append(us[1:] != us[:-1], True))  # the end of each µs
        return Copies(us[last], unique[last], copies[last])


def _transitions(
    group: tuple[np.ndarray, ...], t: np.ndarray, delta: np.ndarray, key: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where a per-group running count of ``delta`` (sorted by time, rises before falls
    at the same ns) turns from 0 to more (+1) or back to 0 (-1): (time, key, ±1)."""
    order = np.lexsort((-delta, t, *group[::-1]))
    d = delta[order]
    g = np.zeros(len(order), dtype=bool)
    for column in group:
        c = column[order]
        g[1:] |= c[1:] != c[:-1]
    g[0] = True
    run = np.cumsum(d)
    start = np.maximum.accumulate(np.where(g, np.arange(len(d)), 0))
    count = run - (run[start] - d[start])  # the running count within the group
    before = count - d
    up = (before == 0) & (count > 0)
    down = (before > 0) & (count == 0)
    turn = up | down
    return t[order][turn], key[order][turn], np.where(up[turn], 1, -1).astype(np.int64)


def copies_figure(copies: Copies) -> Figure:
    """The reference's picture of the table: copies, duplicate copies and unique keys over
    the seconds since the first row, as steps."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 6), layout="constrained")
    ax = fig.subplots()
    if len(copies.timestamp_us):
        seconds = (copies.timestamp_us - copies.timestamp_us[0]) / 1e6
        for values, label, style in (
            (copies.copies, "block copies (all instances)", "-"),
            (copies.duplicates, "duplicate copies (beyond each key's first)", "-"),
            (copies.unique_keys, "unique keys", "--"),
        ):
            ax.step(seconds, values, where="post", linestyle=style, label=label)
        ax.legend(loc="upper left")
    ax.set_xlabel("time since the first block was cached (s)")
    ax.set_ylabel("blocks")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.set_title("The same block cached by several instances")
    return fig
