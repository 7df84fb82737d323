"""Shared benchmark helpers: the default trace, loading it, log-spaced capacities."""

from __future__ import annotations

from pathlib import Path

from litehit_service.offline.traces import read_mooncake

SHARED = Path(__file__).resolve().parents[2] / "shared"
DEFAULT_TRACE = SHARED / "traces/mooncake/conversation_trace.jsonl"


def load_mooncake(path: Path, block_size: int = 512) -> list[tuple[list[int], int]]:
    """``[(keys, input_length), ...]`` through the project's Mooncake reader (complete
    blocks only: ``input_length // block_size`` keys)."""
    return [(event.keys, event.input_len) for event in read_mooncake(path, block_size)]


def log_capacities(max_blocks: int, k: int, lowest: int = 1) -> list[int]:
    """k distinct log-spaced capacities (blocks) from ``lowest`` to ``max_blocks``."""
    caps: list[int] = []
    ratio = max_blocks / lowest
    for i in range(k):
        c = max(lowest, round(lowest * ratio ** (i / (k - 1))))
        caps.append(max(c, caps[-1] + 1) if caps else c)
    return caps
