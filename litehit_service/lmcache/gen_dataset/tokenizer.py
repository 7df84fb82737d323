"""The tokenizer of ``litehit gen-dataset``: loaded as transformers' fast tokenizer loads it,
with the ``tokenizers`` library alone, and its safe vocabulary.

LMCache's ``gen-dataset`` calls three things of ``AutoTokenizer.from_pretrained(dir)``:
``vocab_size``, ``decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)``
and ``encode(text, add_special_tokens=False)``. For a fast tokenizer (transformers 5:
``TokenizersBackend``, alias ``PreTrainedTokenizerFast``) these are exactly, on its backend
``tokenizers.Tokenizer``: ``get_vocab_size(with_added_tokens=False)`` (the base vocabulary,
added tokens excluded), ``decode(ids, skip_special_tokens=True)`` (no clean-up) and
``encode_batch([text], add_special_tokens=False)`` with truncation and padding off and
``encode_special_tokens`` = the config's ``split_special_tokens`` (default false).

:func:`load_tokenizer` builds that backend from ``tokenizer.json`` and replays what
transformers' loading does to it from ``tokenizer_config.json`` (:func:`apply_config`): the
config's ``added_tokens_decoder`` entries are added, then every named special token
(``bos_token`` ... ``mask_token``, other string ``*_token`` keys, ``extra_special_tokens`` /
``additional_special_tokens``) that is not an added token yet is added as a special token --
also one from the base vocabulary, which then decodes to nothing with
``skip_special_tokens``. Without ``added_tokens_decoder`` the legacy files are read as
transformers reads them (``special_tokens_map.json``, ``added_tokens.json``). This is the
generic class's loading. A config whose ``tokenizer_class`` names a model-specific class
(``Qwen2Tokenizer``, ``LlamaTokenizer``, ...) makes transformers 5 rebuild the pipeline in
that class's code (Qwen2's replaces the pre-tokenizer and decoder of ``tokenizer.json``),
so such a directory, like one without ``tokenizer.json``, is loaded by transformers itself
when it is installed (``AutoTokenizer.from_pretrained(dir, local_files_only=True)``, no
remote code), as LMCache loads it; without transformers, from ``tokenizer.json`` with a
note. A transformers tokenizer is called through its backend in batches where its class
adds nothing but construction (:func:`generic_calls`), else call by call.

:func:`safe_vocabulary` is LMCache's ``build_safe_vocab`` (same ids, same order) in batches:
a ``decode_batch`` and an ``encode_batch`` per 16,384 ids instead of two Python calls per id
(one per id only for a batch that raised). Cost O(vocabulary) Rust work, in parallel.
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from litehit_core import InvalidRequestError

__all__ = [
    "INSTALL_HINT",
    "MIN_SAFE_TOKENS",
    "SPACE_STARTS",
    "FastTokenizer",
    "PromptTokenizer",
    "TokenizerError",
    "TokenizerUnavailable",
    "TransformersTokenizer",
    "apply_config",
    "generic_calls",
    "import_tokenizers",
    "load_tokenizer",
    "safe_vocabulary",
    "wrap_transformers",
]

INSTALL_HINT = "pip install '.[dataset]' (in the clone)"
"""How to get the optional dependency of ``litehit gen-dataset``."""
SPACE_STARTS = (" ", "\u0120", "\u2581")
"""A safe token whose text starts with one of these comes first (LMCache's preference)."""
MIN_SAFE_TOKENS = 10
"""Fewer safe tokens than this: the tokenizer is refused (LMCache's limit)."""
BATCH_IDS = 16384
"""Ids decoded and re-encoded per batch by :func:`safe_vocabulary`."""
NAMED_SPECIAL = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)
"""transformers' named special tokens, in its order (``SPECIAL_TOKENS_ATTRIBUTES``)."""
GENERIC_CLASSES = frozenset({None, "PreTrainedTokenizerFast", "TokenizersBackend"})
"""``tokenizer_class`` values whose loading :func:`apply_config` replays exactly."""


