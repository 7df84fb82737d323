"""The facts ledger: one CSV row per request, self-describing and re-projectable.

Format (header exactly :data:`FACTS_HEADER`) of a ledger of full-attention instances::

    trace_id,instance_id,timestamp_ns,input_token_len,block_size_tokens,block_bytes,hit_curve
    7,gpu-0,1000,13,4,1024,"[[1,2],[4,1]]"

``hit_curve`` is always quoted compact JSON (no spaces); the string fields are quoted per
CSV rules only when needed. A row carries everything needed to project it at any capacity:
for model ``lru`` the curve holds ramps ``[start,run]`` in blocks (the k-th block of a
segment hits from ``start + k`` blocks), and bytes become blocks via ``block_bytes``.

A ledger with any other model (hybrid linear/Mamba instances) has the header
:data:`FACTS_HEADER_MODELS`, one more column ``model`` before the curve::

    trace_id,instance_id,timestamp_ns,input_token_len,block_size_tokens,block_bytes,model,hit_curve
    7,mamba-0,1000,20,4,1024,hybrid,"[[4096,2],[7168,3]]"

where a ``hybrid`` curve is a staircase of corners ``[threshold_bytes,hit_blocks]`` (both
strictly increasing: from that many bytes of capacity on, that many head blocks hit) and
``block_bytes`` is the bytes of one full-attention block (a state's bytes are in the
thresholds). :data:`~litehit_core.model.FACT_MODELS` says how each model's curve reads.

A *sampled* ledger (``litehit replay --sample-rate R``, issue 37) starts with one comment
line :func:`sample_line` (``#sample_rate=0.01,sample_seed=0``) and has the header
:data:`FACTS_HEADER_SAMPLED`, one more column ``sampled_blocks`` (the request's blocks the
sample kept) before the curve, which is in blocks *of the sample*; ``input_token_len`` is
the whole request's. An exact ledger never has the comment line, so it is unchanged, and a
reader that knows only the two exact headers refuses a sampled ledger instead of reading
estimates as exact numbers. :mod:`litehit_core.sampled_facts` turns its curves into
estimates of the whole trace's.

A ledger sampled by *subtree* (head-first or hybrid instances: whole requests kept or
dropped below a learned shared trunk, :mod:`litehit_core.sampling`) says so on its comment
line (``#sample_rate=0.01,sample_seed=0,sample_unit=subtree``) and has the header
:data:`FACTS_HEADER_SUBTREE`: the ``model`` column, ``sampled_blocks`` (the request's
blocks if the sample kept it, else 0), ``sample_reuse`` (of those, the blocks the
sample read before), ``trunk_size`` (the instance's trunk so far in the curve's unit:
blocks, or bytes for a hybrid curve; it only grows) and ``trace_reuse`` (the
instance's reused blocks so far, estimated by a block sample); the instance's last row
carries the final values of the last two.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterable, Iterator, Sequence
from itertools import chain
from pathlib import Path
from types import TracebackType
from typing import IO, NamedTuple

from litehit_core.engine import DEFAULT_MODEL, FACT_MODELS
from litehit_core.errors import LocatedError
from litehit_core.lines import DEFAULT_MAX_LINE_BYTES, check_max_line_bytes, read_lines
from litehit_core.model import HitCurveSegment, HitCurveStep
from litehit_core.temporaries import not_a_folder, remove_stale_temps, temp_path

FACTS_HEADER = (
    "trace_id,instance_id,timestamp_ns,input_token_len,block_size_tokens,block_bytes,hit_curve"
)
FACTS_HEADER_MODELS = (
    "trace_id,instance_id,timestamp_ns,input_token_len,block_size_tokens,block_bytes,model,"
    "hit_curve"
)
FACTS_HEADER_SAMPLED = (
    "trace_id,instance_id,timestamp_ns,input_token_len,block_size_tokens,block_bytes,"
    "sampled_blocks,hit_curve"
)
FACTS_HEADER_SUBTREE = (
    "trace_id,instance_id,timestamp_ns,input_token_len,block_size_tokens,block_bytes,model,"
    "sampled_blocks,sample_reuse,trunk_size,trace_reuse,hit_curve"
)
FACTS_FILENAME = "litehit_facts.csv"
SAMPLE_LINE_PREFIX = "#sample_rate="
SAMPLE_UNITS = ("block", "subtree")
"""What a sampled ledger's hash keeps: single blocks (SHARDS; tail-first LRU) or whole
requests by their subtree below the trunk (every other model)."""
_UNIT_SUFFIX = ",sample_unit=subtree"


class LedgerSample(NamedTuple):
    """A sampled ledger's sample: ``rate`` R in (0, 1), the hash ``seed`` and the sampling
    ``unit`` (one of :data:`SAMPLE_UNITS`)."""

    rate: float
    seed: int
    unit: str = "block"


def sample_line(sample: LedgerSample) -> str:
    """The first line of a sampled ledger (no newline): ``#sample_rate=R,sample_seed=k``
    (R as ``repr``, so it reads back exactly), ``,sample_unit=subtree`` appended for a
    sample by subtree. O(1)."""
    suffix = _UNIT_SUFFIX if sample.unit == "subtree" else ""
    return f"{SAMPLE_LINE_PREFIX}{sample.rate!r},sample_seed={sample.seed}{suffix}"


def parse_sample_line(text: str) -> LedgerSample:
    """The sample of a :func:`sample_line` (trailing line ending allowed); ValueError with
    the reason otherwise. O(len)."""
    body = text.rstrip("\r\n")
    unit = "subtree" if body.endswith(_UNIT_SUFFIX) else "block"
    parts = body.removesuffix(_UNIT_SUFFIX).removeprefix(SAMPLE_LINE_PREFIX)
    parts = parts.split(",sample_seed=")
    try:
        if not body.startswith(SAMPLE_LINE_PREFIX) or len(parts) != 2:
            raise ValueError
        rate, seed = float(parts[0]), int(parts[1])
    except ValueError:
        raise ValueError(
            f"a comment line must be {SAMPLE_LINE_PREFIX}R,sample_seed=K (optionally "
            f"followed by {_UNIT_SUFFIX}), got {body!r}"
        ) from None
    if not (0 < rate < 1) or seed < 0:
        raise ValueError(f"sample_rate must be in (0, 1) and sample_seed >= 0, got {body!r}")
    return LedgerSample(rate, seed, unit)


def ledger_sample(path: str | os.PathLike[str]) -> LedgerSample | None:
    """The sample of the ledger at ``path`` (its first line), None for an exact ledger or
    a file that cannot be read (:func:`read_facts` reports that). ValueError for a
    malformed comment line. O(first line)."""
    try:
        with open(path, "rb") as fh:
            first = fh.readline(256)
    except OSError:
        return None
    if not first.startswith(b"#"):
        return None
    return parse_sample_line(first.decode("ascii", "replace"))


class FactRow(NamedTuple):
    """One request of the ledger. Units: tokens, bytes (block_bytes), and the curve's: blocks
    (``model`` lru) or bytes (``model`` hybrid, a staircase)."""

    trace_id: str
    instance_id: str
    timestamp_ns: int
    input_token_len: int
    block_size_tokens: int
    block_bytes: int
    hit_curve: tuple[HitCurveSegment, ...] | tuple[HitCurveStep, ...]
    model: str = DEFAULT_MODEL
    sampled_blocks: int = -1
    """Blocks of the request a sampled ledger's sample kept (-1: an exact ledger)."""
    sample_reuse: int = 0
    """A ledger sampled by subtree: the kept blocks the sample read before."""
    trunk_size: int = 0
    """... the instance's trunk so far, in the curve's unit ..."""
    trace_reuse: int = -1
    """... and its reused blocks so far, estimated (-1: not a ledger sampled by subtree)."""


