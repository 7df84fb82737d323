"""Integers to ASCII text, compiled: the per-read tables' formatting kernel.

:func:`format_rows` writes a table of int64 values as CSV lines into a byte buffer: per
column either the decimal integer (``str(int)``), or, for a column of fixed-point values
``n`` with ``d`` digits, ``n / 10**d`` with exactly ``d`` decimals (``f"{n / 10**d:.df}"``
for ``n >= 0``), or a label from a small table (``true``, a tier's name); any field may be
empty. No Python object per field: ~10-20 ns a field instead of ~1 us. The
caller turns its floats into those integers (and checks their rounding):
:func:`litehit_service.offline.text_columns.table_text`. Cost: O(fields); memory: the
buffer (:func:`buffer_bytes`).
"""

from __future__ import annotations

import time

import numpy as np
from numba import njit

__all__ = [
    "EMPTY",
    "LABEL",
    "MAX_FIELD_BYTES",
    "OPTIONAL",
    "buffer_bytes",
    "format_rows",
    "warm_up",
]

MAX_FIELD_BYTES = 22
"""The longest field plus its separator: a sign, 19 digits, a point and a comma."""


def buffer_bytes(rows: int, columns: int) -> int:
    """Bytes :func:`format_rows` may need for ``rows`` x ``columns`` values."""
    return max(rows * columns * MAX_FIELD_BYTES, 1)


@njit(cache=True, nogil=True)
def _digits(value: np.uint64, out: np.ndarray, at: np.int64, width: np.int64) -> np.int64:
    """Write ``value`` in decimal, at least ``width`` digits (zero-padded); the end."""
    n = np.int64(0)
    v = value
    while True:
        n += 1
        v //= np.uint64(10)
        if v == 0:
            break
    if n < width:
        n = width
    end = at + n
    v = value
    for i in range(n):
        out[end - 1 - i] = np.uint8(48 + np.int64(v % np.uint64(10)))
        v //= np.uint64(10)
    return end


EMPTY = np.iinfo(np.int64).min
"""In an :data:`OPTIONAL` column, a value written as an empty field (``a,,b``)."""
LABEL = -1
"""``decimals`` of a column whose values index labels."""
OPTIONAL = -2
"""``decimals`` of an integer column whose :data:`EMPTY` values are empty fields."""


@njit(cache=True, nogil=True)
def format_rows(
    values: np.ndarray,
    decimals: np.ndarray,
    out: np.ndarray,
    labels: np.ndarray,
    label_off: np.ndarray,
) -> np.int64:
    """Write ``values`` (int64, rows x columns, C order) as CSV lines (``,`` between
    fields, ``\\n`` after each row) into ``out`` (uint8, at least :func:`buffer_bytes`);
    the bytes written. ``decimals[c]`` = 0: column c is an integer; d > 0: the value is n
    with the point d digits from the right; :data:`LABEL`: the value indexes a label, the
    bytes ``labels[label_off[v]:label_off[v + 1]]``; :data:`OPTIONAL`: an integer, or an
    empty field for :data:`EMPTY`."""
    at = np.int64(0)
    rows, cols = values.shape
    for r in range(rows):
        for c in range(cols):
            if c:
                out[at] = 44  # ","
                at += 1
            v = values[r, c]
            d = decimals[c]
            if d == OPTIONAL:
                if v == EMPTY:
                    continue
                d = 0
            if d < 0:
                for i in range(label_off[v], label_off[v + 1]):
                    out[at] = labels[i]
                    at += 1
                continue
            if v < 0:
                out[at] = 45  # "-"
                at += 1
                mag = np.uint64(-(v + 1)) + np.uint64(1)
            else:
                mag = np.uint64(v)
            if d == 0:
                at = _digits(mag, out, at, np.int64(1))
            else:
                scale = np.uint64(10) ** np.uint64(d)
                at = _digits(mag // scale, out, at, np.int64(1))
                out[at] = 46  # "."
                at += 1
                at = _digits(mag % scale, out, at, np.int64(d))
        out[at] = 10
        at += 1
    return at


def warm_up() -> float:
    """Compile (or load from numba's cache) the kernel; seconds it took."""
    start = time.perf_counter()
    values = np.array([[1, -2, 3]], dtype=np.int64)
    out = np.zeros(buffer_bytes(1, 3), dtype=np.uint8)
    labels, label_off = np.zeros(1, dtype=np.uint8), np.zeros(2, dtype=np.int64)
    format_rows(values, np.array([0, 0, 6], dtype=np.int64), out, labels, label_off)
    return time.perf_counter() - start
