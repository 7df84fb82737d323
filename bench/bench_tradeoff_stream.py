"""``litehit tradeoff`` on production-size traces (issue 34 item 3): wall and peak RSS.

Usage: python bench/bench_tradeoff_stream.py TRACE [TRACE ...] [--num-points 3]
           [--quota-blocks 100000] [--workers N] [--mode auto|stream|decode]
           [--policies POLICY ...]

Each TRACE (a standard JSONL or Parquet trace, e.g. the Mooncake conversation K times over
that ``bench_streaming.py`` writes) gets the one-``lru``-instance configuration of
``bench_streaming.py`` (eviction mode 3, batch 100, ``--quota-blocks`` blocks of 512 tokens
x 4096 B/token) and one ``litehit tradeoff CONFIG --num-points N`` as a fresh process
(``_trace.peak_run``: peak RSS from ``wait4`` of a process forked by a small parent, the
largest of the command and its workers). Printed per trace: wall seconds, peak RSS (MiB),
each policy's method (``exact``: spec §7b, LiteHit's curve; ``replay``) and the run line.
Which mode runs: ``--mode auto`` the command's rule (streamed at 256 MB of JSONL text or
more: the 200x Parquet file, not the 40x one), ``stream`` or ``decode`` force one (the
threshold moved in the launched process, as the tests do). Cost: the command's.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _trace import peak_run  # noqa: E402
from bench_streaming import policy_config  # noqa: E402

_FORCED = (
    "import sys\n"
    "from litehit_service.offline import outputs\n"
    "outputs.PLAN_BYTES = {}\n"
    "from litehit_service.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)
LAUNCHERS = {
    "auto": ("-m", "litehit_service"),
    "stream": ("-c", _FORCED.format(0)),
    "decode": ("-c", _FORCED.format(1 << 62)),
}
"""``--mode``: the command's own rule, or its size threshold moved to force streaming or
decoding (what the tests do)."""


def main() -> int:
    """Run the measurements (module docstring); 0."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("traces", nargs="+", type=Path)
    p.add_argument("--num-points", type=int, default=3)
    p.add_argument("--quota-blocks", type=int, default=100_000)
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--mode", choices=("auto", "stream", "decode"), default="auto")
    p.add_argument("--policies", nargs="+", default=None, help="--eviction-policies")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_tradeoff_stream_") as tmp:
        work = Path(tmp)
        for trace in args.traces:
            out = work / f"out_{trace.stem}"
            config = policy_config(work / f"{trace.stem}.json", trace.resolve(), out,
                                   args.quota_blocks)  # fmt: skip
            argv = ["tradeoff", str(config), "--num-points", str(args.num_points), "--json"]
            if args.policies:
                argv += ["--eviction-policies", *args.policies]
            if args.workers:
                argv += ["--max-workers", str(args.workers)]
            wall, peak, done = peak_run(argv, launcher=LAUNCHERS[args.mode])
            if done.returncode:
                raise SystemExit(f"litehit {' '.join(argv)} failed:\n{done.stderr}")
            lines = [x for x in done.stderr.splitlines() if x.startswith("tradeoff:")]
            methods = [p.get("method") for p in json.loads(done.stdout)["policies"]]
            print(f"{trace.name}: {wall:.1f} s, peak RSS {peak / 2**20:.0f} MiB, method "
                  f"{methods}; {lines[-1] if lines else ''}", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
