"""The README's examples run as written against a real server (they must not rot)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from conftest import run_cli
from doc_pages import PAGES, all_text, section, text_of
from google.protobuf import json_format

from litehit_service import messages as pb2
from litehit_service.client import OptimizerClient
from litehit_service.manager import OnlineOptimizerManager
from litehit_service.metrics import ServiceMetrics
from litehit_service.server import create_server

README = all_text()
"""The README and every docs page (their examples run as written too)."""
LANDING = text_of(PAGES[0])
"""The README itself."""
SERVICE = "kv_cache_manager.proto.optimizer.OptimizerService"


@pytest.fixture
def server():
    manager = OnlineOptimizerManager()
    srv = create_server(manager, ServiceMetrics(manager), "127.0.0.1:0").start()
    try:
        yield srv.address
    finally:
        srv.stop()


def test_two_setup_commands_are_near_the_top():
    block = re.search(r"## Two commands\n\n```bash\n(.*?)```", LANDING, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    assert commands == [
        "python -m pip install . && litehit serve",
        "python -m pip install '.[dev]' && python -m pytest",
    ]
    assert LANDING.index("## Two commands") < 2500
    assert LANDING.count("\n") <= 250  # a landing page: the rest is the docs site


def test_gateway_example_runs(server, capsys):
    code = re.search(r"```python\n(.*?)```", section("A gateway in ten lines"), re.S).group(1)
    assert len(code.strip().splitlines()) <= 11
    exec(compile(code.replace("127.0.0.1:50051", server), "README", "exec"), {})
    lines = capsys.readouterr().out.splitlines()
    # two requests sharing the 2-block prefix [1, 2]: the second hits it at every capacity
    assert lines[:2] == ["[0, 0, 0]", "[2, 2, 2]"]
    assert lines[2].startswith("gpu-0 [(8.0, ")
    shown = re.search(r"```text\n(.*?)```", section("A gateway in ten lines"), re.S).group(1)
    assert lines == shown.splitlines()  # the output the README shows under it


def test_the_docs_gateway_example_is_the_readmes_and_the_packed_one_runs(server, capsys):
    """The gateway page shows the README's example (the same code and output), and its
    packed-stream snippet runs as written after it (its own client), printing what the
    page shows."""
    readme, docs = section("A gateway in ten lines"), section("A gateway, step by step")
    blocks = [re.findall(r"```(?:python|text)\n(.*?)```", s, re.S)[:2] for s in (readme, docs)]
    assert blocks[0] == blocks[1]
    exec(compile(blocks[0][0].replace("127.0.0.1:50051", server), "README", "exec"), {})
    capsys.readouterr()
    packed_section = section("A gateway, step by step")
    packed, shown = re.findall(r"```(?:python|text)\n(.*?)```", packed_section, re.S)[2:4]
    assert "stream_packed" in packed
    exec(compile(packed.replace("127.0.0.1:50051", server), "docs", "exec"), {})
    assert capsys.readouterr().out == shown


def test_gateway_example_runs_twice_against_one_server(server, capsys):
    """A restarting gateway runs the example again: the identical group and registration
    are accepted as they are, and the instance keeps its cache (now every block hits)."""
    code = re.search(r"```python\n(.*?)```", section("A gateway in ten lines"), re.S).group(1)
    example = compile(code.replace("127.0.0.1:50051", server), "README", "exec")
    exec(example, {})
    exec(example, {})
    lines = capsys.readouterr().out.splitlines()
    assert lines[3:5] == ["[3, 3, 3]", "[3, 3, 3]"]
    assert lines[5].startswith("gpu-0 [(8.0, ")


def test_grpcurl_examples_are_valid_requests(server):
    """Each grpcurl -d payload parses into its request type (grpcurl's JSON mapping) and
    succeeds, in order, on a real server."""
    calls = []
    for match in re.finditer(r"grpcurl -plaintext (?:-d '([^']*)' (?:\\\n\s*)?)?\S+ (\S+)", README):
        payload, method = match.group(1), match.group(2)
        if method.startswith(SERVICE + "/"):
            calls.append((payload, method.split("/", 1)[1]))
    assert [m for _, m in calls] == [
        "CreateInstanceGroup",
        "RegisterInstance",
        "TraceQuery",
        "ListInstances",
        "GetHitRateCurve",
    ]
    with OptimizerClient(server) as client:
        stub = pb2.OptimizerServiceStub(client.channel)
        method_types = {
            m.name: m.input_type.name
            for m in pb2.FILE_DESCRIPTOR.services_by_name["OptimizerService"].methods
        }
        for payload, method in calls:
            request_type = getattr(pb2, method_types[method])
            request = json_format.Parse(payload or "{}", request_type())
            response = getattr(stub, method)(request, timeout=10)
            assert response.header.status.code == pb2.OK, (method, response)
        listed = stub.ListInstances(pb2.OptimizerListInstancesRequest(), timeout=10)
        assert [s.instance_id for s in listed.instances] == ["gpu-0"]
        assert listed.instances[0].total_queries == 1


def test_documented_cli_commands_exist():
    from litehit_service.cli import build_parser

    commands = set(build_parser()._subparsers._group_actions[0].choices)  # noqa: SLF001
    used = {shlex.split(line)[1] for line in re.findall(r"^litehit \w+.*$", README, re.M)}
    assert used <= commands, used - commands
    assert {"serve", "replay", "query", "curve", "convert", "instances", "health"} <= commands


def documented_command_lines(text: str) -> list[str]:
    """Every ``litehit ...`` command line in a code block of ``text`` (a ``$ `` prompt
    dropped, ``\\`` continuations joined, a trailing ``# comment`` left out)."""
    found = []
    for language, block in re.findall(r"```([\w-]*)\n(.*?)```", text, re.S):
        if language not in ("", "bash", "sh", "console"):
            continue
        for line in block.replace("\\\n", " ").splitlines():
            line = line.removeprefix("$ ").strip()
            if line.startswith("litehit "):
                found.append(line)
    return found


def test_every_documented_command_line_parses():
    """Catches an example whose options the command no longer takes (a rename, a typo, a
    removed flag): every command line of the README and the docs goes through the real
    parser (nothing runs)."""
    from litehit_service.cli import build_parser

    lines = documented_command_lines(README)
    assert len(lines) > 25  # the walk sees the examples
    bad = []
    for line in lines:
        argv = shlex.split(line, comments=True)[1:]
        argv = [a for a in argv if a not in ("&&", "|")][: argv.index("|") if "|" in argv else None]
        try:
            build_parser().parse_args(argv)
        except SystemExit as exc:
            if exc.code != 0:
                bad.append(line)
    assert bad == []


def test_hybrid_section_example_and_worked_table_hold():
    """The hybrid registration example registers; the worked table is what the manager
    replays (facts, hits at 4096 and 8192 bytes and unlimited)."""
    import json

    from litehit_core import format_hit_curve
    from litehit_service.litehit.config import registration_from_dict
    from litehit_service.model import InstanceGroup

    text = section("Hybrid linear-attention / Mamba instances")
    example = json.loads(re.search(r"```json\n(.*?)```", text, re.S).group(1))
    manager = OnlineOptimizerManager()
    gib = 1024**3
    manager.create_group(
        InstanceGroup("g", (4096 / gib, 8192 / gib), enable_theoretical_max_cache=True)
    )
    result = manager.register_instance(registration_from_dict(example))
    assert (result.size_full_only, result.size_full_linear) == (1 << 20, 9 << 20)

    table = re.search(r"\| # \| keys .*?\n\|[-|]+\|\n(.*?)\n\n", text, re.S).group(1)
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()]
    worked = example | {
        "instance_id": "w",
        "block_size": 4,
        "location_spec_infos": [{"name": "kv", "size": 1024}, {"name": "ssm", "size": 2048}],
        "linear_step": 8,
    }
    assert manager.register_instance(registration_from_dict(worked)).estimated_capacity_blocks == (
        2,
        4,
    )
    for _, keys, tokens, fact, at4k, at8k, inf in rows:
        ids = [int(k) for k in keys.split(",")]
        r = manager.trace_query("w", ids, int(tokens))
        assert f"`{format_hit_curve(r.fact.hit_curve)}`" == fact
        assert [*r.hit_blocks, r.theoretical.max_hit_count] == [int(at4k), int(at8k), int(inf)]
    assert "24/80 tokens at 4096 bytes, 36/80 at 8192, 48/80 unlimited" in text
    summary = {s.instance_id: s for s in manager.list_instances()}["w"]
    assert [c.total_hits * 4 for c in summary.capacity_summaries] == [24, 36]


def test_every_serve_flag_is_in_the_configuration_table():
    """Walks the real option list of `litehit serve`: each flag and its variable are a row."""
    from litehit_service.commands.serve import _OPTIONS

    text = section("Configuration")
    table = text[: text.index("\n\n", text.index("| flag |"))]
    rows = {
        line.split("|")[1].strip(): line for line in table.splitlines() if line.startswith("| `")
    }
    for option in _OPTIONS:
        names = [k for k in rows if f"`{option.flag}`" in k]
        assert names, f"README configuration table lacks {option.flag}"
        assert f"`{option.env}`" in rows[names[0]], option.env


def test_live_curve_walkthrough_runs_from_a_fresh_folder(tmp_path, serve, mooncake):
    """The live-curve text's commands as written (``litehit feed`` first), against
    ``litehit serve`` on port 0, in a folder holding only the Mooncake conversation trace:
    each succeeds, and ``litehit curve --server`` prints the table the README shows."""
    text = section("Live curves: every capacity of a running instance")
    block = re.search(r"```bash\n(.*?)```", text, re.S).group(1)
    (tmp_path / "conversation_trace.jsonl").symlink_to(mooncake)
    server = serve("--data-dir", str(tmp_path / "data"))
    done = {}
    for line in block.strip().splitlines():
        argv = [a.replace("127.0.0.1:50051", server.target) for a in shlex.split(line, True)]
        assert argv[0] == "litehit", line
        done[argv[1]] = run_cli(*argv[1:], cwd=tmp_path)
        assert done[argv[1]].returncode == 0, (line, done[argv[1]].stderr)
    assert list(done) == ["convert", "feed", "curve", "instances"]
    assert "(group default, block 512 tokens, 12031 queries on the server)" in done["feed"].stdout
    shown = re.search(r"```text\n(.*?)```", text, re.S).group(1).splitlines()
    printed = done["curve"].stdout.splitlines()
    assert shown[:3] == printed[:3]
    assert set(shown[4:]) <= set(printed), set(shown[4:]) - set(printed)
    assert (tmp_path / "live.png").stat().st_size > 0 and (tmp_path / "live.csv").is_file()


# ---------------------------------------------------------------- the README's figures

# A measured (machine-dependent) figure: a number followed by one of these units. The
# README's Development text states the rule this enforces: every such figure outside
# code blocks sits in a paragraph, list item or table row naming the benchmark script
# that reruns it and the date it ran.
MEASURED = re.compile(
    r"\d[\d.,]*(?:[–-]\d[\d.,]*)?\s?(?:k\s)?"
    r"(?:requests/s|queries/s|q/s|blocks/s|µs|ms\b|MB\b|bytes per|B per|×)"
)
BENCH_SCRIPT = re.compile(r"bench/(bench_\w+\.py)")
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
ROOT = Path(__file__).resolve().parents[1]


def _prose_units(text: str) -> list[str]:
    """Paragraphs, list items and table rows outside fenced code blocks."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    units: list[str] = []
    current: list[str] = []
    for line in text.splitlines():
        if current and (line.startswith(("|", "- ", "* ")) or not line.strip()):
            units.append("\n".join(current))
            current = []
        if line.startswith("|"):
            units.append(line)
        elif line.strip():
            current.append(line)
    if current:
        units.append("\n".join(current))
    return units


def unsourced_figures(text: str) -> list[tuple[list[str], str]]:
    """(figures, unit) for each unit holding a measured figure without both an existing
    ``bench/<script>.py`` and a ``YYYY-MM-DD`` date."""
    bad = []
    for unit in _prose_units(text):
        figures = MEASURED.findall(unit)
        if not figures:
            continue
        scripts = [s for s in BENCH_SCRIPT.findall(unit) if (ROOT / "bench" / s).is_file()]
        if not scripts or not DATE.search(unit):
            bad.append((figures, unit))
    return bad


def test_figure_rule_catches_an_untagged_figure():
    """The walker is not vacuous: the intro's old claim, bare, is caught; tagged with a
    script that exists and a date, it passes; a made-up script does not count."""
    old = "fast (≈180k requests/s on one core, pure Python), and comes as:"
    assert unsourced_figures(old) == [(["180k requests/s"], old)]
    assert unsourced_figures(old + " `bench/bench_core.py`, 2026-12-04") == []
    assert unsourced_figures(old + " `bench/bench_nothing.py`, 2026-12-04")
    table = (
        "| a | b |\n|---|---|\n"
        "| core | 57.1 ms | `bench/bench_core.py` | 2026-12-03 |\n"
        "| x | 2.5× |"
    )
    assert [f for f, _ in unsourced_figures(table)] == [["2.5×"]]
    assert unsourced_figures("```text\nreplay: 0.763 s, 15,773 requests/s\n```") == []


def test_every_measured_figure_names_its_benchmark_and_date():
    assert "Figures in the README and these pages" in section("Development")
    assert MEASURED.search(section("Performance"))  # the walk sees some
    bad = unsourced_figures(README)
    assert not bad, "\n\n".join(f"{figures}: {unit}" for figures, unit in bad)


def test_offline_walkthrough_prints_the_documented_hit_rates(tmp_path, mooncake):
    """The offline text's four commands as written, in a folder holding only the
    Mooncake conversation trace: each succeeds, and the lines the README shows are among
    what ``replay`` and ``curve`` print."""
    text = section("Offline: from a trace to an exact curve")
    block = re.search(r"```bash\n(.*?)```", text, re.S).group(1)
    (tmp_path / "conversation_trace.jsonl").symlink_to(mooncake)
    printed: list[str] = []
    commands = []
    for line in block.strip().splitlines():
        argv = shlex.split(line, comments=True)
        assert argv[0] == "litehit", line
        done = run_cli(*argv[1:], cwd=tmp_path)
        assert done.returncode == 0, (line, done.stderr)
        commands.append(argv[1])
        printed += done.stdout.splitlines()
    assert commands == ["convert", "replay", "query", "curve"]
    shown = re.search(r"```text\n(.*?)```", text, re.S).group(1).splitlines()
    assert len(shown) == 3
    for line in shown:
        assert line in printed, line
    assert "29,599 blocks" in text and "29599" in shown[2]


def test_replay_config_errors_example(tmp_path):
    """The config section's bad config gives exactly the lines shown, all at once, exit 2."""
    section = README[README.index("`litehit replay` checks the whole config") :]
    (tmp_path / "bad.json").write_text(
        re.search(r"```json\n(.*?)```", section, re.S).group(1), encoding="utf-8"
    )
    shown = re.search(r"```text\n(.*?)```", section, re.S).group(1).splitlines()
    assert "gives, from `litehit replay bad.json`:" in section
    done = run_cli("replay", "bad.json", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines() == shown
    assert done.stdout == ""


def test_convert_hint_example(tmp_path, mooncake):
    """The convert bullet's command on the Mooncake file says what the README says."""
    match = re.search(r"`(litehit convert --from standard [^`]*)` says\s+`([^`]*)`", README)
    argv = shlex.split(match.group(1))
    (tmp_path / "conversation_trace.jsonl").symlink_to(mooncake)
    done = run_cli(*argv[1:], cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == " ".join(match.group(2).split())
    assert not (tmp_path / "t.jsonl").exists()


def _blocks(text: str, language: str) -> list[str]:
    return [b for lang, b in re.findall(r"```([\w-]*)\n(.*?)```", text, re.S) if lang == language]


def test_the_readme_lmcache_example_runs_as_written_on_the_shipped_log():
    """The LMCache example reads tests/data (it ships) and prints the lines shown."""
    text = section("Coming from LMCache", PAGES[0])
    (command,) = _blocks(text, "bash")
    (shown,) = _blocks(text, "text")
    done = run_cli(*shlex.split(command)[1:], cwd=ROOT)
    assert done.returncode == 0, done.stderr
    printed = done.stdout.splitlines()
    assert [line for line in shown.splitlines() if line not in printed] == []


def test_the_readme_offline_example_is_the_docs_walkthrough():
    """The README's four offline commands are the docs page's, which
    test_offline_walkthrough_prints_the_documented_hit_rates runs."""
    readme = _blocks(section("Offline: a trace to an exact curve"), "bash")[0]
    docs = _blocks(section("Offline: from a trace to an exact curve"), "bash")[0]
    assert readme == docs


def test_the_readme_optimizer_example_prints_what_it_shows(tmp_path, mooncake):
    """The README's optimizer example on the shipped docs/policy.json (its trace where
    the example puts it: a copy of the configuration pointing at the shared trace) prints
    the lines shown."""
    import json

    text = section("Coming from the KVCacheManager optimizer")
    (commands,) = _blocks(text, "bash")
    (shown,) = _blocks(text, "text")
    argv = shlex.split(commands.splitlines()[1], comments=True)[1:]
    assert argv[:2] == ["optimize", "-c"] and argv[2] == "docs/policy.json"
    config = json.loads((ROOT / argv[2]).read_text())
    assert config["trace_file_path"] == "../traces/conversation_trace.jsonl"
    assert config["output_result_path"] == "../out/policy_results"  # where the comment says
    config.update(trace_file_path=str(mooncake), output_result_path=str(tmp_path / "o"))
    (tmp_path / "policy.json").write_text(json.dumps(config))
    done = run_cli(*argv[:2], str(tmp_path / "policy.json"), *argv[3:])
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == shown.splitlines()
