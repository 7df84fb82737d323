"""A small typed client of the LiteHit OptimizerService (and of any wire-compatible server).

:class:`OptimizerClient` mirrors every RPC with a typed method returning the pb2 response.
A response whose header is not OK raises the typed exception of its ErrorCode (one class
per code, from :mod:`litehit_service.errors`, carrying ``code``, ``message`` and
``trace_id``); ``check=False`` returns the raw response instead. Unary calls retry
UNAVAILABLE and DEADLINE_EXCEEDED with exponential backoff;
:meth:`OptimizerClient.stream_trace_queries` is a batching helper over the TraceQueryStream
bidi RPC for gateways.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from litehit_service import messages as pb2
from litehit_service import wire
from litehit_service.model import InstanceGroup, InstanceRegistration, PackedQueryResult
from litehit_service.wire import packed_result_from_pb, raise_for_header

_Resp = TypeVar("_Resp")

RETRYABLE_CODES: frozenset[grpc.StatusCode] = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}
)
"""gRPC status codes after which a unary call is retried."""

DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024


class OptimizerClient:
    """Typed client of ``kv_cache_manager.proto.optimizer.OptimizerService``.

    ``target`` is ``HOST:PORT``. ``timeout`` (seconds) bounds each unary attempt;
    ``retries`` extra attempts follow UNAVAILABLE/DEADLINE_EXCEEDED after sleeping
    ``backoff_initial * 2**k`` seconds (capped at ``backoff_max``). Note that a retried
    mutating call may report DUPLICATE_ENTITY if the first attempt did reach the server.
    Tokens travel as ``authorization: Bearer <token>``: ``query_token`` on the query RPCs
    (``TraceQuery*``: :meth:`trace_query`, :meth:`stream_trace_queries`,
    :meth:`stream_packed`), ``admin_token`` on every other call, and on the query RPCs too
    when no ``query_token`` is given (the server accepts the admin token everywhere; reads
    need no token). ``tls_ca`` (a PEM file) switches to TLS. Use as a context manager or
    call :meth:`close`.
    """

    def __init__(
        self,
        target: str,
        *,
        timeout: float = 10.0,
        retries: int = 3,
        backoff_initial: float = 0.1,
        backoff_max: float = 2.0,
        admin_token: str | None = None,
        query_token: str | None = None,
        tls_ca: str | Path | None = None,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    ) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        if backoff_initial < 0 or backoff_max < 0:
            raise ValueError(
                f"backoff must be >= 0, got backoff_initial={backoff_initial} "
                f"backoff_max={backoff_max}"
            )
        self.target = target
        self.timeout = timeout
        self.retries = retries
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        # Reconnect as eagerly as we retry: otherwise a channel that saw the server down
        # fails every retry fast until gRPC's own reconnect backoff (1 s and up) elapses.
        reconnect_ms = max(1, int(backoff_initial * 1000))
        options = [
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.initial_reconnect_backoff_ms", reconnect_ms),
            ("grpc.min_reconnect_backoff_ms", reconnect_ms),
            ("grpc.max_reconnect_backoff_ms", max(reconnect_ms, int(backoff_max * 1000))),
        ]
        if tls_ca is not None:
            credentials = grpc.ssl_channel_credentials(root_certificates=Path(tls_ca).read_bytes())
            self._channel = grpc.secure_channel(target, credentials, options=options)
        else:
            self._channel = grpc.insecure_channel(target, options=options)
        self._stub = pb2.OptimizerServiceStub(self._channel)
        self._metadata = _bearer(admin_token)
        self._query_metadata = _bearer(query_token) or self._metadata

    # ------------------------------------------------------------------ plumbing

    def close(self) -> None:
        """Close the channel; further calls fail."""
        self._channel.close()

    def __enter__(self) -> OptimizerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def channel(self) -> grpc.Channel:
        """The underlying channel (e.g. for health or reflection stubs)."""
        return self._channel

    def backoff_delays(self) -> list[float]:
        """The sleeps (seconds) between attempts: ``min(max, initial * 2**k)`` for each retry."""
        return [min(self.backoff_max, self.backoff_initial * 2**k) for k in range(self.retries)]

    def _call(
        self,
        rpc: Callable[..., _Resp],
        request: Any,
        check: bool = True,
        metadata: tuple[tuple[str, str], ...] | None = None,
    ) -> _Resp:
        """Invoke a unary RPC with the timeout, metadata (the admin token's unless given) and
        retry policy; with ``check``, a non-OK header raises its typed
        :class:`~litehit_service.errors.OptimizerError`."""
        delays = self.backoff_delays()
        if metadata is None:
            metadata = self._metadata
        for attempt in itertools.count():
            try:
                response = rpc(request, timeout=self.timeout, metadata=metadata)
            except grpc.RpcError as exc:
                code = exc.code() if isinstance(exc, grpc.Call) else None
                if code not in RETRYABLE_CODES or attempt >= len(delays):
                    raise
                time.sleep(delays[attempt])
                continue
            if check:
                raise_for_header(response, getattr(request, "trace_id", ""))
            return response
        raise AssertionError("unreachable")  # pragma: no cover

    def wait_until_ready(self, timeout: float) -> None:
        """Block until the channel connects; grpc.FutureTimeoutError after ``timeout`` s."""
        grpc.channel_ready_future(self._channel).result(timeout=timeout)

    def health(self, service: str = "") -> int:
        """gRPC health status of ``service`` (``health_pb2.HealthCheckResponse`` enum value)."""
        stub = health_pb2_grpc.HealthStub(self._channel)
        response = self._call(stub.Check, health_pb2.HealthCheckRequest(service=service), False)
        return response.status

    # ------------------------------------------------------------------ groups

    def create_instance_group(
        self,
        group: pb2.OptimizerInstanceGroupProto | InstanceGroup,
        *,
        trace_id: str = "",
        check: bool = True,
    ) -> pb2.CommonResponse:
        """CreateInstanceGroup (a domain group is converted through wire)."""
        return self._call(
            self._stub.CreateInstanceGroup,
            pb2.CreateInstanceGroupRequest(trace_id=trace_id, instance_group=_group_pb(group)),
            check=check,
        )

    def update_instance_group(
        self,
        group: pb2.OptimizerInstanceGroupProto | InstanceGroup,
        *,
        trace_id: str = "",
        check: bool = True,
    ) -> pb2.CommonResponse:
        """UpdateInstanceGroup."""
        return self._call(
            self._stub.UpdateInstanceGroup,
            pb2.UpdateInstanceGroupRequest(trace_id=trace_id, instance_group=_group_pb(group)),
            check=check,
        )

    def remove_instance_group(
        self, name: str, *, trace_id: str = "", check: bool = True
    ) -> pb2.CommonResponse:
        """RemoveInstanceGroup."""
        return self._call(
            self._stub.RemoveInstanceGroup,
            pb2.RemoveInstanceGroupRequest(trace_id=trace_id, name=name),
            check=check,
        )

    def get_instance_group(
        self, name: str, *, trace_id: str = "", check: bool = True
    ) -> pb2.GetInstanceGroupResponse:
        """GetInstanceGroup."""
        return self._call(
            self._stub.GetInstanceGroup,
            pb2.GetInstanceGroupRequest(trace_id=trace_id, name=name),
            check=check,
        )

    def list_instance_groups(
        self, *, trace_id: str = "", check: bool = True
    ) -> pb2.ListInstanceGroupsResponse:
        """ListInstanceGroups (sorted by name)."""
        return self._call(
            self._stub.ListInstanceGroups,
            pb2.ListInstanceGroupsRequest(trace_id=trace_id),
            check=check,
        )

    # ------------------------------------------------------------------ instances

    def register_instance(
        self,
        registration: pb2.OptimizerRegisterInstanceRequest | InstanceRegistration,
        *,
        trace_id: str = "",
        check: bool = True,
    ) -> pb2.OptimizerRegisterInstanceResponse:
        """RegisterInstance (a domain registration is converted through wire).

        ``trace_id`` overrides the request's only when given non-empty.
        """
        if isinstance(registration, InstanceRegistration):
            request = wire.registration_to_request_pb(registration, trace_id)
        else:
            request = registration
            if trace_id:
                request = pb2.OptimizerRegisterInstanceRequest()
                request.CopyFrom(registration)
                request.trace_id = trace_id
        return self._call(self._stub.RegisterInstance, request, check=check)

    def remove_instance(
        self, instance_id: str, *, trace_id: str = "", check: bool = True
    ) -> pb2.OptimizerRemoveInstanceResponse:
        """RemoveInstance."""
        return self._call(
            self._stub.RemoveInstance,
            pb2.OptimizerRemoveInstanceRequest(trace_id=trace_id, instance_id=instance_id),
            check=check,
        )

    def get_instance(
        self, instance_id: str, *, trace_id: str = "", check: bool = True
    ) -> pb2.OptimizerGetInstanceResponse:
        """GetInstance."""
        return self._call(
            self._stub.GetInstance,
            pb2.OptimizerGetInstanceRequest(trace_id=trace_id, instance_id=instance_id),
            check=check,
        )

    def list_instances(
        self, instance_group: str = "", *, trace_id: str = "", check: bool = True
    ) -> pb2.OptimizerListInstancesResponse:
        """ListInstances (all instances, or one group's), sorted by instance_id."""
        return self._call(
            self._stub.ListInstances,
            pb2.OptimizerListInstancesRequest(trace_id=trace_id, instance_group=instance_group),
            check=check,
        )

    def reset_stats(
        self, instance_id: str, *, trace_id: str = "", check: bool = True
    ) -> pb2.OptimizerResetStatsResponse:
        """ResetStats."""
        return self._call(
            self._stub.ResetStats,
            pb2.OptimizerResetStatsRequest(trace_id=trace_id, instance_id=instance_id),
            check=check,
        )

    def get_hit_rate_curve(
        self,
        instance_id: str,
        capacity_gb: Sequence[float] = (),
        target_fractions: Sequence[float] = (),
        max_points: int = 0,
        *,
        trace_id: str = "",
        check: bool = True,
    ) -> pb2.GetHitRateCurveResponse:
        """GetHitRateCurve: the exact live curve of one instance (every corner, or values at
        ``capacity_gb``; ``max_points`` 0 = 512) and the capacity for each target fraction
        of its theoretical hits. :func:`litehit_service.wire.hit_rate_curve_from_pb` turns
        the response into a :class:`~litehit_service.model.HitRateCurveResult`."""
        return self._call(
            self._stub.GetHitRateCurve,
            pb2.GetHitRateCurveRequest(
                trace_id=trace_id,
                instance_id=instance_id,
                capacity_gb=list(capacity_gb),
                target_fractions=list(target_fractions),
                max_points=max_points,
            ),
            check=check,
        )

    # ------------------------------------------------------------------ queries

    def trace_query(
        self,
        instance_id: str,
        block_keys: Sequence[int],
        input_token_len: int = 0,
        *,
        timestamp_ns: int = 0,
        trace_id: str = "",
        check: bool = True,
    ) -> pb2.TraceQueryResponse:
        """TraceQuery for one request: ``block_keys`` head first, ``input_token_len`` tokens.

        A timed-out query is retried and may then be applied twice; gateways that need
        exactly-once should use :meth:`stream_trace_queries`.
        """
        return self._call(
            self._stub.TraceQuery,
            pb2.TraceQueryRequest(
                trace_id=trace_id,
                instance_id=instance_id,
                block_keys=block_keys,
                input_token_len=input_token_len,
                timestamp_ns=timestamp_ns,
            ),
            check=check,
            metadata=self._query_metadata,
        )

    def stream_trace_queries(
        self,
        requests: Iterable[pb2.TraceQueryRequest],
        batch_size: int = 256,
        *,
        timeout: float | None = None,
        check: bool = True,
    ) -> Iterator[pb2.TraceQueryResponse]:
        """Send ``requests`` over one TraceQueryStream in batches; yield responses in order.

        The request iterable is consumed lazily by gRPC's sender thread while responses are
        read, so batches are pipelined. One response per request, each with its own header.
        The stream is not retried (queries may already have been applied); a transport error
        raises ``grpc.RpcError``. With ``check`` a response whose header is not OK raises its
        typed error when it is reached (the responses before it were yielded; the stream is
        then cancelled); ``check=False`` yields it as is. ``timeout`` (seconds, None = none)
        bounds the whole stream. O(total keys).
        """
        if batch_size <= 0:
            raise ValueError(f"batch_size must be > 0, got {batch_size}")
        call = self._stub.TraceQueryStream(
            _batches(requests, batch_size), timeout=timeout, metadata=self._query_metadata
        )
        try:
            for response in call:
                if not check:
                    yield from response.results
                    continue
                for result in response.results:
                    raise_for_header(result)
                    yield result
        finally:
            call.cancel()  # no-op when the stream already finished; stops it if abandoned

    def stream_packed(
        self,
        batches: Iterable[pb2.TraceQueryPackedRequest],
        *,
        timeout: float | None = None,
    ) -> Iterator[PackedQueryResult]:
        """Send packed batches (build them with :func:`~litehit_service.wire.packed_query_to_pb`)
        over one TraceQueryPackedStream; yield each batch's answers, in order, as a
        :class:`~litehit_service.model.PackedQueryResult`. A refused batch (nothing of it
        applied) raises its typed error when reached and cancels the stream; a transport
        error raises ``grpc.RpcError``. Not retried. O(total keys)."""
        call = self._stub.TraceQueryPackedStream(
            iter(batches), timeout=timeout, metadata=self._query_metadata
        )
        try:
            for response in call:
                yield packed_result_from_pb(response)
        finally:
            call.cancel()


def _bearer(token: str | None) -> tuple[tuple[str, str], ...] | None:
    """The call metadata carrying ``token`` (None when there is no token)."""
    return (("authorization", f"Bearer {token}"),) if token else None


def _batches(
    requests: Iterable[pb2.TraceQueryRequest], batch_size: int
) -> Iterator[pb2.TraceQueryBatchRequest]:
    """Group ``requests`` into TraceQueryBatchRequest messages of up to ``batch_size``."""
    iterator = iter(requests)
    while True:
        chunk = list(itertools.islice(iterator, batch_size))
        if not chunk:
            return
        yield pb2.TraceQueryBatchRequest(queries=chunk)


def _group_pb(
    group: pb2.OptimizerInstanceGroupProto | InstanceGroup,
) -> pb2.OptimizerInstanceGroupProto:
    return wire.group_to_pb(group) if isinstance(group, InstanceGroup) else group
