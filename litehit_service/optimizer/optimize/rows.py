"""``{instance_id}_hit_rates.csv``: the reference's columns, one row per read (spec §6).

The replay gives per read its record, local and remote hit blocks, cached blocks (the
instance's and everyone's) and the keys written so far; everything else is derived here,
per instance, with integer arithmetic: ``*Tokens = *Blocks x block_size``, ``Acc*`` are
running sums over the instance's reads, rates are token ratios printed with 6 decimals (0
when the denominator is 0). Hit rates are ratios of accumulated integers; the trailing
partial block stays in ``InputTokens``. Cost O(reads) with numpy; formatting one compiled
call per batch (~15-40 ns a field).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from litehit_core.policy_replay import ReplayRecords
from litehit_service.offline.text_columns import table_text

__all__ = [
    "HEADER",
    "InstanceRows",
    "RowTotals",
    "Running",
    "column_names",
    "concat_rows",
    "csv_header",
    "csv_lines",
    "format_csv",
    "instance_rows",
    "no_rows",
    "row_columns",
    "tier_header",
]

HEADER = (
    "TimestampNs,CachedBlocks,CachedBlocksAllInstances,ReadBlocks,LocalHitBlocks,"
    "RemoteHitBlocks,HitBlocks,InputTokens,LocalHitTokens,RemoteHitTokens,HitTokens,"
    "LocalHitRate,RemoteHitRate,HitRate,AccReadBlocks,AccHitBlocks,AccInputTokens,"
    "AccLocalHitTokens,AccRemoteHitTokens,AccHitTokens,AccLocalHitRate,AccRemoteHitRate,"
    "AccHitRate,AccWriteBlocks"
)
"""The CSV header, exactly as the reference writes it."""
RATE_DIGITS = 6
"""Decimals of a rate (``f"{rate:.6f}"``, as the reference prints them)."""


@dataclass(frozen=True, slots=True)
class InstanceRows:
    """One instance's columns (int64 arrays, one entry per read, in replay order); tiered:
    ``tier_hits`` and ``tier_cached`` (reads x tiers: hit blocks each tier served, blocks
    each tier held right after the read)."""

    timestamp_ns: np.ndarray
    cached: np.ndarray
    cached_all: np.ndarray
    read_blocks: np.ndarray
    local_hits: np.ndarray
    remote_hits: np.ndarray
    input_tokens: np.ndarray
    acc_write: np.ndarray
    block_size: int
    tier_hits: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int64))
    tier_cached: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int64))

    @property
    def reads(self) -> int:
        return len(self.timestamp_ns)

    def acc(self, column: np.ndarray) -> np.ndarray:
        """Running sum of a column."""
        return np.cumsum(column, dtype=np.int64)

    @property
    def hit_tokens(self) -> int:
        """Hit tokens over every read of the instance."""
        return int((self.local_hits.sum() + self.remote_hits.sum()) * self.block_size)

    @property
    def total_input_tokens(self) -> int:
        return int(self.input_tokens.sum())

    @property
    def local_hit_tokens(self) -> int:
        """Hit tokens of blocks marked local over every read of the instance."""
        return int(self.local_hits.sum()) * self.block_size

    @property
    def tier_hit_tokens(self) -> np.ndarray:
        """Hit tokens each tier served over every read (int64, one per tier)."""
        return self.tier_hits.sum(axis=0, dtype=np.int64) * self.block_size


def instance_rows(
    records: ReplayRecords,
    input_lens: np.ndarray,
    rows: np.ndarray,
    inst: int,
    block_size: int,
    tiers: int = 0,
) -> InstanceRows:
    """The reads of instance ``inst`` among ``rows`` (the replay's, all instances, whose
    record column indexes ``records`` and ``input_lens``; its first ``tiers`` tiers'
    columns when tiered). O(reads)."""
    mine = rows[records.insts[rows[:, 0]] == inst] if len(rows) else rows
    rec = mine[:, 0]
    stride = (rows.shape[1] - 6) // 2
    tier_hits = mine[:, 6 : 6 + tiers] if tiers else np.zeros((len(mine), 0), dtype=np.int64)
    tier_cached = (
        mine[:, 6 + stride : 6 + stride + tiers]
        if tiers
        else np.zeros((len(mine), 0), dtype=np.int64)
    )
    return InstanceRows(
        timestamp_ns=records.times[rec],
        cached=mine[:, 3],
        cached_all=mine[:, 4],
        read_blocks=(records.key_off[rec + 1] - records.key_off[rec]),
        local_hits=mine[:, 1],
        remote_hits=mine[:, 2],
        input_tokens=input_lens[rec],
        acc_write=mine[:, 5],
        block_size=block_size,
        tier_hits=tier_hits,
        tier_cached=tier_cached,
    )


def no_rows(block_size: int, tiers: int) -> InstanceRows:
    """An instance's rows when it read nothing."""
    empty = np.zeros(0, dtype=np.int64)
    none = np.zeros((0, tiers), dtype=np.int64)
    return InstanceRows(empty, empty, empty, empty, empty, empty, empty, empty, block_size,
                        none, none)  # fmt: skip


