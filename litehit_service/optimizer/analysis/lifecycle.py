"""``litehit lifecycle``: one row per block life, and what they add up to (spec §9).

A *life* is a block's stay in one instance's cache (one tier of it when tiered): from its
insert (a write, a promotion, a cascading demotion into the tier) to its eviction or TTL
expiry, or alive at the end. Rows come from the replay's ``lives``
(:data:`~litehit_core.policy_replay.state.LIFE_FIELDS`) as the trace streams
(:class:`LifecycleWriter`): a life is written once it has ended, so rows are in the order
the lives ended (by death time; ties in the order they began), then the lives alive at the
end in the order they began -- the same rows in the same order however the trace is cut
into batches. Only the lives alive and, per life, what the statistics need
(~11 bytes: lifespan, tier, cause, hit or not) are held.

The CSV, ``{instance_id}_block_lifecycle.csv``: :data:`HEADER` (plus a trailing ``Tier``
column, the tier's ``unique_name``, for a tiered instance). Times are the replay's ns
floored to whole µs (``ns // 1000``); ``LifespanUs`` is the life's length in ns floored
(so it may be one more than ``DeathTimeUs - BirthTimeUs``); a life alive at the end has an
empty ``DeathTimeUs`` and lasts to the end of the replay (the later of the last record and
the last write applied); ``AccessCount`` is the read hits during the life,
``LastAccessTimeUs`` the latest one's time (empty: never hit); ``IsAlive`` ``true`` or
``false`` (the reference's spelling).

Statistics (:func:`lifecycle_stats`): lifespan percentiles (numpy's linear interpolation
over the CSV's ``LifespanUs`` values, so they can be recomputed from the file), the share
of lives never hit and the utilisation (lives hit at least once / all lives), revivals
(lives of a path beyond its first in the same tier: the path was written again after it
died), deaths by eviction and by TTL, and per tier the same counts. Cost: O(lives) numpy
plus one compiled formatting call per million lives for the CSV.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TextIO

import numpy as np

from litehit_core.policy_replay import Replayer
from litehit_core.policy_replay.state import (
    ALIVE,
    CACHED_ALL,
    EVICTED,
    EXPIRED,
    LIFE_FIELDS,
    LIVES,
    NOW,
    ReplayArrays,
)
from litehit_service.offline.text_columns import EMPTY, LABEL, OPTIONAL, table_text
from litehit_service.optimizer.analysis.copies import CopyCounter
from litehit_service.optimizer.analysis.replay import Analysis, InstanceInfo
from litehit_service.optimizer.optimize.stream import Fed

__all__ = [
    "HEADER",
    "CSV_CHUNK_LIVES",
    "DRAIN_LIVES",
    "PERCENTILES",
    "InstanceLives",
    "LifeSummary",
    "LifecycleWriter",
    "lifecycle_csv",
    "lifecycle_header",
    "lifecycle_stats",
    "stats_text",
]

HEADER = "BlockKey,BirthTimeUs,DeathTimeUs,LifespanUs,AccessCount,LastAccessTimeUs,IsAlive"
"""The CSV's columns (a tiered instance adds ``,Tier``)."""
PERCENTILES = (25, 50, 75, 90, 95, 99)
"""The lifespan percentiles reported."""
_COL = {name: i for i, name in enumerate(LIFE_FIELDS)}


@dataclass(frozen=True, slots=True)
class InstanceLives:
    """One configured instance's lives in birth order (int64 arrays, one entry per
    life): ``key`` (the block's key), ``slot`` (the replica slot: one path in one tier),
    ``tier`` (0 untiered), ``birth``/``death`` ns (death -1: alive at the end), ``hits``,
    ``last_hit`` ns (-1 none), ``cause`` (0 alive, 1 evicted, 2 expired); ``end_ns``: the
    end of the replay."""

    info: InstanceInfo
    key: np.ndarray
    slot: np.ndarray
    tier: np.ndarray
    birth: np.ndarray
    death: np.ndarray
    hits: np.ndarray
    last_hit: np.ndarray
    cause: np.ndarray
    end_ns: int

    @property
    def alive(self) -> np.ndarray:
        """Per life, whether it lasts to the end (bool)."""
        return self.death < 0

    @property
    def lifespan_us(self) -> np.ndarray:
        """Per life, its length in µs, ns floored; an alive life's to the end (int64)."""
        return (np.where(self.alive, self.end_ns, self.death) - self.birth) // 1000


