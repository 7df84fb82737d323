"""``litehit gen-dataset`` beside LMCache's ``gen-dataset``, on the same LMCache log and
tokenizer: time, peak memory, and the two files compared byte for byte.

Usage: python bench/bench_gen_dataset.py [TRACE.jsonl] [--max-samples N] [--repeat N]
       [--tokenizer DIR] [--vocab N] [--lmcache-dir DIR]

(It imports the installed ``litehit``; from a checkout that is not installed, run it as
``PYTHONPATH=. python bench/bench_gen_dataset.py``.) Needs ``tokenizers`` and, for the
LMCache side, ``transformers`` (both in the dev extra).

TRACE defaults to ../shared/traces/mooncake/conversation_trace.jsonl, written once into a
temporary directory as an LMCache log (``_trace.write_lmcache_log``: chunk_size 512); both
sides read that file with ``-n`` (default 2,000 requests; LMCache keeps every distinct
chunk's tokens as a Python list, 4 KiB per 512-token chunk, so all 12,031 requests need
over 1 GiB there and minutes). The tokenizer is ``--tokenizer DIR`` (a local folder with
tokenizer.json) or a byte-level BPE of ``--vocab`` ids (default 65,536) trained here on
generated text.

Parts, each best of ``--repeat`` (default 3) wall-clock runs, the sides taking turns:

- ``safe vocabulary``: LMCache's ``build_safe_vocab(AutoTokenizer.from_pretrained(dir))``
  (two transformers calls per id) vs LiteHit's ``safe_vocabulary(load_tokenizer(dir))``
  (batched), in this process, tokenizer loading included; the lists must be equal;
- ``command``: ``lmcache tool cache-simulator gen-dataset -i LOG --tokenizer DIR -n N``
  (its ``run_gen_dataset``) vs ``litehit gen-dataset`` with the same options, each a fresh
  process (imports included), with its peak resident memory (``VmHWM``); the outputs must
  be byte-identical.

LMCache's module comes from an unpacked lmcache 0.5.6 wheel (``--lmcache-dir``, default
``$LMCACHE_WHEEL_DIR`` or ``../lmc/wheel`` beside the checkout); without it only LiteHit
runs.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _trace import DEFAULT_TRACE, interleaved_walls, mooncake_requests, write_lmcache_log  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
GEN = "lmcache.tools.cache_simulator.gen_bench_dataset"
PEAK = (  # at exit, the process's own peak resident memory (kB) into $BENCH_PEAK_FILE
    "import atexit, os\n"
    "def _peak():\n"
    "    with open('/proc/self/status') as fh:\n"
    "        kb = [line.split()[1] for line in fh if line.startswith('VmHWM:')][0]\n"
    "    with open(os.environ['BENCH_PEAK_FILE'], 'w') as out:\n"
    "        out.write(kb)\n"
    "atexit.register(_peak)\n"
)
LITEHIT_MAIN = PEAK + (
    "import sys\nfrom litehit_service.cli import main\nsys.exit(main(sys.argv[1:]))\n"
)
LMCACHE_MAIN = PEAK + (
    "import logging, sys\n"
    "sys.path.insert(0, sys.argv.pop(1))\n"
    "logging.disable(logging.WARNING)\n"
    "from lmcache.tools.cache_simulator import gen_bench_dataset as g\n"
    "logging.disable(logging.NOTSET)\n"
    "sys.argv[0] = 'gen-dataset'\n"
    "g.main()\n"
)


def train_tokenizer(folder: Path, vocab: int) -> Path:
    """A byte-level BPE tokenizer of ``vocab`` ids trained on generated text (syllables of
    several scripts), saved with a tokenizer_config.json transformers loads."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    rng = random.Random(1)
    heads = [*"bcdfghjklmnprstvwxyz", "ch", "sh", "th", "qu", "ß", "ñ", "ж", "к", "л", "日", "中"]
    vowels = [*"aeiou", "é", "ü", "ö", "ai", "ou", "и", "о"]
    syllables = [h + v for h in heads for v in vowels]
    words = [
        "".join(rng.choices(syllables, k=rng.choice([1, 2, 2, 3, 3, 4]))) for _ in range(200_000)
    ]
    lines = (" ".join(rng.choices(words, k=30)) + rng.choice(".,!?;") for _ in range(100_000))
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(lines, trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text('{"eos_token": "<|endoftext|>"}\n')
    return folder


def run_process(argv: list[str], tmp: Path) -> tuple[float, int]:
    """Wall seconds and peak resident KiB (``VmHWM``, the process's own: ``ru_maxrss``
    would count the parent's pages shared before ``exec``) of one fresh process."""
    peak_file = tmp / "peak.txt"
    env = dict(os.environ, BENCH_PEAK_FILE=str(peak_file))
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        code = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=err).returncode
        wall = time.perf_counter() - t0
        if code:
            err.seek(0)
            raise SystemExit(f"{argv[:4]} failed ({code}):\n{err.read().decode()}")
    return wall, int(peak_file.read_text())


