"""``litehit gen-dataset``: a ``vllm bench serve`` custom dataset whose prompts share prefixes
exactly as the logged requests shared chunks -- byte for byte LMCache's ``lmcache tool
cache-simulator gen-dataset`` (0.5.6) on the same logs and tokenizer.

LMCache's algorithm (``gen_bench_dataset.py``), which :func:`gen_dataset` follows:

1. the safe vocabulary (:func:`~litehit_service.lmcache.gen_dataset.tokenizer.safe_vocabulary`);
2. a chunk hash string ``h`` becomes ``chunk_size`` tokens: ``rng.choice(vocab)`` per token
   with ``rng = random.Random(int.from_bytes(sha256(h.encode()).digest(), "big") % 2**31)``
   (:mod:`~litehit_service.lmcache.gen_dataset.tokens`: the same draws, in bulk), so equal
   hashes give equal tokens;
3. a request's tokens are its chunks' tokens in order, then, when ``seq_len -
   len(hashes) * chunk_size > 0``, that many tail tokens from the hash string
   ``f"__tail__{id}"`` (:meth:`~litehit_service.lmcache.gen_dataset.events.Request.tail_id`:
   the ``request_id``, else ``f"{timestamp}_{n}"`` with ``n`` the prompt's 0-based position);
4. the prompt is ``decode(tokens, skip_special_tokens=True,
   clean_up_tokenization_spaces=False)`` and its line ``json.dumps({"prompt": prompt,
   "output_tokens": output_len}, ensure_ascii=False) + "\\n"``.

The requests are every input line (LMCache logs, or a standard / Mooncake trace: see
:mod:`~litehit_service.lmcache.gen_dataset.events`), stably sorted by time, the first
``max_samples``. Where LMCache skips a bad line (bad JSON, an unreadable file) or crashes,
gen-dataset stops at the first bad line with ``path:line: field value`` and writes nothing;
see the README for every departure.

Cost: two reads of the input (the index, then each kept line once more), the safe
vocabulary (O(vocabulary), batched in Rust), the draws of each chunk missing from the memo
and of each tail (numpy, ~20 ns per token), and per prompt token either a join of memoised
chunk texts (byte-level tokenizers,
:func:`~litehit_service.lmcache.gen_dataset.tokens.joins_exactly`) or a batched, parallel
decode. Memory: about 44 bytes per request for the index, the chunk memo
(:class:`~litehit_service.lmcache.gen_dataset.tokens.ChunkMemo`: at most
:data:`MEMO_CHUNKS` chunks holding at most :data:`MEMO_BYTES` = 32 MiB of ids or text), and
one batch of prompts (:data:`BATCH_TOKENS` tokens or one longer prompt) -- independent of
the input's size. LMCache keeps every event and every distinct chunk's tokens (a Python
list each).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from litehit_core import InvalidRequestError
from litehit_core.lines import DEFAULT_MAX_LINE_BYTES, check_max_line_bytes
from litehit_service.lmcache.gen_dataset.events import (
    EventParser,
    LookupParser,
    Request,
    index_requests,
    input_files,
)
from litehit_service.lmcache.gen_dataset.tokenizer import (
    SPACE_STARTS,
    PromptTokenizer,
    load_tokenizer,
    safe_vocabulary,
)
from litehit_service.lmcache.gen_dataset.tokens import (
    MEMO_BYTES,
    MEMO_CHUNKS,
    Prompts,
    Vocabulary,
    joins_exactly,
)
from litehit_service.offline.outputs import (
    atomic_outputs,
    byte_progress,
    file_size,
    new_dirs,
    progress_bar,
)
from litehit_service.traces.readers.records import TraceReader
from litehit_service.traces.readers.registry import reader_of_inputs

__all__ = [
    "BATCH_TOKENS",
    "DEFAULT_OUTPUT",
    "DEFAULT_OUTPUT_LEN",
    "MEMO_BYTES",
    "MEMO_CHUNKS",
    "GenDatasetError",
    "GenDatasetSummary",
    "gen_dataset",
]

DEFAULT_OUTPUT = "bench_dataset.jsonl"
DEFAULT_OUTPUT_LEN = 128
BATCH_TOKENS = 1 << 19
"""Prompts are made, decoded and written in batches of about this many tokens (or 256
prompts)."""
BATCH_PROMPTS = 256


class GenDatasetError(InvalidRequestError):
    """An option or an input that gen-dataset cannot use (exit code 2)."""


@dataclass(frozen=True)
class GenDatasetSummary:
    """What :func:`gen_dataset` did: prompts written, their tokens, the chunk tokens drawn
    (memo misses) and reused, the safe vocabulary, the inputs and the output."""

    prompts: int
    tokens: int
    chunks_drawn: int
    chunks_reused: int
    safe_tokens: int
    spaced_tokens: int
    vocab_size: int
    chunk_size: int
    fmt: str
    files: tuple[str, ...]
    tokenizer: str
    tokenizer_note: str
    joined: bool
    output: str
    seconds: float


def _check_options(
    inputs: Sequence[str],
    output_len: int,
    max_samples: int | None,
    block_size: int | None,
    max_line_bytes: int,
) -> None:
    if not inputs:
        raise GenDatasetError("-i/--input needs at least one file or directory")
    if type(output_len) is not int or output_len < 1:
        raise GenDatasetError(f"--output-len must be an integer >= 1, got {output_len!r}")
    if max_samples is not None and (type(max_samples) is not int or max_samples < 0):
        raise GenDatasetError(f"-n/--max-samples must be an integer >= 0, got {max_samples!r}")
    if block_size is not None and (type(block_size) is not int or block_size < 1):
        raise GenDatasetError(f"--block-size must be an integer >= 1, got {block_size!r}")
    check_max_line_bytes(max_line_bytes)


def _parser(reader: TraceReader, model: str | None, block_size: int | None) -> Any:
    """The line parser of ``reader``'s inputs (LMCache logs state their chunk size; the
    other formats take ``block_size``, default the reader's)."""
    if reader.sizes_in_trace:
        if block_size is not None:
            raise GenDatasetError("--block-size is not for LMCache logs: chunk_size is in the logs")
        return LookupParser(model)
    if model is not None and not reader.names_instances:
        raise GenDatasetError(f"--instance is not for {reader.name} traces: they name no instance")
    return EventParser(reader, model, block_size or reader.default_block_size or 0)


