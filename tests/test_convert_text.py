"""``litehit convert --from text`` (issue 36): raw prompts and a real (tiny) Hugging Face
tokenizer through the real CLI entry point. Keys are checked against an independent
computation: the library's own token ids, cut into complete blocks, chained with a
re-implementation of the documented prefix hash that is itself checked on the golden
vectors. Each test names the bug it catches (each was planted once and seen red).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tiny_tokenizer import write_tokenizer

from litehit_service.cli import main
from litehit_service.traces.readers import read_standard

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = json.loads((ROOT / "tests" / "data" / "prefix_hash.json").read_text())
"""The prefix-hash golden vectors (the project's copy of ``shared/golden/prefix_hash.json``)."""
M = 2**64


def next_key(prev: int, raw: int) -> int:
    """The documented prefix hash, written again from its formula (golden_ratio constant,
    shifts 12 and 32, unsigned 64-bit, read back as int64)."""
    h, v = prev % M, raw % M
    value = h ^ ((v + 0x9E3779B97F4A7C15 + ((h << 12) % M) + (h >> 32)) % M)
    return value - M if value >= 2**63 else value


def expected_keys(ids: list[int], block_size: int) -> list[int]:
    """Chain every token from 0; a key at the last token of each complete block."""
    keys, h = [], 0
    for t, token in enumerate(ids, 1):
        h = next_key(h, token)
        if t % block_size == 0:
            keys.append(h)
    return keys


@pytest.fixture
def tokenizer_path(tmp_path: Path) -> Path:
    return write_tokenizer(tmp_path / "tok")


@pytest.fixture
def encode(tokenizer_path: Path):
    """The tiny tokenizer's ids of a text, straight from the library (BOS included)."""
    import tokenizers

    tok = tokenizers.Tokenizer.from_file(str(tokenizer_path))
    return lambda text: tok.encode(text).ids


def write_lines(path: Path, objs: list[object]) -> Path:
    path.write_text("".join(json.dumps(o) + "\n" for o in objs), encoding="utf-8")
    return path


def convert(src: Path, out: Path, tokenizer: Path, *args: str) -> int:
    argv = ["convert", "-i", str(src), "-o", str(out), "-f", "text", "--mode", "optimizer"]
    return main([*argv, "--tokenizer-path", str(tokenizer), *args])


def records(out: Path) -> list[dict]:
    return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]


def t(second: int) -> str:
    return f"2024-01-01 12:00:{second:02d}.000000"


# ------------------------------------------------------------------ keys


def test_the_independent_hash_is_the_golden_one() -> None:
    """Catches a wrong re-implementation below (the oracle itself is pinned)."""
    for step in GOLDEN["steps"]:
        assert next_key(step["prev"], step["raw"]) == step["next"]
    for chain in GOLDEN["chains"]:
        assert expected_keys(chain["raw"], 1) == chain["keys"]


@pytest.mark.parametrize("block_size", [1, 2, 3, 5])
def test_keys_are_the_token_chain_at_each_complete_block(
    tmp_path: Path, tokenizer_path: Path, encode, block_size: int
) -> None:
    """Catches keys chained per block instead of per token (the reference chains every
    token), a chain not starting from 0, a key read at a block's first token instead of its
    last, and an input_len that is not the token count."""
    prompts = ["the quick brown fox jumps over the lazy dog", "hello world a b c d e f g h"]
    src = write_lines(tmp_path / "p.jsonl", [{"time": t(i), "prompt_messages": p}
                                             for i, p in enumerate(prompts)])  # fmt: skip
    out = tmp_path / "o.jsonl"
    assert convert(src, out, tokenizer_path, "--block-size", str(block_size)) == 0
    got = records(out)
    for record, prompt in zip(got, prompts, strict=True):
        ids = encode(prompt)
        assert record["type"] == "request" and record["instance_id"] == "instance"
        assert record["input_len"] == len(ids)
        assert record["keys"] == expected_keys(ids, block_size)
        assert len(record["keys"]) == len(ids) // block_size


def test_prompts_sharing_a_prefix_share_their_leading_keys(
    tmp_path: Path, tokenizer_path: Path, encode
) -> None:
    """Catches a key that does not depend on the whole prefix (each block hashed alone)
    or that depends on more than it (the rest of the prompt): the shared blocks match, the
    first differing block and every later one differ, even when their tokens are equal."""
    a = "the quick brown fox jumps over the lazy dog a b c d"
    b = "the quick brown fox hello over the lazy dog a b c d"  # 5th word differs
    lines = [{"time": t(1), "prompt_messages": a}, {"time": t(2), "prompt_messages": b}]
    src = write_lines(tmp_path / "p.jsonl", lines)
    out = tmp_path / "o.jsonl"
    assert convert(src, out, tokenizer_path, "--block-size", "2") == 0
    ka, kb = (r["keys"] for r in records(out))
    assert len(ka) == len(kb) == len(encode(a)) // 2 == 7
    # tokens: [BOS] the | quick brown | fox jumps/hello | ...: blocks 0 and 1 are shared
    assert ka[:2] == kb[:2]
    assert all(x != y for x, y in zip(ka[2:], kb[2:], strict=True))


