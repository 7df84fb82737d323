"""``litehit health``: exit 0 when the server's gRPC health check answers SERVING.

Meant for container health checks (Docker HEALTHCHECK, Kubernetes exec probes). Prints the
status; exit 1 when not SERVING or unreachable.
"""

from __future__ import annotations

import argparse

from litehit_service.commands import CommandFailed, UsageError, rpc_detail


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``health`` subcommand."""
    parser = subparsers.add_parser(
        "health", help="check a server's gRPC health (exit 0 when SERVING)", description=__doc__
    )
    parser.add_argument(
        "--server", default="127.0.0.1:50051", help="HOST:PORT (default 127.0.0.1:50051)"
    )
    parser.add_argument(
        "--service", default="", help="service name to check (default: the whole server)"
    )
    parser.add_argument(
        "--timeout", type=float, default=3.0, help="seconds to wait for the answer (default 3)"
    )
    parser.add_argument("--tls-ca", default=None, help="PEM CA certificate (enables TLS)")
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