class TokenizerUnavailable(ImportError):
    """The ``tokenizers`` library, gen-dataset's optional dependency, is not installed."""


class TokenizerError(InvalidRequestError):
    """The tokenizer cannot be loaded or has fewer than :data:`MIN_SAFE_TOKENS` safe tokens."""


class PromptTokenizer(Protocol):
    """What gen-dataset needs of a tokenizer (transformers' calls, see the module doc)."""

    source: str
    note: str  # said on stderr: what may keep the output from being transformers' (or "")
    vocab_size: int

    def decode_batch(self, sequences: Sequence[Sequence[int]]) -> list[str]:
        """``decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)``
        of each sequence."""
        ...

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """``encode(text, add_special_tokens=False)`` of each text."""
        ...


def import_tokenizers() -> Any:
    """The ``tokenizers`` module, or :class:`TokenizerUnavailable` saying how to install it."""
    try:
        import tokenizers
    except ImportError:
        raise TokenizerUnavailable(
            f"gen-dataset needs the 'tokenizers' library: {INSTALL_HINT}"
        ) from None
    return tokenizers


class FastTokenizer:
    """A ``tokenizers.Tokenizer`` called as transformers' fast tokenizer calls it (truncation
    and padding off; ``split_special_tokens`` as configured). Batches run in parallel."""

    def __init__(
        self, backend: Any, source: str, split_special_tokens: bool = False, note: str = ""
    ) -> None:
        backend.no_truncation()
        backend.no_padding()
        backend.encode_special_tokens = bool(split_special_tokens)
        self.backend = backend
        self.source = source
        self.note = note
        self.vocab_size: int = backend.get_vocab_size(with_added_tokens=False)

    def decode_batch(self, sequences: Sequence[Sequence[int]]) -> list[str]:
        return self.backend.decode_batch(sequences, skip_special_tokens=True)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        encodings = self.backend.encode_batch(texts, add_special_tokens=False)
        return [e.ids for e in encodings]


class TransformersTokenizer:
    """A transformers tokenizer without a ``tokenizers`` backend (a slow one), called per
    sequence exactly as LMCache calls it."""

    def __init__(self, tokenizer: Any, source: str) -> None:
        self.tokenizer = tokenizer
        self.source = source
        self.note = ""
        self.vocab_size: int = tokenizer.vocab_size

    def decode_batch(self, sequences: Sequence[Sequence[int]]) -> list[str]:
        decode = self.tokenizer.decode
        return [
            decode(list(ids), skip_special_tokens=True, clean_up_tokenization_spaces=False)
            for ids in sequences
        ]

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        encode = self.tokenizer.encode
        return [list(encode(text, add_special_tokens=False)) for text in texts]


def load_tokenizer(path: str | os.PathLike[str]) -> PromptTokenizer:
    """The tokenizer at ``path``: a directory holding ``tokenizer.json`` (with its
    ``tokenizer_config.json`` applied, :func:`apply_config`), a ``tokenizer.json`` file (the
    same as its directory) or another ``tokenizers`` file (alone); a directory without
    ``tokenizer.json``, or whose config names a model-specific class, through transformers
    when installed (tokenizer.json is then not parsed here). :class:`TokenizerUnavailable`
    without the ``tokenizers`` library; :class:`TokenizerError` naming the path otherwise.
    Local files only. O(tokenizer file)."""
    tokenizers = import_tokenizers()
    where = os.fspath(path)
    directory: str | None = None
    if os.path.isdir(where):
        directory, file = where, os.path.join(where, "tokenizer.json")
        if not os.path.isfile(file):
            return _from_transformers(where)
    elif os.path.isfile(where):
        file = where
        if os.path.basename(where) == "tokenizer.json":
            directory = os.path.dirname(where) or "."
    else:
        raise TokenizerError(
            f"--tokenizer {where}: no such file or directory (give a local directory holding "
            "tokenizer.json, or a tokenizer.json file)"
        )
    config: dict[str, Any] = {}
    note = ""
    if directory is not None:
        config = _json_file(os.path.join(directory, "tokenizer_config.json"))
        kind = config.get("tokenizer_class")
        if kind not in GENERIC_CLASSES:
            loaded, why = _model_specific(directory)
            if loaded is not None:
                return loaded
            note = (
                f"tokenizer_config.json names tokenizer_class {kind!r}, whose pipeline "
                f"transformers builds in code; {why}, so gen-dataset reads tokenizer.json "
                "(the two normally agree)"
            )
    try:
        backend = tokenizers.Tokenizer.from_file(file)
    except Exception as exc:  # the Rust side raises plain Exception
        raise TokenizerError(f"--tokenizer {file}: not a tokenizers file: {exc}") from None
    if directory is not None:
        apply_config(backend, config, directory, tokenizers.AddedToken)
    return FastTokenizer(backend, file, bool(config.get("split_special_tokens", False)), note)


