"""The one conversion point between wire messages (pb2) and domain values, and the error table.

Everything that turns a protobuf message into a :mod:`litehit_service.model` value (or back)
lives here -- except the server's side of the packed stream, which reads and writes bytes
without protobuf objects in :mod:`litehit_service.packed_frames` -- as does the single mapping
from exceptions to wire ``ErrorCode`` values. Units are
those of the proto: capacities in GiB, sizes in bytes, ``block_size`` in tokens per block, hit
counts in blocks. Converters are O(size of the message) unless noted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from litehit_core import InvalidRequestError
from litehit_service import messages as pb2
from litehit_service.errors import (
    DuplicateEntity,
    InstanceNotExist,
    InternalError,
    InvalidArgument,
    OptimizerError,
    ReachMaxEntityCapacity,
    RegistryIOError,
    ServerNotLeader,
    ServiceNotReady,
    UnknownError,
    Unsupported,
)
from litehit_service.model import (
    HitRateCurveResult,
    HitRatePoint,
    InstanceGroup,
    InstanceRegistration,
    InstanceSummary,
    LocationSpec,
    LocationSpecGroup,
    PackedQueryResult,
    RegistrationResult,
    TargetCapacity,
    TraceQueryResult,
)

# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------

#: THE error table: domain exception class <-> wire ErrorCode value (both directions).
ERROR_TABLE: dict[type[OptimizerError], int] = {
    InvalidArgument: pb2.INVALID_ARGUMENT,
    Unsupported: pb2.UNSUPPORTED,
    DuplicateEntity: pb2.DUPLICATE_ENTITY,
    ReachMaxEntityCapacity: pb2.REACH_MAX_ENTITY_CAPACITY,
    InstanceNotExist: pb2.INSTANCE_NOT_EXIST,
    RegistryIOError: pb2.IO_ERROR,
    ServiceNotReady: pb2.SERVICE_NOT_READY,
    InternalError: pb2.INTERNAL_ERROR,
    ServerNotLeader: pb2.SERVER_NOT_LEADER,
    UnknownError: pb2.UNKNOWN_ERROR,
}
_CLASS_FOR_CODE: dict[int, type[OptimizerError]] = {code: cls for cls, code in ERROR_TABLE.items()}


def error_code_for(exc: BaseException) -> int:
    """The wire ``ErrorCode`` of ``exc``. O(depth of the class hierarchy).

    Table entries match subclasses too; :class:`litehit_core.InvalidRequestError` is
    ``INVALID_ARGUMENT``; anything else (a bug) is ``INTERNAL_ERROR``.
    """
    for cls in type(exc).__mro__:
        code = ERROR_TABLE.get(cls)  # type: ignore[call-overload]
        if code is not None:
            return code
    if isinstance(exc, InvalidRequestError):
        return pb2.INVALID_ARGUMENT
    return pb2.INTERNAL_ERROR


def error_from_status(status: pb2.Status, trace_id: str = "") -> OptimizerError:
    """The typed exception of a non-OK header status: one class per ErrorCode (an unknown
    code, UNSPECIFIED or ERROR_MAX gives :class:`UnknownError`), carrying the code, the
    message and the trace_id. O(1)."""
    cls = _CLASS_FOR_CODE.get(status.code, UnknownError)
    return cls(status.message, trace_id=trace_id, code=status.code)


def raise_for_header(response: Any, trace_id: str = "") -> None:
    """Raise the typed exception of ``response.header.status`` unless it is OK. O(1)."""
    status = response.header.status
    if status.code != pb2.OK:
        raise error_from_status(status, response.header.request_id or trace_id)


def error_name(code: int) -> str:
    """``ErrorCode`` name of ``code`` (e.g. ``"INVALID_ARGUMENT"``), used as a metrics label."""
    return pb2.ErrorCode.Name(code)


def error_message(exc: BaseException) -> str:
    """Message for ``header.status.message``: the domain message, or type and text of a bug."""
    if isinstance(exc, (OptimizerError, InvalidRequestError)):
        return str(exc)
    return f"internal error: {type(exc).__name__}: {exc}"


def ok_header(trace_id: str) -> pb2.CommonResponseHeader:
    """A header with status OK echoing ``trace_id`` as ``request_id``."""
    return pb2.CommonResponseHeader(status=pb2.Status(code=pb2.OK), request_id=trace_id)


def error_header(trace_id: str, code: int, message: str) -> pb2.CommonResponseHeader:
    """A header carrying an error ``code`` and ``message``."""
    return pb2.CommonResponseHeader(
        status=pb2.Status(code=code, message=message), request_id=trace_id
    )


# --------------------------------------------------------------------------------------------
# Instance groups
# --------------------------------------------------------------------------------------------

_POLICY_FROM_PB = {
    pb2.OPTIMIZER_EVICTION_POLICY_UNSPECIFIED: "unspecified",
    pb2.OPTIMIZER_EVICTION_POLICY_LRU: "lru",
}
_POLICY_TO_PB = {name: value for value, name in _POLICY_FROM_PB.items()}


def eviction_policy_from_pb(value: int) -> str:
    """Wire enum value -> domain policy name; an unknown value raises InvalidArgument."""
    try:
        return _POLICY_FROM_PB[value]
    except KeyError:
        raise InvalidArgument(
            f"instance_group.eviction_policy: unknown value {value} "
            "(expected OPTIMIZER_EVICTION_POLICY_LRU)"
        ) from None


def eviction_policy_to_pb(policy: str) -> int:
    """Domain policy name -> wire enum value; an unknown name raises InvalidArgument."""
    try:
        return _POLICY_TO_PB[policy]
    except KeyError:
        raise InvalidArgument(
            f"eviction_policy: unknown policy {policy!r} (expected 'lru')"
        ) from None


def group_from_pb(msg: pb2.OptimizerInstanceGroupProto) -> InstanceGroup:
    """Wire group -> domain group (no validation beyond the enum; the manager validates)."""
    return InstanceGroup(
        name=msg.name,
        capacity_gb=tuple(msg.capacity_gb),
        eviction_policy=eviction_policy_from_pb(msg.eviction_policy),
        shared_group_quota=msg.shared_group_quota,
        ttl_seconds=msg.ttl_seconds,
        enable_theoretical_max_cache=msg.enable_theoretical_max_cache,
        enable_prefix_hash=msg.enable_prefix_hash,
    )


def group_to_pb(group: InstanceGroup) -> pb2.OptimizerInstanceGroupProto:
    """Domain group -> wire group."""
    return pb2.OptimizerInstanceGroupProto(
        name=group.name,
        eviction_policy=eviction_policy_to_pb(group.eviction_policy),
        capacity_gb=group.capacity_gb,
        shared_group_quota=group.shared_group_quota,
        ttl_seconds=group.ttl_seconds,
        enable_theoretical_max_cache=group.enable_theoretical_max_cache,
        enable_prefix_hash=group.enable_prefix_hash,
    )


# --------------------------------------------------------------------------------------------
# Instances
# --------------------------------------------------------------------------------------------


def registration_from_pb(
    msg: pb2.OptimizerRegisterInstanceRequest | pb2.OptimizerGetInstanceResponse,
) -> InstanceRegistration:
    """RegisterInstance request (or GetInstance response) -> domain registration."""
    return InstanceRegistration(
        instance_id=msg.instance_id,
        instance_group=msg.instance_group,
        block_size=msg.block_size,
        location_spec_infos=tuple(LocationSpec(s.name, s.size) for s in msg.location_spec_infos),
        location_spec_groups=tuple(
            LocationSpecGroup(g.name, tuple(g.spec_names)) for g in msg.location_spec_groups
        ),
        full_location_spec_group_name=msg.optimizer_state_info.full_location_spec_group_name,
        linear_location_spec_group_name=msg.optimizer_state_info.linear_location_spec_group_name,
        linear_step=msg.linear_step,
    )


def _registration_fields(reg: InstanceRegistration) -> dict[str, Any]:
    return {
        "instance_group": reg.instance_group,
        "instance_id": reg.instance_id,
        "block_size": reg.block_size,
        "location_spec_infos": [
            pb2.LocationSpecInfo(name=s.name, size=s.size) for s in reg.location_spec_infos
        ],
        "location_spec_groups": [
            pb2.LocationSpecGroup(name=g.name, spec_names=g.spec_names)
            for g in reg.location_spec_groups
        ],
        "optimizer_state_info": pb2.OptimizerStateInfo(
            full_location_spec_group_name=reg.full_location_spec_group_name,
            linear_location_spec_group_name=reg.linear_location_spec_group_name,
        ),
        "linear_step": reg.linear_step,
    }


def registration_to_request_pb(
    reg: InstanceRegistration, trace_id: str = ""
) -> pb2.OptimizerRegisterInstanceRequest:
    """Domain registration -> RegisterInstance request (used by clients and tests)."""
    return pb2.OptimizerRegisterInstanceRequest(trace_id=trace_id, **_registration_fields(reg))


def registration_to_pb(
    reg: InstanceRegistration, trace_id: str
) -> pb2.OptimizerGetInstanceResponse:
    """Domain registration -> successful GetInstance response."""
    return pb2.OptimizerGetInstanceResponse(header=ok_header(trace_id), **_registration_fields(reg))


def registration_result_to_pb(
    result: RegistrationResult, trace_id: str
) -> pb2.OptimizerRegisterInstanceResponse:
    """Domain registration result -> successful RegisterInstance response."""
    return pb2.OptimizerRegisterInstanceResponse(
        header=ok_header(trace_id),
        estimated_capacity_blocks=result.estimated_capacity_blocks,
        size_full_only=result.size_full_only,
        size_full_linear=result.size_full_linear,
    )


# --------------------------------------------------------------------------------------------
# Trace queries (hot path)
# --------------------------------------------------------------------------------------------

_OK = pb2.OK
# Shared, never mutated: protobuf only reads constructor dicts.
_OK_STATUS = {"code": _OK}
_OK_HEADER = {"status": _OK_STATUS}


def trace_result_fields(result: TraceQueryResult, trace_id: str) -> dict[str, Any]:
    """Constructor fields of a successful TraceQueryResponse, as plain dicts and lists.

    Plain values let protobuf build the whole message (or a whole batch, see
    ``TraceQueryBatchResponse(results=[...])``) in one C-level constructor call, which is
    several times cheaper than creating and copying sub-messages. O(capacity slots).
    """
    t = result.theoretical
    return {
        "header": {"status": _OK_STATUS, "request_id": trace_id} if trace_id else _OK_HEADER,
        "total_blocks": result.total_blocks,
        "input_token_len": result.input_token_len,
        "capacity_results": [
            {"capacity_gb": g, "cache_hit_count": h, "hit_rate": r, "current_unique_keys": u}
            for g, h, r, u in zip(
                result.capacity_gb,
                result.hit_blocks,
                result.hit_rates,
                result.unique_keys,
                strict=True,
            )
        ],
        "theoretical_result": {
            "max_hit_count": t.max_hit_count,
            "current_unique_keys": t.current_unique_keys,
            "hit_rate": t.hit_rate,
        },
    }


def trace_error_fields(trace_id: str, code: int, message: str) -> dict[str, Any]:
    """Constructor fields of a failed TraceQueryResponse (only the header is set)."""
    return {"header": {"status": {"code": code, "message": message}, "request_id": trace_id}}


def packed_query_to_pb(
    instance_id: str,
    block_keys: Sequence[int] | np.ndarray,
    key_counts: Sequence[int] | np.ndarray,
    input_token_lens: Sequence[int] | np.ndarray,
    timestamps_ns: Sequence[int] | np.ndarray = (),
    trace_id: str = "",
) -> pb2.TraceQueryPackedRequest:
    """The wire form of a packed batch (the server reads it in
    :mod:`litehit_service.packed_frames`). O(keys)."""
    return pb2.TraceQueryPackedRequest(
        trace_id=trace_id,
        instance_id=instance_id,
        block_keys=_ints(block_keys),
        key_counts=_ints(key_counts),
        input_token_lens=_ints(input_token_lens),
        timestamps_ns=_ints(timestamps_ns),
    )


def packed_result_from_pb(msg: pb2.TraceQueryPackedResponse) -> PackedQueryResult:
    """The client's side of :func:`~litehit_service.packed_frames.answer_bytes`; raises
    the header's error.
    O(queries x slots)."""
    raise_for_header(msg)
    slots = len(msg.capacity_gb)
    total = np.array(msg.total_blocks, np.int64)
    return PackedQueryResult(
        block_size_tokens=msg.block_size,
        capacity_gb=tuple(msg.capacity_gb),
        total_blocks=total,
        input_token_lens=np.array(msg.input_token_lens, np.int64),
        hit_blocks=np.array(msg.cache_hit_counts, np.int64).reshape(len(total), slots),
        max_hit_blocks=np.array(msg.max_hit_counts, np.int64) if len(msg.max_hit_counts) else None,
        unique_blocks=np.array(msg.current_unique_keys, np.int64),
    )


def _ints(values: Sequence[int] | np.ndarray) -> list[int]:
    return values.tolist() if isinstance(values, np.ndarray) else list(values)


# --------------------------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------------------------


def summary_to_pb(s: InstanceSummary) -> pb2.OptimizerInstanceSummary:
    """Domain instance summary -> wire summary (theoretical fields -1 when disabled)."""
    d = s.debug_info
    return pb2.OptimizerInstanceSummary(
        instance_id=s.instance_id,
        instance_group=s.instance_group,
        total_queries=s.total_queries,
        total_blocks_queried=s.total_blocks_queried,
        total_input_tokens=s.total_input_tokens,
        capacity_summaries=[
            pb2.OptimizerCapacitySummary(
                capacity_gb=c.capacity_gb,
                total_hits=c.total_hits,
                hit_rate=c.hit_rate,
                capacity_blocks=c.capacity_blocks,
            )
            for c in s.capacity_summaries
        ],
        theoretical_summary=pb2.OptimizerTheoreticalSummary(
            total_max_hits=s.total_max_hits, max_hit_rate=s.max_hit_rate
        ),
        debug_info=pb2.OptimizerInstanceDebugInfo(
            block_size=d.block_size,
            unique_keys=d.unique_keys,
            linear_step=d.linear_step,
            eviction_count=d.eviction_count,
            memory_usage_bytes=d.memory_usage_bytes,
            kv_cache_usage_bytes=d.kv_cache_usage_bytes,
            ttl_eviction_count=d.ttl_eviction_count,
            max_tracked_blocks=d.max_tracked_blocks,
            dropped_blocks=d.dropped_blocks,
        ),
    )


def hit_rate_curve_to_pb(result: HitRateCurveResult, trace_id: str) -> pb2.GetHitRateCurveResponse:
    """Domain live curve -> GetHitRateCurve response. O(points + targets)."""
    point = pb2.HitRateCurvePoint
    return pb2.GetHitRateCurveResponse(
        header=ok_header(trace_id),
        points=[
            point(
                capacity_gb=p.capacity_gb,
                capacity_blocks=p.capacity_blocks,
                capacity_bytes=p.capacity_bytes,
                hit_tokens=p.hit_tokens,
                hit_rate=p.hit_rate,
            )
            for p in result.points
        ],
        capacity_for_targets=[
            pb2.CapacityForTarget(
                target_fraction=t.target_fraction,
                capacity_blocks=t.capacity_blocks,
                capacity_bytes=t.capacity_bytes,
                capacity_gb=t.capacity_gb,
            )
            for t in result.capacity_for_targets
        ],
        total_input_tokens=result.total_input_tokens,
        theoretical_hit_tokens=result.theoretical_hit_tokens,
        corners_complete=result.corners_complete,
        resolution_bytes=result.resolution_bytes,
        corners=result.corners,
        block_size=result.block_size,
        block_bytes=result.block_bytes,
        linear_step=result.linear_step,
        total_queries=result.total_queries,
        model=result.model,
    )


def hit_rate_curve_from_pb(msg: pb2.GetHitRateCurveResponse) -> HitRateCurveResult:
    """GetHitRateCurve response -> domain live curve (the client's side). O(points)."""
    return HitRateCurveResult(
        points=tuple(
            HitRatePoint(
                p.capacity_gb, p.capacity_blocks, p.capacity_bytes, p.hit_tokens, p.hit_rate
            )
            for p in msg.points
        ),
        capacity_for_targets=tuple(
            TargetCapacity(t.target_fraction, t.capacity_blocks, t.capacity_bytes, t.capacity_gb)
            for t in msg.capacity_for_targets
        ),
        total_input_tokens=msg.total_input_tokens,
        theoretical_hit_tokens=msg.theoretical_hit_tokens,
        corners_complete=msg.corners_complete,
        resolution_bytes=msg.resolution_bytes,
        corners=msg.corners,
        block_size=msg.block_size,
        block_bytes=msg.block_bytes,
        linear_step=msg.linear_step,
        total_queries=msg.total_queries,
        model=msg.model,
    )
