"""``litehit instances``: print every instance's hit rates per capacity from a live server.

One row per capacity slot; the instance's columns (group, queries, theoretical maximum, the
capacity reaching 90 % of the theoretical hits on its exact live curve, unique blocks,
memory) are shown on its first row. ``--json`` prints the same data as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from litehit_service.commands import CommandFailed, rpc_detail
from litehit_service.commands.options import add_server_options

if TYPE_CHECKING:
    from litehit_service import messages as pb2

COLUMNS = (
    "INSTANCE",
    "GROUP",
    "QUERIES",
    "CAPACITY_GIB",
    "CAPACITY_BLOCKS",
    "HIT_RATE",
    "THEORETICAL",
    "FOR_90%",
    "UNIQUE_BLOCKS",
    "MEMORY",
)


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``instances`` subcommand."""
    parser = subparsers.add_parser(
        "instances",
        help="show hit rates per capacity of a live server",
        description="Print every instance's hit rates per capacity from a live server: one "
        "row per capacity slot; the instance's columns (group, queries, theoretical maximum, "
        "the capacity reaching 90 % of the theoretical hits on its exact live curve, unique "
        "blocks, memory) are shown on its first row. --json prints the same data as JSON.",
    )
    add_server_options(parser, 10.0, "seconds per attempt")
    parser.add_argument(
        "--group",
        metavar="NAME",
        default="",
        help="only instances of this instance group (default: every group)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(func=run)


def format_percent(rate: float) -> str:
    """A hit rate (0..1) as a percentage with two decimals; ``-`` for a negative (off) rate."""
    return "-" if rate < 0 else f"{rate * 100:.2f}%"


def format_bytes(n: int) -> str:
    """Bytes with a binary unit: ``512 B``, ``1.4 KiB``, ``3.0 GiB``."""
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            break
    return f"{value:.1f} {unit}"


def table_rows(
    response: pb2.OptimizerListInstancesResponse, for_90: dict[str, int | None] | None = None
) -> list[tuple[str, ...]]:
    """The table body: one row per capacity slot of every instance (instance columns once).
    ``for_90``: instance_id -> bytes reaching 90 % of its theoretical hits (None: no hits
    yet, or unknown)."""
    rows: list[tuple[str, ...]] = []
    for_90 = for_90 or {}
    for inst in response.instances:
        theo = inst.theoretical_summary
        theoretical = "off" if theo.total_max_hits < 0 else format_percent(theo.max_hit_rate)
        needed = for_90.get(inst.instance_id)
        head = (
            inst.instance_id,
            inst.instance_group,
            str(inst.total_queries),
            theoretical,
            "-" if needed is None else format_bytes(needed),
            str(inst.debug_info.unique_keys),
            format_bytes(inst.debug_info.memory_usage_bytes),
        )
        blank = ("",) * len(head)
        for i, cap in enumerate(inst.capacity_summaries):
            first = head if i == 0 else blank
            rows.append(
                (
                    *first[:3],
                    f"{cap.capacity_gb:g}",
                    str(cap.capacity_blocks),
                    format_percent(cap.hit_rate),
                    *first[3:],
                )
            )
        if not inst.capacity_summaries:
            rows.append((*head[:3], "", "", "", *head[3:]))
    return rows


def format_table(
    response: pb2.OptimizerListInstancesResponse, for_90: dict[str, int | None] | None = None
) -> str:
    """The whole table as text with aligned columns (left-aligned names, right numbers)."""
    rows = [COLUMNS, *table_rows(response, for_90)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    left = {0, 1}
    lines = []
    for row in rows:
        cells = [
            cell.ljust(widths[i]) if i in left else cell.rjust(widths[i])
            for i, cell in enumerate(row)
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines) + "\n"


def to_json(
    response: pb2.OptimizerListInstancesResponse, for_90: dict[str, int | None] | None = None
) -> dict[str, Any]:
    """Plain JSON-ready data (integers stay integers; theoretical None when off;
    ``capacity_for_90_percent_bytes`` None without hits)."""
    out = []
    for_90 = for_90 or {}
    for inst in response.instances:
        theo = inst.theoretical_summary
        debug = inst.debug_info
        out.append(
            {
                "instance_id": inst.instance_id,
                "instance_group": inst.instance_group,
                "total_queries": inst.total_queries,
                "total_blocks_queried": inst.total_blocks_queried,
                "total_input_tokens": inst.total_input_tokens,
                "capacities": [
                    {
                        "capacity_gb": c.capacity_gb,
                        "capacity_blocks": c.capacity_blocks,
                        "total_hits": c.total_hits,
                        "hit_rate": c.hit_rate,
                    }
                    for c in inst.capacity_summaries
                ],
                "theoretical": None
                if theo.total_max_hits < 0
                else {"total_max_hits": theo.total_max_hits, "max_hit_rate": theo.max_hit_rate},
                "capacity_for_90_percent_bytes": for_90.get(inst.instance_id),
                "block_size": debug.block_size,
                "linear_step": debug.linear_step,
                "unique_blocks": debug.unique_keys,
                "memory_usage_bytes": debug.memory_usage_bytes,
                "kv_cache_usage_bytes": debug.kv_cache_usage_bytes,
                "ttl_expired_blocks": debug.ttl_eviction_count,
            }
        )
    return {"instances": out}


def run(args: argparse.Namespace) -> int:
    """Fetch ListInstances and print it (raises on a transport error or an error status:
    an unknown group is bad input, exit 2)."""
    import grpc

    from litehit_service.client import OptimizerClient

    try:
        with OptimizerClient(args.server, timeout=args.timeout, tls_ca=args.tls_ca) as client:
            response = client.list_instances(args.group)  # an error status raises its type
            for_90 = {
                inst.instance_id: _for_90(client, inst.instance_id) for inst in response.instances
            }
    except grpc.RpcError as exc:
        raise CommandFailed(f"{args.server} unreachable: {rpc_detail(exc)}") from None
    if args.json:
        print(json.dumps(to_json(response, for_90), indent=2))
    elif not response.instances:
        print("no instances registered" + (f" in group {args.group!r}" if args.group else ""))
    else:
        sys.stdout.write(format_table(response, for_90))
    return 0


def _for_90(client: Any, instance_id: str) -> int | None:
    """Bytes reaching 90 % of the instance's theoretical hits on its live curve; None
    without hits or when the instance went away meanwhile. One small GetHitRateCurve."""
    from litehit_service import messages as pb2

    answer = client.get_hit_rate_curve(instance_id, [0.0], [0.9], check=False)
    if answer.header.status.code != pb2.OK or not answer.theoretical_hit_tokens:
        return None
    return int(answer.capacity_for_targets[0].capacity_bytes)