def format_hit_curve(hit_curve: Sequence[tuple[int, int]]) -> str:
    """Compact JSON of a curve: ``[[s,r],[s,r]]``. O(segments)."""
    if not hit_curve:
        return "[]"
    if len(hit_curve) == 1:
        s, r = hit_curve[0]
        return f"[[{s},{r}]]"
    return "[" + ",".join([f"[{s},{r}]" for s, r in hit_curve]) + "]"


def csv_field(text: str) -> str:
    """``text`` as one CSV field: quoted (quotes doubled) only when it must be. O(len)."""
    if '"' in text or "," in text or "\n" in text or "\r" in text:
        return '"' + text.replace('"', '""') + '"'
    return text


class FactLineFormat:
    """The one formatter of ledger lines, for the rows of one lane: an instance with its
    ``block_size_tokens`` and ``block_bytes`` (the parts of a line that never change are
    formatted once). :func:`format_fact_row` and the offline replay both use it.
    """

    __slots__ = ("_head", "_mid", "_tail")

    def __init__(
        self, instance_id: str, block_size_tokens: int, block_bytes: int, model: str | None = None
    ) -> None:
        """``model``: the value of the ``model`` column (a ledger with
        :data:`FACTS_HEADER_MODELS`), or None for a :data:`FACTS_HEADER` ledger."""
        self._head = f",{csv_field(instance_id)},"
        column = f"{model}," if model is not None else ""
        self._tail = f',{block_size_tokens},{block_bytes},{column}"'
        self._mid = f",{block_size_tokens},{block_bytes},{column}"

    def line(
        self,
        trace_id: str,
        timestamp_ns: int,
        input_token_len: int,
        hit_curve: Sequence[tuple[int, int]],
    ) -> str:
        """One ledger line including the trailing newline. O(segments)."""
        if not trace_id.isalnum():  # letters and digits never need CSV quoting
            trace_id = csv_field(trace_id)
        return (
            f"{trace_id}{self._head}{timestamp_ns},{input_token_len}{self._tail}"
            f'{format_hit_curve(hit_curve)}"\n'
        )

    def sampled_line(
        self,
        trace_id: str,
        timestamp_ns: int,
        input_token_len: int,
        sampled_blocks: int,
        hit_curve: Sequence[tuple[int, int]],
        subtree: tuple[int, int, int] | None = None,
    ) -> str:
        """One line of a :data:`FACTS_HEADER_SAMPLED` ledger (the formatter made without a
        model, ``subtree`` None) or of a :data:`FACTS_HEADER_SUBTREE` one (made with the
        model; ``subtree``: ``sample_reuse``, ``trunk_size`` and ``trace_reuse``),
        trailing newline included. O(segments)."""
        if not trace_id.isalnum():
            trace_id = csv_field(trace_id)
        trunk = "".join(f"{v}," for v in subtree) if subtree is not None else ""
        return (
            f"{trace_id}{self._head}{timestamp_ns},{input_token_len}{self._mid}"
            f'{sampled_blocks},{trunk}"{format_hit_curve(hit_curve)}"\n'
        )


