"""``litehit gen-dataset``: a ``vllm bench serve`` custom dataset (JSONL of ``prompt`` and
``output_tokens``) from LMCache lookup-hash logs, or a standard or Mooncake trace, whose
prompts share token prefixes exactly as the requests shared chunks
(:mod:`litehit_service.lmcache.gen_dataset.dataset`).

The options are LMCache's ``lmcache tool cache-simulator gen-dataset`` (``-i/--input``,
``--tokenizer``, ``--output-len``, ``-o/--output``, ``-n/--max-samples``; its ``--model`` is
spelled ``--instance`` here, the old spelling accepted), and for the same logs and
tokenizer the file is byte for byte LMCache's. Added: ``--trace-format`` (default:
detected), ``--block-size`` (standard and Mooncake: tokens per key) and
``--max-line-bytes``. Needs the ``tokenizers`` library (``pip install '.[dataset]'``;
exit 1 without it). Bad input or options exit 2 and write nothing. A summary on stdout, the
run's line on stderr, progress bars on a terminal.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from litehit_service.commands import CommandFailed
from litehit_service.commands.options import (
    add_instance,
    add_max_line_bytes,
    add_output_file,
    add_trace_format,
    non_negative_int,
    positive_int,
    required_options,
)


def register(subparsers: Any) -> None:
    """Add the ``gen-dataset`` subcommand."""
    p = subparsers.add_parser(
        "gen-dataset",
        help="a vllm bench serve dataset with the logs' prefix sharing (LMCache's gen-dataset)",
        description=(
            "Turn LMCache lookup-hash logs (or a standard / Mooncake trace) into a JSONL "
            'dataset of {"prompt": ..., "output_tokens": N} for vllm bench serve: equal '
            "chunk hashes become equal token runs, so the prompts share prefixes as the "
            "requests did. Byte for byte LMCache's gen-dataset output. Errors exit 2 and "
            "write nothing."
        ),
    )
    required = required_options(p)
    required.add_argument("-i", "--input", nargs="+", required=True, metavar="PATH",
                          help="trace files, or LMCache directories of "
                          "lookup_hashes_*.jsonl")  # fmt: skip
    required.add_argument("--tokenizer", required=True, metavar="PATH",
                          help="a local directory holding tokenizer.json (or the file itself); "
                          "other tokenizer folders need transformers")  # fmt: skip
    p.add_argument("--output-len", type=positive_int, default=128, metavar="N",
                   help="output_tokens of every request (default 128)")  # fmt: skip
    add_output_file(p, "the dataset to write (default bench_dataset.jsonl)",
                    default="bench_dataset.jsonl")  # fmt: skip
    p.add_argument("-n", "--max-samples", type=non_negative_int, default=None, metavar="N",
                   help="keep the first N requests in time order (default or 0: all)")  # fmt: skip
    add_instance(p, "keep one instance's requests: an LMCache model_name, a standard trace's "
                 "instance_id (default: all)", aliases=("--model",))  # fmt: skip
    add_trace_format(p, "input", aliases=("--from",))
    p.add_argument("--block-size", type=positive_int, default=None, metavar="TOKENS",
                   help="mooncake/standard: tokens per key (default 512 / 256)")  # fmt: skip
    add_max_line_bytes(p, "input")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Write the dataset, print its summary. Raises on failure (exit code by the CLI)."""
    from litehit_service.lmcache.gen_dataset.dataset import gen_dataset
    from litehit_service.lmcache.gen_dataset.tokenizer import TokenizerUnavailable
    from litehit_service.offline.outputs import run_line

    started = time.perf_counter()
    try:
        s = gen_dataset(
            args.input,
            args.tokenizer,
            args.output,
            fmt=args.trace_format,
            output_len=args.output_len,
            max_samples=args.max_samples,
            model=args.instance,
            block_size=args.block_size,
            max_line_bytes=args.max_line_bytes,
        )
    except TokenizerUnavailable as exc:
        raise CommandFailed(str(exc)) from None
    if s.tokenizer_note:
        print(f"litehit gen-dataset: note: {s.tokenizer_note}", file=sys.stderr)
    print(f"Read {len(s.files)} file(s) ({s.fmt}); chunk size {s.chunk_size} tokens")
    how = "joined from token texts" if s.joined else "decoded"
    print(f"Tokenizer {s.tokenizer}: {s.safe_tokens:,} safe tokens of {s.vocab_size:,} "
          f"({s.spaced_tokens:,} space-prefixed); prompts {how}")  # fmt: skip
    print(f"Wrote {s.prompts:,} prompts ({s.tokens:,} tokens; {s.chunks_drawn:,} chunks drawn, "
          f"{s.chunks_reused:,} reused) to {s.output}")  # fmt: skip
    sys.stdout.flush()
    elapsed = time.perf_counter() - started
    print(run_line("gen-dataset", s.prompts, "prompts", f"{s.tokens} tokens", elapsed, s.output),
          file=sys.stderr)  # fmt: skip
    return 0
