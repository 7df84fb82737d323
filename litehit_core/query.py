"""Facts queries: project a ledger at a list of capacities (GiB), exactly.

Output shapes (dicts, JSON-ready), in this order:

- one row per request: ``trace_id, instance_id, timestamp_ns, input_token_len,
  hit_blocks[...], hit_rates[...]`` (one entry per requested slot);
- one summary per instance, lexicographic ``instance_id`` order: ``summary: true,
  instance_id, requests, total_input_tokens, capacity_gb[...], total_hit_blocks[...],
  total_hit_tokens[...], hit_rates[...]``;
- one total row: the same without ``instance_id``.

Slots keep the caller's order; duplicates and 0 are allowed; a negative capacity means
infinite. Rates are ``hit_tokens / input_tokens`` of accumulated integers (0 when there
are no tokens), never means of ratios. Rows are projected in chunks with numpy (vectorised
over segments x slots); memory is O(chunk + instances x slots).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from litehit_core.facts import FactRow
from litehit_core.model import InvalidRequestError
from litehit_core.projector import capacity_gb_to_bytes, project_matrix

CHUNK_ROWS = 4096


def _slot_bytes(capacity_gb_list: Sequence[float]) -> list[int]:
    if not capacity_gb_list:
        raise InvalidRequestError("capacity_gb must list at least one capacity, got []")
    out = []
    for gb in capacity_gb_list:
        if isinstance(gb, bool) or not isinstance(gb, (int, float)) or math.isnan(gb):
            raise InvalidRequestError(f"capacity_gb must be numbers, got {gb!r}")
        out.append(-1 if gb < 0 else capacity_gb_to_bytes(gb))
    return out


class _Totals:
    __slots__ = ("requests", "tokens", "hit_blocks", "hit_tokens")

    def __init__(self, n_slots: int) -> None:
        self.requests = 0
        self.tokens = 0
        self.hit_blocks = np.zeros(n_slots, dtype=np.int64)
        self.hit_tokens = np.zeros(n_slots, dtype=np.int64)

    def row(self, capacity_gb: list[float], instance_id: str | None) -> dict[str, Any]:
        out: dict[str, Any] = {"summary": True}
        if instance_id is not None:
            out["instance_id"] = instance_id
        tokens = self.tokens
        hit_tokens = self.hit_tokens.tolist()
        out.update(
            requests=self.requests,
            total_input_tokens=tokens,
            capacity_gb=list(capacity_gb),
            total_hit_blocks=self.hit_blocks.tolist(),
            total_hit_tokens=hit_tokens,
            hit_rates=[h / tokens if tokens else 0.0 for h in hit_tokens],
        )
        return out


def query_facts(
    rows: Iterable[FactRow], capacity_gb_list: Sequence[float], chunk_rows: int = CHUNK_ROWS
) -> Iterator[dict[str, Any]]:
    """Project every row at every slot; yield request rows, per-instance summaries, total.

    Cost: O(rows x slots) output plus O(segments x slots) vectorised work. Errors in the
    capacity list raise :class:`InvalidRequestError` before anything is yielded.
    """
    capacity_gb = list(capacity_gb_list)
    slot_bytes = _slot_bytes(capacity_gb)
    n_slots = len(slot_bytes)
    per_instance: dict[str, _Totals] = {}
    total = _Totals(n_slots)
    chunk: list[FactRow] = []
    rows_iter = iter(rows)
    while True:
        chunk.clear()
        for row in rows_iter:
            chunk.append(row)
            if len(chunk) >= chunk_rows:
                break
        if not chunk:
            break
        hits = project_matrix(
            [r.hit_curve for r in chunk], [r.block_bytes for r in chunk], slot_bytes
        )
        bs = np.fromiter((r.block_size_tokens for r in chunk), dtype=np.int64, count=len(chunk))
        tokens = np.fromiter((r.input_token_len for r in chunk), dtype=np.int64, count=len(chunk))
        hit_tokens = hits * bs[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            rates = np.where(tokens[:, None] > 0, hit_tokens / np.maximum(tokens, 1)[:, None], 0.0)
        hits_l = hits.tolist()
        rates_l = rates.tolist()
        for i, row in enumerate(chunk):
            yield {
                "trace_id": row.trace_id,
                "instance_id": row.instance_id,
                "timestamp_ns": row.timestamp_ns,
                "input_token_len": row.input_token_len,
                "hit_blocks": hits_l[i],
                "hit_rates": rates_l[i],
            }
        # accumulate per instance (group the chunk's rows by instance)
        ids = [row.instance_id for row in chunk]
        for iid in set(ids):
            mask = np.fromiter((x == iid for x in ids), dtype=bool, count=len(ids))
            acc = per_instance.get(iid)
            if acc is None:
                acc = per_instance[iid] = _Totals(n_slots)
            acc.requests += int(mask.sum())
            acc.tokens += int(tokens[mask].sum())
            acc.hit_blocks += hits[mask].sum(axis=0)
            acc.hit_tokens += hit_tokens[mask].sum(axis=0)
        total.requests += len(chunk)
        total.tokens += int(tokens.sum())
        total.hit_blocks += hits.sum(axis=0)
        total.hit_tokens += hit_tokens.sum(axis=0)
    for iid in sorted(per_instance):
        yield per_instance[iid].row(capacity_gb, iid)
    yield total.row(capacity_gb, None)
