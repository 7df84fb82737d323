"""The prompts of ``litehit gen-dataset``: LMCache's draws and decode, exactly and fast.

LMCache turns a hash string ``h`` into ``n`` tokens with ``rng = random.Random(seed(h))``
and ``[rng.choice(vocab) for _ in range(n)]`` (:func:`reference_draw`; ``seed`` is
:func:`chunk_seed`). CPython's ``choice(seq)`` is ``seq[_randbelow(len(seq))]`` and, for a
plain ``Random``, ``_randbelow(m)`` takes the next 32-bit Mersenne Twister output ``w`` and
keeps ``w >> (32 - k)`` (``k = m.bit_length()``) if it is below ``m``, else the next one.
:meth:`Vocabulary.positions` reads those outputs in bulk -- ``getrandbits(32 * c)`` is
``c`` outputs, the first in the lowest 32 bits -- and does the shift and the rejection in
numpy: about 20x faster than one ``choice`` call per token. Drawing more outputs than
needed is harmless (each hash has its own generator). Every :class:`Vocabulary` checks the
bulk draw against :func:`reference_draw` once and falls back to it if they ever differ
(another Python implementation).

The prompt is LMCache's ``decode`` of the ids. For a byte-level decoder (GPT-2, Llama 3,
Qwen, DeepSeek tokenizers) that is the concatenation of the safe tokens' own texts: the
decoder maps each token to its bytes and decodes the whole as UTF-8, and a safe token's
bytes are valid UTF-8 by themselves (otherwise its text would hold U+FFFD, which does not
re-encode to that token), so joining the per-token texts gives the same string.
:func:`joins_exactly` accepts a tokenizer for this only when its decoder is ``ByteLevel``,
no safe token is an added token, and decoding the whole safe vocabulary (and a shuffled
sample with repeats) equals the joined texts; then :class:`Prompts` memoises each chunk's
text and a prompt is a join of strings. Any other tokenizer decodes the ids, in batches.

:class:`ChunkMemo` keeps recently used chunks (LRU, bounded by chunks and by bytes).
"""

from __future__ import annotations

import hashlib
import random
import sys
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from litehit_service.lmcache.gen_dataset.events import Request

__all__ = [
    "MEMO_BYTES",
    "MEMO_CHUNKS",
    "ChunkMemo",
    "Prompts",
    "Vocabulary",
    "chunk_seed",
    "joins_exactly",
    "reference_draw",
]

MEMO_CHUNKS = 65536
"""At most this many chunks are memoised (least recently used dropped) ..."""
MEMO_BYTES = 1 << 25
"""... holding at most this many bytes of ids (4 per token) or text (32 MiB)."""
_CHECK_HASHES = ("0x0", "__tail__check", "日本")
_CHECK_TOKENS = 700


def chunk_seed(hash_text: str) -> int:
    """LMCache's seed of a hash string: SHA-256 of its UTF-8 bytes, big-endian, mod 2**31."""
    return int.from_bytes(hashlib.sha256(hash_text.encode()).digest(), "big") % (2**31)


def reference_draw(hash_text: str, n: int, vocab: Sequence[int]) -> list[int]:
    """LMCache's ``hash_to_tokens``, as written: one ``rng.choice`` per token. O(n)."""
    rng = random.Random(chunk_seed(hash_text))
    return [rng.choice(vocab) for _ in range(n)]


class Vocabulary:
    """The safe vocabulary (LMCache's order) prepared for drawing; ``texts`` (set by
    :meth:`use_texts`) holds each safe token's text, for :meth:`text`."""

    def __init__(self, ids: Sequence[int]) -> None:
        if not ids:
            raise ValueError("the vocabulary is empty")
        self.ids = list(ids)
        self.array = np.asarray(self.ids, dtype=np.uint32)
        self.size = len(self.ids)
        self.shift = 32 - self.size.bit_length()
        self.texts: np.ndarray | None = None
        self._index: dict[int, int] | None = None  # id -> position, without the bulk draw
        self.bulk = True
        self.bulk = all(
            self.draw(h, _CHECK_TOKENS).tolist() == reference_draw(h, _CHECK_TOKENS, self.ids)
            for h in _CHECK_HASHES
        )

    def positions(self, hash_text: str, n: int) -> np.ndarray:
        """Where in the vocabulary the ``n`` draws of ``hash_text`` fall. O(n)."""
        if n <= 0:
            return np.zeros(0, dtype=np.int64)
        if not self.bulk:
            if self._index is None:
                self._index = {t: i for i, t in enumerate(self.ids)}
            drawn = reference_draw(hash_text, n, self.ids)
            return np.asarray([self._index[t] for t in drawn], dtype=np.int64)
        rng = random.Random(chunk_seed(hash_text))
        parts = []
        need = n
        while need > 0:
            count = 2 * need + 16  # at least half the outputs are accepted
            words = rng.getrandbits(32 * count).to_bytes(4 * count, "little")
            picks = np.frombuffer(words, dtype="<u4") >> self.shift
            picks = picks[picks < self.size][:need]
            parts.append(picks)
            need -= len(picks)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def draw(self, hash_text: str, n: int) -> np.ndarray:
        """The ``n`` token ids of ``hash_text`` (uint32): :func:`reference_draw`'s. O(n)."""
        return self.array[self.positions(hash_text, n)]

    def use_texts(self, texts: Sequence[str]) -> None:
        """Each safe token's text (in :attr:`ids` order), for :meth:`text`."""
        self.texts = np.array(list(texts), dtype=object)

    def text(self, hash_text: str, n: int) -> str:
        """The joined texts of the ``n`` tokens of ``hash_text`` (:meth:`use_texts` first)."""
        assert self.texts is not None
        return "".join(self.texts[self.positions(hash_text, n)])