def test_a_trailing_partial_block_counts_in_input_len_but_has_no_key(
    tmp_path: Path, tokenizer_path: Path, encode
) -> None:
    """Catches a key for the trailing partial block (the reference's older default) and
    an input_len cut down to the complete blocks."""
    prompt = "the quick brown fox jumps"  # [BOS] + 5 words = 6 tokens
    assert len(encode(prompt)) == 6
    lines = [{"time": t(1), "prompt_messages": prompt}, {"time": t(2), "prompt_messages": "hello"}]
    src = write_lines(tmp_path / "p.jsonl", lines)
    out = tmp_path / "o.jsonl"
    assert convert(src, out, tokenizer_path, "--block-size", "4") == 0
    first, short = records(out)
    assert first["input_len"] == 6 and first["keys"] == expected_keys(encode(prompt), 4)
    assert len(first["keys"]) == 1
    assert short["input_len"] == 2 and short["keys"] == []  # shorter than a block: a miss


# ------------------------------------------------------------------ prompts


def test_a_message_list_is_rendered_as_role_lines(
    tmp_path: Path, tokenizer_path: Path, encode
) -> None:
    """Catches a rendering other than the documented one (roles dropped, no newline after
    each message, text parts not joined, the {"messages": [...]} form refused), and a next
    turn that does not extend the previous one's keys."""
    turn1 = [{"role": "system", "content": "hello"},
             {"role": "user", "content": [{"type": "text", "text": "the quick"},
                                          {"type": "text", "text": " brown fox"}]}]  # fmt: skip
    turn2 = [*turn1, {"role": "assistant", "content": "jumps over"},
             {"role": "user", "content": None}]  # fmt: skip
    src = write_lines(tmp_path / "p.jsonl", [
        {"time": t(1), "prompt_messages": turn1},
        {"time": t(2), "prompt_messages": {"messages": turn2}},
    ])  # fmt: skip
    out = tmp_path / "o.jsonl"
    assert convert(src, out, tokenizer_path, "--block-size", "2") == 0
    first, second = records(out)
    text1 = "system: hello\nuser: the quick brown fox\n"
    text2 = text1 + "assistant: jumps over\nuser: \n"
    assert first["input_len"] == len(encode(text1))
    assert first["keys"] == expected_keys(encode(text1), 2)
    assert second["keys"] == expected_keys(encode(text2), 2)
    assert second["keys"][: len(first["keys"])] == first["keys"]


def test_fields_instances_block_sizes_and_time_order(tmp_path: Path, tokenizer_path: Path,
                                                      encode) -> None:  # fmt: skip
    """Catches --time-field / --content-field ignored, a line's instance_id field ignored,
    --instance-block-sizes not applied per instance (or applied to the wrong one), and an
    output not sorted by time (the lines are 0.5 s out of order)."""
    src = write_lines(tmp_path / "p.jsonl", [
        {"at": "2024-01-01T12:00:02Z", "text": "a b c d e f", "instance_id": "big"},
        {"at": "2024-01-01 12:00:01,5", "text": "a b c d e f"},
        {"at": 1704110401, "text": "a b c d e f", "instance_id": "small"},
    ])  # fmt: skip
    out = tmp_path / "o.jsonl"
    assert convert(src, out, tokenizer_path, "--time-field", "at", "--content-field", "text",
                   "--instance", "dflt", "--block-size", "2",
                   "--instance-block-sizes", "big:3,small:1") == 0  # fmt: skip
    got = records(out)
    assert [r["timestamp_ns"] for r in got] == [
        1704110401_000000000, 1704110401_500000000, 1704110402_000000000]  # fmt: skip
    assert [r["instance_id"] for r in got] == ["small", "dflt", "big"]
    ids = encode("a b c d e f")
    assert [r["keys"] for r in got] == [expected_keys(ids, n) for n in (1, 2, 3)]
    assert [r["trace_id"] for r in got] == ["p.jsonl:3", "p.jsonl:2", "p.jsonl:1"]


