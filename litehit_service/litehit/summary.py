"""What a replay did: :class:`ReplaySummary` (its text lines and ``--json`` object), and
for a sampled replay (``--sample-rate``, issue 37) :class:`SampledEstimates`.

A sampled replay's estimates are read back from its ledgers, one per seed, through the
same curves as ``litehit curve`` (:func:`~litehit_service.litehit.curve.ledger_curves`):
per instance and configured capacity, each seed's estimated hit tokens, pooled as hit
tokens over input tokens summed over the seeds, with a 90 % band from the seeds' spread
(Student's t; :class:`~litehit_core.sampled_facts.Estimate`, as ``optimize
--sample-rate`` reports).
Cost: one read of each seed's ledger (O(rows)).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from litehit_core.curve import InstanceCurve
from litehit_core.lines import DEFAULT_MAX_LINE_BYTES
from litehit_core.sampled_facts import Estimate
from litehit_service.litehit.curve import sampled_curves
from litehit_service.model import CapacitySummary, InstanceSummary
from litehit_service.offline.outputs import run_line

__all__ = ["ReplaySummary", "SampledEstimates"]


@dataclass(frozen=True, slots=True)
class SampledEstimates:
    """A sampled replay's ledgers (``paths``, seed order) at ``rate`` and per seed its
    estimated curves by instance id."""

    rate: float
    paths: tuple[str, ...]
    curves: tuple[dict[str, InstanceCurve], ...]
    unit: str = "block"
    """What the samples kept: ``"block"`` or ``"subtree"`` (whole requests)."""
    coarse: dict[str, int] | None = None
    """Per instance the capacity (its curve's unit) below which an estimate is coarse,
    the largest over the seeds (:func:`~litehit_service.litehit.curve.sampled_curves`)."""

    @classmethod
    def read(
        cls, rate: float, paths: Sequence[str], max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    ) -> SampledEstimates:
        """Read every seed's ledger back into its estimated curves. O(rows)."""
        curves = []
        unit = "block"
        coarse: dict[str, int] = {}
        for path in paths:
            sample, found, below = sampled_curves(path, max_line_bytes=max_line_bytes)
            unit = sample.unit if sample is not None else unit
            curves.append({c.instance_id: c for c in found})
            for iid, cap in below.items():
                coarse[iid] = max(cap, coarse.get(iid, 0))
        return cls(rate, tuple(paths), tuple(curves), unit, coarse)

    def is_coarse(self, instance_id: str, capacity: CapacitySummary) -> bool:
        """Whether the estimate at a configured ``capacity`` is coarse (the sample's
        cache holds fewer than 200 of the trace's average requests: it reads low). O(1)."""
        below = (self.coarse or {}).get(instance_id, 0)
        by_id = self.curves[0] if self.curves else {}
        cur = by_id.get(instance_id)
        return cur is not None and self._capacity(cur, capacity) < below

    def _capacity(self, cur: InstanceCurve, c: CapacitySummary) -> int:
        """A configured capacity in ``cur``'s unit (bytes for a hybrid curve)."""
        return c.capacity_blocks if cur.unit == "blocks" else cur.units_for_gb(c.capacity_gb)

    def estimate(self, instance_id: str, capacity: CapacitySummary | None) -> Estimate:
        """The estimate at a configured ``capacity`` of the whole trace (None: infinite)
        over the seeds (an instance without requests: 0 of 0). O(seeds log B)."""
        hits, inputs = [], []
        for by_id in self.curves:
            cur = by_id.get(instance_id)
            if cur is None:
                hits.append(0)
                inputs.append(0)
                continue
            units = -1 if capacity is None else self._capacity(cur, capacity)
            hits.append(cur.hit_tokens_at(units))
            inputs.append(cur.input_tokens)
        return Estimate(tuple(hits), tuple(inputs))

    def lines(self, summaries: Sequence[InstanceSummary]) -> list[str]:
        """The text: a head line naming the sample, then per instance its estimates at
        every configured capacity and infinite (``≈``, the band with K > 1)."""
        k = len(self.paths)
        by = ", whole requests by subtree" if self.unit == "subtree" else ""
        out = [
            f"sampled replay: R = {self.rate:g}, {k} seed{'s' if k != 1 else ''}{by} (estimates "
            "of the whole trace's hit rates; the band is a 90% interval from the seeds' spread)"
        ]
        if any(self.is_coarse(s.instance_id, c) for s in summaries for c in s.capacity_summaries):
            out.append(
                "  coarse: the sample's cache holds fewer than 200 of the trace's average "
                "requests, where an estimate reads low; a larger --sample-rate mends it"
            )
        for s in summaries:
            rates = [
                f"{_gb(c.capacity_gb)} GiB {self.estimate(s.instance_id, c).text()}"
                + (" coarse" if self.is_coarse(s.instance_id, c) else "")
                for c in s.capacity_summaries
            ]
            rates.append(f"inf {self.estimate(s.instance_id, None).text()}")
            out.append(
                f"  {s.instance_id} (group {s.instance_group}, block {s.debug_info.block_size} "
                f"tokens, {s.total_queries} requests): token hit rate {'; '.join(rates)}"
            )
        return out

    def instance_json(self, s: InstanceSummary) -> dict[str, Any]:
        """One instance's ``--json`` entry: as an exact replay's, with per capacity (and
        for infinite) the estimate ``hit_rate``, its band ``hit_rate_low`` and
        ``hit_rate_high``, ``hit_rate_per_seed``, ``hit_tokens_per_seed`` and ``coarse``
        (:meth:`is_coarse`)."""
        iid = s.instance_id
        caps = []
        for c in s.capacity_summaries:
            est = self.estimate(iid, c)
            caps.append(
                {"capacity_gb": _whole(c.capacity_gb), "capacity_blocks": c.capacity_blocks}
                | _estimate_json(est)
                | {"coarse": self.is_coarse(iid, c)}
            )
        inf = self.estimate(iid, None)
        return {
            "instance_id": iid,
            "instance_group": s.instance_group,
            "block_size": s.debug_info.block_size,
            "requests": s.total_queries,
            "input_tokens": s.total_input_tokens,
            "estimate": True,
            "capacities": caps,
            "theoretical": _estimate_json(inf),
        }


def _estimate_json(est: Estimate) -> dict[str, Any]:
    return {
        "hit_rate": est.rate,
        "hit_rate_low": est.low,
        "hit_rate_high": est.high,
        "hit_rate_per_seed": est.per_seed,
        "hit_tokens_per_seed": list(est.hits),
    }


@dataclass(frozen=True, slots=True)
class ReplaySummary:
    """What one replay did.

    ``requests``: request events replayed (writes excluded); ``rows``: facts rows written
    (requests x routed instances); ``instances``: configured instances; ``elapsed_s``: wall
    time of the whole run (setup, parsing, replay, writing); ``requests_per_s`` =
    requests / elapsed_s; ``instance_summaries``: the manager's cumulative counters per
    instance (sorted by id), holding the token hit rate of every capacity slot.
    """

    requests: int
    rows: int
    writes_skipped: int
    instances: int
    elapsed_s: float
    requests_per_s: float
    facts_path: str
    instance_summaries: tuple[InstanceSummary, ...]
    sampled: SampledEstimates | None = None
    """A sampled replay's estimates, read back from its ledgers (one per seed;
    ``facts_path`` is the first); None for an exact replay. The manager's
    ``instance_summaries`` of a sampled replay count the sample's blocks: only the
    estimates are shown."""

    def summary_line(self) -> str:
        """The one-line summary: requests, instances, rows, elapsed, requests/s, facts path
        (a sampled replay's: its first seed's, and how many more)."""
        parts = f"{self.instances} instances, {self.rows} rows"
        dest = self.facts_path
        if self.sampled is not None and len(self.sampled.paths) > 1:
            dest += f" and {len(self.sampled.paths) - 1} more seed(s)"
        return run_line("replay", self.requests, "requests", parts, self.elapsed_s, dest)

    def instance_lines(self) -> list[str]:
        """One line per instance: its token hit rate at every capacity slot (and infinite);
        a sampled replay's: a head line naming the sample, then the estimates with ``≈``."""
        if self.sampled is not None:
            return self.sampled.lines(self.instance_summaries)
        out = []
        for s in self.instance_summaries:
            rates = [f"{_gb(c.capacity_gb)} GiB {c.hit_rate:.2%}" for c in s.capacity_summaries]
            if s.theoretical_enabled:
                rates.append(f"inf {s.max_hit_rate:.2%}")
            out.append(
                f"  {s.instance_id} (group {s.instance_group}, block {s.debug_info.block_size} "
                f"tokens, {s.total_queries} requests): token hit rate {', '.join(rates)}"
            )
        return out

    def to_json(self) -> dict[str, Any]:
        """The summary as one JSON-ready object (``litehit replay --json``): the totals
        (``requests``, ``rows``, ``writes_skipped``), ``elapsed_s``, ``requests_per_s``,
        ``facts_path`` and per instance (sorted by id) ``instance_id``, ``instance_group``,
        ``block_size`` (tokens), ``requests``, ``input_tokens``, one entry per configured
        capacity (``capacity_gb``, ``capacity_blocks``, ``hit_blocks``, ``hit_tokens``,
        ``hit_rate``) and the theoretical maximum's ``theoretical_hit_tokens`` and
        ``theoretical_hit_rate`` (both null when the group does not track it). Counts are
        ints; ``capacity_gb`` is an int when it is a whole number of GiB. A sampled replay
        adds ``sample_rate``, ``sample_seeds``, ``sample_unit``, ``facts_paths`` and
        ``estimate: true``, and per capacity gives the estimate
        (:meth:`SampledEstimates.instance_json`). O(slots)."""
        if self.sampled is not None:
            instances = [self.sampled.instance_json(s) for s in self.instance_summaries]
        else:
            instances = [_instance_json(s) for s in self.instance_summaries]
        head: dict[str, Any] = {}
        if self.sampled is not None:
            head = {
                "estimate": True,
                "sample_rate": self.sampled.rate,
                "sample_seeds": len(self.sampled.paths),
                "sample_unit": self.sampled.unit,
                "facts_paths": list(self.sampled.paths),
            }
        return head | {
            "requests": self.requests,
            "rows": self.rows,
            "writes_skipped": self.writes_skipped,
            "elapsed_s": self.elapsed_s,
            "requests_per_s": self.requests_per_s,
            "facts_path": self.facts_path,
            "instances": instances,
        }


def _instance_json(s: InstanceSummary) -> dict[str, Any]:
    bs = s.debug_info.block_size
    theoretical = s.theoretical_enabled
    return {
        "instance_id": s.instance_id,
        "instance_group": s.instance_group,
        "block_size": bs,
        "requests": s.total_queries,
        "input_tokens": s.total_input_tokens,
        "capacities": [
            {
                "capacity_gb": _whole(c.capacity_gb),
                "capacity_blocks": c.capacity_blocks,
                "hit_blocks": c.total_hits,
                "hit_tokens": c.total_hits * bs,
                "hit_rate": c.hit_rate,
            }
            for c in s.capacity_summaries
        ],
        "theoretical_hit_tokens": s.total_max_hits * bs if theoretical else None,
        "theoretical_hit_rate": s.max_hit_rate if theoretical else None,
    }


def _whole(value: float) -> int | float:
    """``value`` as an int when it is a whole number (16.0 GiB -> 16), else unchanged."""
    return int(value) if float(value).is_integer() else value


def _gb(value: float) -> str:
    return f"{value:g}"
