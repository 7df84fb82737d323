"""``litehit health``: exit 0 when the server's gRPC health check answers SERVING.

Meant for container health checks (Docker HEALTHCHECK, Kubernetes exec probes). Prints the
status; exit 1 when not SERVING or unreachable.
"""

from __future__ import annotations

import argparse

from litehit_service.commands import CommandFailed, UsageError, rpc_detail
from litehit_service.commands.options import add_server_options


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``health`` subcommand."""
    parser = subparsers.add_parser(
        "health",
        help="check a server's gRPC health (exit 0 when SERVING)",
        description="Exit 0 when the server's gRPC health check answers SERVING. Meant for "
        "container health checks (Docker HEALTHCHECK, Kubernetes exec probes). Prints the "
        "status; exit 1 when not SERVING or unreachable.",
    )
    add_server_options(parser, 3.0, "seconds to wait for the answer")
    parser.add_argument(
        "--service",
        metavar="NAME",
        default="",
        help="the service to check (default: the whole server)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """One health Check; prints the status; 0 when SERVING, 1 otherwise (raises when the
    server cannot be reached)."""
    import grpc
    from grpc_health.v1 import health_pb2

    from litehit_service.client import OptimizerClient

    if not args.timeout > 0:
        raise UsageError(f"--timeout must be > 0, got {args.timeout}")
    try:
        with OptimizerClient(
            args.server, timeout=args.timeout, retries=0, tls_ca=args.tls_ca
        ) as client:
            status = client.health(args.service)
    except grpc.RpcError as exc:
        raise CommandFailed(f"{args.server} unreachable: {rpc_detail(exc)}") from None
    name = health_pb2.HealthCheckResponse.ServingStatus.Name(status)
    print(name)
    return 0 if status == health_pb2.HealthCheckResponse.SERVING else 1
