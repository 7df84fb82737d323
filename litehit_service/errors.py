"""Domain errors of the online optimizer (no gRPC/protobuf here): one class per ErrorCode.

Every error carries ``kind``, the name of the wire ``ErrorCode`` it maps to, its
``message`` (naming the offending field and value) and, when it came back from a server,
the request's ``trace_id`` and the wire ``code``. The single mapping between these classes
and wire codes lives in :mod:`litehit_service.wire`; the server raises them in the manager
and the client (:class:`~litehit_service.client.OptimizerClient`) raises them again from a
response header, so both sides speak the same exceptions.
"""

from __future__ import annotations


class OptimizerError(Exception):
    """Base class of every error the optimizer reports (``kind`` ``INTERNAL_ERROR``).

    ``trace_id`` and ``code`` (the wire ErrorCode value) are set when the error was read
    from a response; both are empty (``""``, ``None``) when raised by the manager itself.
    """

    kind: str = "INTERNAL_ERROR"

    def __init__(self, message: str = "", *, trace_id: str = "", code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.trace_id = trace_id
        self.code = code


class InternalError(OptimizerError):
    """The server failed unexpectedly (a bug); the message names the exception."""

    kind = "INTERNAL_ERROR"


class InvalidArgument(OptimizerError):
    """A field of the request is malformed or inconsistent with current state."""

    kind = "INVALID_ARGUMENT"


class Unsupported(OptimizerError):
    """The request asks for a feature this optimizer does not implement."""

    kind = "UNSUPPORTED"


class DuplicateEntity(OptimizerError):
    """Creating an entity whose name is already taken."""

    kind = "DUPLICATE_ENTITY"


class ReachMaxEntityCapacity(OptimizerError):
    """Creating one more entity would exceed a configured limit (e.g. ``--max-instances``)."""

    kind = "REACH_MAX_ENTITY_CAPACITY"


class InstanceNotExist(OptimizerError):
    """The named instance (or instance group) is not registered."""

    kind = "INSTANCE_NOT_EXIST"


class RegistryIOError(OptimizerError):
    """The persistent registry could not be read or written; nothing was changed."""

    kind = "IO_ERROR"


class ServiceNotReady(OptimizerError):
    """The service is starting or stopping and cannot answer yet."""

    kind = "SERVICE_NOT_READY"


class ServerNotLeader(OptimizerError):
    """The server is not the leader of a replicated deployment (never raised by LiteHit;
    a wire-compatible server may answer it)."""

    kind = "SERVER_NOT_LEADER"


class UnknownError(OptimizerError):
    """A response carried an error code this client does not know (or UNKNOWN_ERROR)."""

    kind = "UNKNOWN_ERROR"
