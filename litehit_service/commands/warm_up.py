"""``litehit warm-up``: compile every compiled kernel once, ahead of the first command.

After an install, the first command that needs a family of kernels compiles it (the
policy replay ~11 s on 2 cores, the engines a few seconds each) and later runs load it
from numba's disk cache in ~0.1 s. This command does all of it at once, so the install
line (``python -m pip install . && litehit warm-up``) pays it and no command does.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any


def register(subparsers: Any) -> None:
    """Add the ``warm-up`` subcommand."""
    p = subparsers.add_parser(
        "warm-up",
        help="compile every kernel once after an install (the first commands then start fast)",
        description="Compile (or load from numba's disk cache) every family of compiled "
        "kernels: the full-attention and hybrid engines, the policy replay, the prefix chain. "
        "Once after an install this takes about 20 s on 2 cores; afterwards every command "
        "loads its kernels in about 0.1 s, and so does a second warm-up.",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Warm every family, one stderr line each, then the total."""
    from litehit_service.offline.kernels import warm_up_all

    start = time.perf_counter()
    taken = warm_up_all()
    print(f"warm-up: {len(taken)} kernel families ready in {time.perf_counter() - start:.1f} s",
          file=sys.stderr)  # fmt: skip
    return 0
