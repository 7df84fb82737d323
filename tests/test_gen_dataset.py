"""``litehit gen-dataset`` against LMCache 0.5.6's own ``gen-dataset`` (byte-identical files)
on hand-built logs and the checked-in log, with small BPE tokenizers trained here; the safe
vocabulary and the transformers-equivalent tokenizer load; standard and Mooncake inputs
against prompts computed here from the rule; errors (``path:line: field value``, exit 2,
nothing written), the missing-library message and the option checks.

LMCache's modules come from the unpacked wheel as in test_lmcache_parity.py
(``$LMCACHE_WHEEL_DIR`` or ``.ci-lmcache/wheel`` from ``scripts/test-extras``; required
under CI); it loads the tokenizer with ``transformers.AutoTokenizer`` (the dev extra).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import io
import json
import logging
import os
import random
import subprocess
import sys
import warnings
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest
from conftest import require, run_cli
from serve_process import serve_env
from test_lmcache_parity import NO_WHEEL, WHEEL
from test_simulate import FIXTURE

from litehit_service.cli import main
from litehit_service.lmcache.gen_dataset.dataset import gen_dataset
from litehit_service.lmcache.gen_dataset.events import LookupParser, Request, SortKeys
from litehit_service.lmcache.gen_dataset.tokenizer import (
    TokenizerError,
    load_tokenizer,
    safe_vocabulary,
)
from litehit_service.lmcache.gen_dataset.tokens import (
    ChunkMemo,
    Prompts,
    Vocabulary,
    joins_exactly,
    reference_draw,
)

tokenizers = pytest.importorskip("tokenizers")  # the dev extra installs it (CI: always there)

WORDS = (
    "alpha beta gamma delta cache prefix token hit miss block chunk request model server "
    "héllo naïve über ñandú 日本 中文 ключ данные café zoë"
).split()
MISSING = object()


# ----------------------------------------------------------------------------- tokenizers


def corpus(seed: int = 7, lines: int = 400) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        words = [rng.choice(WORDS) for _ in range(rng.randint(5, 25))]
        words += ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(3))]
        out.append(" ".join(words) + rng.choice([".", "!", "?", ",", ""]))
    return out


def make_tokenizer(folder: Path, kind: str = "bytelevel", config: dict | None = None) -> Path:
    """A BPE tokenizer trained here (vocabulary ~500, special tokens ``<unk>``, ``<s>``,
    ``</s>``) saved as ``folder/tokenizer.json`` with a tokenizer_config.json (``config``,
    default naming ``</s>`` as eos) that transformers' AutoTokenizer loads."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    specials = ["<unk>", "<s>", "</s>"]
    if kind == "bytelevel":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    else:
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
        alphabet = []
    trainer = trainers.BpeTrainer(
        vocab_size=500, special_tokens=specials, initial_alphabet=alphabet
    )
    tok.train_from_iterator(corpus(), trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    config = {"eos_token": "</s>", "bos_token": "<s>"} if config is None else config
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


@pytest.fixture(scope="module", params=["bytelevel", "metaspace"])
def tok_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tokenizer(tmp_path_factory.mktemp(request.param) / "tok", request.param)


@pytest.fixture(scope="module")
def byte_tok(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tokenizer(tmp_path_factory.mktemp("bytelevel") / "tok")


# ----------------------------------------------------------------------------- LMCache


@pytest.fixture(scope="module")
def lmcache() -> Any:
    require(
        (WHEEL / "lmcache/tools/cache_simulator/gen_bench_dataset.py").is_file(),
        NO_WHEEL,
    )
    require(importlib.util.find_spec("transformers") is not None, "transformers is not installed")
    sys.path.insert(0, str(WHEEL))
    logging.disable(logging.WARNING)  # lmcache/__init__ warns that torch is absent
    try:
        from lmcache.tools.cache_simulator import gen_bench_dataset
    finally:
        logging.disable(logging.NOTSET)
    return gen_bench_dataset


def auto_tokenizer(folder: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


def theirs(gen: Any, out: Path, inputs: list[Path], tok: Path, *extra: str) -> bytes:
    """LMCache's ``run_gen_dataset`` (its own parser, AutoTokenizer) -> the file's bytes."""
    parser = argparse.ArgumentParser()
    gen.add_gen_dataset_arguments(parser)
    argv = ["-i", *map(str, inputs), "--tokenizer", str(tok), "-o", str(out), *extra]
    with redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gen.run_gen_dataset(parser.parse_args(argv))
    return out.read_bytes()


def ours(capsys: pytest.CaptureFixture[str], out: Path, inputs: list[Path], tok: Path,
         *extra: str) -> bytes:  # fmt: skip
    """``litehit gen-dataset`` through the CLI entry point -> the file's bytes."""
    argv = ["gen-dataset", "-i", *map(str, inputs), "--tokenizer", str(tok), "-o", str(out)]
    code = main([*argv, *extra])
    _, err = capsys.readouterr()
    assert code == 0, err
    assert f"-> {out}" in err.splitlines()[-1]
    return out.read_bytes()


def lookup(**fields: Any) -> str:
    """One LMCache lookup line; fields given as MISSING are left out."""
    base = {"timestamp": 1.0, "request_id": "r", "model_name": "m1", "chunk_size": 4,
            "seq_len": 8, "dtypes": ["bfloat16"], "shapes": [[1, 4, 8]],
            "chunk_hashes": ["0x1", "0x2"]}  # fmt: skip
    base.update(fields)
    return json.dumps({k: v for k, v in base.items() if v is not MISSING}, ensure_ascii=False)


def write_lines(path: Path, lines: list[str], ending: str = "\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes("".join(line + ending for line in lines).encode("utf-8"))
    return path


def hand_built_logs(root: Path) -> list[Path]:
    """A directory (two lookup_hashes files, one CRLF, and a file the glob ignores) and a
    file: unsorted and equal timestamps across files, int and float timestamps, a missing
    timestamp, two models, tails with and without request_id (string, number, null,
    non-ASCII), a partial tail chunk's hash, non-ASCII hash strings."""
    logs = root / "logs"
    write_lines(logs / "lookup_hashes_b.jsonl", [
        lookup(timestamp=5.5, request_id="r1", seq_len=10, chunk_hashes=["0xa", "0xb"]),
        lookup(timestamp=2, request_id="r2", model_name="m2", chunk_hashes=["0xa", "0xc"]),
        lookup(timestamp=5.5, request_id=MISSING, seq_len=13,
               chunk_hashes=["0xa", "0xb", "0xd"]),
    ])  # fmt: skip
    write_lines(logs / "lookup_hashes_a.jsonl", [
        lookup(timestamp=1700000000.123456, request_id="ключ-7", seq_len=7,
               chunk_hashes=["0xa"]),
        lookup(timestamp=3, request_id=42, seq_len=6, chunk_hashes=["0xa"]),
        "",
        lookup(timestamp=2.0, request_id=MISSING, seq_len=9, chunk_hashes=["0xa", "0xb", "0xe"]),
        lookup(timestamp=1e-7, request_id=3.25, seq_len=12,
               chunk_hashes=["0xa", "0xb", "日本"]),
    ], ending="\r\n")  # fmt: skip
    write_lines(logs / "other.jsonl", [lookup(timestamp=0.1, request_id="ignored")])
    extra = write_lines(root / "extra.jsonl", [
        lookup(timestamp=MISSING, request_id=None, model_name="m2", seq_len=5,
               chunk_hashes=["日本"]),
        lookup(timestamp=0.5, request_id=MISSING, seq_len=3, chunk_hashes=[]),
        lookup(timestamp=4, request_id=MISSING, seq_len=3, chunk_hashes=MISSING),
        lookup(timestamp=2, request_id="r2-again", seq_len=8, chunk_hashes=["0xa", "0xc"]),
        lookup(timestamp=1e16, request_id=MISSING, seq_len=6, chunk_hashes=["0xf"]),
    ])  # fmt: skip
    return [logs, extra]


# ----------------------------------------------------------------------------- parity


@pytest.mark.parametrize(
    "extra",
    [
        [],
        ["--model", "m1"],  # LMCache's spelling, which ours accepts as --instance
        ["-n", "4"],
        ["--model", "m1", "-n", "3", "--output-len", "7"],
        ["-n", "0", "--model", "m2"],
    ],
)
def test_hand_built_logs_give_lmcaches_bytes(
    lmcache: Any, tok_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    extra: list[str],
) -> None:  # fmt: skip
    inputs = hand_built_logs(tmp_path)
    expected = theirs(lmcache, tmp_path / "theirs.jsonl", inputs, tok_dir, *extra)
    assert expected  # a real comparison: LMCache wrote prompts
    assert ours(capsys, tmp_path / "ours.jsonl", inputs, tok_dir, *extra) == expected


@pytest.mark.parametrize("extra", [[], ["-n", "50", "--output-len", "1"]])
def test_the_checked_in_log_gives_lmcaches_bytes(
    lmcache: Any, tok_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    extra: list[str],
) -> None:  # fmt: skip
    expected = theirs(lmcache, tmp_path / "theirs.jsonl", [FIXTURE], tok_dir, *extra)
    assert expected.count(b"\n") == (50 if extra else 400)
    assert ours(capsys, tmp_path / "ours.jsonl", [FIXTURE], tok_dir, *extra) == expected


def test_many_files_interleaved_in_time_give_lmcaches_bytes(
    lmcache: Any, byte_tok: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """More files than gen-dataset keeps open while it reads lines back in time order."""
    logs = tmp_path / "logs"
    for f in range(40):
        write_lines(logs / f"lookup_hashes_{f:02d}.jsonl", [
            lookup(timestamp=(k * 40 + 39 - f) / 8, request_id=f"f{f}-{k}", seq_len=9 + k,
                   chunk_hashes=[f"0x{k}", f"0x{f % 3}"])
            for k in range(3)
        ])  # fmt: skip
    expected = theirs(lmcache, tmp_path / "theirs.jsonl", [logs], byte_tok)
    assert ours(capsys, tmp_path / "ours.jsonl", [logs], byte_tok) == expected


def test_safe_vocabulary_is_lmcaches(lmcache: Any, tok_dir: Path) -> None:
    ids = safe_vocabulary(load_tokenizer(tok_dir))
    assert ids == lmcache.build_safe_vocab(auto_tokenizer(tok_dir))
    assert len(ids) > 100


def test_a_promoted_special_token_leaves_the_safe_vocabulary(lmcache: Any, tmp_path: Path) -> None:
    """tokenizer_config.json naming a base-vocabulary token as special: transformers makes
    it special (it decodes to nothing), and so does gen-dataset."""
    plain = make_tokenizer(tmp_path / "plain")
    promoted = make_tokenizer(tmp_path / "promoted", config={"bos_token": "alpha"})
    alpha = tokenizers.Tokenizer.from_file(str(plain / "tokenizer.json")).token_to_id("alpha")
    assert alpha in safe_vocabulary(load_tokenizer(plain))
    ids = safe_vocabulary(load_tokenizer(promoted))
    assert alpha not in ids
    assert ids == lmcache.build_safe_vocab(auto_tokenizer(promoted))


CONFIGS = [
    {},
    {"eos_token": "</s>", "bos_token": "beta", "tokenizer_class": "PreTrainedTokenizerFast"},
    {"additional_special_tokens": ["<a1>", "gamma"], "image_token": "<img>", "pad_token": "<p>"},
    {"extra_special_tokens": {"image_token": "<img>"}, "split_special_tokens": True},
    {
        "added_tokens_decoder": {
            "2": {"content": "</s>", "lstrip": False, "rstrip": False, "normalized": False,
                  "single_word": False, "special": True},
            "600": {"content": "<think>", "lstrip": False, "rstrip": False,
                    "normalized": False, "single_word": False, "special": False},
            "601": {"content": "delta", "lstrip": False, "rstrip": False, "normalized": True,
                    "single_word": False, "special": False},
        },
        "eos_token": "</s>",
        "unk_token": "<think>",
    },
]  # fmt: skip


@pytest.mark.parametrize("config", CONFIGS)
def test_the_tokenizer_loads_as_transformers_loads_it(
    lmcache: Any, tmp_path: Path, config: dict
) -> None:
    """Our backend equals transformers' (post-processor, truncation and padding aside: the
    calls made never use them): same vocabulary, added tokens and flags."""
    folder = make_tokenizer(tmp_path / "tok", config=config)
    mine = load_tokenizer(folder)
    auto = auto_tokenizer(folder)
    a = json.loads(auto.backend_tokenizer.to_str())
    b = json.loads(mine.backend.to_str())
    for key in ("post_processor", "truncation", "padding"):
        a.pop(key), b.pop(key)
    assert b == a
    assert mine.vocab_size == auto.vocab_size
    assert mine.backend.encode_special_tokens == auto.split_special_tokens


def test_a_folder_without_tokenizer_json_loads_through_transformers(
    lmcache: Any, byte_tok: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "gpt2"
    folder.mkdir()
    tokenizers.Tokenizer.from_file(str(byte_tok / "tokenizer.json")).model.save(str(folder))
    config = {"tokenizer_class": "GPT2Tokenizer", "eos_token": "</s>"}
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    expected = theirs(lmcache, tmp_path / "theirs.jsonl", [FIXTURE], folder)
    assert ours(capsys, tmp_path / "ours.jsonl", [FIXTURE], folder) == expected


def test_a_tokenizer_json_file_is_its_folder(byte_tok: Path, tmp_path: Path) -> None:
    a = gen_dataset([FIXTURE], byte_tok, tmp_path / "a.jsonl")
    b = gen_dataset([FIXTURE], byte_tok / "tokenizer.json", tmp_path / "b.jsonl")
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    assert a.prompts == b.prompts == 400 and a.tokenizer_note == ""


# ----------------------------------------------------------------------------- the rule


def draw(hash_text: str, n: int, vocab: list[int]) -> list[int]:
    """LMCache's rule, written out: n choices seeded by SHA-256 of the hash string."""
    seed = int(hashlib.sha256(hash_text.encode("utf-8")).hexdigest(), 16) % 2**31
    rng = random.Random(seed)
    return [rng.choice(vocab) for _ in range(n)]


def expected_ids(keys: list[int], block: int, seq_len: int, rid: str, vocab: list[int]) -> list:
    ids = [t for k in keys for t in draw(str(k), block, vocab)]
    if seq_len > len(keys) * block:
        ids += draw(f"__tail__{rid}", seq_len - len(keys) * block, vocab)
    return ids


def prompts(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_a_standard_trace_follows_the_rule(
    byte_tok: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = write_lines(tmp_path / "trace.jsonl", [
        json.dumps({"type": "request", "instance_id": "i", "trace_id": "t1",
                    "timestamp_ns": 2000, "keys": [1, 2, 3], "input_len": 14}),
        json.dumps({"type": "write", "instance_id": "i", "timestamp_ns": 1500, "keys": [1]}),
        json.dumps({"type": "get", "instance_id": "i", "trace_id": "t2",
                    "timestamp_ns": 1000, "keys": [1, 2, -5], "input_len": 12}),
        json.dumps({"type": "get", "instance_id": "j", "timestamp_ns": 3000, "keys": [1],
                    "input_len": 6}),
    ])  # fmt: skip
    out = tmp_path / "out.jsonl"
    ours(capsys, out, [trace], byte_tok, "--block-size", "4", "--output-len", "9")
    vocab = safe_vocabulary(load_tokenizer(byte_tok))
    raw = tokenizers.Tokenizer.from_file(str(byte_tok / "tokenizer.json"))
    wanted = [
        expected_ids([1, 2, -5], 4, 12, "t2", vocab),
        expected_ids([1, 2, 3], 4, 14, "t1", vocab),
        expected_ids([1], 4, 6, "4", vocab),  # no trace_id: the line number
    ]
    got = prompts(out)
    assert [p["prompt"] for p in got] == [raw.decode(ids) for ids in wanted]
    assert {p["output_tokens"] for p in got} == {9}
    shared = raw.decode(wanted[0][:8])  # keys 1, 2: the same tokens, the same text
    assert got[0]["prompt"].startswith(shared) and got[1]["prompt"].startswith(shared)
    assert got[0]["prompt"][: len(shared) + 5] != got[1]["prompt"][: len(shared) + 5]

    only_j = tmp_path / "j.jsonl"
    ours(capsys, only_j, [trace], byte_tok, "--block-size", "4", "--instance", "j")
    assert [p["prompt"] for p in prompts(only_j)] == [raw.decode(wanted[2])]

    # -n N keeps the first N requests in time order; -n 0 keeps every one (LMCache's rule)
    for n, kept in (("2", wanted[:2]), ("0", wanted), ("9", wanted)):
        first = tmp_path / f"n{n}.jsonl"
        ours(capsys, first, [trace], byte_tok, "--block-size", "4", "-n", n)
        assert [p["prompt"] for p in prompts(first)] == [raw.decode(ids) for ids in kept], n


def test_a_mooncake_trace_follows_the_rule(
    byte_tok: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = write_lines(tmp_path / "moon.jsonl", [
        json.dumps({"timestamp": 10, "input_length": 9, "output_length": 3,
                    "hash_ids": [7, 8, 9]}),
        json.dumps({"timestamp": 5, "input_length": 8, "output_length": 3, "hash_ids": [7, 8]}),
    ])  # fmt: skip
    out = tmp_path / "out.jsonl"
    ours(capsys, out, [trace], byte_tok, "--block-size", "4")  # detected as Mooncake
    vocab = safe_vocabulary(load_tokenizer(byte_tok))
    raw = tokenizers.Tokenizer.from_file(str(byte_tok / "tokenizer.json"))
    wanted = [expected_ids([7, 8], 4, 8, "2", vocab), expected_ids([7, 8], 4, 9, "1", vocab)]
    assert [p["prompt"] for p in prompts(out)] == [raw.decode(ids) for ids in wanted]
    assert prompts(out)[1]["prompt"].startswith(prompts(out)[0]["prompt"])


def test_bulk_draws_and_the_memo_follow_the_rule(byte_tok: Path) -> None:
    ids = safe_vocabulary(load_tokenizer(byte_tok))
    vocab = Vocabulary(ids)
    assert vocab.bulk  # CPython: the bulk draw is taken, and checked here too
    for h, n in [("0xabc", 37), ("日本", 5), ("__tail__r9", 5000), ("", 1), ("x", 0)]:
        assert vocab.draw(h, n).tolist() == draw(h, n, ids) == reference_draw(h, n, ids)
    for size in (10, 11, 1023, 1024, 1025, 65537):  # acceptance rates from 1/2 to 1
        many = list(range(7, 7 + size))
        assert Vocabulary(many).draw("h", 3000).tolist() == draw("h", 3000, many)
    small = ChunkMemo(lambda h: vocab.draw(h, 6), max_chunks=2)
    big = ChunkMemo(lambda h: vocab.draw(h, 6))
    names = [f"h{i % 5}" for i in range(40)]
    assert [small.get(h).tolist() for h in names] == [big.get(h).tolist() for h in names]
    assert len(small.chunks) == 2 and small.drawn > big.drawn == 5
    by_bytes = ChunkMemo(lambda h: vocab.draw(h, 6), max_bytes=60)  # 24 bytes per chunk
    for h in names:
        by_bytes.get(h)
    assert len(by_bytes.chunks) == 2 and by_bytes.bytes == 48


def test_byte_level_prompts_are_joined_texts_equal_to_the_decode(tok_dir: Path) -> None:
    """Byte-level tokenizers join the safe tokens' texts (exactly the decode); others
    decode the ids. Both give the decode of the ids."""
    tok = load_tokenizer(tok_dir)
    ids = safe_vocabulary(tok)
    texts = tok.decode_batch([[i] for i in ids])
    vocab = Vocabulary(ids)
    joined = joins_exactly(tok, vocab, texts)
    assert joined == (tok_dir.parent.name.startswith("bytelevel"))
    by_ids = Prompts(vocab, 5, texts=False)
    requests = [
        Request(["a", "b"], 5, 13, "r1", None),
        Request(["a", "日本"], 5, 10, None, "2.5"),
        Request([], 5, 3, None, None),
        Request(["a", "b", "c"], 5, 14, "x", None),
    ]
    decoded = [tok.decode_batch([by_ids.make(r, n)[0]])[0] for n, r in enumerate(requests)]
    assert [by_ids.make(r, n)[1] for n, r in enumerate(requests)] == [13, 10, 3, 15]
    if joined:
        vocab.use_texts(texts)
        by_texts = Prompts(vocab, 5, texts=True)
        assert [by_texts.make(r, n)[0] for n, r in enumerate(requests)] == decoded
    assert decoded[1].startswith(tok.decode_batch([vocab.draw("a", 5).tolist()])[0])


# ----------------------------------------------------------------------------- values


@pytest.mark.parametrize(
    "line",
    [
        '{"timestamp": 1e16, "chunk_size": 4, "seq_len": 3}',
        '{"timestamp": 1.0, "chunk_size": 4, "seq_len": 3}',
        '{"timestamp": -3, "chunk_size": 4, "seq_len": 3}',
        '{"timestamp": 18446744073709551616, "chunk_size": 4, "seq_len": 3}',
        '{"timestamp": 2.5, "request_id": 99999999999999999999, "chunk_size": 4, "seq_len": 3}',
        '{"timestamp": 2.5, "request_id": [1, "a", {"b": null}], "chunk_size": 4, "seq_len": 3}',
        '{"timestamp": 2.5, "request_id": null, "chunk_size": 4, "seq_len": 3}',
        '{"timestamp": 2.5, "request_id": true, "chunk_size": 4, "seq_len": 3}',
        '{"timestamp": 2.5, "request_id": 1.5e300, "chunk_size": 4, "seq_len": 3}',
        '{"chunk_size": 4, "seq_len": 3}',
    ],
)
def test_tail_ids_are_lmcaches_text_forms(line: str) -> None:
    """The id in the tail's seed is what LMCache's f-string makes of json.loads' values."""
    event = json.loads(line)
    for n in (0, 7):
        lmcache_id = event.get("request_id", f"{event.get('timestamp', n)}_{n}")
        key, request = LookupParser(None)(line.encode(), 1, "x.jsonl")
        assert request.tail_id(n) == f"{lmcache_id}"
        assert key == event.get("timestamp", 0.0)


def test_sort_keys_sort_exactly_as_python() -> None:
    rng = random.Random(3)
    pool = [0, -0.0, 0.0, 1, 1.0, 2**53, 2**53 + 1, float(2**53), 2**63 - 1, 2**64, -(2**70),
            1e300, 5e-324, 0.1, 3]  # fmt: skip
    for trial in range(200):
        keys = [rng.choice(pool) for _ in range(rng.randint(1, 30))]
        if trial % 3 == 0:
            keys = [k for k in keys if type(k) is int and abs(k) < 2**63]  # the int64 path
        if trial % 3 == 1:
            keys = [float(k) if abs(k) < 2**53 else 1.5 for k in keys]  # the float path
        sk = SortKeys()
        for k in keys:
            sk.append(k)
        assert len(sk) == len(keys)
        assert sk.order().tolist() == sorted(range(len(keys)), key=keys.__getitem__)


# ----------------------------------------------------------------------------- errors


def run_err(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(["gen-dataset", *argv])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("{not json", "invalid JSON: Expecting property name enclosed in double quotes at "
                      "column 2"),
        ("[1, 2]", "expected a JSON object, got array [1, 2]"),
        (lookup(chunk_size="4"), "field 'chunk_size' must be an integer > 0; got \"4\""),
        (lookup(seq_len=0), "field 'seq_len' must be an integer > 0; got 0"),
        (lookup(seq_len=MISSING), "missing required field 'seq_len'"),
        ('{"timestamp": NaN, "chunk_size": 4, "seq_len": 3}',
         "field 'timestamp' must be a finite number of seconds; got NaN"),
        (lookup(timestamp="1.5"), "field 'timestamp' must be a finite number of seconds; "
                                  "got \"1.5\""),
        (lookup(chunk_hashes=["0x1", 2]), "field 'chunk_hashes[1]' must be a string; got 2"),
        (lookup(chunk_hashes="0x1"), "field 'chunk_hashes' must be an array of strings; "
                                     "got \"0x1\""),
        (lookup(chunk_hashes=["0x1"]), "field 'chunk_hashes' has 1 entries but seq_len 8 // "
         "chunk_size 4 = 2 complete chunks"),
        (lookup(chunk_hashes=["0x1", "\\ud800"]).replace("\\\\", "\\"),
         "field 'chunk_hashes[1]' must be Unicode text (no lone surrogate escapes); "
         "got \"\\ud800\""),
        (lookup(request_id="\\udc80", seq_len=9).replace("\\\\", "\\"),
         "field 'request_id' must be Unicode text (no lone surrogate escapes); got \"\\udc80\""),
    ],
)  # fmt: skip
def test_a_bad_line_stops_at_its_line_and_writes_nothing(
    byte_tok: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, reason: str
) -> None:
    log = write_lines(tmp_path / "lookup_hashes_0.jsonl", [lookup(), line, lookup()])
    out = tmp_path / "out" / "ds.jsonl"
    code, err = run_err(capsys, "-i", str(log), "--tokenizer", str(byte_tok), "-o", str(out))
    assert (code, err) == (2, f"{log}:2: {reason}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lookup_hashes_0.jsonl"]


def test_an_error_leaves_an_existing_output_untouched(
    byte_tok: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = write_lines(tmp_path / "log.jsonl", [lookup(), lookup(chunk_size=8, seq_len=16)])
    out = write_lines(tmp_path / "ds.jsonl", ["previous"])
    code, err = run_err(capsys, "-i", str(log), "--tokenizer", str(byte_tok), "-o", str(out))
    assert code == 2
    assert err == (f"{log}:2: field 'chunk_size' 8 differs from 4 first seen at {log}:1; "
                   "gen-dataset takes one chunk size (--instance picks one model)\n")  # fmt: skip
    assert out.read_text(encoding="utf-8") == "previous\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds.jsonl", "log.jsonl"]


def test_a_long_line_is_refused_and_one_of_the_limit_accepted(
    byte_tok: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from long_lines import lmc, padded

    log = write_lines(tmp_path / "log.jsonl", [lmc(1), padded({"seq_len": 3, "chunk_size": 4},
                                                              2000), lmc(2)])  # fmt: skip
    out = tmp_path / "ds.jsonl"
    base = ["-i", str(log), "--tokenizer", str(byte_tok), "-o", str(out)]
    code, err = run_err(capsys, *base, "--max-line-bytes", "1999")
    assert (code, err) == (2, f"{log}:2: line is longer than 1999 bytes (max_line_bytes)\n")
    assert not out.exists()
    code, err = run_err(capsys, *base, "--max-line-bytes", "2000")
    assert code == 0, err
    assert len(prompts(out)) == 3


def test_model_filter_matching_nothing_names_the_models(
    byte_tok: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = write_lines(tmp_path / "log.jsonl", [lookup(), lookup(model_name="m2"), lookup()])
    code, err = run_err(capsys, "-i", str(log), "--tokenizer", str(byte_tok), "--instance", "x",
                        "-o", str(tmp_path / "o.jsonl"))  # fmt: skip
    assert code == 2
    assert err == (f"litehit gen-dataset: error: no requests of model 'x' in {log}; "
                   'models present: "m1", "m2"\n')  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--block-size", "4"], "--block-size is not for LMCache logs: chunk_size is in the logs"),
        (["--trace-format", "mooncake", "--instance", "m"], "--instance is not for mooncake "
                                                         "traces: they name no instance"),
    ],
)  # fmt: skip
def test_options_that_do_not_fit_the_input(
    byte_tok: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
    message: str,
) -> None:  # fmt: skip
    log = write_lines(tmp_path / "log.jsonl", [lookup()])
    code, err = run_err(capsys, "-i", str(log), "--tokenizer", str(byte_tok), *argv)
    assert (code, err) == (2, f"litehit gen-dataset: error: {message}\n")


def test_inputs_of_different_formats_need_from(
    byte_tok: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = write_lines(tmp_path / "log.jsonl", [lookup()])
    moon = write_lines(tmp_path / "moon.jsonl", ['{"timestamp": 1, "input_length": 4, '
                                                 '"hash_ids": [1]}'])  # fmt: skip
    code, err = run_err(capsys, "-i", str(log), str(moon), "--tokenizer", str(byte_tok))
    assert code == 2
    assert err == (f"litehit gen-dataset: error: the inputs are of different formats: {log} "
                   f"(lmcache), {moon} (mooncake); give --trace-format\n")  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-n", "-1"], "argument -n/--max-samples: must be an integer >= 0, got '-1'"),
        (["-n", "x"], "argument -n/--max-samples: must be an integer >= 0, got 'x'"),
        (["--output-len", "0"], "argument --output-len: must be an integer >= 1, got '0'"),
        (["--output-len", "-3"], "argument --output-len: must be an integer >= 1, got '-3'"),
        (["--block-size", "0"], "argument --block-size: must be an integer >= 1, got '0'"),
        (
            ["--trace-format", "csv"],
            "argument --trace-format: unknown trace format 'csv'; "
            "known formats: 'standard', 'mooncake', 'lmcache'",
        ),
        (["--max-line-bytes", "0"], "argument --max-line-bytes: must be an integer > 0, got '0'"),
    ],
)
def test_bad_option_values_are_usage_errors(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["gen-dataset", "-i", "x.jsonl", "--tokenizer", "t", *argv])
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_a_missing_tokenizer_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = write_lines(tmp_path / "log.jsonl", [lookup()])
    missing = tmp_path / "nope"
    code, err = run_err(capsys, "-i", str(log), "--tokenizer", str(missing))
    assert code == 2
    assert err == (f"litehit gen-dataset: error: --tokenizer {missing}: no such file or "
                   "directory (give a local directory holding tokenizer.json, or a "
                   "tokenizer.json file)\n")  # fmt: skip


def test_too_few_safe_tokens_is_refused(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"<unk>": 0, "a": 1, "b": 2}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    (tmp_path / "t").mkdir()
    tok.save(str(tmp_path / "t" / "tokenizer.json"))
    log = write_lines(tmp_path / "log.jsonl", [lookup()])
    with pytest.raises(TokenizerError, match="only 2 safe tokens in its vocabulary of 3"):
        gen_dataset([log], tmp_path / "t", tmp_path / "o.jsonl")
    assert not (tmp_path / "o.jsonl").exists()


def run_blocked(tmp_path: Path, modules: list[str], *argv: str) -> subprocess.CompletedProcess:
    """``litehit ARGV`` in a subprocess where importing ``modules`` fails."""
    code = (
        "import sys\n"
        f"for name in {modules!r}:\n"
        "    sys.modules[name] = None  # import raises ImportError\n"
        "from litehit_service.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                          env=serve_env(), cwd=tmp_path, timeout=120, check=False)  # fmt: skip


def test_without_tokenizers_the_message_says_how_to_install(tmp_path: Path) -> None:
    log = write_lines(tmp_path / "log.jsonl", [lookup()])
    proc = run_blocked(tmp_path, ["tokenizers"], "gen-dataset", "-i", str(log),
                       "--tokenizer", str(tmp_path))  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == (
        "litehit gen-dataset: error: gen-dataset needs the 'tokenizers' library: "
        "pip install '.[dataset]' (in the clone)\n"
    )
    assert not (tmp_path / "bench_dataset.jsonl").exists()


def test_a_folder_without_tokenizer_json_needs_transformers(tmp_path: Path) -> None:
    log = write_lines(tmp_path / "log.jsonl", [lookup()])
    (tmp_path / "tok").mkdir()
    proc = run_blocked(tmp_path, ["transformers"], "gen-dataset", "-i", str(log),
                       "--tokenizer", str(tmp_path / "tok"))  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (
        f"litehit gen-dataset: error: --tokenizer {tmp_path / 'tok'}: the directory holds no "
        "tokenizer.json (install transformers to load other tokenizer files, or give a "
        "directory with tokenizer.json)\n"
    )


def test_help_imports_neither_tokenizers_nor_transformers(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from litehit_service.cli import build_parser\n"
        "build_parser()\n"
        "print(sorted({'tokenizers', 'transformers'} & set(sys.modules)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=serve_env(), cwd=tmp_path, timeout=120, check=True)  # fmt: skip
    assert proc.stdout.strip() == "[]"
    assert "gen-dataset" in run_cli("--help").stdout


def test_the_summary_and_the_default_output(
    byte_tok: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = write_lines(tmp_path / "log.jsonl", [lookup(), lookup(seq_len=11, timestamp=0.5)])
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        code = main(["gen-dataset", "-i", str(log), "--tokenizer", str(byte_tok)])
    finally:
        os.chdir(cwd)
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = prompts(tmp_path / "bench_dataset.jsonl")
    assert [p["output_tokens"] for p in lines] == [128, 128]
    assert out.splitlines()[0] == "Read 1 file(s) (lmcache); chunk size 4 tokens"
    assert out.splitlines()[2].startswith("Wrote 2 prompts (19 tokens; 2 chunks drawn, 2 reused)")
    assert err.startswith("gen-dataset: 2 prompts, 19 tokens, ")
    assert err.endswith(" -> bench_dataset.jsonl\n")


def test_a_bom_file_is_read_whole(
    byte_tok: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A departure: LMCache drops the first line of a file starting with a byte-order mark
    (its JSON fails); gen-dataset skips the mark and reads the line."""
    log = tmp_path / "log.jsonl"
    log.write_bytes(b"\xef\xbb\xbf" + (lookup(timestamp=2) + "\n" + lookup()).encode())
    plain = write_lines(tmp_path / "plain.jsonl", [lookup(timestamp=2), lookup()])
    a = ours(capsys, tmp_path / "a.jsonl", [log], byte_tok)
    assert a == ours(capsys, tmp_path / "b.jsonl", [plain], byte_tok)
    assert a.count(b"\n") == 2


def test_awrap_transformers_is_called_as_lmcache_calls_it(
    lmcache: Any, byte_tok: Path, tmp_path: Path
) -> None:
    """The adapter for transformers tokenizers without a ``tokenizers`` backend (one call
    per sequence), here around a fast one: LMCache's vocabulary and file."""
    from litehit_service.lmcache.gen_dataset.tokenizer import TransformersTokenizer

    auto = auto_tokenizer(byte_tok)
    adapter = TransformersTokenizer(auto, "auto")
    assert safe_vocabulary(adapter) == lmcache.build_safe_vocab(auto)
    expected = theirs(lmcache, tmp_path / "theirs.jsonl", [FIXTURE], byte_tok, "-n", "40")
    summary = gen_dataset([FIXTURE], adapter, tmp_path / "ours.jsonl", max_samples=40)
    assert (tmp_path / "ours.jsonl").read_bytes() == expected
    assert not summary.joined  # no backend to join texts from: decoded


QWEN2_CONFIG = {"tokenizer_class": "Qwen2Tokenizer", "eos_token": "</s>", "bos_token": "<s>"}
"""A model-specific class: transformers 5 rebuilds Qwen2's byte-level pipeline in code,
replacing the Metaspace pre-tokenizer and decoder of a tokenizer.json trained here."""


def test_a_model_specific_class_loads_as_lmcache_loads_it(
    lmcache: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tokenizers import Tokenizer

    from litehit_service.lmcache.gen_dataset.tokenizer import FastTokenizer

    folder = make_tokenizer(tmp_path / "qwen", "metaspace", QWEN2_CONFIG)
    auto = auto_tokenizer(folder)
    wanted = lmcache.build_safe_vocab(auto)
    from_json = FastTokenizer(Tokenizer.from_file(str(folder / "tokenizer.json")), "json")
    assert safe_vocabulary(from_json) != wanted  # tokenizer.json alone would differ here
    loaded = load_tokenizer(folder)
    assert loaded.source == f"{folder} (transformers Qwen2Tokenizer)" and not loaded.note
    assert safe_vocabulary(loaded) == wanted
    expected = theirs(lmcache, tmp_path / "theirs.jsonl", [FIXTURE], folder, "-n", "60")
    assert ours(capsys, tmp_path / "ours.jsonl", [FIXTURE], folder, "-n", "60") == expected


def test_only_generic_calls_go_to_the_backend(byte_tok: Path) -> None:
    """A transformers class that overrides anything callable on the way to encode/decode is
    called through transformers, call by call; the generic class and Qwen2's (construction
    only) through their backend."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast
    from transformers.models.qwen2.tokenization_qwen2 import Qwen2Tokenizer

    from litehit_service.lmcache.gen_dataset.tokenizer import generic_calls, wrap_transformers

    class Decoding(PreTrainedTokenizerFast):
        def _decode(self, *args: Any, **kwargs: Any) -> str:
            return super()._decode(*args, **kwargs)

    backend = Tokenizer.from_file(str(byte_tok / "tokenizer.json"))
    generic = PreTrainedTokenizerFast(tokenizer_object=backend)
    assert generic_calls(generic)
    assert generic_calls(auto_tokenizer(make_tokenizer(byte_tok.parent / "q", "bytelevel",
                                                       QWEN2_CONFIG)))  # fmt: skip
    assert isinstance(auto_tokenizer(byte_tok.parent / "q"), Qwen2Tokenizer)
    decoding = Decoding(tokenizer_object=backend)
    assert not generic_calls(decoding)
    assert type(wrap_transformers(decoding, "d")).__name__ == "TransformersTokenizer"
    assert type(wrap_transformers(generic, "g")).__name__ == "FastTokenizer"


def test_without_transformers_a_model_specific_class_is_read_from_json_and_noted(
    byte_tok: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "tok"
    folder.mkdir()
    (folder / "tokenizer.json").write_bytes((byte_tok / "tokenizer.json").read_bytes())
    (folder / "tokenizer_config.json").write_text(json.dumps(QWEN2_CONFIG), encoding="utf-8")
    out = tmp_path / "o.jsonl"
    proc = run_blocked(tmp_path, ["transformers"], "gen-dataset", "-i", str(FIXTURE),
                       "--tokenizer", str(folder), "-n", "3", "-o", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines()[0] == (
        "litehit gen-dataset: note: tokenizer_config.json names tokenizer_class "
        "'Qwen2Tokenizer', whose pipeline transformers builds in code; transformers is not "
        "installed (pip install transformers for it), so gen-dataset reads tokenizer.json "
        "(the two normally agree)"
    )
    assert out.read_bytes().count(b"\n") == 3


def test_an_output_folder_is_refused(
    byte_tok: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = run_err(capsys, "-i", str(FIXTURE), "--tokenizer", str(byte_tok), "-o",
                        str(tmp_path))  # fmt: skip
    assert (code, err) == (
        2,
        f"litehit gen-dataset: error: -o/--output {tmp_path} is a directory\n",
    )


class FailingTokenizer:
    """The real tokenizer, whose decode fails on the first long prompt (a failure while the
    dataset is being written)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.source, self.note = inner, inner.source, ""
        self.vocab_size = inner.vocab_size
        self.encode_batch = inner.encode_batch

    def decode_batch(self, sequences: Any) -> list[str]:
        if any(len(s) > 100 for s in sequences):
            raise RuntimeError("decode failed")
        return self.inner.decode_batch(sequences)


def test_a_failure_while_writing_leaves_nothing(byte_tok: Path, tmp_path: Path) -> None:
    out = tmp_path / "new" / "deeper" / "ds.jsonl"
    with pytest.raises(RuntimeError, match="decode failed"):
        gen_dataset([FIXTURE], FailingTokenizer(load_tokenizer(byte_tok)), out)
    assert list(tmp_path.iterdir()) == []  # the folders it made are gone, no temporary
    gen_dataset([FIXTURE], byte_tok, out, max_samples=2)
    assert len(prompts(out)) == 2  # the same call with a working tokenizer makes them


def test_trace_format_takes_every_trace_format() -> None:
    from litehit_service.cli import build_parser
    from litehit_service.traces.readers import READERS

    for name in READERS:
        args = build_parser().parse_args(["gen-dataset", "-i", "x", "--tokenizer", "t",
                                          "--trace-format", name])  # fmt: skip
        assert args.trace_format == name


def test_an_input_without_requests_is_an_error(
    byte_tok: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = write_lines(tmp_path / "lookup_hashes_0.jsonl", ["", "  "])
    code, err = run_err(capsys, "-i", str(tmp_path), "--trace-format", "lmcache", "--tokenizer",
                        str(byte_tok), "-o", str(tmp_path / "o.jsonl"))  # fmt: skip
    assert (code, err) == (2, f"litehit gen-dataset: error: no requests in {tmp_path}\n")
    code, err = run_err(capsys, "-i", str(empty), "--tokenizer", str(byte_tok))
    assert (code, err) == (2, f"{empty}:0: cannot tell the trace format of an empty file\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lookup_hashes_0.jsonl"]
