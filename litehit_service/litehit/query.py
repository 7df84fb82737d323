"""``litehit query``'s work: project a facts ledger at a list of capacities into JSON lines.

All or nothing: the output goes to ``<OUT>.<pid>.tmp`` (or, for stdout, a spooled temporary
buffer) and is published only after the last row was read and projected, so a malformed
row anywhere fails the whole query and publishes nothing. The core formats the lines
(:func:`litehit_core.query.format_chunk_lines` and ``format_summary_lines``).
Cost: O(rows x slots) time, O(chunk + instances x slots) memory (plus the output for stdout).

A sampled ledger (``litehit replay --sample-rate``) gives only the summaries, as estimates
(:func:`sampled_summaries`): its per-request rows are the sample's, of no request of the
whole trace.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import IO, Any

from litehit_core import FactRow, FactsQuery, read_facts
from litehit_core.curve import InstanceCurve
from litehit_core.facts import LedgerSample
from litehit_core.lines import DEFAULT_MAX_LINE_BYTES
from litehit_core.projector import capacity_slot_bytes
from litehit_core.query import format_chunk_lines, format_summary_lines
from litehit_service.litehit.curve import ledger_curves, read_sample
from litehit_service.offline.outputs import atomic_outputs, progress, run_line

SPOOL_BYTES = 64 * 1024 * 1024
"""Stdout output is buffered in memory up to this size, then in a temporary file."""


@dataclass(frozen=True, slots=True)
class QuerySummary:
    """What one query did: ``requests`` rows projected over ``instances`` instances."""

    requests: int
    instances: int
    elapsed_s: float
    destination: str

    def line(self) -> str:
        """The one-line summary printed on stderr."""
        parts = f"{self.instances} instances"
        return run_line("query", self.requests, "requests", parts, self.elapsed_s, self.destination)


def write_query(
    query: FactsQuery, rows: Iterable[FactRow], out: IO[bytes], summary_only: bool = False
) -> tuple[int, int]:
    """Write every line of ``query`` over ``rows`` to ``out``; returns (requests, instances)."""
    for chunk in query.chunks(rows):
        if not summary_only:
            out.write(format_chunk_lines(chunk))
    summaries = query.summaries()
    out.write(format_summary_lines(summaries))
    return summaries[-1]["requests"], len(summaries) - 1


def sampled_summaries(
    sample: LedgerSample, curves: Sequence[InstanceCurve], capacity_gb: Sequence[float]
) -> list[dict[str, Any]]:
    """The summaries of a sampled ledger's estimated ``curves`` at ``capacity_gb`` (-1 =
    infinite): per instance then the total, as :meth:`~litehit_core.FactsQuery.summaries`
    shapes them (without ``total_hit_blocks``) plus ``estimate: true``, ``sample_rate``,
    ``sample_seed`` and ``sample_unit`` (``block`` or ``subtree``); hit tokens are the
    estimates, rounded; the total sums them.
    O(instances x slots x log B)."""
    slot_bytes = [capacity_slot_bytes(gb, f"capacity_gb[{i}]") for i, gb in enumerate(capacity_gb)]
    head = {"summary": True, "estimate": True, "sample_rate": sample.rate,
            "sample_seed": sample.seed, "sample_unit": sample.unit}  # fmt: skip
    out: list[dict[str, Any]] = []
    requests = tokens = 0
    totals = [0] * len(slot_bytes)
    for cur in curves:
        hits = [cur.hit_tokens_at(cur.units_for_bytes(b)) for b in slot_bytes]
        requests += cur.requests
        tokens += cur.input_tokens
        totals = [t + h for t, h in zip(totals, hits, strict=True)]
        out.append(head | {"instance_id": cur.instance_id} | _sums(cur.requests, cur.input_tokens,
                                                                    capacity_gb, hits))  # fmt: skip
    out.append(head | _sums(requests, tokens, capacity_gb, totals))
    return out


def _sums(requests: int, tokens: int, gbs: Sequence[float], hits: list[int]) -> dict[str, Any]:
    return {
        "requests": requests,
        "total_input_tokens": tokens,
        "capacity_gb": list(gbs),
        "total_hit_tokens": hits,
        "hit_rates": [h / tokens if tokens else 0.0 for h in hits],
    }


def run_query(
    facts_path: str,
    capacity_gb: Sequence[float],
    output: str | None = None,
    *,
    summary_only: bool = False,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> QuerySummary:
    """Project ``facts_path`` at ``capacity_gb`` (GiB; -1 = infinite) into ``output``
    (None: stdout, written only once everything succeeded); a sampled ledger: its
    :func:`sampled_summaries` only. Raises LocatedError (a bad
    row, or a line longer than ``max_line_bytes`` bytes) or InvalidRequestError (the
    capacity list)."""
    started = time.perf_counter()
    query = FactsQuery(capacity_gb)
    sample = read_sample(facts_path)
    if sample is not None:
        _, curves = ledger_curves(facts_path, max_line_bytes=max_line_bytes, counter=[0])
        text = format_summary_lines(sampled_summaries(sample, curves, capacity_gb))
        if output is not None:
            with atomic_outputs([output]) as (tmp,), open(tmp, "wb") as fh:
                fh.write(text)
        else:
            sys.stdout.flush()
            sys.stdout.buffer.write(text)
            sys.stdout.buffer.flush()
        n = sum(c.requests for c in curves)
        return QuerySummary(n, len(curves), time.perf_counter() - started, output or "stdout")
    rows = progress(read_facts(facts_path, max_line_bytes=max_line_bytes), "req")
    if output is not None:
        with atomic_outputs([output]) as (tmp,), open(tmp, "wb") as fh:
            n, instances = write_query(query, rows, fh, summary_only)
    else:
        with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES, mode="w+b") as spool:
            n, instances = write_query(query, rows, spool, summary_only)
            spool.seek(0)
            sys.stdout.flush()
            shutil.copyfileobj(spool, sys.stdout.buffer)
            sys.stdout.buffer.flush()
    return QuerySummary(n, instances, time.perf_counter() - started, output or "stdout")
