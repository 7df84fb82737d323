"""Test helpers: trace and facts lines of an exact byte size, and sparse long-line files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MIB = 1024 * 1024
STANDARD = {"type": "get", "instance_id": "i", "trace_id": "r", "timestamp_ns": 1, "keys": [1]}
MOONCAKE = {"timestamp": 0, "input_length": 10, "hash_ids": [7, 8, 9]}
LMCACHE = {
    "timestamp": 1.0,
    "request_id": "r",
    "model_name": "m",
    "chunk_size": 4,
    "seq_len": 8,
    "chunk_hashes": ["a1", "b2"],
}


def padded(obj: dict[str, Any], size: int) -> str:
    """``obj`` as one JSON line of exactly ``size`` bytes (spaces after the brace)."""
    text = json.dumps(obj, separators=(",", ":"))
    assert len(text) <= size
    return "{" + " " * (size - len(text)) + text[1:]


def std(ts: int, size: int = 0) -> str:
    obj = {**STANDARD, "timestamp_ns": ts, "input_len": 4}
    return padded(obj, size) if size else json.dumps(obj)


def moon(ts: int, size: int = 0) -> str:
    obj = {**MOONCAKE, "timestamp": ts}
    return padded(obj, size) if size else json.dumps(obj)


def lmc(ts: float, size: int = 0) -> str:
    obj = {**LMCACHE, "timestamp": ts, "request_id": f"r{ts}"}
    return padded(obj, size) if size else json.dumps(obj)


def fact(trace_id: str) -> str:
    return f'{trace_id},i,1,13,4,1024,"[]"'


def fact_of(size: int) -> str:
    """A facts row of exactly ``size`` bytes (a long trace id)."""
    return fact("t" * (size - len(fact(""))))


def write(path: Path, lines: list[str]) -> Path:
    """``lines`` as a UTF-8 file, each ending with a newline."""
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def sparse_long_line(path: Path, head: list[str], size: int = 100 * MIB) -> Path:
    """``head`` lines, then one line of NUL bytes up to ``size`` bytes: a sparse file, made
    in microseconds, whose last line would take ``size`` bytes of memory to read whole."""
    write(path, head)
    with open(path, "r+b") as fh:
        fh.truncate(size)
    return path