def joins_exactly(tokenizer: Any, vocab: Vocabulary, texts: Sequence[str]) -> bool:
    """Whether ``tokenizer``'s decode of safe tokens is the join of their ``texts``
    (module docstring): a ``tokenizers`` backend whose decoder is ``ByteLevel``, no safe
    token among its added tokens, and two whole-vocabulary decodes that agree. O(vocab)."""
    backend = getattr(tokenizer, "backend", None)
    if backend is None or type(backend.decoder).__name__ != "ByteLevel":
        return False
    if set(backend.get_added_tokens_decoder()) & set(vocab.ids):
        return False
    rng = random.Random(0)
    shuffled = [rng.randrange(vocab.size) for _ in range(2 * vocab.size)]
    sequences = [vocab.ids, [vocab.ids[p] for p in shuffled]]
    expected = ["".join(texts), "".join(texts[p] for p in shuffled)]
    return bool(tokenizer.decode_batch(sequences) == expected)


class ChunkMemo:
    """Recently used chunks' values (``make(hash)``: ids or text), least recently used
    dropped beyond ``max_chunks`` chunks or ``max_bytes`` bytes of values (at least one is
    kept). Exact: a chunk's value is a function of its hash (one chunk size per run)."""

    def __init__(
        self,
        make: Callable[[str], Any],
        max_chunks: int = MEMO_CHUNKS,
        max_bytes: int = MEMO_BYTES,
    ) -> None:
        self.make = make
        self.max_chunks = max_chunks
        self.max_bytes = max_bytes
        self.chunks: OrderedDict[str, tuple[Any, int]] = OrderedDict()
        self.bytes = 0
        self.drawn = 0
        self.reused = 0

    def get(self, hash_text: str) -> Any:
        """The chunk's value (made on a miss). O(1) on a hit, O(chunk) on a miss."""
        chunks = self.chunks
        entry = chunks.get(hash_text)
        if entry is not None:
            chunks.move_to_end(hash_text)
            self.reused += 1
            return entry[0]
        value = self.make(hash_text)
        size = value.nbytes if isinstance(value, np.ndarray) else sys.getsizeof(value)
        chunks[hash_text] = (value, size)
        self.bytes += size
        self.drawn += 1
        while len(chunks) > 1 and (len(chunks) > self.max_chunks or self.bytes > self.max_bytes):
            self.bytes -= chunks.popitem(last=False)[1][1]
        return value


class Prompts:
    """Makes each prompt of one run: as text (``texts``: the vocabulary's texts joined,
    :func:`joins_exactly`) or as token ids for a decode."""

    def __init__(self, vocab: Vocabulary, chunk_size: int, texts: bool) -> None:
        self.vocab = vocab
        self.chunk_size = chunk_size
        self.texts = texts
        make = vocab.text if texts else vocab.draw
        self.memo = ChunkMemo(lambda h: make(h, chunk_size))

    def make(self, request: Request, n: int) -> tuple[str | list[int], int]:
        """The ``n``-th prompt (0-based; text or ids) and its number of tokens."""
        get = self.memo.get
        parts = [get(h) for h in request.hashes]
        tail = request.seq_len - len(request.hashes) * request.chunk_size
        tokens = len(request.hashes) * self.chunk_size + max(tail, 0)
        if tail > 0:
            tail_hash = f"__tail__{request.tail_id(n)}"
            parts.append((self.vocab.text if self.texts else self.vocab.draw)(tail_hash, tail))
        if self.texts:
            return "".join(parts), tokens
        if not parts:
            return [], 0
        return np.concatenate(parts).tolist(), tokens