def gen_dataset(
    inputs: Sequence[str | os.PathLike[str]],
    tokenizer: str | os.PathLike[str] | PromptTokenizer,
    output: str | os.PathLike[str] = DEFAULT_OUTPUT,
    *,
    fmt: str | None = None,
    output_len: int = DEFAULT_OUTPUT_LEN,
    max_samples: int | None = None,
    model: str | None = None,
    block_size: int | None = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> GenDatasetSummary:
    """Write the dataset of ``inputs`` to ``output`` (module docstring), all or nothing
    (``<output>.<pid>.tmp`` renamed at the end; missing parent folders are made, and
    removed again on failure). ``tokenizer`` is a path for
    :func:`~litehit_service.lmcache.gen_dataset.tokenizer.load_tokenizer` or a loaded tokenizer;
    ``fmt`` a trace format (default: detected); ``max_samples`` None or 0 keeps every
    request; ``model`` keeps one LMCache ``model_name`` or standard ``instance_id``;
    ``block_size`` is the tokens per key of standard and Mooncake traces. Raises
    GenDatasetError / LocatedError for bad options or input, TokenizerError /
    TokenizerUnavailable for the tokenizer. Progress bars on a terminal (stderr).
    """
    started = time.perf_counter()
    paths = [os.fspath(p) for p in inputs]
    out = os.fspath(output)
    _check_options(paths, output_len, max_samples, block_size, max_line_bytes)
    if os.path.isdir(out):
        raise GenDatasetError(f"-o/--output {out} is a directory")
    reader = reader_of_inputs(paths, fmt, max_line_bytes=max_line_bytes)
    parse = _parser(reader, model, block_size)
    tok = load_tokenizer(tokenizer) if isinstance(tokenizer, (str, os.PathLike)) else tokenizer
    files = [f for path in paths for f in input_files(reader, path)]
    total = sum(file_size(f) or 0 for f in files)
    with byte_progress(total, "gen-dataset: reading") as advance:
        index = index_requests(files, parse, max_line_bytes=max_line_bytes, advance=advance)
    if not len(index):
        where = ", ".join(paths)
        if model is None:
            raise GenDatasetError(f"no requests in {where}")
        present = ", ".join(sorted(parse.models)) or "none"
        raise GenDatasetError(
            f"no requests of model {model!r} in {where}; models present: {present}"
        )
    order = index.order(max_samples)
    with progress_bar(tok.vocab_size, "ids", "gen-dataset: safe vocabulary") as advance:
        vocab = safe_vocabulary(tok, advance)
    texts = tok.decode_batch([[i] for i in vocab])
    vocabulary = Vocabulary(vocab)
    joined = joins_exactly(tok, vocabulary, texts)
    if joined:
        vocabulary.use_texts(texts)
    prompts = Prompts(vocabulary, index.chunk_size, joined)
    with (
        new_dirs([os.path.dirname(os.path.abspath(out))]),
        atomic_outputs([out]) as (tmp,),
        open(tmp, "w", encoding="utf-8", newline="") as fh,
        progress_bar(len(order), "requests", "gen-dataset") as advance,
    ):
        tokens = _write(index.requests(order), tok, prompts, output_len, fh, advance)
    return GenDatasetSummary(
        prompts=len(order),
        tokens=tokens,
        chunks_drawn=prompts.memo.drawn,
        chunks_reused=prompts.memo.reused,
        safe_tokens=len(vocab),
        spaced_tokens=sum(1 for text in texts if text[:1] in SPACE_STARTS),
        joined=joined,
        vocab_size=tok.vocab_size,
        chunk_size=index.chunk_size,
        fmt=reader.name,
        files=tuple(files),
        tokenizer=tok.source,
        tokenizer_note=getattr(tok, "note", ""),
        output=out,
        seconds=time.perf_counter() - started,
    )


def _write(
    requests: Iterable[Request],
    tok: PromptTokenizer,
    prompts: Prompts,
    output_len: int,
    fh: Any,
    advance: Any,
) -> int:
    """Make the prompts (joined texts, or ids decoded in batches) and write their lines in
    batches of about :data:`BATCH_TOKENS` tokens; the tokens written."""
    suffix = f', "output_tokens": {json.dumps(output_len)}}}\n'
    batch: list[Any] = []
    pending = 0
    tokens = 0

    def flush() -> None:
        texts = batch if prompts.texts else tok.decode_batch(batch)
        fh.write("".join([f'{{"prompt": {_dumps(t)}{suffix}' for t in texts]))
        advance(len(batch))
        batch.clear()

    for n, request in enumerate(requests):
        prompt, count = prompts.make(request, n)
        batch.append(prompt)
        pending += count
        tokens += count
        if pending >= BATCH_TOKENS or len(batch) >= BATCH_PROMPTS:
            flush()
            pending = 0
    if batch:
        flush()
    return tokens


def _dumps(text: str) -> str:
    """A JSON string as ``json.dumps(..., ensure_ascii=False)`` writes it in a dict."""
    return json.dumps(text, ensure_ascii=False)
