"""``litehit lifecycle``: one row per block life, and what they add up to (spec §9).

A *life* is a block's stay in one instance's cache (one tier of it when tiered): from its
insert (a write, a promotion, a cascading demotion into the tier) to its eviction or TTL
expiry, or alive at the end. Rows come from the replay's ``lives``
(:data:`~litehit_core.policy_replay.state.LIFE_FIELDS`), in the order the lives began.

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

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from litehit_core.policy_replay.state import EVICTED, EXPIRED, LIFE_FIELDS
from litehit_service.offline.text_columns import EMPTY, LABEL, OPTIONAL, table_text
from litehit_service.optimizer.analysis.replay import Analysis, InstanceInfo

__all__ = [
    "HEADER",
    "CSV_CHUNK_LIVES",
    "PERCENTILES",
    "InstanceLives",
    "instance_lives",
    "lifecycle_csv",
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


def instance_lives(analysis: Analysis) -> list[InstanceLives]:
    """Every configured instance's lives (configuration order). O(lives)."""
    a = analysis.result.arrays
    lives = a.lives
    inst = lives[:, _COL["inst"]]
    out = []
    for info in analysis.instances:
        mine = np.flatnonzero(inst % analysis.users == info.index)
        rows = lives[mine]
        slot = rows[:, _COL["node"]]
        out.append(
            InstanceLives(
                info=info,
                key=a.key[slot],
                slot=slot,
                tier=rows[:, _COL["inst"]] // analysis.users,
                birth=rows[:, _COL["birth"]],
                death=rows[:, _COL["death"]],
                hits=rows[:, _COL["hits"]],
                last_hit=rows[:, _COL["last_hit"]],
                cause=rows[:, _COL["cause"]],
                end_ns=analysis.end_ns,
            )
        )
    return out


CSV_CHUNK_LIVES = 1 << 20
"""Lives formatted per piece of the CSV (~60 MB of text): the file is written piece by
piece, never held whole."""


def lifecycle_csv(lives: InstanceLives) -> Iterator[str]:
    """The CSV text (module docstring), in pieces of :data:`CSV_CHUNK_LIVES` rows (the
    header first). O(lives), one compiled call a piece
    (:func:`~litehit_service.offline.text_columns.table_text`)."""
    tiered = bool(lives.info.tier_names)
    yield HEADER + (",Tier" if tiered else "") + "\n"
    labels = ["false", "true", *lives.info.tier_names]
    alive = lives.alive
    for lo in range(0, len(lives.birth), CSV_CHUNK_LIVES):
        part = slice(lo, lo + CSV_CHUNK_LIVES)
        columns = [
            lives.key[part],
            lives.birth[part] // 1000,
            np.where(alive[part], EMPTY, lives.death[part] // 1000),
            lives.lifespan_us[part],
            lives.hits[part],
            np.where(lives.last_hit[part] < 0, EMPTY, lives.last_hit[part] // 1000),
            alive[part].astype(np.int64),
        ]
        decimals = [0, 0, OPTIONAL, 0, 0, OPTIONAL, LABEL]
        if tiered:
            columns.append(lives.tier[part] + 2)
            decimals.append(LABEL)
        yield table_text(columns, decimals, labels)


def _counts(lives: InstanceLives, mine: np.ndarray) -> dict[str, int]:
    n = int(len(mine))
    paths = int(len(np.unique(lives.slot[mine])))
    return {
        "lives": n,
        "alive": int(lives.alive[mine].sum()),
        "paths": paths,
        "revivals": n - paths,
        "never_hit": int((lives.hits[mine] == 0).sum()),
        "evicted": int((lives.cause[mine] == EVICTED).sum()),
        "expired": int((lives.cause[mine] == EXPIRED).sum()),
    }


def lifecycle_stats(lives: InstanceLives) -> dict[str, object]:
    """The statistics of one instance (module docstring) as a JSON-ready dict: counts
    (``lives``, ``alive``, ``paths`` (distinct paths in each tier), ``revivals``,
    ``never_hit``, ``evicted``, ``expired``), ``never_hit_share`` and ``utilisation``
    (0 without lives), ``lifespan_us`` (``p25`` .. ``p99``, ``mean``, ``max``; null
    without lives) and, tiered, ``tiers`` (the counts per tier). O(lives log lives)."""
    everything = np.arange(len(lives.birth))
    counts = _counts(lives, everything)
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
            {"tier": t, "name": name, **_counts(lives, np.flatnonzero(lives.tier == t))}
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