def _auto_tokenizer(directory: str) -> PromptTokenizer:
    """``directory`` loaded by transformers' ``AutoTokenizer`` (local files, no remote
    code), as LMCache loads it, and wrapped (:func:`wrap_transformers`).
    TokenizerUnavailable without transformers; TokenizerError (the exception's type and
    text) when transformers cannot load it."""
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise TokenizerUnavailable("transformers is not installed") from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
    except Exception as exc:
        raise TokenizerError(f"{type(exc).__name__}: {exc}") from None
    return wrap_transformers(tokenizer, directory)


def _model_specific(directory: str) -> tuple[PromptTokenizer | None, str]:
    """A folder whose config names a model-specific ``tokenizer_class``, through
    transformers (:func:`_auto_tokenizer`): that class's own pipeline. ``(None, why not)``
    when transformers is not installed or cannot load it."""
    try:
        return _auto_tokenizer(directory), ""
    except TokenizerUnavailable:
        return None, "transformers is not installed (pip install transformers for it)"
    except TokenizerError as exc:
        return None, f"transformers cannot load it ({exc})"


def _from_transformers(directory: str) -> PromptTokenizer:
    """A directory without tokenizer.json, loaded by transformers (:func:`_auto_tokenizer`)."""
    try:
        return _auto_tokenizer(directory)
    except TokenizerUnavailable:
        raise TokenizerError(
            f"--tokenizer {directory}: the directory holds no tokenizer.json (install "
            "transformers to load other tokenizer files, or give a directory with tokenizer.json)"
        ) from None
    except TokenizerError as exc:
        raise TokenizerError(
            f"--tokenizer {directory}: transformers cannot load it: {exc}"
        ) from None


def wrap_transformers(tokenizer: Any, directory: str) -> PromptTokenizer:
    """A tokenizer transformers loaded from ``directory``: its ``tokenizers`` backend called
    directly (in batches) when :func:`generic_calls` says transformers' encode and decode
    are the backend's, else each call through transformers (:class:`TransformersTokenizer`:
    exact for any class, one Python call per sequence)."""
    source = f"{directory} (transformers {type(tokenizer).__name__})"
    if not generic_calls(tokenizer):
        return TransformersTokenizer(tokenizer, source)
    split = bool(getattr(tokenizer, "split_special_tokens", False))
    return FastTokenizer(tokenizer.backend_tokenizer, source, split)


