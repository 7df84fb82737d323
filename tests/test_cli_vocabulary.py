"""One CLI vocabulary, enforced on the real parsers (``litehit_service.commands.options``).

The walk covers every subcommand of :func:`litehit_service.cli.build_parser` and every
option of each (deny by default: a new command or option is walked without being listed).
It fails on an option string that names a concept of :data:`CONCEPTS` another way (unless
it is one of that concept's hidden aliases), on a concept's option with another metavar,
on help text with reST markup or ``%%``, on an option that takes a value without its own
metavar (argparse's ``--timeout TIMEOUT``) or whose default goes unsaid, on a required
option outside the "required options" group, and on a configuration positional without
``-c/--config``. Hidden aliases still parse to the same destination and never show in help.
"""

from __future__ import annotations

import argparse
import re

import pytest
from conftest import write_replay_config
from doc_pages import PAGES, all_text, text_of

from litehit_service.cli import build_parser, main
from litehit_service.commands.options import (
    CONCEPTS,
    REQUIRED_TITLE,
    Concept,
    hidden_aliases,
)

EXEMPT: dict[tuple[str, str], str] = {
    ("convert", "--from"): "convert's job is formats: --from names the input's (a trace "
    "format or a log format), as the issue that set the vocabulary decided",
    ("convert", "--model-name"): "the reference converter's --model-name names the folder "
    "./model/NAME its tokenizer is read from, not an instance (issue 36: its command lines "
    "work as written)",
    ("tradeoff", "--warmup-capacity"): "the reference tradeoff.py's flag (GB), accepted and "
    "not acted on so its command lines run: the warm-up here is at infinite quota",
    ("tradeoff", "--plot-capacity"): "the reference tradeoff.py's flag, accepted and not "
    "acted on so its command lines run (with --plot-timeseries)",
}
"""(command, option string) pairs that may spell a concept their own way, with the reason."""

MARKUP = re.compile(r"``|`|:mod:|:class:|:func:|:meth:|:data:|%%")
"""What plain help text never holds (reST roles and literals, a doubled percent sign)."""

NO_VALUE = (
    argparse._StoreTrueAction,  # noqa: SLF001
    argparse._StoreFalseAction,  # noqa: SLF001
    argparse._StoreConstAction,  # noqa: SLF001
    argparse._HelpAction,  # noqa: SLF001
    argparse._CountAction,  # noqa: SLF001
)


def _commands() -> dict[str, argparse.ArgumentParser]:
    return build_parser()._subparsers._group_actions[0].choices  # noqa: SLF001


def _groups(parser: argparse.ArgumentParser) -> list[argparse._ArgumentGroup]:  # noqa: SLF001
    return parser._action_groups  # noqa: SLF001


def _takes_value(action: argparse.Action) -> bool:
    return not isinstance(action, NO_VALUE) and action.nargs != 0


def _concept_of(option: str) -> Concept | None:
    found = [c for c in CONCEPTS if c.spelled.match(option)]
    assert len(found) <= 1, f"{option} matches two concepts: {[c.name for c in found]}"
    return found[0] if found else None


def vocabulary_problems(name: str, parser: argparse.ArgumentParser) -> list[str]:
    """Every way ``parser`` (subcommand ``name``) departs from the one vocabulary."""
    problems = []
    texts = [parser.description or "", parser.epilog or ""]
    in_required = {
        id(a) for g in _groups(parser) if g.title == REQUIRED_TITLE for a in g._group_actions
    }
    for action in parser._actions:  # noqa: SLF001
        where = f"{name} {'/'.join(action.option_strings) or action.dest}"
        if action.help not in (None, argparse.SUPPRESS):
            texts.append(action.help % vars(action) if "%" in action.help else action.help)
        hidden = hidden_aliases(action)
        for option in action.option_strings:
            concept = _concept_of(option)
            if concept is None or (name, option) in EXEMPT:
                continue
            if option in hidden:
                if option not in concept.aliases:
                    problems.append(f"{where}: {option} is hidden but no alias of {concept.name}")
            elif option not in concept.options:
                right = " or ".join(concept.options)
                problems.append(f"{where}: {option} spells the {concept.name} as {right} does")
            elif concept.options[option] not in (None, action.metavar):
                problems.append(
                    f"{where}: {option} shows {action.metavar!r}, the vocabulary says "
                    f"{concept.options[option]!r}"
                )
        for option in hidden - set(action.option_strings):
            problems.append(f"{where}: hidden alias {option} is not an option string")
        if not action.option_strings:
            if action.dest == "config" and "config_option" not in {
                a.dest
                for a in parser._actions  # noqa: SLF001
            }:
                problems.append(f"{where}: a configuration positional without -c/--config")
            continue
        if _takes_value(action) and action.choices is None and action.metavar is None:
            problems.append(f"{where}: no metavar of its own (argparse shows the dest)")
        said = action.help is not None and "default" in action.help.lower()
        default_given = action.default not in (None, False, argparse.SUPPRESS)
        if _takes_value(action) and default_given and not action.required and not said:
            problems.append(f"{where}: the default {action.default!r} is not in its help")
        if action.required and id(action) not in in_required:
            problems.append(f"{where}: required, but not under '{REQUIRED_TITLE}'")
    for text in texts:
        bad = MARKUP.search(text)
        if bad:
            problems.append(f"{name}: help shows {bad.group()!r}: {text[:70]!r}...")
    return problems