@pytest.fixture
def utc_plus_8(monkeypatch) -> Iterator[None]:
    """The process's local time zone is UTC+8 for the test (then restored)."""
    monkeypatch.setenv("TZ", "Asia/Shanghai")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize(
    ("value", "ns"),
    [
        ("1970-01-01 00:00:01.000000", 1_000_000_000),
        ("2024-01-01 12:00:00.123456789", 1704110400_123456789),
        ("2024-01-01 20:00:00+08:00", 1704110400_000000000),
        ("2024-01-01 06:30:00-05:30", 1704110400_000000000),
        ("2024-01-01T12:00:00", 1704110400_000000000),
        (1.1, 1_100_000_000),
        (1704110400.75, 1704110400_750000000),
    ],
)
def test_times_are_exact_utc_nanoseconds(
    tmp_path: Path, tokenizer_path: Path, utc_plus_8: None, value, ns
) -> None:
    """Catches a time read in the machine's local zone (the reference's naive datetime; the
    zone is UTC+8 here), an offset ignored, a fraction read through a float."""
    src = write_lines(tmp_path / "p.jsonl", [{"time": value, "prompt_messages": "a"}])
    out = tmp_path / "o.jsonl"
    assert convert(src, out, tokenizer_path) == 0
    assert records(out)[0]["timestamp_ns"] == ns


def test_a_prompt_without_tokens_is_skipped_and_counted(
    tmp_path: Path, tokenizer_path: Path, capsys
) -> None:
    """Catches a request with input_len 0 written (a trace every reader refuses) and a
    skip that goes unsaid."""
    import tokenizers

    tok = tokenizers.Tokenizer.from_file(str(tokenizer_path))
    tok.post_processor = None  # no BOS: an empty prompt has no token
    bare = tmp_path / "bare.json"
    tok.save(str(bare))
    src = write_lines(tmp_path / "p.jsonl", [{"time": t(1), "prompt_messages": ""},
                                             {"time": t(2), "prompt_messages": "a b"}])  # fmt: skip
    out = tmp_path / "o.jsonl"
    assert convert(src, out, bare, "--block-size", "1") == 0
    assert [(r["trace_id"], r["input_len"]) for r in records(out)] == [("p.jsonl:2", 2)]
    assert "text: skipped 1 lines without tokens" in capsys.readouterr().err
    assert [e.input_len for e in read_standard(out)] == [2]


# ------------------------------------------------------------------ outputs


def test_parquet_output_equals_jsonl_output(tmp_path: Path, tokenizer_path: Path) -> None:
    """Catches a text conversion that bypasses the shared writer (a .parquet output
    written as JSONL, or different records) and lines not sorted within the window."""
    src = write_lines(tmp_path / "p.jsonl", [
        {"time": t(i % 7), "prompt_messages": "the quick brown fox " * (i % 5 + 1)}
        for i in range(40)
    ])  # fmt: skip
    jsonl, parquet = tmp_path / "o.jsonl", tmp_path / "o.parquet"
    args = ("--block-size", "4", "--reorder-window-ms", "7000")
    assert convert(src, jsonl, tokenizer_path, *args) == 0
    assert convert(src, parquet, tokenizer_path, *args) == 0
    assert parquet.read_bytes()[:4] == b"PAR1"
    events = list(read_standard(jsonl))
    assert list(read_standard(parquet)) == events
    times = [e.timestamp_ns for e in events]
    assert times == sorted(times) and len(events) == 40