def format_fact_row(row: FactRow, with_model: bool = False) -> str:
    """One ledger line including the trailing newline (see :class:`FactLineFormat`);
    ``with_model`` for a ledger with the ``model`` column."""
    model = row.model if with_model else None
    return FactLineFormat(row.instance_id, row.block_size_tokens, row.block_bytes, model).line(
        row.trace_id, row.timestamp_ns, row.input_token_len, row.hit_curve
    )


class FactsWriter:
    """Write a ledger atomically: ``<path>.<pid>.tmp`` first (:mod:`litehit_core.temporaries`),
    renamed onto ``path`` on success.

    Use as a context manager; an exception inside the block (any ``BaseException``:
    KeyboardInterrupt, the CLI's SIGTERM exception) or :meth:`abort` deletes the temporary
    file and leaves any previous ``path`` untouched. Entering first deletes the temporaries
    of ``path`` that dead processes left (one directory listing). Each write is O(segments).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        with_model: bool = False,
        sample: LedgerSample | None = None,
    ) -> None:
        """``with_model``: write :data:`FACTS_HEADER_MODELS` and the ``model`` column (needed
        as soon as one row is of another model than ``lru``). ``sample``: a sampled ledger
        (module docstring): its :func:`sample_line`, then :data:`FACTS_HEADER_SAMPLED`, or
        :data:`FACTS_HEADER_SUBTREE` for a sample by subtree (rows by
        :meth:`FactLineFormat.sampled_line`; not with ``with_model``)."""
        if sample is not None and with_model:
            raise ValueError("a sampled ledger has no model column")
        self.sample = sample
        self.path = Path(path)
        self.tmp_path = Path(temp_path(self.path))
        self.with_model = with_model
        self.rows_written = 0
        self._fh: IO[str] | None = None

    def __enter__(self) -> FactsWriter:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except FileExistsError:  # a file where a folder must go
            raise not_a_folder(
                next(p for p in self.path.parents if p.exists() and not p.is_dir())
            ) from None
        remove_stale_temps(self.path)
        self._fh = open(self.tmp_path, "w", encoding="utf-8", newline="")
        if self.sample is not None:
            header = FACTS_HEADER_SUBTREE if self.sample.unit == "subtree" else FACTS_HEADER_SAMPLED
            self._fh.write(sample_line(self.sample) + "\n" + header + "\n")
        else:
            self._fh.write((FACTS_HEADER_MODELS if self.with_model else FACTS_HEADER) + "\n")
        return self

    def write(self, row: FactRow) -> None:
        """Append one row. O(segments)."""
        assert self._fh is not None, "FactsWriter used outside its with-block"
        if row.model != DEFAULT_MODEL and not self.with_model:
            raise ValueError(f"a {row.model!r} row needs a ledger with the model column")
        self._fh.write(format_fact_row(row, self.with_model))
        self.rows_written += 1

    def write_lines(self, lines: Iterable[str]) -> None:
        """Append already formatted rows (see :func:`format_fact_row`). O(total length)."""
        assert self._fh is not None, "FactsWriter used outside its with-block"
        n = 0
        for line in lines:
            self._fh.write(line)
            n += 1
        self.rows_written += n

    def abort(self) -> None:
        """Discard everything written; ``path`` is not touched."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        self.tmp_path.unlink(missing_ok=True)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._fh is None:
            return
        if exc_type is not None:
            self.abort()
            return
        try:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._fh.close()
            self._fh = None
            os.replace(self.tmp_path, self.path)
        except BaseException:
            self.abort()
            raise


