"""Shared benchmark helpers: the default trace, loading it, log-spaced capacities,
writing any list of requests as an LMCache lookup-hash log, and CPU timing (best and
median of N, sides taking turns).

Tests use :func:`write_lmcache_log` too: they load this file by path
(``tests/test_traces.py``, ``load_bench_trace``); it is the one LMCache-log writer.
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from litehit_service.traces.readers import read_mooncake

SHARED = Path(__file__).resolve().parents[2] / "shared"
DEFAULT_TRACE = SHARED / "traces/mooncake/conversation_trace.jsonl"

MIB = 1 << 20
LMCACHE_BYTES_PER_CHUNK = 64 * MIB
"""Default KV bytes per chunk of :func:`write_lmcache_log` (bf16 [32, 512, 2048])."""
_MASK64 = (1 << 64) - 1


_PEAK = (
    "import os, sys\n"
    "pid = os.fork()\n"
    "if pid == 0:\n"
    "    os.execv(sys.executable, [sys.executable, *sys.argv[1:]])\n"
    "_, status, usage = os.wait4(pid, 0)\n"
    "print(f'peak-rss-kib {usage.ru_maxrss}', file=sys.stderr)\n"
    "sys.exit(os.waitstatus_to_exitcode(status))\n"
)


def peak_run(
    argv: Sequence[str],
    env: dict[str, str] | None = None,
    timeout: float | None = None,
    launcher: Sequence[str] = ("-m", "litehit_service"),
) -> tuple[float, int, subprocess.CompletedProcess[str]]:
    """Wall seconds, peak RSS (bytes, from ``wait4``) and the finished process of
    ``litehit ARGV`` run by a small parent: a child's peak counts the pages of the process
    it was forked from until its ``exec`` (Linux keeps the high-water mark across it), so
    forking from a benchmark or a test that holds a trace would inflate it. The parent's
    last stderr line carries the figure; the process's own stderr comes before it.
    ``launcher``: the interpreter's arguments before ``ARGV`` (a script that runs the CLI
    otherwise, say)."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _PEAK, *launcher, *argv], env=env,
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip
    wall = time.perf_counter() - start
    kib = int(done.stderr.rsplit("peak-rss-kib ", 1)[1]) if "peak-rss-kib " in done.stderr else 0
    return wall, kib * 1024, done


def load_mooncake(path: Path, block_size: int = 512) -> list[tuple[list[int], int]]:
    """``[(keys, input_length), ...]`` through the project's Mooncake reader (complete
    blocks only: ``input_length // block_size`` keys)."""
    return [(event.keys, event.input_len) for event in read_mooncake(path, block_size)]


def mooncake_requests(path: Path, block_size: int = 512) -> list[tuple[float, list[int], int]]:
    """``[(timestamp_s, keys, input_length), ...]`` of a Mooncake trace, for
    :func:`write_lmcache_log`: Mooncake's millisecond timestamps become seconds (``ms /
    1000``, whose shortest decimal form is the exact value), keys are the complete blocks'
    ids. O(file size)."""
    return [(e.timestamp_ns / 1e9, e.keys, e.input_len) for e in read_mooncake(path, block_size)]


