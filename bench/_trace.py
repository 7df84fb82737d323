"""Load a Mooncake FAST'25 trace for benchmarks (keys of complete 512-token blocks)."""

from __future__ import annotations

import json
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared"
DEFAULT_TRACE = SHARED / "traces/mooncake/conversation_trace.jsonl"


def load_mooncake(path: Path, block_size: int = 512) -> list[tuple[list[int], int]]:
    """Return ``[(keys, input_length), ...]`` keeping ``input_length // block_size`` keys."""
    out = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                rec = json.loads(line)
                n = rec["input_length"]
                out.append((rec["hash_ids"][: n // block_size], n))
    return out