def test_every_subcommand_speaks_the_one_vocabulary() -> None:
    """Catches: an option spelled as another command spells the same concept (--format
    beside --trace-format), argparse's default metavars, reST markup or '%%' in help, a
    default the help leaves unsaid, a required option among the optional ones."""
    commands = _commands()
    assert len(commands) == 16  # the walk is not vacuous: every subcommand is in it
    problems = [p for name, parser in commands.items() for p in vocabulary_problems(name, parser)]
    assert problems == []


@pytest.mark.parametrize(
    "option, message",
    [
        ("--format", "spells the trace format as --trace-format does"),
        ("--workers", "spells the parallelism as --max-workers does"),
        ("--capacity-gb", "spells the capacity as"),
        ("--model", "spells the instance as --instance does"),
        ("--out-dir", "spells the output as"),
        ("--cfg", "spells the configuration as"),
        ("--address", "spells the server as --server does"),
        ("--chunk-size", "spells the block size as --block-size does"),
    ],
)
def test_the_walk_fails_on_a_new_option_spelling_a_known_concept(option, message) -> None:
    """The walk itself can fail: a planted option in another spelling is named."""
    parser = argparse.ArgumentParser(prog="x")
    parser.add_argument(option, metavar="N", help="x (default 1)", default="1")
    problems = vocabulary_problems("planted", parser)
    assert len(problems) == 1 and message in problems[0], problems


def test_the_walk_fails_on_markup_metavars_unsaid_defaults_and_required_placement() -> None:
    """Each help fault of the issue, planted once, is reported."""
    parser = argparse.ArgumentParser(prog="x", description="see ``litehit x`` and 99%%")
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds per call")
    parser.add_argument("--tls-ca", help="PEM CA (:mod:`x`)")
    parser.add_argument("--needed", required=True, metavar="N", help="must be given")
    parser.add_argument("config", nargs="?", help="a configuration")
    problems = vocabulary_problems("planted", parser)
    assert any("--timeout: no metavar of its own" in p for p in problems), problems
    assert any("--timeout: the default 3.0 is not in its help" in p for p in problems)
    assert any("--tls-ca: no metavar" in p for p in problems)
    assert any("--needed: required, but not under" in p for p in problems)
    assert any("configuration positional without -c/--config" in p for p in problems)
    assert sum("help shows" in p for p in problems) == 2


ALIASES = [
    (["replay", "c.json", "--workers", "3"], "max_workers", 3),
    (["query", "f.csv", "--capacity-gb", "8", "-1"], "capacity_gib", [8, -1]),
    (["simulate", "-i", "x", "--cache-capacity-gib", "4"], "capacity_gib", 4.0),
    (["simulate", "-i", "x", "--capacity-gib", "4", "--model", "m"], "instance", "m"),
    (["simulate", "-i", "x", "--capacity-gib", "4", "--format", "mooncake"], "trace_format",
     "mooncake"),
    (["sweep", "-i", "x", "--format", "standard"], "trace_format", "standard"),
    (["gen-dataset", "-i", "x", "--tokenizer", "t", "--from", "lmcache"], "trace_format",
     "lmcache"),
    (["gen-dataset", "-i", "x", "--tokenizer", "t", "--model", "m"], "instance", "m"),
    (["convert", "in", "-o", "out", "--instance-id", "a"], "instance", "a"),
    (["convert", "in", "-o", "out", "--model", "m"], "instance", "m"),
    (["feed", "t.jsonl", "--format", "mooncake"], "trace_format", "mooncake"),
]  # fmt: skip


@pytest.mark.parametrize("argv, dest, value", ALIASES)
def test_old_spellings_still_parse_to_the_same_option(argv, dest, value) -> None:
    """Catches a renamed option whose old spelling stopped working (scripts break)."""
    args = build_parser().parse_args(argv)
    assert getattr(args, dest) == value


def test_hidden_aliases_never_show_in_help_or_usage() -> None:
    """Catches an alias leaking into --help (two names for one concept on screen)."""
    for name, parser in _commands().items():
        text = parser.format_help()
        for action in parser._actions:  # noqa: SLF001
            for alias in hidden_aliases(action):
                assert re.search(rf"(?<![\w-]){re.escape(alias)}(?![\w-])", text) is None, (
                    name,
                    alias,
                )


