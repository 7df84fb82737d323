"""Configurations know their kind: a replay configuration, an optimizer configuration or a
serve groups file given to another kind's command is refused with one error naming the kind
found, the fields that show it and the commands that read it (exit 2), before any
field-by-field check; no valid document of any kind is refused."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from doc_pages import all_text
from fresh import ROOT, run_python

from litehit_core import LocatedError
from litehit_service import config_kinds, entries
from litehit_service.cli import main
from litehit_service.config_files import ConfigErrors
from litehit_service.config_kinds import (
    ENTRY_GROUP_MARKS,
    KINDS,
    OPTIMIZER_GROUP_MARKS,
    OPTIMIZER_TOP_MARKS,
    TRACE_FIELDS,
    check_kind,
    config_kind,
)
from litehit_service.entries import load_groups_file
from litehit_service.litehit import config as replay_config
from litehit_service.litehit.config import load_config
from litehit_service.optimizer.optimize import config as optimizer_config
from litehit_service.optimizer.optimize.config import load_optimize_config

INSTANCE = {
    "instance_id": "i",
    "instance_group": "g",
    "block_size": 4,
    "location_spec_infos": [{"name": "kv", "size": 1024}],
    "location_spec_groups": [{"name": "full", "spec_names": ["kv"]}],
    "optimizer_state_info": {"full_location_spec_group_name": "full"},
}
GROUPS: dict[str, Any] = {
    "instance_groups": [{"name": "g", "capacity_gb": [1, 2], "ttl_seconds": 30}],
    "instances": [INSTANCE],
}
REPLAY: dict[str, Any] = {
    "trace_file_path": "t.jsonl",
    "output_result_path": "out",
    "block_size": 4,
    "trace_format": "standard",
    **GROUPS,
}
OPTIMIZER: dict[str, Any] = {
    "trace_file_path": "t.jsonl",
    "output_result_path": "out",
    "eviction_params": {"eviction_mode": 3, "eviction_batch_size_per_instance": 100},
    "trace_replay": {"write_delay_ns": 0},
    "instance_groups": [
        {
            "group_name": "g",
            "quota_capacity": 0.0625,
            "used_percentage": 1.0,
            "instances": [
                {
                    "instance_id": "conv",
                    "block_size": 16,
                    "bytes_per_token": 4096,
                    "eviction_policy_type": "lru",
                    "eviction_policy_params": {},
                }
            ],
        }
    ],
}

USE_REPLAY = "use litehit replay or feed --register-from"
USE_OPTIMIZER = "use litehit optimize, tradeoff, export-tree or lifecycle"
USE_GROUPS = "use litehit serve --groups"
READS_REPLAY = "litehit replay or feed --register-from reads a replay configuration"
READS_OPTIMIZER = (
    "litehit optimize, tradeoff, export-tree or lifecycle reads an optimizer configuration"
)
READS_GROUPS = "litehit serve --groups reads a serve groups file"
IS_REPLAY = "this is a replay configuration (trace_file_path, instances, instance_groups[0].name)"
IS_OPTIMIZER = (
    "this is an optimizer configuration "
    "(eviction_params, instance_groups[0].group_name, quota_capacity)"
)
IS_GROUPS = (
    "this is a serve groups file (instances, instance_groups[0].name, capacity_gb; "
    "no trace_file_path)"
)


def write(tmp_path: Path, name: str, data: dict[str, Any]) -> Path:
    """``data`` as ``name`` in ``tmp_path``: indented JSON, or YAML for ``*.yaml``."""
    path = tmp_path / name
    if name.endswith(".yaml"):
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    else:
        path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return path


def line_of(path: Path, key: str) -> int:
    """1-based line of the first ``"key":`` in the JSON file ``path``."""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if f'"{key}":' in line:
            return number
    raise AssertionError(f"{key} not in {path}")


def refusal(load: Any, path: Path) -> LocatedError:
    """The one error ``load(path)`` raises (not a list of field errors)."""
    with pytest.raises(LocatedError) as info:
        load(path)
    assert not isinstance(info.value, ConfigErrors), str(info.value)
    assert len(str(info.value).splitlines()) == 1
    return info.value


# --------------------------------------------------------------------------- the detector


def readme_json_blocks() -> list[Any]:
    """Every complete JSON document the README and the docs show (fragments left out)."""
    text = all_text()
    found = []
    for block in re.findall(r"```json\n(.*?)```", text, re.S):
        try:
            found.append(json.loads(block))
        except json.JSONDecodeError:
            continue  # a fragment (a few fields of a larger document)
    return found


def test_each_kind_is_detected_on_real_examples() -> None:
    """Bug: the detector misnames a valid document (its own loader would then refuse it)
    or cannot tell a complete one. The shipped docs/*.json are optimizer configurations;
    the README's full documents are an optimizer configuration, a replay configuration
    (bad.json, with a field missing) and an instance (no kind)."""
    assert config_kind(REPLAY) == "replay"
    assert config_kind(OPTIMIZER) == "optimizer"
    assert config_kind(GROUPS) == "groups"
    assert config_kind({"instances": None, "instance_groups": None}) == "groups"  # YAML nulls
    shipped = {p.name: config_kind(json.loads(p.read_text())) for p in ROOT.glob("docs/*.json")}
    assert shipped == {"policy.json": "optimizer", "tiered.json": "optimizer"}
    assert [config_kind(doc) for doc in readme_json_blocks()] == ["optimizer", "replay", None]


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        ([REPLAY], None),  # not an object
        ("instance_groups", None),
        ({}, None),
        ({"trace_file_path": "t.jsonl"}, None),  # shared by replay and optimizer
        ({"trace_file_path": "t", "output_result_path": "o", "instance_groups": []}, None),
        ({"instance_groups": "g"}, None),
        # misspelled or partial documents: decided by the strong evidence left
        ({"instance_groups": [{"group_nme": "g", "quota_capacity": 1}]}, "optimizer"),
        ({"trace_replay": {}}, "optimizer"),
        ({"block_size": 4, "instance_groups": [{"nme": "g", "capacity_gb": [1]}]}, "replay"),
        ({"trace_file_path": "t.jsonl", "instances": []}, "replay"),
        ({"instance_groups": [7, {"name": "g"}]}, "groups"),  # a bad first entry skipped
        ({"instances": []}, "groups"),
        # a mix of both formats: the field checks say more than a kind would
        ({"eviction_params": {}, "instances": []}, None),
        ({"instance_groups": [{"group_name": "g", "capacity_gb": [1]}]}, None),
    ],
)
def test_partial_misspelled_and_mixed_documents(data: Any, kind: str | None) -> None:
    """Bug: a weak hint (a shared field, an empty list) names a kind, or a half-converted
    document is called one kind while it carries the other's fields."""
    assert config_kind(data) == kind


def test_marks_are_fields_the_other_kinds_refuse() -> None:
    """Bug: a field is added to one loader that the detector counts as another kind's
    mark, so a valid document of the first kind is refused. Each mark must be a field its
    kind's loader accepts and the other kinds' loaders reject."""
    replay_top = set(replay_config._TOP_FIELDS)
    replay_group = set(entries._GROUP_FIELDS)
    optimizer_top = set(optimizer_config._TOP)
    optimizer_group = set(optimizer_config._GROUP)
    assert set(ENTRY_GROUP_MARKS) == replay_group and not replay_group & optimizer_group
    assert set(OPTIMIZER_GROUP_MARKS) == optimizer_group and not optimizer_group & replay_group
    assert set(OPTIMIZER_TOP_MARKS) == optimizer_top - replay_top
    assert set(TRACE_FIELDS) == replay_top - {"instance_groups", "instances"}
    assert "instances" in replay_top and "instances" not in optimizer_top
    assert set(KINDS) == {"replay", "optimizer", "groups"}


def test_the_detector_module_stays_at_the_bottom_of_the_import_graph() -> None:
    """Bug: the detector imports a loader's home (an import cycle, as every loader imports
    it) or a heavy dependency (YAML, gRPC) that a caller may not need."""
    tree = ast.parse(Path(config_kinds.__file__).read_text(encoding="utf-8"))
    imported = {
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    }
    assert imported <= {
        "__future__",
        "collections.abc",
        "dataclasses",
        "typing",
        "litehit_core",
        "litehit_service.config_files",
    }
    code = (
        "import sys\n"
        "import litehit_service.config_kinds\n"
        "print(sorted(m for m in ('yaml', 'grpc', 'litehit_service.entries',\n"
        "    'litehit_service.litehit', 'litehit_service.optimizer', 'litehit_service.commands')\n"
        "    if m in sys.modules))\n"
    )
    proc = run_python(ROOT, code=code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_check_kind_is_silent_on_its_own_kind_and_on_unknown() -> None:
    """Bug: the check refuses a document of the expected kind, or one it cannot tell
    (which the loader's field checks must judge)."""
    for kind, data in (("replay", REPLAY), ("optimizer", OPTIMIZER), ("groups", GROUPS)):
        check_kind(data, kind, "c.json")
        check_kind({}, kind, "c.json")
        check_kind({"trace_file_path": "t.jsonl"}, kind, "c.json")
    with pytest.raises(LocatedError) as info:
        check_kind(OPTIMIZER, "replay", "c.json", {"": 1, "eviction_params": 4})
    assert str(info.value) == f"c.json:4: {IS_OPTIMIZER}: {USE_OPTIMIZER}; {READS_REPLAY}"


# --------------------------------------------------------------------------- the loaders


def test_valid_documents_of_every_kind_still_load(tmp_path: Path) -> None:
    """Bug: the kind check refuses a valid document in its own loader."""
    assert len(load_config(write(tmp_path, "replay.json", REPLAY)).instances) == 1
    assert len(load_optimize_config(write(tmp_path, "optimizer.json", OPTIMIZER)).groups) == 1
    for name in ("groups.json", "groups.yaml"):
        groups, regs = load_groups_file(write(tmp_path, name, GROUPS))
        assert (len(groups), len(regs)) == (1, 1)
    (tmp_path / "empty.yaml").write_text("", encoding="utf-8")
    assert load_groups_file(tmp_path / "empty.yaml") == ([], [])


def test_replay_loader_names_an_optimizer_config_and_a_groups_file(tmp_path: Path) -> None:
    """Bug: litehit replay lists every optimizer field as unknown (or calls a groups file a
    replay config missing its trace fields) instead of saying what the document is; the
    error is located at the line of its first evidence."""
    path = write(tmp_path, "optimizer.json", OPTIMIZER)
    error = refusal(load_config, path)
    assert (error.path, error.line_no, error.field) == (
        str(path),
        line_of(path, "eviction_params"),
        "",
    )
    assert error.reason == f"{IS_OPTIMIZER}: {USE_OPTIMIZER}; {READS_REPLAY}"
    path = write(tmp_path, "groups.json", GROUPS)
    error = refusal(load_config, path)
    assert (error.path, error.line_no) == (str(path), line_of(path, "instances"))
    assert error.reason == f"{IS_GROUPS}: {USE_GROUPS}; {READS_REPLAY}"


def test_optimizer_loader_names_a_replay_config_and_a_groups_file(tmp_path: Path) -> None:
    """Bug: litehit optimize (tradeoff, export-tree, lifecycle) lists the replay format's
    fields as unknown instead of pointing at litehit replay or serve --groups."""
    path = write(tmp_path, "replay.json", REPLAY)
    error = refusal(load_optimize_config, path)
    assert (error.path, error.line_no) == (str(path), line_of(path, "instances"))
    assert str(error) == (f"{path}:{error.line_no}: {IS_REPLAY}: {USE_REPLAY}; {READS_OPTIMIZER}")
    path = write(tmp_path, "groups.json", GROUPS)
    error = refusal(load_optimize_config, path)
    assert (error.path, error.line_no) == (str(path), line_of(path, "instances"))
    assert error.reason == f"{IS_GROUPS}: {USE_GROUPS}; {READS_OPTIMIZER}"


@pytest.mark.parametrize("suffix", ["json", "yaml"])
def test_groups_loader_names_a_replay_and_an_optimizer_config(tmp_path: Path, suffix: str) -> None:
    """Bug: serve --groups reports a replay config's trace fields as unknown (its other
    fields are a groups file's), or lists an optimizer config's fields, instead of naming
    the kind; JSON and YAML alike (no line map: line 0)."""
    path = write(tmp_path, f"replay.{suffix}", REPLAY)
    error = refusal(load_groups_file, path)
    assert str(error) == f"{path}:0: {IS_REPLAY}: {USE_REPLAY}; {READS_GROUPS}"
    path = write(tmp_path, f"optimizer.{suffix}", OPTIMIZER)
    error = refusal(load_groups_file, path)
    assert str(error) == f"{path}:0: {IS_OPTIMIZER}: {USE_OPTIMIZER}; {READS_GROUPS}"


# --------------------------------------------------------------------------- the CLI


def test_cli_replay_of_an_optimizer_config_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bug: litehit replay OPTIMIZER.json prints a screen of unknown-field errors (or
    exits with another code) instead of one line saying what to run."""
    path = write(tmp_path, "optimizer.json", OPTIMIZER)
    assert main(["replay", str(path)]) == 2
    captured = capsys.readouterr()
    line = line_of(path, "eviction_params")
    assert captured.err.splitlines() == [
        f"{path}:{line}: {IS_OPTIMIZER}: {USE_OPTIMIZER}; {READS_REPLAY}"
    ]
    assert captured.out == ""
    assert not (tmp_path / "out").exists()


def test_cli_optimize_of_a_replay_config_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bug: litehit optimize REPLAY.json prints a screen of unknown-field errors (or exits
    with another code) instead of one line pointing at litehit replay."""
    path = write(tmp_path, "replay.json", REPLAY)
    assert main(["optimize", str(path)]) == 2
    captured = capsys.readouterr()
    line = line_of(path, "instances")
    assert captured.err.splitlines() == [
        f"{path}:{line}: {IS_REPLAY}: {USE_REPLAY}; {READS_OPTIMIZER}"
    ]
    assert captured.out == ""
    assert not (tmp_path / "out").exists()


def test_the_readme_example_of_a_wrong_kind_is_what_replay_prints(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Catches the README's example drifting from the command's real message."""
    from litehit_service.cli import main

    root = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(root)
    readme = all_text()
    shown = readme.split("`litehit replay\ndocs/policy.json`:\n\n```text\n", 1)[1].split("\n")[0]
    assert main(["replay", "docs/policy.json"]) == 2
    assert capsys.readouterr().err == shown + "\n"
