"""The ``litehit`` console script: dispatches to :mod:`litehit_service.commands`."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from litehit_service.commands import COMMAND_MODULES


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every available subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="litehit",
        description="Exact prefix KV-cache hit rates for an LRU of every capacity.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"litehit_service.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"litehit_service.commands.{name}":
                raise
            continue  # command not built yet
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen subcommand; returns the process exit code."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