@dataclass(frozen=True, slots=True)
class LifeSummary:
    """One instance's lives as its statistics and picture need them (int64 / int8 / bool
    arrays, one entry per life, in CSV order): ``lifespan_us``, ``tier``, ``cause``,
    ``hit`` (hit at least once), and ``paths`` per tier (distinct paths with a life)."""

    info: InstanceInfo
    lifespan_us: np.ndarray
    tier: np.ndarray
    cause: np.ndarray
    hit: np.ndarray
    paths: np.ndarray

    @property
    def alive(self) -> np.ndarray:
        """Per life, whether it lasts to the end (bool)."""
        return self.cause == ALIVE


DRAIN_LIVES = 1 << 18
"""Ended lives gathered before they are written (at least as many as are alive, so the
copying stays O(1) per life)."""


class LifecycleWriter:
    """Writes each instance's CSV while the analysis replay streams (module docstring):
    :meth:`on_batch` (the replay's ``on_batch``) writes the lives that ended once there
    are :data:`DRAIN_LIVES` of them and as many as alive; :meth:`finish` writes the rest
    and gives each instance's :class:`LifeSummary`. ``files``: one open text file per
    configured instance (configuration order; None: no CSV for it), the header is written
    here; ``reference``: the reference's values for lives alive at the end and never hit
    (:func:`lifecycle_csv`); ``copies``: also gathers every life into it (the fleet's
    duplicate blocks, :mod:`.copies`). Memory O(lives alive + 11 bytes a life)."""

    def __init__(
        self,
        infos: Sequence[InstanceInfo],
        files: Sequence[TextIO | None],
        *,
        reference: bool = False,
        copies: CopyCounter | None = None,
    ) -> None:
        self.infos = tuple(infos)
        self.files = tuple(files)
        self.reference = reference
        self.copies = copies
        self.seen = np.zeros(0, dtype=bool)  # per replica slot: a life of it was written
        self.parts: list[list[tuple[np.ndarray, ...]]] = [[] for _ in infos]
        self.paths = [np.zeros(max(len(i.tier_names), 1), dtype=np.int64) for i in infos]
        for info, fh in zip(self.infos, self.files, strict=True):
            if fh is not None:
                fh.write(lifecycle_header(info))

    def on_batch(self, replayer: Replayer, fed: Fed) -> None:
        """Write the lives that ended, when enough have. O(lives held) when it writes."""
        scalars = replayer.arrays.scalars
        alive = int(scalars[CACHED_ALL])  # one life per cached replica
        if int(scalars[LIVES]) - alive >= max(DRAIN_LIVES, alive):
            # a life ending at the current time may tie with one ending in the next batch
            self._write(replayer.drain_lives(int(scalars[NOW])), replayer.arrays, 0)

    def finish(self, analysis: Analysis) -> list[LifeSummary]:
        """Write the lives left (those that ended, then the alive) and summarise each
        instance. O(lives left + lives)."""
        a = analysis.result.arrays
        rows = a.lives
        alive = rows[:, _COL["cause"]] == ALIVE
        self._write(rows[~alive], a, analysis.end_ns)
        self._write(rows[alive], a, analysis.end_ns)
        out = []
        for info, parts, paths in zip(self.infos, self.parts, self.paths, strict=True):
            columns = [
                np.concatenate([part[i] for part in parts]) if parts else np.zeros(0, dtype)
                for i, dtype in enumerate((np.int64, np.int8, np.int8, bool))
            ]
            out.append(LifeSummary(info, *columns, paths=paths))
        return out

    def _write(self, rows: np.ndarray, a: ReplayArrays, end_ns: int) -> None:
        """Write ``rows`` (lives, ended ones first by death, then alive) per instance."""
        if not len(rows):
            return
        if (rows[:, _COL["cause"]] != ALIVE).all():  # ended lives: in the order they ended
            rows = rows[np.argsort(rows[:, _COL["death"]], kind="stable")]
        users = len(self.infos)
        slot = rows[:, _COL["node"]]
        if len(self.seen) <= int(slot.max()):
            grown = np.zeros(max(int(slot.max()) + 1, 2 * len(self.seen)), dtype=bool)
            grown[: len(self.seen)] = self.seen
            self.seen = grown
        slots, first = np.unique(slot, return_index=True)
        fresh = ~self.seen[slots]  # paths (in one tier) whose first life is written now
        self.seen[slots[fresh]] = True
        inst = rows[:, _COL["inst"]]
        fresh_inst = inst[first[fresh]]
        for info in self.infos:
            mine = np.flatnonzero(inst % users == info.index)
            if not len(mine):
                continue
            lives = _lives(info, rows[mine], a, users, end_ns)
            fh = self.files[info.index]
            if fh is not None:
                fh.writelines(lifecycle_csv(lives, header=False, reference=self.reference))
            if self.copies is not None:
                self.copies.add(lives.key, info.index, lives.birth, lives.death)
            self.parts[info.index].append(
                (lives.lifespan_us, lives.tier.astype(np.int8), lives.cause.astype(np.int8),
                 lives.hits > 0)
            )  # fmt: skip
            paths = self.paths[info.index]
            tiers = fresh_inst[fresh_inst % users == info.index] // users
            paths += np.bincount(tiers, minlength=len(paths))


