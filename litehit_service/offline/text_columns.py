"""Columns of numbers to CSV text at compiled speed, byte-identical to Python's formatting.

The per-read tables (``{instance}_hit_rates.csv`` and the like) have tens of millions of
fields on a production trace; formatting them one Python ``str`` at a time (~1 us a
field) costs more than the replay. :func:`table_text` formats whole columns with one
compiled call (:func:`litehit_core.text_kernels.format_rows`): integers as ``str(int)``
writes them, rates as ``f"{v:.6f}"`` does.

The rates become fixed-point integers first (:func:`fixed_units`): Python rounds the
double's exact value half to even; ``rint(v * 10**d)`` gives the same integer except when
the product lies within 1e-9 of a half, where the product's own rounding error (at most
1.2e-10 for values below 1e6) could decide it: those few are rounded by Python itself.
Cost: O(fields), ~15 ns a field; memory: the chunk's table and text, a few times over.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from litehit_core.text_kernels import EMPTY, LABEL, OPTIONAL, buffer_bytes, format_rows

__all__ = ["EMPTY", "LABEL", "OPTIONAL", "fixed_units", "table_text"]

_NEAR_HALF = 1e-9
"""How close to a half the scaled value may come before Python rounds it."""
_LARGEST = 1e6
"""Fixed-point values must be below this (rates are at most 1)."""


def fixed_units(values: np.ndarray, digits: int) -> np.ndarray:
    """``values`` (float64, finite, in [0, 1e6)) as int64 units of ``10**-digits``, rounded
    as ``f"{v:.{digits}f}"`` rounds (module docstring). ``digits`` in 1..9; ValueError for
    a value out of range. O(n)."""
    if not 1 <= digits <= 9:
        raise ValueError(f"digits must be in 1..9, got {digits}")
    v = np.asarray(values, dtype=np.float64)
    if len(v) and not (np.all(np.isfinite(v)) and v.min() >= 0 and v.max() < _LARGEST):
        raise ValueError("fixed-point values must be finite and in [0, 1e6)")
    scaled = v * 10**digits
    units = np.rint(scaled).astype(np.int64)
    near = np.flatnonzero(np.abs(scaled - np.floor(scaled) - 0.5) < _NEAR_HALF)
    for i in near.tolist():
        units[i] = int(f"{float(v[i]):.{digits}f}".replace(".", ""))
    return units


def table_text(
    columns: Sequence[np.ndarray], decimals: Sequence[int], labels: Sequence[str] = ()
) -> str:
    """CSV lines (``,`` between fields, ``\\n`` after each row) of equally long
    ``columns``: int64 columns where ``decimals`` is 0, float64 ones formatted with that
    many decimals (:func:`fixed_units`) where it is > 0; where it is :data:`LABEL` the
    values index ``labels`` (no comma, no line end); where it is :data:`OPTIONAL` int64
    values, :data:`EMPTY` an empty field. "" without rows. O(fields)."""
    if not columns or not len(columns[0]):
        return ""
    table = np.empty((len(columns[0]), len(columns)), dtype=np.int64)
    for c, (column, d) in enumerate(zip(columns, decimals, strict=True)):
        table[:, c] = fixed_units(column, d) if d > 0 else column
    encoded = [label.encode("utf-8") for label in labels]
    label_off = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in encoded], out=label_off[1:])
    label_bytes = np.frombuffer(b"".join(encoded) or b"\0", dtype=np.uint8)
    widest = max((len(b) for b in encoded), default=0)
    labelled = sum(1 for d in decimals if d == LABEL)
    extra = widest * table.shape[0] * labelled
    out = np.empty(buffer_bytes(*table.shape) + extra, dtype=np.uint8)
    n = format_rows(table, np.asarray(decimals, dtype=np.int64), out, label_bytes, label_off)
    return out[:n].tobytes().decode("utf-8")