_CURVE_CACHE = 1 << 16

_INT_FIELDS = ("timestamp_ns", "input_token_len", "block_size_tokens", "block_bytes")
_INT64_MAX = 2**63 - 1


def _field_error(rec: list[str], exc: ValueError) -> str:
    """The reason for a row whose ints or curve failed to parse, naming the field."""
    for field, text in zip(_INT_FIELDS, rec[2:6], strict=True):
        if not (text.isascii() and text.isdigit()):
            return f"{field} must be a non-negative decimal integer, got {text!r}"
    return str(exc)


def _row_error(ts: int, tokens: int, bs: int, bb: int, hit_blocks: int) -> str:
    for field, value in zip(_INT_FIELDS, (ts, tokens, bs, bb), strict=True):
        if value > _INT64_MAX:
            return f"{field} must fit in int64, got {value}"
    if bs <= 0:
        return f"block_size_tokens must be > 0, got {bs}"
    if bb <= 0:
        return f"block_bytes must be > 0, got {bb}"
    return f"hit_curve covers {hit_blocks} blocks of {bs} tokens but input_token_len is {tokens}"


def _id_error(rec: list[str]) -> str | None:
    """A reason if an id field holds bytes that were not UTF-8 (decoded as surrogates)."""
    for field, text in (("trace_id", rec[0]), ("instance_id", rec[1])):
        if not text.isascii():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                return f"{field} is not valid UTF-8, got {text!r}"
    return None


def parse_hit_steps(text: str) -> tuple[HitCurveStep, ...]:
    """Parse and validate a compact staircase ``[[threshold,hits],...]`` (both strictly
    increasing, hits >= 1). Raises ValueError with the reason. O(len)."""
    if text == "[]":
        return ()
    if not (text.startswith("[[") and text.endswith("]]")) or not text.isascii() or " " in text:
        raise ValueError(f"hit_curve must look like [[threshold,hits],...] (compact), got {text!r}")
    out = []
    last_threshold = -1
    last_hits = 0
    for part in text[2:-2].split("],["):
        pair = part.split(",")
        if len(pair) != 2 or not (pair[0].isdigit() and pair[1].isdigit()):
            raise ValueError(f"hit_curve corner must be [threshold,hits] integers, got [{part}]")
        threshold, hits = int(pair[0]), int(pair[1])
        if threshold <= last_threshold or hits <= last_hits:
            raise ValueError(
                f"hit_curve corners must increase in threshold and hits: [{part}] after "
                f"[{last_threshold},{last_hits}]"
            )
        out.append(HitCurveStep(threshold, hits))
        last_threshold, last_hits = threshold, hits
    return tuple(out)


