"""Instance lanes of an offline replay, run as Ray tasks (``litehit replay --executor ray``).

Instances are independent: each instance's requests form one sequential replay (a *lane*)
through its own engine, and nothing one lane does changes another. So the driver parses
and routes the trace exactly as the local replay does (the same :func:`_routed` rule), hands
each lane its requests as one Ray task (:func:`replay_lane`: a fresh
:class:`~litehit_service.manager.OnlineOptimizerManager` under the same offline policy,
with that instance's group and registration), and writes the rows back in trace order:
the ledger is byte-identical to the local run's. What scales: instances (one task each, on
any node of the cluster). What does not: one instance is one sequential lane.

Errors are the local run's: each lane stops at its first failing request and reports it;
the driver raises the earliest (by line, then lane order) unless the parse or routing
stopped earlier. Cost: the driver holds the routed requests of the whole trace (O(trace));
each task O(its requests) plus its engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from litehit_core import FactLineFormat, LocatedError
from litehit_service.errors import OptimizerError
from litehit_service.manager import BatchQueryError, OnlineOptimizerManager
from litehit_service.model import InstanceSummary
from litehit_service.offline.pool import RAY_MISSING, start_ray
from litehit_service.policy import QueryPolicy

__all__ = [
    "LANE_CHUNK",
    "RAY_MISSING",
    "LaneRequest",
    "LaneResult",
    "LaneSpec",
    "first_error",
    "replay_lane",
    "run_lanes",
]

# (row index in the ledger, line_no, trace_id, timestamp_ns, keys, input_len)
LaneRequest = tuple[int, int, str, int, Sequence[int], int]


LANE_CHUNK = 4096
"""Requests a compact-engine lane replays in one compiled call."""


class LaneSpec(NamedTuple):
    """What a lane's task needs: the offline policy's trace block size, the instance's
    group and registration (as the replay config holds them), and its ledger line format
    (instance id, block size, block bytes, model column or None), and the full-attention
    engine implementation (:data:`~litehit_core.engine.LRU_ENGINES`)."""

    trace_block_size: int
    group: Any
    registration: Any
    line_format: tuple[str, int, int, str | None]
    lru_engine: str = "python"


class LaneResult(NamedTuple):
    """A lane's rows (ledger index, text) up to its first error, that error as ``(line_no,
    message)`` or None, and its instance's summary."""

    rows: list[tuple[int, str]]
    error: tuple[int, str] | None
    summary: InstanceSummary


def replay_lane(spec: LaneSpec, requests: Sequence[LaneRequest]) -> LaneResult:
    """Replay one instance's requests in order through a fresh manager (what a Ray task
    runs; plain Python, testable without Ray). O(requests x query cost)."""
    manager = OnlineOptimizerManager(
        policy=QueryPolicy.offline(spec.trace_block_size), lru_engine=spec.lru_engine
    )
    manager.create_group(spec.group)
    manager.register_instance(spec.registration)
    instance_id = spec.line_format[0]
    line = FactLineFormat(*spec.line_format).line
    rows: list[tuple[int, str]] = []
    append = rows.append
    error = None
    if manager.batched(instance_id):  # one compiled replay per chunk, as the local drive
        for start in range(0, len(requests), LANE_CHUNK):
            chunk = requests[start : start + LANE_CHUNK]
            try:
                answers = manager.record_batch(instance_id, [(r[4], r[5], r[3]) for r in chunk])
            except BatchQueryError as exc:  # the requests before it, then its error
                chunk = chunk[: exc.index]
                answers = manager.record_batch(instance_id, [(r[4], r[5], r[3]) for r in chunk])
                error = (requests[start + exc.index][1], str(exc.error))
            for (index, _, tid, ts, _, _), fact, tokens in zip(chunk, *answers, strict=True):
                append((index, line(tid, ts, tokens, fact.hit_curve)))
            if error is not None:
                break
    else:
        record = manager.record_query
        for index, line_no, tid, ts, keys, input_len in requests:
            try:
                fact, tokens = record(instance_id, keys, input_len, ts)
            except OptimizerError as exc:
                error = (line_no, str(exc))
                break
            append((index, line(tid, ts, tokens, fact.hit_curve)))
    (summary,) = manager.list_instances()
    return LaneResult(rows, error, summary)


def run_lanes(
    specs: dict[str, LaneSpec],
    work: dict[str, list[LaneRequest]],
    address: str | None,
) -> dict[str, LaneResult]:
    """Every lane with requests as one Ray task; results by instance id. Connects to the
    cluster at ``address`` or, without one, starts a local Ray (stopped again at the end);
    an already initialised Ray is used as it is. RuntimeError naming the install command
    when Ray is absent."""
    ray, started = start_ray(address)
    try:
        task = ray.remote(replay_lane)
        futures = {iid: task.remote(specs[iid], reqs) for iid, reqs in work.items() if reqs}
        return dict(zip(futures, ray.get(list(futures.values())), strict=True))
    finally:
        if started:
            ray.shutdown()


def first_error(
    results: dict[str, LaneResult], lane_order: Sequence[str], path: str
) -> LocatedError | None:
    """The error the local replay would raise first among the lanes' errors: the smallest
    line, then the first lane in routing order. O(lanes)."""
    found = [
        (result.error[0], lane_order.index(iid), result.error[1])
        for iid, result in results.items()
        if result.error is not None
    ]
    if not found:
        return None
    line_no, _, message = min(found)
    return LocatedError(path, line_no, message)
