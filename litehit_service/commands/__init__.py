"""Subcommands of the ``litehit`` console script, one module each.

Every module exposes ``register(subparsers) -> None`` which adds its parser and sets
``func`` (``Callable[[argparse.Namespace], int]``, the exit code) as a default.
Heavy imports (grpc, matplotlib, numpy) happen inside ``func`` so ``litehit --help`` is fast.
"""

COMMAND_MODULES = ("serve", "instances", "health", "replay", "query", "curve", "convert")