def generic_calls(tokenizer: Any) -> bool:
    """Whether ``tokenizer``'s ``vocab_size``, ``encode`` and ``decode`` are transformers'
    generic fast tokenizer's (``TokenizersBackend``), so its ``backend_tokenizer`` answers
    them: it is a fast tokenizer and every class between its own and the generic one
    defines no method, property or class/static method but ``__init__`` (deny by default: a
    model class that overrides anything callable, ``_decode`` say, is called through
    transformers). O(class attributes)."""
    from transformers import PreTrainedTokenizerFast as generic

    if not isinstance(tokenizer, generic) or getattr(tokenizer, "backend_tokenizer", None) is None:
        return False
    for klass in type(tokenizer).__mro__:
        if klass is generic:
            return True
        for name, value in vars(klass).items():
            if name != "__init__" and (
                inspect.isfunction(value)
                or isinstance(value, (property, classmethod, staticmethod))
            ):
                return False
    return False


def _json_file(path: str) -> dict[str, Any]:
    """A JSON object file, ``{}`` when absent; a TokenizerError naming it when unreadable."""
    if not os.path.isfile(path):
        return {}
    try:
        with open(path, encoding="utf-8") as fh:
            value = json.load(fh)
    except (OSError, ValueError) as exc:
        raise TokenizerError(f"{path}: cannot read it as JSON: {exc}") from None
    if not isinstance(value, dict):
        raise TokenizerError(f"{path}: expected a JSON object")
    return value


def apply_config(
    backend: Any, config: dict[str, Any], directory: str, added_token: Callable[..., Any]
) -> None:
    """Add to ``backend`` the tokens transformers' generic fast tokenizer adds when it loads
    ``directory`` with ``config`` (its tokenizer_config.json), in transformers' order:
    every ``added_tokens_decoder`` entry (by id), then each named special token (the
    :data:`NAMED_SPECIAL` ones, other string ``*_token`` keys, ``extra_special_tokens``)
    that is not an added token yet, as special. A named token that matches an added token
    by text takes that token's settings. O(added tokens)."""
    config = dict(config)
    if "additional_special_tokens" in config and not config.get("extra_special_tokens"):
        config["extra_special_tokens"] = config.pop("additional_special_tokens")
    specific = {
        key: config.pop(key)
        for key in list(config)
        if key not in NAMED_SPECIAL and key.endswith("_token") and isinstance(config[key], str)
    }
    if isinstance(config.get("extra_special_tokens"), dict):
        specific.update(config.pop("extra_special_tokens"))
    decoder: dict[int, Any] = {}
    if "added_tokens_decoder" in config:
        for idx, token in (config["added_tokens_decoder"] or {}).items():
            decoder[int(idx)] = _added(token, added_token)
    else:
        _legacy(config, specific, decoder, directory, backend, added_token)
    by_text = {str(t): t for t in decoder.values()}
    named = [_added(config.get(key), added_token) for key in NAMED_SPECIAL]
    if by_text:  # transformers maps the seven named ones (not the others) by text
        named = [t if t is None else by_text.get(str(t), t) for t in named]
    named += [_added(value, added_token) for value in specific.values()]
    named = [t for t in named if t is not None]
    extras = config.get("extra_special_tokens") or []
    extras = [_added(t, added_token) for t in extras] if isinstance(extras, list) else []

    to_add = [token for _, token in sorted(decoder.items())]
    present = list(_added_texts(backend)) + [str(t) for t in to_add]
    for token in (*named, *extras):
        if str(token) not in present and token not in to_add:
            to_add.append(token)
    if not to_add:
        return
    named_texts = [str(t) for t in named if t]
    tokens = []
    for token in to_add:
        if isinstance(token, str):
            token = added_token(token, special=True)
        elif not token.special and str(token) in named_texts:
            token.special = True
        tokens.append(token)
    backend.add_tokens(tokens)


def _added(value: Any, added_token: Callable[..., Any]) -> Any:
    """A config value as transformers takes it: an AddedToken for a token object, else as is."""
    if isinstance(value, dict):
        return added_token(**{k: v for k, v in value.items() if k != "__type"})
    return value


def _added_texts(backend: Any) -> list[str]:
    """The texts of the backend's added tokens, by id."""
    return [t.content for _, t in sorted(backend.get_added_tokens_decoder().items())]