def concat_rows(parts: Sequence[InstanceRows]) -> InstanceRows:
    """One instance's rows from its rows of consecutive batches, in order. O(reads)."""
    first = parts[0]
    if len(parts) == 1:
        return first
    names = ("timestamp_ns", "cached", "cached_all", "read_blocks", "local_hits",
             "remote_hits", "input_tokens", "acc_write", "tier_hits", "tier_cached")  # fmt: skip
    return InstanceRows(
        block_size=first.block_size,
        **{n: np.concatenate([getattr(p, n) for p in parts]) for n in names},
    )


@dataclass(slots=True)
class RowTotals:
    """What the summary needs of an instance's reads when their rows were not kept:
    ``reads``, ``total_input_tokens``, ``hit_tokens`` (``local_hit_tokens`` of them),
    ``tier_hit_tokens`` (per tier)."""

    block_size: int
    reads: int = 0
    total_input_tokens: int = 0
    hit_blocks: int = 0
    local_hit_blocks: int = 0
    tier_hit_blocks: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def add(self, r: InstanceRows) -> None:
        """Count the reads of ``r``."""
        self.reads += r.reads
        self.total_input_tokens += int(r.input_tokens.sum())
        self.hit_blocks += int(r.local_hits.sum() + r.remote_hits.sum())
        self.local_hit_blocks += int(r.local_hits.sum())
        tier = r.tier_hits.sum(axis=0, dtype=np.int64)
        if len(self.tier_hit_blocks) != len(tier):
            self.tier_hit_blocks = np.zeros(len(tier), dtype=np.int64)
        self.tier_hit_blocks += tier

    @property
    def hit_tokens(self) -> int:
        return self.hit_blocks * self.block_size

    @property
    def local_hit_tokens(self) -> int:
        return self.local_hit_blocks * self.block_size

    @property
    def tier_hit_tokens(self) -> np.ndarray:
        return self.tier_hit_blocks * self.block_size


@dataclass(slots=True)
class Running:
    """The ``Acc*`` sums of an instance's CSV so far (what the next rows start from):
    read blocks, hit blocks, input/local/remote/hit tokens, per tier the hit tokens."""

    read_blocks: int = 0
    hits: int = 0
    input_tokens: int = 0
    local_tokens: int = 0
    remote_tokens: int = 0
    hit_tokens: int = 0
    tier_tokens: list[int] = field(default_factory=list)