def test_a_command_taking_a_configuration_takes_it_either_way(tmp_path, capsys) -> None:
    """Every configuration command accepts -c CONFIG.json as well as the positional, and
    refuses two different ones (exit 2, both named)."""
    takes = [n for n, p in _commands().items() if any(a.dest == "config" for a in p._actions)]  # noqa: SLF001
    assert sorted(takes) == ["export-tree", "lifecycle", "optimize", "replay", "tradeoff"]
    for name in takes:
        args = build_parser().parse_args([name, "-c", "a.json"])
        assert (args.config, args.config_option) == (None, "a.json")
        assert main([name, "a.json", "-c", "b.json"]) == 2
        err = capsys.readouterr().err
        assert "two configurations given: 'a.json' and -c 'b.json'; give one" in err, name


def test_replay_writes_into_output_dir(tmp_path, capsys) -> None:
    """replay -o DIR writes the ledger into DIR instead of output_result_path (the option
    every configuration command has)."""
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"type": "get", "instance_id": "i", "timestamp_ns": 1, "keys": [1, 2], '
                     '"input_len": 8}\n')  # fmt: skip
    config = write_replay_config(tmp_path / "c.json", trace, output=tmp_path / "configured")
    assert main(["replay", "-c", str(config), "-o", str(tmp_path / "chosen"), "--quiet"]) == 0
    assert (tmp_path / "chosen" / "litehit_facts.csv").read_text().count("\n") == 2
    assert not (tmp_path / "configured").exists()


def readme_problems(text: str, where: str = "README.md") -> list[str]:
    """README lines that use an old spelling: a ``litehit COMMAND`` line with one of that
    command's hidden aliases, or anywhere an alias no command spells that way any more;
    allowed only in the "Renamed options" note and the LMCache mapping table (LMCache's own
    options, first column)."""
    commands = _commands()
    aliases = {
        name: {a for action in p._actions for a in hidden_aliases(action)}  # noqa: SLF001
        for name, p in commands.items()
    }
    canonical = {
        s
        for p in commands.values()
        for a in p._actions
        for s in a.option_strings  # noqa: SLF001
        if s not in hidden_aliases(a)
    }
    stale = set().union(*aliases.values()) - canonical
    problems, allowed, section = [], False, ""
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("#"):
            section, allowed = line, False
        if line.startswith("**Renamed options.**"):
            allowed = True
        lmcache_row = "Coming from LMCache" in section and line.startswith("| `")
        if allowed or lmcache_row:
            continue
        for command, olds in aliases.items():
            for old in olds:
                used = re.search(rf"litehit {command}\b.*(?<![\w-]){re.escape(old)}(?![\w-])", line)
                if used or (
                    old in stale and re.search(rf"(?<![\w-]){re.escape(old)}(?![\w-])", line)
                ):
                    problems.append(f"{where}:{n}: {old} ({command}): {line.strip()[:80]}")
    return sorted(set(problems))


def test_the_readme_speaks_the_one_vocabulary() -> None:
    """Catches a README example or sentence still using a renamed option (outside the
    renamed-options note), and a renamed option the note forgets."""
    problems = []
    for page in PAGES:
        problems += readme_problems(text_of(page), str(page.relative_to(page.parents[1])))
    assert problems == []
    text = all_text()
    note = text[text.index("**Renamed options.**") :]
    note = note[: note.index("\n#")]
    every = {a for p in _commands().values() for act in p._actions for a in hidden_aliases(act)}  # noqa: SLF001
    assert {old for old in every if f"| `{old}` |" not in note} == set()


def test_the_readme_walk_can_fail() -> None:
    """A planted old spelling in an example is found, with its line."""
    text = "## X\n```bash\nlitehit query f.csv --capacity-gb 8\nlitehit gen-dataset --from x\n"
    text += "litehit convert --from mooncake a -o b\n```\n"
    assert readme_problems(text) == [
        "README.md:3: --capacity-gb (query): litehit query f.csv --capacity-gb 8",
        "README.md:4: --from (gen-dataset): litehit gen-dataset --from x",
    ]


def test_the_cli_reference_lists_every_command_with_its_help() -> None:
    """Catches a command added (or renamed) without its row in docs/reference/cli.md."""
    from doc_pages import ROOT

    page = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    sub = build_parser()._subparsers._group_actions[0]  # noqa: SLF001
    missing = [
        a.dest
        for a in sub._choices_actions  # noqa: SLF001
        if f"| `litehit {a.dest}` | {a.help.replace('%%', '%')} |" not in page
    ]
    assert missing == []
