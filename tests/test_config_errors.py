"""``litehit replay`` reports every problem of its config at once, each as
``path:line: json.path: reason`` on a real line, and exits 2 without publishing anything."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from litehit_core import LocatedError
from litehit_service.cli import main
from litehit_service.config_files import ConfigErrors
from litehit_service.litehit.config import load_config

SPEC = {
    "location_spec_infos": [{"name": "hbm", "size": 1024}],
    "location_spec_groups": [{"name": "full", "spec_names": ["hbm"]}],
}


def write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "t.jsonl").write_text("", encoding="utf-8")
    path = tmp_path / "c.json"
    path.write_text(text, encoding="utf-8")
    return path


def replay(capsys: pytest.CaptureFixture[str], config: Path) -> tuple[int, list[str]]:
    rc = main(["replay", str(config)])
    captured = capsys.readouterr()
    assert captured.out == ""
    return rc, captured.err.splitlines()


def test_every_structural_problem_at_once_with_its_json_path_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = json.dumps(SPEC)[1:-1]
    cfg = write(
        tmp_path,
        "{\n"
        '  "trace_file_path": "t.jsonl",\n'
        '  "block_size": 4,\n'
        '  "instance_groups": [{"name": "g", "capacity_gb": ["abc", 2]},\n'
        '                      {"name": "h", "capacity_gb": [1], "ttl": 3}],\n'
        '  "instances": [\n'
        f'    {{"instance_id": "i", "instance_group": "g", "block_size": "x", {spec}}},\n'
        f'    {{"instance_id": "j", "instance_group": "h", "blok_size": 8, {spec}}},\n'
        f'    {{"instance_id": "k", "instance_group": "h", "block_size": 6, {spec}}}\n'
        "  ]\n"
        "}\n",
    )
    rc, lines = replay(capsys, cfg)
    assert rc == 2
    assert lines == [
        f"{cfg}:1: output_result_path: missing required field",
        f'{cfg}:4: instance_groups[0].capacity_gb[0]: must be a number of GiB, got string "abc"',
        f"{cfg}:5: instance_groups[1].ttl: unknown field 'ttl' (allowed: name, eviction_policy, "
        "capacity_gb, ttl_seconds, enable_prefix_hash, enable_theoretical_max_cache, "
        "shared_group_quota, touch_order)",
        f'{cfg}:7: instances[0].block_size: must be an integer, got string "x"',
        # the misspelling is reported once (not also as a missing block_size)
        f"{cfg}:8: instances[1].blok_size: unknown field 'blok_size' (allowed: instance_id, "
        "instance_group, block_size, location_spec_infos, location_spec_groups, "
        "optimizer_state_info, linear_step); did you mean 'block_size'?",
        f"{cfg}:9: instances[2].block_size: 6 must be a positive multiple of the trace "
        "block_size 4 (re-blocking only coarsens)",
    ]
    assert not (tmp_path / "out").exists()


def test_a_missing_top_level_field_is_on_the_documents_line_not_line_0(tmp_path: Path) -> None:
    cfg = write(tmp_path, '\n\n{"trace_file_path": "t.jsonl"}\n')
    with pytest.raises(LocatedError) as info:
        load_config(cfg)
    assert str(info.value).splitlines() == [
        f"{cfg}:3: output_result_path: missing required field",
        f"{cfg}:3: instance_groups: missing required field",
        f"{cfg}:3: instances: missing required field",
    ]
    assert (info.value.line_no, info.value.field) == (3, "output_result_path")
    cfg = write(tmp_path, "[1]\n")
    with pytest.raises(LocatedError, match=r"c\.json:1: must be an object, got array \[1\]$"):
        load_config(cfg)


def test_every_manager_rule_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Value rules the manager judges (capacities, group names) come together too; an
    instance of a refused group is not also reported."""
    config = {
        "trace_file_path": "t.jsonl",
        "output_result_path": "out",
        "block_size": 4,
        "instance_groups": [
            {"name": "g", "capacity_gb": [-1]},
            {"name": "h", "capacity_gb": [1, 0]},
            {"name": "ok", "capacity_gb": [1]},
        ],
        "instances": [
            {"instance_id": "i", "instance_group": "g", "block_size": 4, **SPEC},
            {"instance_id": "j", "instance_group": "nope", "block_size": 4, **SPEC},
            {"instance_id": "k", "instance_group": "ok", "block_size": 4, **SPEC},
        ],
    }
    cfg = write(tmp_path, json.dumps(config, indent=2))
    rc, lines = replay(capsys, cfg)
    assert rc == 2
    assert [line.split(": ", 1)[1] for line in lines] == [
        "instance_groups[0]: capacity_gb[0] of instance group 'g' must be finite and > 0, got -1.0",
        "instance_groups[1]: capacity_gb[1] of instance group 'h' must be finite and > 0, got 0.0",
        "instances[1]: instance_group 'nope' of instance_id 'j' does not exist",
    ]
    assert all(int(line.split(":")[1]) > 0 for line in lines)
    assert not (tmp_path / "out" / "litehit_facts.csv").exists()


def test_config_errors_pickle_and_place() -> None:
    errors = ConfigErrors((LocatedError("", 0, "bad", "a"), LocatedError("", 0, "worse", "b")))
    assert str(errors) == "a: bad\nb: worse"
    again = pickle.loads(pickle.dumps(errors))
    assert (type(again), str(again)) == (ConfigErrors, str(errors))
    assert str(errors.at("f.json", 2)) == "f.json:2: a: bad\nf.json:2: b: worse"