def _rates(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """``num / den`` per read (float64; 0 where ``den`` is 0)."""
    out = np.zeros(len(num), dtype=np.float64)
    np.divide(num, den, out=out, where=den > 0)
    return out


TIER_GROUPS = ("Tier{i}({n})_HitTokens", "Tier{i}({n})_HitRate", "AccTier{i}({n})_HitRate",
               "Tier{i}({n})_BlockNum")  # fmt: skip
"""The per-tier columns (spec §6, the reference's order): four groups, each over the tiers
in priority order -- every tier's hit tokens, then every hit rate, every running hit rate,
and every tier's blocks held right after the read (they sum to ``CachedBlocks``)."""


def tier_header(names: Sequence[str]) -> str:
    """The per-tier columns of the header (spec §6, :data:`TIER_GROUPS`), tier 0 first;
    '' untiered."""
    return "".join(
        "," + group.format(i=i, n=n) for group in TIER_GROUPS for i, n in enumerate(names)
    )


def csv_header(tier_names: Sequence[str] = ()) -> str:
    """The CSV's first line (with ``\\n``)."""
    return HEADER + tier_header(tier_names) + "\n"


def format_csv(r: InstanceRows, tier_names: Sequence[str] = ()) -> str:
    """The whole CSV text (header and rows, ``\\n`` line ends); ``tier_names`` (one per
    column of ``r.tier_hits``) add the per-tier columns. O(reads)."""
    return csv_header(tier_names) + csv_lines(r, tier_names, Running())


def _acc(column: np.ndarray, start: int) -> np.ndarray:
    out = np.cumsum(column, dtype=np.int64)
    if start:
        out += start
    return out


def row_columns(
    r: InstanceRows, tier_names: Sequence[str], running: Running
) -> tuple[list[np.ndarray], list[int]]:
    """The columns of ``r``'s rows in the header's order (int64, or float64 rates) and per
    column its decimals in a CSV (0: an integer), the ``Acc*`` columns continuing from
    ``running``, which is advanced past them (a table written batch by batch is the table
    of the whole). O(reads)."""
    bs = r.block_size
    hits = r.local_hits + r.remote_hits
    local_t, remote_t, hit_t = r.local_hits * bs, r.remote_hits * bs, hits * bs
    acc_in = _acc(r.input_tokens, running.input_tokens)
    acc_local = _acc(local_t, running.local_tokens)
    acc_remote = _acc(remote_t, running.remote_tokens)
    acc_hit = _acc(hit_t, running.hit_tokens)
    acc_read = _acc(r.read_blocks, running.read_blocks)
    acc_hits = _acc(hits, running.hits)
    columns: list[np.ndarray] = [
        r.timestamp_ns, r.cached, r.cached_all, r.read_blocks, r.local_hits, r.remote_hits,
        hits, r.input_tokens, local_t, remote_t, hit_t,
        _rates(local_t, r.input_tokens), _rates(remote_t, r.input_tokens),
        _rates(hit_t, r.input_tokens),
        acc_read, acc_hits, acc_in, acc_local, acc_remote, acc_hit,
        _rates(acc_local, acc_in), _rates(acc_remote, acc_in), _rates(acc_hit, acc_in),
        r.acc_write,
    ]  # fmt: skip
    decimals = [0] * 11 + [RATE_DIGITS] * 3 + [0] * 6 + [RATE_DIGITS] * 3 + [0]
    while len(running.tier_tokens) < len(tier_names):
        running.tier_tokens.append(0)
    groups: list[list[np.ndarray]] = [[], [], [], []]  # TIER_GROUPS
    for tier in range(len(tier_names)):
        tier_t = r.tier_hits[:, tier] * bs
        acc_tier = _acc(tier_t, running.tier_tokens[tier])
        groups[0].append(tier_t)
        groups[1].append(_rates(tier_t, r.input_tokens))
        groups[2].append(_rates(acc_tier, acc_in))
        groups[3].append(r.tier_cached[:, tier])
        if len(acc_tier):
            running.tier_tokens[tier] = int(acc_tier[-1])
    for group, digits in zip(groups, (0, RATE_DIGITS, RATE_DIGITS, 0), strict=True):
        columns += group
        decimals += [digits] * len(group)
    if r.reads:
        running.read_blocks, running.hits = int(acc_read[-1]), int(acc_hits[-1])
        running.input_tokens, running.hit_tokens = int(acc_in[-1]), int(acc_hit[-1])
        running.local_tokens, running.remote_tokens = int(acc_local[-1]), int(acc_remote[-1])
    return columns, decimals


def csv_lines(r: InstanceRows, tier_names: Sequence[str], running: Running) -> str:
    """The CSV lines of ``r`` (each ending ``\\n``; :func:`row_columns`, ``running``
    advanced). O(reads), one compiled call (:func:`~..offline.text_columns.table_text`)."""
    return table_text(*row_columns(r, tier_names, running))


def column_names(tier_names: Sequence[str] = ()) -> list[str]:
    """The columns' names, as the CSV header writes them."""
    return (HEADER + tier_header(tier_names)).split(",")