def _legacy(
    config: dict[str, Any],
    specific: dict[str, Any],
    decoder: dict[int, Any],
    directory: str,
    backend: Any,
    added_token: Callable[..., Any],
) -> None:
    """Without ``added_tokens_decoder``: special_tokens_map.json's values, added_tokens.json's
    tokens and tokenizer.json's added tokens, as transformers' legacy loading reads them."""
    special_map = _json_file(os.path.join(directory, "special_tokens_map.json"))
    for key, value in special_map.items():
        if isinstance(value, dict) and key != "extra_special_tokens":
            fields = {k: v for k, v in value.items() if k not in ("special", "__type")}
            value = added_token(**fields, special=True)
        elif key == "extra_special_tokens" and isinstance(value, list):
            merged = list(config.get("extra_special_tokens") or [])
            for token in value:
                if isinstance(token, dict):
                    fields = {k: v for k, v in token.items() if k not in ("special", "__type")}
                    token = added_token(**fields, special=True)
                if token not in merged:
                    merged.append(token)
            value = merged
        config[key] = value
    if isinstance(config.get("extra_special_tokens"), dict):
        specific.update(config.pop("extra_special_tokens"))
    if "additional_special_tokens" in config and not config.get("extra_special_tokens"):
        config["extra_special_tokens"] = config.pop("additional_special_tokens")
    added_file = _json_file(os.path.join(directory, "added_tokens.json"))
    if added_file:
        specials = {str(config[k]) for k in NAMED_SPECIAL if config.get(k)}
        specials.update(str(t) for t in (config.get("extra_special_tokens") or []))
        for text, idx in added_file.items():
            special = text in specials
            decoder[idx] = added_token(
                text, rstrip=False, lstrip=False, normalized=not special, special=special
            )
    for idx, token in backend.get_added_tokens_decoder().items():
        decoder[idx] = token


def safe_vocabulary(
    tokenizer: PromptTokenizer, advance: Callable[[int], object] | None = None
) -> list[int]:
    """LMCache's ``build_safe_vocab``: every id of ``range(vocab_size)`` whose decoded text
    is non-empty, printable and re-encodes to exactly that id; those whose text starts with
    one of :data:`SPACE_STARTS` first, then the others, each in id order. A decode or encode
    that raises drops its id (LMCache's rule), found by retrying the batch one by one.
    ``advance(n)`` hears the ids done. :class:`TokenizerError` for fewer than
    :data:`MIN_SAFE_TOKENS`. O(vocabulary) in batches of :data:`BATCH_IDS`."""
    spaced: list[int] = []
    other: list[int] = []
    size = tokenizer.vocab_size
    for start in range(0, size, BATCH_IDS):
        ids = range(start, min(size, start + BATCH_IDS))
        texts = _each(tokenizer.decode_batch, [[i] for i in ids])
        candidates = [(i, t) for i, t in zip(ids, texts, strict=True) if t and t.isprintable()]
        encoded = _each(tokenizer.encode_batch, [t for _, t in candidates])
        for (i, text), ids_back in zip(candidates, encoded, strict=True):
            if ids_back == [i]:
                (spaced if text[0] in SPACE_STARTS else other).append(i)
        if advance is not None:
            advance(len(ids))
    found = spaced + other
    if len(found) < MIN_SAFE_TOKENS:
        raise TokenizerError(
            f"--tokenizer {tokenizer.source}: only {len(found)} safe tokens in its vocabulary of "
            f"{size} (at least {MIN_SAFE_TOKENS} needed); this tokenizer is not supported"
        )
    return found


def _each(batch: Callable[[list[Any]], list[Any]], items: list[Any]) -> list[Any]:
    """``batch(items)``; when it raises, each item alone, ``None`` for those that raise."""
    try:
        return batch(items)
    except Exception:
        pass
    out = []
    for item in items:
        try:
            out.append(batch([item])[0])
        except Exception:
            out.append(None)
    return out
