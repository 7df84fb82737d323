"""gRPC servicer of ``kv_cache_manager.proto.optimizer.OptimizerService``.

Each RPC converts its request through :mod:`litehit_service.wire` (a packed batch through
:mod:`litehit_service.packed_frames`, from and to bytes), calls the
:class:`~litehit_service.manager.OnlineOptimizerManager`, and answers with gRPC status OK; a
failure travels in ``header.status`` (code from ``wire.ERROR_TABLE``, message naming the field
and value). The servicer never raises on bad input: unexpected exceptions are logged and
reported as ``INTERNAL_ERROR``. Transport problems and limits (message size, admin token) are
the server's business (:mod:`litehit_service.server`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from time import perf_counter
from typing import TYPE_CHECKING, Any, TypeVar

import grpc

from litehit_service import messages as pb2
from litehit_service import packed_frames, wire
from litehit_service.log_limits import LogLimiter
from litehit_service.packed_frames import PackedFrame

if TYPE_CHECKING:
    from litehit_service.manager import OnlineOptimizerManager
    from litehit_service.metrics import ServiceMetrics
    from litehit_service.model import RegistrationResult

log = logging.getLogger(__name__)

_R = TypeVar("_R")
_T = TypeVar("_T")
_INSTANCE_NOT_EXIST = pb2.INSTANCE_NOT_EXIST

_INTERNAL = pb2.INTERNAL_ERROR


class OptimizerServicer(pb2.OptimizerServiceServicer):
    """Serves every OptimizerService RPC from one manager; thread-safe (the manager locks).

    ``metrics`` (optional) receives per-query latencies and error counts (every error);
    ``log_limits`` decides which rejected requests are written to the log (the first of a
    kind per instance and peer in full, the repeats summarised: see
    :mod:`litehit_service.log_limits`). Successful admin actions are logged at INFO with
    the peer and what changed.
    """

    def __init__(
        self,
        manager: OnlineOptimizerManager,
        metrics: ServiceMetrics | None = None,
        *,
        log_limits: LogLimiter | None = None,
    ) -> None:
        self._manager = manager
        self._metrics = metrics
        self.log_limits = log_limits if log_limits is not None else LogLimiter(log)

    # ---------------------------------------------------------------- helpers

    def _classify(
        self, method: str, request: Any, exc: BaseException, peer: str = ""
    ) -> tuple[int, str]:
        """Error code and message of ``exc``; counts it, and logs it through
        :attr:`log_limits` (keyed by method and code, instance, peer): a rejected request at
        INFO with its fields (no traceback), a bug at ERROR with its traceback."""
        code = wire.error_code_for(exc)
        message = wire.error_message(exc)
        instance_id = getattr(request, "instance_id", "")
        fields = {
            "method": method,
            "trace_id": request.trace_id,
            "instance_id": instance_id,
            "code": wire.error_name(code),
            "peer": peer,
        }
        kind = f"{method} {fields['code']}"
        if code == _INTERNAL:
            self.log_limits.log(
                logging.ERROR,
                kind,
                instance_id,
                peer,
                "%s failed unexpectedly: %s",
                method,
                message,
                exc_info=exc,
                extra=fields,
            )
        else:
            self.log_limits.log(
                logging.INFO,
                kind,
                instance_id,
                peer,
                "%s rejected: %s",
                method,
                message,
                extra=fields,
            )
        if self._metrics is not None:
            self._metrics.count_error(method, fields["code"])
        return code, message

    def _run(
        self,
        method: str,
        request: Any,
        action: Callable[[], _R],
        on_ok: Callable[[_R], Any],
        response_type: Callable[..., Any],
        context: Any = None,
        changed: Callable[[_R], str] | None = None,
    ) -> Any:
        """Run ``action``; its result through ``on_ok``, or an error response of the type.
        ``changed`` (admin actions) describes a success for the log (INFO, with the peer)."""
        peer = _peer(context)
        try:
            result = action()
        except Exception as exc:  # every failure becomes a header status
            code, message = self._classify(method, request, exc, peer)
            return response_type(header=wire.error_header(request.trace_id, code, message))
        if changed is not None:
            log.info(
                "%s by %s: %s",
                method,
                peer or "an in-process caller",
                changed(result),
                extra={"method": method, "trace_id": request.trace_id, "peer": peer},
            )
        return on_ok(result)

    def _common(
        self,
        method: str,
        request: Any,
        action: Callable[[], object],
        context: Any = None,
        changed: Callable[[object], str] | None = None,
    ) -> Any:
        return self._run(
            method,
            request,
            action,
            lambda _: pb2.CommonResponse(header=wire.ok_header(request.trace_id)),
            pb2.CommonResponse,
            context,
            changed,
        )

    # ---------------------------------------------------------------- groups

    def CreateInstanceGroup(
        self, request: pb2.CreateInstanceGroupRequest, context: grpc.ServicerContext
    ) -> pb2.CommonResponse:
        """Create a group (an identical one again: OK, logged as unchanged);
        DUPLICATE_ENTITY when the name holds a different group."""
        return self._common(
            "CreateInstanceGroup",
            request,
            lambda: self._manager.create_group(wire.group_from_pb(request.instance_group)),
            context,
            lambda created: (
                f"instance group {'created' if created else 'unchanged'}: "
                f"{_group_text(request.instance_group)}"
            ),
        )

    def UpdateInstanceGroup(
        self, request: pb2.UpdateInstanceGroupRequest, context: grpc.ServicerContext
    ) -> pb2.CommonResponse:
        """Replace a group's settings; INSTANCE_NOT_EXIST when missing."""
        return self._common(
            "UpdateInstanceGroup",
            request,
            lambda: self._manager.update_group(wire.group_from_pb(request.instance_group)),
            context,
            lambda _: f"instance group updated: {_group_text(request.instance_group)}",
        )

    def RemoveInstanceGroup(
        self, request: pb2.RemoveInstanceGroupRequest, context: grpc.ServicerContext
    ) -> pb2.CommonResponse:
        """Remove an empty group; INSTANCE_NOT_EXIST when missing."""
        return self._common(
            "RemoveInstanceGroup",
            request,
            lambda: self._manager.remove_group(request.name),
            context,
            lambda _: f"instance group {request.name!r} removed",
        )

    def GetInstanceGroup(
        self, request: pb2.GetInstanceGroupRequest, context: grpc.ServicerContext
    ) -> pb2.GetInstanceGroupResponse:
        """One group by name."""
        trace_id = request.trace_id
        return self._run(
            "GetInstanceGroup",
            request,
            lambda: self._manager.get_group(request.name),
            lambda g: pb2.GetInstanceGroupResponse(
                header=wire.ok_header(trace_id), instance_group=wire.group_to_pb(g)
            ),
            pb2.GetInstanceGroupResponse,
        )

    def ListInstanceGroups(
        self, request: pb2.ListInstanceGroupsRequest, context: grpc.ServicerContext
    ) -> pb2.ListInstanceGroupsResponse:
        """Every group, sorted by name."""
        trace_id = request.trace_id
        return self._run(
            "ListInstanceGroups",
            request,
            self._manager.list_groups,
            lambda groups: pb2.ListInstanceGroupsResponse(
                header=wire.ok_header(trace_id),
                instance_groups=[wire.group_to_pb(g) for g in groups],
            ),
            pb2.ListInstanceGroupsResponse,
        )

    # ---------------------------------------------------------------- instances

    def RegisterInstance(
        self, request: pb2.OptimizerRegisterInstanceRequest, context: grpc.ServicerContext
    ) -> pb2.OptimizerRegisterInstanceResponse:
        """Register (or replace) an instance; answers capacity blocks and bytes per block."""
        trace_id = request.trace_id
        return self._run(
            "RegisterInstance",
            request,
            lambda: self._registered(
                self._manager.register_instance(wire.registration_from_pb(request)),
                request.instance_id,
            ),
            lambda result: wire.registration_result_to_pb(result, trace_id),
            pb2.OptimizerRegisterInstanceResponse,
            context,
            lambda result: (
                f"instance {request.instance_id!r} of group {request.instance_group!r} "
                f"registered ({result.outcome})"
            ),
        )

    def RemoveInstance(
        self, request: pb2.OptimizerRemoveInstanceRequest, context: grpc.ServicerContext
    ) -> pb2.OptimizerRemoveInstanceResponse:
        """Forget an instance (memory, registry and metrics)."""
        trace_id = request.trace_id
        return self._run(
            "RemoveInstance",
            request,
            lambda: self._forgetting(
                request.instance_id, self._manager.remove_instance(request.instance_id)
            ),
            lambda _: pb2.OptimizerRemoveInstanceResponse(header=wire.ok_header(trace_id)),
            pb2.OptimizerRemoveInstanceResponse,
            context,
            lambda _: f"instance {request.instance_id!r} removed",
        )

    def GetInstance(
        self, request: pb2.OptimizerGetInstanceRequest, context: grpc.ServicerContext
    ) -> pb2.OptimizerGetInstanceResponse:
        """An instance's registration."""
        trace_id = request.trace_id
        return self._run(
            "GetInstance",
            request,
            lambda: self._manager.get_instance(request.instance_id),
            lambda reg: wire.registration_to_pb(reg, trace_id),
            pb2.OptimizerGetInstanceResponse,
        )

    def ListInstances(
        self, request: pb2.OptimizerListInstancesRequest, context: grpc.ServicerContext
    ) -> pb2.OptimizerListInstancesResponse:
        """Cumulative statistics per instance (optionally one group), sorted by instance_id."""
        trace_id = request.trace_id
        return self._run(
            "ListInstances",
            request,
            lambda: self._manager.list_instances(request.instance_group),
            lambda summaries: pb2.OptimizerListInstancesResponse(
                header=wire.ok_header(trace_id),
                instances=[wire.summary_to_pb(s) for s in summaries],
            ),
            pb2.OptimizerListInstancesResponse,
        )

    def ResetStats(
        self, request: pb2.OptimizerResetStatsRequest, context: grpc.ServicerContext
    ) -> pb2.OptimizerResetStatsResponse:
        """Fresh LRU state and zeroed counters for one instance."""
        trace_id = request.trace_id
        return self._run(
            "ResetStats",
            request,
            lambda: self._forgetting(
                request.instance_id, self._manager.reset_stats(request.instance_id)
            ),
            lambda _: pb2.OptimizerResetStatsResponse(header=wire.ok_header(trace_id)),
            pb2.OptimizerResetStatsResponse,
            context,
            lambda _: f"statistics of instance {request.instance_id!r} reset",
        )

    def GetHitRateCurve(
        self, request: pb2.GetHitRateCurveRequest, context: grpc.ServicerContext
    ) -> pb2.GetHitRateCurveResponse:
        """The exact live curve of one instance: points, capacities for targets, totals."""
        trace_id = request.trace_id
        return self._run(
            "GetHitRateCurve",
            request,
            lambda: self._manager.hit_rate_curve(
                request.instance_id,
                list(request.capacity_gb),
                list(request.target_fractions),
                request.max_points,
            ),
            lambda result: wire.hit_rate_curve_to_pb(result, trace_id),
            pb2.GetHitRateCurveResponse,
        )

    def _registered(self, result: RegistrationResult, instance_id: str) -> RegistrationResult:
        """An identical re-registration keeps everything; otherwise the latency restarts."""
        if result.outcome != "unchanged":
            self._forgetting(instance_id, result)
        return result

    def _forgetting(self, instance_id: str, result: _T) -> _T:
        """After a successful register/remove/reset: the instance's latency starts anew."""
        if self._metrics is not None:
            self._metrics.forget_instance(instance_id)
        return result

    # ---------------------------------------------------------------- queries

    def _answer(
        self, method: str, request: pb2.TraceQueryRequest, peer: str = ""
    ) -> dict[str, Any]:
        """Process one query; the response's constructor fields. O(keys + slots).

        A failed query's header carries its error; its status code tells the latency
        recorder whether the instance exists (see :func:`_latency_id`).
        """
        try:
            result = self._manager.trace_query(
                request.instance_id,
                request.block_keys[:],  # a list: slicing a upb repeated field beats list()
                request.input_token_len,
                len(request.token_ids),
                request.timestamp_ns,
            )
        except Exception as exc:  # every failure becomes a header status
            code, message = self._classify(method, request, exc, peer)
            return wire.trace_error_fields(request.trace_id, code, message)
        return wire.trace_result_fields(result, request.trace_id)

    def TraceQuery(
        self, request: pb2.TraceQueryRequest, context: grpc.ServicerContext
    ) -> pb2.TraceQueryResponse:
        """Replay one request's block keys; hits per capacity slot and theoretical."""
        start = perf_counter()
        fields = self._answer("TraceQuery", request, _peer(context))
        if self._metrics is not None:
            self._metrics.observe_query(
                "TraceQuery", perf_counter() - start, _latency_id(request, fields)
            )
        return pb2.TraceQueryResponse(**fields)

    def answer_batch(
        self, batch: pb2.TraceQueryBatchRequest, method: str = "TraceQueryStream", peer: str = ""
    ) -> pb2.TraceQueryBatchResponse:
        """Apply one batch: one result per query, in order, each with its own header.

        Queries are applied in order; a failing query only sets its own header. The batch
        is built in one constructor call from plain fields (see wire), and its per-query
        latencies are recorded under one lock. O(keys + slots) per query.
        """
        answer = self._answer
        results = []
        append = results.append
        durations = []
        record = durations.append
        queries = batch.queries
        for query in queries:
            start = perf_counter()
            append(answer(method, query, peer))
            record(perf_counter() - start)
        if self._metrics is not None:
            self._metrics.observe_queries(
                method, durations, list(map(_latency_id, queries, results))
            )
        return pb2.TraceQueryBatchResponse(results=results)

    def TraceQueryStream(
        self, request_iterator: Iterable[pb2.TraceQueryBatchRequest], context: grpc.ServicerContext
    ) -> Iterator[pb2.TraceQueryBatchResponse]:
        """One response batch per request batch (see :meth:`answer_batch`).

        The server's transport (:mod:`litehit_service.transport`) runs :meth:`answer_batch`
        itself, with the stream limits, idle timeout and drain; this method serves the
        same answers to an in-process or grpc_testing caller.
        """
        for batch in request_iterator:
            yield self.answer_batch(batch, peer=_peer(context))

    def answer_packed(
        self, frame: PackedFrame, method: str = "TraceQueryPackedStream", peer: str = ""
    ) -> bytes:
        """Apply one packed batch of one instance, whole or not at all (see
        :meth:`~litehit_service.manager.OnlineOptimizerManager.trace_query_packed`): the
        answer's bytes; a refused batch's header names the query and field. Decoding and
        encoding are compiled and leave the GIL (:mod:`litehit_service.packed_frames`);
        bytes protobuf cannot parse raise its ``DecodeError`` (the caller ends the call).
        Each query's latency is the batch's time shared equally. O(keys + queries x slots)."""
        start = perf_counter()
        arrays = packed_frames.frame_arrays(frame)
        try:
            result = self._manager.trace_query_packed(*arrays)
            response = packed_frames.answer_bytes(result, frame.trace_id)
            known = frame.instance_id
        except Exception as exc:  # every failure becomes a header status
            code, message = self._classify(method, frame, exc, peer)
            response = packed_frames.error_bytes(frame.trace_id, code, message)
            known = "" if code == _INSTANCE_NOT_EXIST else frame.instance_id
        if self._metrics is not None:
            self._metrics.observe_packed(method, perf_counter() - start, frame.queries, known)
        return response

    def TraceQueryPackedStream(
        self, request_iterator: Iterable[pb2.TraceQueryPackedRequest], context: grpc.ServicerContext
    ) -> Iterator[pb2.TraceQueryPackedResponse]:
        """One packed answer per packed batch, in order (see :meth:`answer_packed`, which
        the server's transport calls itself on the bytes it receives)."""
        for request in request_iterator:
            frame = packed_frames.packed_frame(request.SerializeToString())
            answer = self.answer_packed(frame, peer=_peer(context))
            yield pb2.TraceQueryPackedResponse.FromString(answer)


def _peer(context: Any) -> str:
    """The caller's address (``ipv4:10.0.0.7:53412``), or "" without one (no context, or
    a test double's that does not know it)."""
    try:
        return context.peer() if context is not None else ""
    except NotImplementedError:
        return ""


def _group_text(group: pb2.OptimizerInstanceGroupProto) -> str:
    capacities = ", ".join(f"{c:g}" for c in group.capacity_gb)
    return f"{group.name!r}, capacity_gb [{capacities}], ttl_seconds {group.ttl_seconds}"


def _latency_id(request: pb2.TraceQueryRequest, fields: dict[str, Any]) -> str:
    """The instance id a query's latency is recorded under: empty for an unknown instance
    (keeps the series bounded by the registered instances)."""
    if fields["header"]["status"]["code"] == _INSTANCE_NOT_EXIST:
        return ""
    return request.instance_id
