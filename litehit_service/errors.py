"""Domain errors of the online optimizer (no gRPC/protobuf here).

Every error carries ``kind``, the name of the wire ``ErrorCode`` it maps to; the
single mapping to wire codes lives in :mod:`litehit_service.wire`. Messages always name
the offending field and value.
"""

from __future__ import annotations


class OptimizerError(Exception):
    """Base class of every error the manager reports to a caller."""

    kind: str = "INTERNAL_ERROR"


class InvalidArgument(OptimizerError):
    """A field of the request is malformed or inconsistent with current state."""

    kind = "INVALID_ARGUMENT"


class Unsupported(OptimizerError):
    """The request asks for a feature this optimizer does not implement."""

    kind = "UNSUPPORTED"


class DuplicateEntity(OptimizerError):
    """Creating an entity whose name is already taken."""

    kind = "DUPLICATE_ENTITY"


class InstanceNotExist(OptimizerError):
    """The named instance (or instance group) is not registered."""

    kind = "INSTANCE_NOT_EXIST"


class RegistryIOError(OptimizerError):
    """The persistent registry could not be read or written; nothing was changed."""

    kind = "IO_ERROR"


class ServiceNotReady(OptimizerError):
    """The service is starting or stopping and cannot answer yet."""

    kind = "SERVICE_NOT_READY"