def parse_hit_curve(text: str) -> tuple[HitCurveSegment, ...]:
    """Parse and validate compact curve JSON. Raises ValueError with the reason. O(len)."""
    if text == "[]":
        return ()
    if not (text.startswith("[[") and text.endswith("]]")) or not text.isascii() or " " in text:
        raise ValueError(f"hit_curve must look like [[start,run],...] (compact), got {text!r}")
    out = []
    last_end = 0
    for part in text[2:-2].split("],["):
        pair = part.split(",")
        if len(pair) != 2:
            raise ValueError(f"hit_curve segment must be [start,run], got [{part}]")
        if not (pair[0].isdigit() and pair[1].isdigit()):
            raise ValueError(f"hit_curve segment must hold decimal integers, got [{part}]")
        start, run = int(pair[0]), int(pair[1])
        if run < 1:
            raise ValueError(f"hit_curve run_length must be >= 1, got {run}")
        if start <= last_end:
            raise ValueError(
                f"hit_curve thresholds must increase: start {start} after threshold {last_end}"
            )
        out.append(HitCurveSegment(start, run))
        last_end = start + run - 1
    return tuple(out)


def read_facts(
    path: str | os.PathLike[str], *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> Iterator[FactRow]:
    """Stream the rows of a ledger, validating each one. O(1) memory per row.

    Raises :class:`LocatedError` (``path:line: reason``) on the first malformed row, a
    wrong header or a line longer than ``max_line_bytes`` bytes (which is never read whole:
    see :mod:`litehit_core.lines`). ``ValueError`` for a ``max_line_bytes`` that is not an
    integer > 0. The csv module's process-wide field limit is raised to ``max_line_bytes``
    (never lowered), so every line within the limit parses. Cost: O(file bytes) plus one
    curve parse per distinct curve text.
    """
    check_max_line_bytes(max_line_bytes)
    if csv.field_size_limit() < max_line_bytes:  # process-wide: only ever raised
        csv.field_size_limit(max_line_bytes)  # so a field of any accepted line fits
    name = os.fspath(path)
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise LocatedError(name, 0, f"cannot read the facts: {exc.strerror or exc}") from None
    with fh:
        # Chunks of whole lines, each decoded at once and split as a text file opened with
        # newline="" would (csv needs the endings). surrogateescape: a byte that is not
        # UTF-8 survives into the row, where the id check reports it with its line
        # (numbers and curves are ASCII-checked anyway).
        chunks = read_lines(fh, name, max_line_bytes, split=_text_lines)
        lines: Iterator[str] = chain.from_iterable(chunks)
        first = next(lines, None)
        skip = 0  # the comment line of a sampled ledger: csv's line numbers are one short
        subtree = False
        if first is not None and first.startswith("#"):
            try:
                subtree = parse_sample_line(first).unit == "subtree"
            except ValueError as exc:
                raise LocatedError(name, 1, str(exc)) from None
            skip = 1
        elif first is not None:
            lines = chain((first,), lines)
        reader = csv.reader(lines)
        try:
            header = next(reader, None)
            joined = ",".join(header or [])
            sampled_header = FACTS_HEADER_SUBTREE if subtree else FACTS_HEADER_SAMPLED
            wanted = (sampled_header,) if skip else (FACTS_HEADER, FACTS_HEADER_MODELS)
            if header is None or joined not in wanted:
                raise LocatedError(
                    name,
                    1 + skip,
                    (
                        f"after the sample line the header must be {sampled_header!r}"
                        if skip
                        else f"header must be {FACTS_HEADER!r} (or with a model column: "
                        f"{FACTS_HEADER_MODELS!r})"
                    )
                    + f", got {joined!r}",
                )
            width = {FACTS_HEADER: 7, FACTS_HEADER_SUBTREE: 12}.get(joined, 8)
            with_model = joined in (FACTS_HEADER_MODELS, FACTS_HEADER_SUBTREE)
            at = 7 if subtree else 6  # sampled_blocks
            # Curves repeat heavily (cold requests, whole-chain hits): parse each text once.
            curves: dict[tuple[str, str], tuple[tuple, int]] = {}
            for rec in reader:
                if len(rec) != width:
                    if not rec:
                        continue
                    raise LocatedError(
                        name, reader.line_num + skip, f"expected {width} fields, got {len(rec)}"
                    )
                model = rec[6] if with_model else DEFAULT_MODEL
                sampled, own, trunk, reuse = -1, 0, 0, -1
                text = rec[-1]
                try:
                    digits = rec[2] + rec[3] + rec[4] + rec[5]
                    if not (digits.isascii() and digits.isdigit()) or not all(rec[2:6]):
                        raise ValueError("not digits")
                    ts, tokens, bs, bb = int(rec[2]), int(rec[3]), int(rec[4]), int(rec[5])
                    if skip:
                        sampled = _count(rec[at], "sampled_blocks")
                        if subtree:
                            own = _count(rec[8], "sample_reuse")
                            trunk = _count(rec[9], "trunk_size")
                            reuse = _count(rec[10], "trace_reuse")
                            if own > sampled:
                                raise ValueError(
                                    f"sample_reuse {own} must not exceed sampled_blocks {sampled}"
                                )
                    parsed = curves.get((model, text))
                    if parsed is None:
                        parsed = _parse_curve(model, text)
                        if len(curves) >= _CURVE_CACHE:
                            curves.clear()
                        curves[(model, text)] = parsed
                except ValueError as exc:
                    raise LocatedError(
                        name, reader.line_num + skip, _field_error(rec, exc)
                    ) from None
                curve, hit_blocks = parsed
                if (
                    bs <= 0
                    or bb <= 0
                    or hit_blocks * bs > tokens
                    or max(ts, tokens, bs, bb) > _INT64_MAX
                ):
                    raise LocatedError(
                        name, reader.line_num + skip, _row_error(ts, tokens, bs, bb, hit_blocks)
                    )
                if skip and not (hit_blocks <= sampled <= tokens // bs):
                    raise LocatedError(
                        name,
                        reader.line_num + skip,
                        f"sampled_blocks {sampled} must be between the curve's {hit_blocks} hit "
                        f"blocks and the request's {tokens // bs} blocks",
                    )
                if not (rec[0].isascii() and rec[1].isascii()):
                    reason = _id_error(rec)
                    if reason is not None:
                        raise LocatedError(name, reader.line_num + skip, reason)
                yield FactRow(
                    trace_id=rec[0],
                    instance_id=rec[1],
                    timestamp_ns=ts,
                    input_token_len=tokens,
                    block_size_tokens=bs,
                    block_bytes=bb,
                    hit_curve=curve,
                    model=model,
                    sampled_blocks=sampled,
                    sample_reuse=own,
                    trunk_size=trunk,
                    trace_reuse=reuse,
                )
        except csv.Error as exc:  # e.g. a quoted field over the csv module's field limit
            raise LocatedError(name, reader.line_num + skip, f"malformed CSV: {exc}") from None


def _count(text: str, name: str) -> int:
    """A sampled ledger's count column: a non-negative integer, else ValueError naming it."""
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f"{name} must be a non-negative integer, got {text!r}")
    return int(text)


def _parse_curve(model: str, text: str) -> tuple[tuple, int]:
    """(curve, hit blocks at infinite capacity) of a curve text of ``model``."""
    facts = FACT_MODELS.get(model)
    if facts is None:
        raise ValueError(f"model must be one of {sorted(FACT_MODELS)}, got {model!r}")
    if facts.curve == "steps":
        steps = parse_hit_steps(text)
        return steps, steps[-1][1] if steps else 0
    ramps = parse_hit_curve(text)
    return ramps, sum(r for _, r in ramps)


_SPLITLINES_ONLY = ("\x0b", "\x0c", "\x1c", "\x1d", "\x1e")
"""ASCII characters where ``str.splitlines`` splits but a text file does not."""


def _text_lines(chunk: bytes) -> list[str]:
    """The lines of a chunk of whole lines, as text with their endings untranslated (as a
    file opened with ``newline=""`` gives them). O(len(chunk)) in C: ``str.splitlines``
    when the text has no character it alone would split at (a quarter faster), else a
    ``StringIO``, which splits exactly like a file."""
    text = chunk.decode("utf-8", "surrogateescape")
    if text.isascii() and not any(c in text for c in _SPLITLINES_ONLY):
        return text.splitlines(keepends=True)
    return io.StringIO(text, newline="").readlines()