def lmcache_shape(bytes_per_chunk: int, chunk_size: int) -> list[int]:
    """A bf16 tensor shape ``[layers, chunk_size, width]`` of exactly ``bytes_per_chunk``
    bytes (2 bytes per element); 64 MiB at 512 tokens gives ``[32, 512, 2048]``.
    ``bytes_per_chunk`` must be a multiple of ``2 * chunk_size``. O(1)."""
    elements, rest = divmod(bytes_per_chunk, 2 * chunk_size)
    if rest or elements <= 0:
        raise ValueError(
            f"bytes_per_chunk {bytes_per_chunk} is not a positive multiple of 2 bytes x "
            f"chunk_size {chunk_size}"
        )
    layers = 32 if elements % 32 == 0 else 1
    return [layers, chunk_size, elements // layers]


def write_lmcache_log(
    path: str | os.PathLike[str],
    requests: Iterable[tuple[float, Sequence[int], int]],
    chunk_size: int = 512,
    model: str = "mooncake",
    bytes_per_chunk: int = LMCACHE_BYTES_PER_CHUNK,
    *,
    tail_hash: bool = False,
) -> int:
    """Write ``requests`` as an LMCache lookup-hash log (JSONL, the fields LMCache 0.5.6's
    ``LookupHashLoggingSubscriber`` writes); returns the number of lines.

    Each request is ``(timestamp_s, keys, seq_len)``: seconds (float or int), int keys
    (int64 or uint64) of at least ``seq_len // chunk_size`` chunks, tokens. A line holds
    ``timestamp``, ``request_id`` (``"req-<i>"``, i from 0), ``model_name`` = ``model``,
    ``chunk_size``, ``seq_len``, ``dtypes`` ``["bfloat16"]``, ``shapes`` (one tensor of
    exactly ``bytes_per_chunk`` bytes, :func:`lmcache_shape`) and ``chunk_hashes``: the
    first ``seq_len // chunk_size`` keys as ``0x`` + 16 lower-case hex digits (the low 64
    bits, like LMCache's 8-byte hashes); further keys (Mooncake's partial tail block) are
    dropped, unless ``tail_hash`` is true and ``seq_len`` has a partial tail chunk, in which
    case the next key is written as that tail's hash. O(total keys).
    """
    if type(chunk_size) is not int or chunk_size <= 0:
        raise ValueError(f"chunk_size must be an integer > 0, got {chunk_size!r}")
    if isinstance(requests, (str, os.PathLike)):  # (trace, out) swapped would truncate the trace
        raise TypeError(f"requests must be the requests, got the path {requests!r}")
    if os.path.abspath(path).startswith(os.path.abspath(SHARED)):
        raise ValueError(f"refusing to write into the shared folder: {path}")
    shapes = [lmcache_shape(bytes_per_chunk, chunk_size)]
    n_lines = 0
    with open(path, "w", encoding="utf-8") as out:
        for i, (timestamp, keys, seq_len) in enumerate(requests):
            n = seq_len // chunk_size
            if tail_hash and seq_len % chunk_size:
                n += 1
            if len(keys) < n:
                raise ValueError(
                    f"request {i}: {len(keys)} keys for seq_len {seq_len} (needs {n} chunks)"
                )
            obj = {  # LMCache's field order
                "timestamp": timestamp,
                "request_id": f"req-{i}",
                "model_name": model,
                "chunk_size": chunk_size,
                "seq_len": seq_len,
                "dtypes": ["bfloat16"],
                "shapes": shapes,
                "chunk_hashes": [f"0x{k & _MASK64:016x}" for k in keys[:n]],
            }
            out.write(json.dumps(obj) + "\n")
            n_lines += 1
    return n_lines


def log_capacities(max_blocks: int, k: int, lowest: int = 1) -> list[int]:
    """k distinct log-spaced capacities (blocks) from ``lowest`` to ``max_blocks``."""
    caps: list[int] = []
    ratio = max_blocks / lowest
    for i in range(k):
        c = max(lowest, round(lowest * ratio ** (i / (k - 1))))
        caps.append(max(c, caps[-1] + 1) if caps else c)
    return caps


def cpu_times(fn: Callable[[], Any], repeat: int) -> list[float]:
    """Process CPU seconds of ``repeat`` calls of ``fn`` (a full collection before each)."""
    times = []
    for _ in range(repeat):
        gc.collect()
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return times


def interleaved(fns: dict[str, Callable[[], Any]], repeat: int) -> dict[str, list[float]]:
    """CPU seconds of each function, ``repeat`` rounds of one call each, in turn."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            times[name] += cpu_times(fn, 1)
    return times


def interleaved_walls(fns: dict[str, Callable[[], Any]], repeat: int) -> dict[str, list[float]]:
    """Wall seconds of each function, ``repeat`` rounds of one call each, in turn (for work
    that a process's CPU time misses: worker processes, subprocesses, threads)."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return times


def show(times: list[float]) -> str:
    """``best X ms  median Y ms`` of seconds."""
    return f"best {min(times) * 1e3:7.1f} ms  median {statistics.median(times) * 1e3:7.1f} ms"


def write_standard_copies(
    path: str | os.PathLike[str], copies: int, trace: Path = DEFAULT_TRACE, block_size: int = 512
) -> tuple[int, int]:
    """The Mooncake ``trace`` ``copies`` times over as one standard JSONL trace at
    ``path``: copy c has fresh keys (``key + c * 2**40``), fresh trace ids (``"c-id"``) and
    comes after copy c - 1 in time (timestamps ns from 1 ms, as ``convert`` writes
    Mooncake's, copies the trace's span + 1 ms apart). Every
    record is a ``request`` of instance ``conv``. Returns (records, keys). O(output)."""
    if os.path.abspath(path).startswith(os.path.abspath(SHARED)):
        raise ValueError(f"refusing to write into the shared folder: {path}")
    events = list(read_mooncake(trace, block_size))
    span = events[-1].timestamp_ns - events[0].timestamp_ns + 1_000_000
    n_keys = 0
    with open(path, "w", encoding="utf-8") as out:
        for c in range(copies):
            shift, lines = c << 40, []
            for i, e in enumerate(events):
                keys = ",".join(str(k + shift) for k in e.keys)
                lines.append(
                    f'{{"type":"request","instance_id":"conv","trace_id":"{c}-{i}",'
                    f'"timestamp_ns":{e.timestamp_ns + 1_000_000 + c * span},"keys":[{keys}],'
                    f'"input_len":{e.input_len}}}\n'
                )
                n_keys += len(e.keys)
            out.write("".join(lines))
    return copies * len(events), n_keys


def write_mooncake_copies(
    path: str | os.PathLike[str], copies: int, trace: Path = DEFAULT_TRACE
) -> tuple[int, int]:
    """The Mooncake ``trace`` ``copies`` times over as one Mooncake JSONL trace at ``path``,
    the records :func:`write_standard_copies` writes in Mooncake's own form: copy c has
    fresh ids (``id + c * 2**40``, the partial last block's too) and comes after copy c - 1
    in time (the trace's span + 1 ms apart, ms from 0 as Mooncake's clock); ``input_length``
    and ``output_length`` as they are. Returns (records, ids). O(output)."""
    if os.path.abspath(path).startswith(os.path.abspath(SHARED)):
        raise ValueError(f"refusing to write into the shared folder: {path}")
    with open(trace, "rb") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    start = rows[0]["timestamp"]
    span = rows[-1]["timestamp"] - start + 1
    n_ids = 0
    with open(path, "w", encoding="utf-8") as out:
        for c in range(copies):
            shift, lines = c << 40, []
            for r in rows:
                ids = ", ".join(str(k + shift) for k in r["hash_ids"])
                lines.append(
                    f'{{"timestamp": {r["timestamp"] - start + c * span}, "input_length": '
                    f'{r["input_length"]}, "output_length": {r["output_length"]}, '
                    f'"hash_ids": [{ids}]}}\n'
                )
                n_ids += len(r["hash_ids"])
            out.write("".join(lines))
    return copies * len(rows), n_ids
