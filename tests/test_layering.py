"""Layering: litehit_core is pure and never depends on the service, gRPC or Prometheus.

The static check (no such import in any core module) is ``test_layout.py``'s; here the
behaviour: importing every core module loads no service stack, the contract names are
exported, and full-attention commands never load numba."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from fresh import ROOT, run_python

import litehit_core
from litehit_service.cli import build_parser, command_module

CORE = ROOT / "litehit_core"
# the public contract other packages code against (see the preamble / issue 2)
CONTRACT_NAMES = [
    "InvalidRequestError",
    "HitCurveSegment",
    "RequestFact",
    "NormalizedRequest",
    "prefix_hash_next",
    "apply_prefix_hash",
    "normalize_request",
    "LiteHit",
    "project_blocks",
    "project_infinite",
    "project_bytes",
    "capacity_gb_to_bytes",
    "capacity_gb_to_blocks",
    "bytes_to_blocks",
    "FACTS_HEADER",
    "FactRow",
    "FactsWriter",
    "read_facts",
    "query_facts",
    "HitCurveAccumulator",
    "LocatedError",
    "FactLineFormat",
]


def test_importing_core_in_a_fresh_interpreter_loads_no_service_stack() -> None:
    code = (
        "import importlib, json, pkgutil, sys\n"
        "import litehit_core\n"
        "for m in pkgutil.walk_packages(litehit_core.__path__, 'litehit_core.'):\n"
        "    importlib.import_module(m.name)\n"
        "print(json.dumps(sorted(m for m in sys.modules\n"
        "    if m.split('.')[0] in ('grpc', 'prometheus_client', 'litehit_service'))))\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('litehit_core.'))))\n"
    )
    proc = run_python(ROOT, code=code)
    assert proc.returncode == 0, proc.stderr
    loaded_forbidden, loaded_core = (json.loads(line) for line in proc.stdout.splitlines())
    assert loaded_forbidden == []
    # the walk really imported the modules (so the check above is not vacuous)
    every = {f"litehit_core.{p.stem}" for p in CORE.glob("*.py") if p.stem != "__init__"}
    assert len(every) > 15 and every <= set(loaded_core)


def test_contract_names_are_exported_from_the_package() -> None:
    # other packages use `from litehit_core import ...` for every name of the contract
    missing = [name for name in CONTRACT_NAMES if not hasattr(litehit_core, name)]
    assert missing == []
    assert set(CONTRACT_NAMES) <= set(litehit_core.__all__)


def test_full_attention_commands_do_not_import_numba(tmp_path: Path) -> None:
    """numba (~0.15 s to import, more to load kernels) is for the hybrid and head-first
    models only: the CLI, the manager and a full-attention replay never import it, and
    ``litehit_core.HybridLRU`` still resolves on first use."""
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"type": "get", "instance_id": "i", "timestamp_ns": 1, "keys": [1, 2], '
                     '"input_len": 8}\n')  # fmt: skip
    config = tmp_path / "c.json"
    config.write_text(json.dumps({
        "trace_file_path": str(trace), "output_result_path": str(tmp_path / "out"),
        "block_size": 4,
        "instance_groups": [{"name": "g", "capacity_gb": [1]}],
        "instances": [{"instance_id": "i", "instance_group": "g", "block_size": 4,
                       "location_spec_infos": [{"name": "kv", "size": 1024}],
                       "location_spec_groups": [{"name": "full", "spec_names": ["kv"]}]}],
    }))  # fmt: skip
    code = (
        "import sys\n"
        "from litehit_service.cli import main\n"
        "import litehit_service.manager, litehit_service.litehit.replay\n"
        f"assert main(['replay', {str(config)!r}]) == 0\n"
        "print('numba' in sys.modules)\n"
        "import litehit_core\n"
        "print(litehit_core.HybridLRU.__name__, 'numba' in sys.modules)\n"
    )
    proc = run_python(tmp_path, code=code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-2:] == ["False", "HybridLRU True"]


def _choices(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return parser._subparsers._group_actions[0].choices  # noqa: SLF001


def test_a_command_line_builds_only_its_own_subcommand() -> None:
    """``main`` builds the parser of the named subcommand only (a command imports nothing of
    the others): for every subcommand of the full parser, the one-command parser knows it
    and gives it the very same help; an unknown or missing name gets the full parser."""
    full = _choices(build_parser())
    for name, subparser in full.items():
        module = command_module(name)
        assert module is not None, name
        only = _choices(build_parser(module))
        assert list(only) == [name]
        assert only[name].format_help() == subparser.format_help()
    assert [command_module(n) for n in ("nosuch", "gen_dataset", "-h", "--version")] == [None] * 4


def test_a_command_imports_no_other_command(tmp_path: Path) -> None:
    """``litehit sweep --help`` in a fresh interpreter loads the sweep command (and the
    simulate command it builds on, and the shared options) and no other command module,
    nor grpc, numba or matplotlib; ``--version`` still answers."""
    code = (
        "import sys\n"
        "from litehit_service.cli import main\n"
        "try:\n"
        "    main(['sweep', '--help'])\n"
        "except SystemExit as exc:\n"
        "    assert exc.code == 0\n"
        "print(sorted(m for m in sys.modules if m.startswith('litehit_service.commands.')))\n"
        "print([m for m in ('grpc', 'numba', 'matplotlib') if m in sys.modules])\n"
    )
    proc = run_python(tmp_path, code=code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-2:] == [
        "['litehit_service.commands.options', 'litehit_service.commands.simulate', "
        "'litehit_service.commands.sweep']",
        "[]",
    ]
    version = run_python(tmp_path, "-m", "litehit_service", "--version")
    assert version.returncode == 0 and version.stdout.startswith("litehit "), version
