"""A real, tiny Hugging Face tokenizer for the tests of ``litehit convert --from text``.

:func:`write_tokenizer` trains a word-level ``tokenizers`` model on :data:`WORDS` (split
on whitespace and punctuation, so ``user:`` is two tokens) with a ``[BOS]`` post-processor
(``add_special_tokens=True`` puts it first) and saves it as ``tokenizer.json``. Tests that
need it skip, naming the install command, when the ``tokenizers`` library is absent.
"""

from __future__ import annotations

from pathlib import Path

import pytest

WORDS = (
    "the quick brown fox jumps over the lazy dog system user assistant tool : hello world "
    "a b c d e f g h i j k l m n o p"
)
"""Every word the tiny tokenizer knows (anything else is ``[UNK]``)."""


def write_tokenizer(folder: Path) -> Path:
    """``folder/tokenizer.json``: the tiny tokenizer (see the module docstring)."""
    tokenizers = pytest.importorskip(
        "tokenizers", reason="needs the tokenizers library: pip install 'litehit[text]'"
    )
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    trainer = tokenizers.trainers.WordLevelTrainer(special_tokens=["[UNK]", "[BOS]"])
    tokenizer.train_from_iterator([WORDS], trainer)
    bos = tokenizer.token_to_id("[BOS]")
    tokenizer.post_processor = tokenizers.processors.TemplateProcessing(
        single="[BOS] $A", special_tokens=[("[BOS]", bos)]
    )
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tokenizer.json"
    tokenizer.save(str(path))
    return path