def fmt(times: list[float]) -> str:
    return f"best {min(times):8.2f} s  (runs: {', '.join(f'{t:.2f}' for t in times)})"


def part_vocabulary(gen: Any, tok_dir: Path, repeat: int) -> None:
    from litehit_service.lmcache.gen_dataset.tokenizer import load_tokenizer, safe_vocabulary

    def ours() -> list[int]:
        return safe_vocabulary(load_tokenizer(tok_dir))

    fns: dict[str, Callable[[], Any]] = {"litehit safe_vocabulary": ours}
    ids = ours()
    if gen is not None:
        from transformers import AutoTokenizer

        def theirs() -> list[int]:
            return gen.build_safe_vocab(AutoTokenizer.from_pretrained(str(tok_dir)))

        assert theirs() == ids, "the safe vocabularies differ"
        fns = {"lmcache build_safe_vocab": theirs, **fns}
    print(f"safe vocabulary: {len(ids):,} safe ids (equal: {gen is not None})")
    times = interleaved_walls(fns, repeat)
    for name, t in times.items():
        print(f"  {name:28s} {fmt(t)}")
    if len(times) == 2:
        ratio = min(times["lmcache build_safe_vocab"]) / min(times["litehit safe_vocabulary"])
        print(f"  LiteHit {ratio:.1f}x faster")


def part_command(
    wheel: Path | None, log: Path, tok_dir: Path, n: int, repeat: int, tmp: Path
) -> None:
    common = ["-i", str(log), "--tokenizer", str(tok_dir), "-n", str(n)]
    argvs = {"litehit gen-dataset": [sys.executable, "-c", LITEHIT_MAIN, "gen-dataset",
                                     *common, "-o", str(tmp / "ours.jsonl")]}  # fmt: skip
    if wheel is not None:
        argvs = {"lmcache gen-dataset": [sys.executable, "-c", LMCACHE_MAIN, str(wheel), *common,
                                         "-o", str(tmp / "theirs.jsonl")], **argvs}  # fmt: skip
    times: dict[str, list[float]] = {name: [] for name in argvs}
    peaks: dict[str, int] = {}
    for _ in range(repeat):
        for name, argv in argvs.items():
            wall, peak = run_process(argv, tmp)
            times[name].append(wall)
            peaks[name] = max(peaks.get(name, 0), peak)
    ours = (tmp / "ours.jsonl").read_bytes()
    prompts = ours.count(b"\n")
    print(f"command: -n {n}: {prompts:,} prompts, {len(ours):,} bytes")
    for name, t in times.items():
        print(f"  {name:22s} {fmt(t)}  peak RSS {peaks[name] / 1024:7.0f} MiB")
    if wheel is not None:
        same = (tmp / "theirs.jsonl").read_bytes() == ours
        ratio = min(times["lmcache gen-dataset"]) / min(times["litehit gen-dataset"])
        print(f"  byte-identical: {same}; LiteHit {ratio:.1f}x faster")
        if not same:
            raise SystemExit("the outputs differ")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace", nargs="?", default=str(DEFAULT_TRACE), help="a Mooncake trace")
    p.add_argument("--max-samples", "-n", type=int, default=2000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--tokenizer", default=None, help="a folder with tokenizer.json")
    p.add_argument("--vocab", type=int, default=65536, help="ids of the trained tokenizer")
    default_wheel = os.environ.get("LMCACHE_WHEEL_DIR", str(ROOT.parent / "lmc" / "wheel"))
    p.add_argument("--lmcache-dir", default=default_wheel)
    args = p.parse_args()

    wheel: Path | None = Path(args.lmcache_dir)
    gen = None
    if (wheel / "lmcache/tools/cache_simulator/gen_bench_dataset.py").is_file():
        sys.path.insert(0, str(wheel))
        logging.disable(logging.WARNING)  # lmcache/__init__ warns that torch is absent
        try:
            import importlib

            gen = importlib.import_module(GEN)
        finally:
            logging.disable(logging.NOTSET)
    else:
        print(f"LMCache: no unpacked wheel at {wheel}; only LiteHit runs")
        wheel = None
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        log = tmp / "lookup_hashes_0.jsonl"
        lines = write_lmcache_log(log, mooncake_requests(Path(args.trace)))
        print(f"log: {args.trace} as an LMCache log, {lines:,} lines, chunk_size 512")
        if args.tokenizer:
            tok_dir = Path(args.tokenizer)
        else:
            t0 = time.perf_counter()
            tok_dir = train_tokenizer(tmp / "tok", args.vocab)
            print(f"tokenizer: byte-level BPE, {args.vocab:,} ids, trained in "
                  f"{time.perf_counter() - t0:.1f} s")  # fmt: skip
        part_vocabulary(gen, tok_dir, args.repeat)
        part_command(wheel, log, tok_dir, args.max_samples, args.repeat, tmp)


if __name__ == "__main__":
    main()
