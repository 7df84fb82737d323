"""Facts queries: project a ledger at a list of capacities (GiB), exactly.

Output shapes (dicts, JSON-ready), in this order:

- one row per request: ``trace_id, instance_id, timestamp_ns, input_token_len,
  hit_blocks[...], hit_rates[...]`` (one entry per requested slot);
- one summary per instance, lexicographic ``instance_id`` order: ``summary: true,
  instance_id, requests, total_input_tokens, capacity_gb[...], total_hit_blocks[...],
  total_hit_tokens[...], hit_rates[...]``;
- one total row: the same without ``instance_id``.

The JSON-lines text of these shapes has one formatter: :func:`format_chunk_lines` for the
request rows (whole numpy matrices serialised at once) and :func:`format_summary_lines`
for the summaries; parsed back, the lines equal the dicts :func:`query_facts` yields.

Slots keep the caller's order; duplicates and 0 are allowed; -1 means infinite (the one
marker: any other negative value, NaN or an infinity is an :class:`InvalidRequestError`,
see :func:`~litehit_core.projector.capacity_slot_bytes`). Rates are ``hit_tokens /
input_tokens`` of accumulated integers (0 when there are no tokens), never means of ratios.
Rows are projected in chunks with numpy (vectorised over segments x slots); memory is
O(chunk + instances x slots).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from typing import Any, NamedTuple

import numpy as np
import orjson

from litehit_core.engine import FACT_MODELS
from litehit_core.facts import FactRow
from litehit_core.model import InvalidRequestError
from litehit_core.projector import capacity_slot_bytes, project_matrix, project_steps_matrix

CHUNK_ROWS = 4096


def _slot_bytes(capacity_gb_list: Sequence[float]) -> list[int]:
    """Bytes per slot (-1 = infinite), each checked by :func:`capacity_slot_bytes`."""
    if not capacity_gb_list:
        raise InvalidRequestError("capacity_gb must list at least one capacity, got []")
    return [capacity_slot_bytes(gb, f"capacity_gb[{i}]") for i, gb in enumerate(capacity_gb_list)]


class QueryChunk(NamedTuple):
    """One chunk of projected rows: ``hit_blocks`` (int64) and ``hit_rates`` (float64) are
    (rows x slots) matrices aligned with ``rows``."""

    rows: list[FactRow]
    hit_blocks: np.ndarray
    hit_rates: np.ndarray


class FactsQuery:
    """Projects facts at a fixed list of capacity slots, chunk by chunk, and accumulates
    the per-instance and total summaries (integers; rates only at the end).

    :func:`query_facts` renders it as dicts; ``litehit query`` renders the same chunks as
    JSON text in bulk. Memory: O(chunk + instances x slots).
    """

    def __init__(self, capacity_gb_list: Sequence[float], chunk_rows: int = CHUNK_ROWS) -> None:
        self.capacity_gb = list(capacity_gb_list)
        self._slot_bytes = _slot_bytes(self.capacity_gb)
        self._chunk_rows = max(1, chunk_rows)
        n_slots = len(self._slot_bytes)
        self._index: dict[str, int] = {}  # instance_id -> row of the accumulators
        self._requests = np.zeros(0, dtype=np.int64)
        self._tokens = np.zeros(0, dtype=np.int64)
        self._hit_blocks = np.zeros((0, n_slots), dtype=np.int64)
        self._hit_tokens = np.zeros((0, n_slots), dtype=np.int64)

    def chunks(self, rows: Iterable[FactRow]) -> Iterator[QueryChunk]:
        """Project ``rows`` chunk by chunk (and add them to the summaries).

        O(segments x slots) numpy work and O(rows) Python work per chunk.
        """
        slot_bytes = self._slot_bytes
        index = self._index
        rows_iter = iter(rows)
        while True:
            chunk = list(islice(rows_iter, self._chunk_rows))
            if not chunk:
                return
            n = len(chunk)
            hits = _project_rows(chunk, slot_bytes)
            bs = np.fromiter((r.block_size_tokens for r in chunk), dtype=np.int64, count=n)
            tokens = np.fromiter((r.input_token_len for r in chunk), dtype=np.int64, count=n)
            hit_tokens = hits * bs[:, None]
            rates = hit_tokens / np.maximum(tokens, 1)[:, None]  # 0 hits when 0 tokens
            setdefault = index.setdefault
            codes = np.fromiter(
                (setdefault(r.instance_id, len(index)) for r in chunk), dtype=np.int64, count=n
            )
            self._grow(len(index))
            np.add.at(self._requests, codes, 1)
            np.add.at(self._tokens, codes, tokens)
            np.add.at(self._hit_blocks, codes, hits)
            np.add.at(self._hit_tokens, codes, hit_tokens)
            yield QueryChunk(chunk, hits, rates)

    def _grow(self, n_instances: int) -> None:
        extra = n_instances - len(self._requests)
        if extra > 0:
            n_slots = self._hit_blocks.shape[1]
            self._requests = np.concatenate([self._requests, np.zeros(extra, np.int64)])
            self._tokens = np.concatenate([self._tokens, np.zeros(extra, np.int64)])
            self._hit_blocks = np.vstack([self._hit_blocks, np.zeros((extra, n_slots), np.int64)])
            self._hit_tokens = np.vstack([self._hit_tokens, np.zeros((extra, n_slots), np.int64)])

    def summaries(self) -> list[dict[str, Any]]:
        """One summary per instance (lexicographic instance_id), then the total. O(i x s)."""
        out = [self._summary(self._index[iid], iid) for iid in sorted(self._index)]
        out.append(self._summary(None, None))
        return out

    def _summary(self, i: int | None, instance_id: str | None) -> dict[str, Any]:
        if i is None:
            requests = int(self._requests.sum())
            tokens = int(self._tokens.sum())
            hit_blocks = self._hit_blocks.sum(axis=0).tolist()
            hit_tokens = self._hit_tokens.sum(axis=0).tolist()
        else:
            requests = int(self._requests[i])
            tokens = int(self._tokens[i])
            hit_blocks = self._hit_blocks[i].tolist()
            hit_tokens = self._hit_tokens[i].tolist()
        out: dict[str, Any] = {"summary": True}
        if instance_id is not None:
            out["instance_id"] = instance_id
        out.update(
            requests=requests,
            total_input_tokens=tokens,
            capacity_gb=list(self.capacity_gb),
            total_hit_blocks=hit_blocks,
            total_hit_tokens=hit_tokens,
            hit_rates=[h / tokens if tokens else 0.0 for h in hit_tokens],
        )
        return out


def _project_rows(rows: list[FactRow], slot_bytes: list[int]) -> np.ndarray:
    """Hit blocks of every row at every slot (bytes; -1 = infinite), each row read as
    its model says (:data:`~litehit_core.model.FACT_MODELS`): ramps in blocks through
    :func:`project_matrix`, staircases through :func:`project_steps_matrix` (bytes as they
    are, or whole blocks). O(segments x slots) numpy work."""
    ramps = [i for i, r in enumerate(rows) if FACT_MODELS[r.model].curve == "ramps"]
    if len(ramps) == len(rows):
        return project_matrix(
            [r.hit_curve for r in rows], [r.block_bytes for r in rows], slot_bytes
        )
    hits = np.zeros((len(rows), len(slot_bytes)), dtype=np.int64)
    if ramps:
        picked = [rows[i] for i in ramps]
        hits[ramps] = project_matrix(
            [r.hit_curve for r in picked], [r.block_bytes for r in picked], slot_bytes
        )
    steps = [i for i, r in enumerate(rows) if FACT_MODELS[r.model].curve == "steps"]
    picked = [rows[i] for i in steps]
    units = [1 if FACT_MODELS[r.model].unit == "bytes" else r.block_bytes for r in picked]
    hits[steps] = project_steps_matrix([r.hit_curve for r in picked], units, slot_bytes)
    return hits


def query_facts(
    rows: Iterable[FactRow], capacity_gb_list: Sequence[float], chunk_rows: int = CHUNK_ROWS
) -> Iterator[dict[str, Any]]:
    """Project every row at every slot; yield request rows, per-instance summaries, total.

    Cost: O(rows x slots) output plus O(segments x slots) vectorised work. Errors in the
    capacity list raise :class:`InvalidRequestError` before anything is yielded.
    """
    query = FactsQuery(capacity_gb_list, chunk_rows)
    return _query_rows(query, rows)


def _query_rows(query: FactsQuery, rows: Iterable[FactRow]) -> Iterator[dict[str, Any]]:
    for chunk in query.chunks(rows):
        hits_l = chunk.hit_blocks.tolist()
        rates_l = chunk.hit_rates.tolist()
        for i, row in enumerate(chunk.rows):
            yield {
                "trace_id": row.trace_id,
                "instance_id": row.instance_id,
                "timestamp_ns": row.timestamp_ns,
                "input_token_len": row.input_token_len,
                "hit_blocks": hits_l[i],
                "hit_rates": rates_l[i],
            }
    yield from query.summaries()


_NUMPY = orjson.OPT_SERIALIZE_NUMPY


def format_chunk_lines(chunk: QueryChunk) -> bytes:
    """A chunk's request rows as compact JSON lines (the ``litehit query`` output).

    Each line parses back to the row dict :func:`query_facts` yields for it (orjson floats:
    shortest round trip). The two matrices are serialised in bulk (C speed) and split into
    rows; per row only the ids and two ints are formatted. O(rows x slots).
    """
    dumps = orjson.dumps
    hits = dumps(chunk.hit_blocks, option=_NUMPY)[2:-2].split(b"],[")
    rates = dumps(chunk.hit_rates, option=_NUMPY)[2:-2].split(b"],[")
    ids: dict[str, bytes] = {}
    lines = []
    append = lines.append
    for row, h, r in zip(chunk.rows, hits, rates, strict=True):
        iid = ids.get(row.instance_id)
        if iid is None:
            iid = ids[row.instance_id] = dumps(row.instance_id)
        append(
            b'{"trace_id":%b,"instance_id":%b,"timestamp_ns":%d,"input_token_len":%d,'
            b'"hit_blocks":[%b],"hit_rates":[%b]}\n'
            % (dumps(row.trace_id), iid, row.timestamp_ns, row.input_token_len, h, r)
        )
    return b"".join(lines)


def format_summary_lines(summaries: Iterable[dict[str, Any]]) -> bytes:
    """Summary dicts (:meth:`FactsQuery.summaries`) as compact JSON lines. O(size)."""
    return b"".join(orjson.dumps(row) + b"\n" for row in summaries)