def test_model_name_reads_the_tokenizer_from_model_folder(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """Catches --model-name not acted on (the reference reads ./model/NAME)."""
    write_tokenizer(tmp_path / "model" / "tiny")
    monkeypatch.chdir(tmp_path)
    src = write_lines(tmp_path / "p.jsonl", [{"time": t(1), "prompt_messages": "a b"}])
    argv = ["convert", "-i", "p.jsonl", "-o", "o.jsonl", "-f", "text", "--model-name", "tiny"]
    assert main(argv) == 0
    assert records(tmp_path / "o.jsonl")[0]["input_len"] == 3
    assert main([*argv[:-1], "other"]) == 2
    assert "model/other:0: no such directory" in capsys.readouterr().err
    assert src.exists()


def test_the_shipped_sample_shares_keys_as_the_docs_say(tmp_path: Path) -> None:
    """Catches the docs' sample tokenizer drifting from tiny_tokenizer.py (regenerate it
    with write_tokenizer(Path("tests/data/tiny_tokenizer"))) and the sample's documented
    sharing no longer holding (docs/reference/traces.md, raw prompts)."""
    import tokenizers

    shipped = ROOT / "tests" / "data" / "tiny_tokenizer" / "tokenizer.json"
    fresh = write_tokenizer(tmp_path / "fresh")
    assert tokenizers.Tokenizer.from_file(str(shipped)).to_str() == (
        tokenizers.Tokenizer.from_file(str(fresh)).to_str()
    )
    out = tmp_path / "o.jsonl"
    argv = ["convert", "--from", "text", str(ROOT / "tests" / "data" / "text_prompts.jsonl")]
    assert main([*argv, "-o", str(out), "--tokenizer-path", str(shipped.parent),
                 "--instance", "chat", "--block-size", "4"]) == 0  # fmt: skip
    one, two, three, four = (r["keys"] for r in records(out))
    assert len(one) == 2 and one == three[:2] == four[:2]
    assert len(three) > len(four) > len(one) and three[2] != four[2]
    assert not set(two) & set(one + three + four)


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ({"prompt_messages": "a"}, "p.jsonl:2: time: missing (--time-field names"),
        ({"time": "yesterday", "prompt_messages": "a"},
         "p.jsonl:2: time: must be 'YYYY-MM-DD HH:MM:SS[.ffffff]' (UTC unless it ends in Z "
         'or +HH:MM) or a number of seconds since the epoch; got "yesterday"'),
        ({"time": "2024-02-30 00:00:00", "prompt_messages": "a"},
         'p.jsonl:2: time: day is out of range for month; got "2024-02-30 00:00:00"'),
        ({"time": -1, "prompt_messages": "a"}, "p.jsonl:2: time: must be "),
        ({"time": t(1)}, "p.jsonl:2: prompt_messages: missing (--content-field names"),
        ({"time": t(1), "prompt_messages": 5},
         "p.jsonl:2: prompt_messages: must be a string or a list of chat messages"),
        ({"time": t(1), "prompt_messages": [{"role": "user", "content": "a"}, "b"]},
         'p.jsonl:2: prompt_messages[1]: must be a message {role, content}; got "b"'),
        ({"time": t(1), "prompt_messages": [{"content": "a"}]},
         "p.jsonl:2: prompt_messages[0].role: must be a non-empty string; got null"),
        ({"time": t(1), "prompt_messages": [{"role": "user", "content": [{"type": "image"}]}]},
         'p.jsonl:2: prompt_messages[0].content[0]: must be a text part {"type": "text", '
         '"text": ...}; got {"type": "image"}'),
        ({"time": t(1), "prompt_messages": "a", "instance_id": 3},
         "p.jsonl:2: instance_id: must be a non-empty string; got 3"),
    ],
)  # fmt: skip
def test_a_bad_line_names_file_line_field_and_writes_nothing(
    tmp_path: Path, tokenizer_path: Path, capsys, line: dict, message: str
) -> None:
    """Catches a bad line skipped silently (the reference skips it), an error without its
    file:line and field, and a partial output left behind."""
    src = write_lines(tmp_path / "p.jsonl", [{"time": t(0), "prompt_messages": "a"}, line])
    out = tmp_path / "o.jsonl"
    assert convert(src, out, tokenizer_path) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("o.")] == []


def test_a_missing_tokenizer_is_a_clear_usage_error(tmp_path: Path, capsys) -> None:
    """Catches a traceback or a late failure for a missing tokenizer file or directory, and
    a text conversion run without a tokenizer at all."""
    src = write_lines(tmp_path / "p.jsonl", [{"time": t(0), "prompt_messages": "a"}])
    out = tmp_path / "o.jsonl"
    assert convert(src, out, tmp_path / "nope.json") == 2
    assert "nope.json:0: no such file (--tokenizer-path: a Hugging Face tokenizer.json" in (
        capsys.readouterr().err
    )
    assert convert(src, out, tmp_path) == 2
    assert ":0: holds no tokenizer.json" in capsys.readouterr().err
    assert main(["convert", str(src), "-o", str(out), "--from", "text"]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith(
            "--from text needs --tokenizer-path PATH (or --model-name NAME with ./model/NAME)"
        )
    )
    assert not out.exists()


def test_without_the_tokenizers_library_the_error_names_the_extra(
    tmp_path: Path, tokenizer_path: Path, monkeypatch, capsys
) -> None:
    """Catches an ImportError traceback (exit 1) instead of exit 2 naming the install."""
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # import tokenizers -> ImportError
    src = write_lines(tmp_path / "p.jsonl", [{"time": t(0), "prompt_messages": "a"}])
    out = tmp_path / "o.jsonl"
    assert convert(src, out, tokenizer_path) == 2
    err = capsys.readouterr().err
    assert "--from text needs the 'tokenizers' library: pip install 'litehit[text]'" in err
    assert "Traceback" not in err and not out.exists()


def test_options_of_text_only_are_refused_for_other_formats(tmp_path: Path, capsys) -> None:
    """Catches a text option silently ignored with another --from."""
    src = write_lines(tmp_path / "p.jsonl", [{"timestamp": 0, "input_length": 1, "hash_ids": []}])
    argv = ["convert", str(src), "-o", str(tmp_path / "o.jsonl"), "--from", "mooncake"]
    assert main([*argv, "--tokenizer-path", "t"]) == 2
    assert "--tokenizer-path applies to --from text only, not --from mooncake" in (
        capsys.readouterr().err
    )