def _lives(
    info: InstanceInfo, rows: np.ndarray, a: ReplayArrays, users: int, end_ns: int
) -> InstanceLives:
    slot = rows[:, _COL["node"]]
    return InstanceLives(
        info=info,
        key=a.key[slot],
        slot=slot,
        tier=rows[:, _COL["inst"]] // users,
        birth=rows[:, _COL["birth"]],
        death=rows[:, _COL["death"]],
        hits=rows[:, _COL["hits"]],
        last_hit=rows[:, _COL["last_hit"]],
        cause=rows[:, _COL["cause"]],
        end_ns=end_ns,
    )


CSV_CHUNK_LIVES = 1 << 20
"""Lives formatted per piece of the CSV (~60 MB of text): the file is written piece by
piece, never held whole."""


def lifecycle_header(info: InstanceInfo) -> str:
    """The CSV's first line (with ``\\n``): :data:`HEADER`, and ``,Tier`` when tiered."""
    return HEADER + (",Tier" if info.tier_names else "") + "\n"


def lifecycle_csv(
    lives: InstanceLives, *, header: bool = True, reference: bool = False
) -> Iterator[str]:
    """The CSV text of ``lives`` (module docstring), in pieces of :data:`CSV_CHUNK_LIVES`
    rows (the header first, unless ``header`` is False). ``reference``: the reference
    optimizer's values where ours are empty -- a life alive at the end dies at the end of
    the replay (``DeathTimeUs``), a life never hit was last accessed at its birth
    (``LastAccessTimeUs``); ``IsAlive`` still tells them apart. O(lives), one compiled
    call a piece (:func:`~litehit_service.offline.text_columns.table_text`)."""
    tiered = bool(lives.info.tier_names)
    if header:
        yield lifecycle_header(lives.info)
    labels = ["false", "true", *lives.info.tier_names]
    alive = lives.alive
    end_us = lives.end_ns // 1000
    for lo in range(0, len(lives.birth), CSV_CHUNK_LIVES):
        part = slice(lo, lo + CSV_CHUNK_LIVES)
        columns = [
            lives.key[part],
            lives.birth[part] // 1000,
            np.where(alive[part], end_us if reference else EMPTY, lives.death[part] // 1000),
            lives.lifespan_us[part],
            lives.hits[part],
            np.where(
                lives.last_hit[part] < 0,
                lives.birth[part] // 1000 if reference else EMPTY,
                lives.last_hit[part] // 1000,
            ),
            alive[part].astype(np.int64),
        ]
        decimals = [0, 0, OPTIONAL, 0, 0, OPTIONAL, LABEL]
        if tiered:
            columns.append(lives.tier[part] + 2)
            decimals.append(LABEL)
        yield table_text(columns, decimals, labels)


def _counts(lives: LifeSummary, mine: np.ndarray, paths: int) -> dict[str, int]:
    n = int(len(mine))
    return {
        "lives": n,
        "alive": int(lives.alive[mine].sum()),
        "paths": paths,
        "revivals": n - paths,
        "never_hit": int((~lives.hit[mine]).sum()),
        "evicted": int((lives.cause[mine] == EVICTED).sum()),
        "expired": int((lives.cause[mine] == EXPIRED).sum()),
    }


def lifecycle_stats(lives: LifeSummary) -> dict[str, object]:
    """The statistics of one instance (module docstring) as a JSON-ready dict: counts
    (``lives``, ``alive``, ``paths`` (distinct paths in each tier), ``revivals``,
    ``never_hit``, ``evicted``, ``expired``), ``never_hit_share`` and ``utilisation``
    (0 without lives), ``lifespan_us`` (``p25`` .. ``p99``, ``mean``, ``max``; null
    without lives) and, tiered, ``tiers`` (the counts per tier). O(lives log lives)."""
    everything = np.arange(len(lives.cause))
    counts = _counts(lives, everything, int(lives.paths.sum()))
    n = counts["lives"]
    span = lives.lifespan_us
    spans: dict[str, float | None]
    if n:
        values = np.percentile(span, PERCENTILES)
        spans = {f"p{p}": round(float(v), 3) for p, v in zip(PERCENTILES, values, strict=True)}
        spans["mean"] = round(float(span.mean()), 3)
        spans["max"] = float(span.max())
    else:
        spans = {f"p{p}": None for p in PERCENTILES} | {"mean": None, "max": None}
    stats: dict[str, object] = {
        "instance_id": lives.info.instance_id,
        "eviction_policy_type": lives.info.policy,
        **counts,
        "never_hit_share": counts["never_hit"] / n if n else 0.0,
        "utilisation": (n - counts["never_hit"]) / n if n else 0.0,
        "lifespan_us": spans,
    }
    if lives.info.tier_names:
        stats["tiers"] = [
            {
                "tier": t,
                "name": name,
                **_counts(lives, np.flatnonzero(lives.tier == t), int(lives.paths[t])),
            }
            for t, name in enumerate(lives.info.tier_names)
        ]
    return stats


def _us(value: object) -> str:
    """A µs value for people: seconds above 1 s, ms above 1 ms, else µs."""
    if value is None:
        return "-"
    v = float(value)  # type: ignore[arg-type]
    if v >= 1e6:
        return f"{v / 1e6:.3f} s"
    if v >= 1e3:
        return f"{v / 1e3:.3f} ms"
    return f"{v:.3f} us"


def stats_text(stats: dict[str, object]) -> str:
    """The statistics of one instance as a few lines of text."""
    n = int(stats["lives"])  # type: ignore[call-overload]
    spans: dict[str, object] = stats["lifespan_us"]  # type: ignore[assignment]
    lines = [
        f"{stats['instance_id']} ({stats['eviction_policy_type']}): {n} lives of "
        f"{stats['paths']} paths, {stats['alive']} alive at the end",
        "  lifespan: " + ", ".join(f"P{p} {_us(spans[f'p{p}'])}" for p in PERCENTILES),
        f"  never hit: {stats['never_hit']} lives ({float(stats['never_hit_share']) * 100:.2f}%);"  # type: ignore[arg-type]
        f" utilisation {float(stats['utilisation']) * 100:.2f}% (lives hit at least once)",  # type: ignore[arg-type]
        f"  revivals: {stats['revivals']} (a path written again after its death)",
        f"  deaths: {stats['evicted']} by eviction, {stats['expired']} by TTL",
    ]
    for tier in stats.get("tiers", []):  # type: ignore[attr-defined]
        lines.append(
            f"  tier {tier['tier']} ({tier['name']}): {tier['lives']} lives, "
            f"{tier['alive']} alive, {tier['revivals']} revivals, {tier['evicted']} "
            f"evicted, {tier['expired']} expired, {tier['never_hit']} never hit"
        )
    return "\n".join(lines)
