"""numba's reference counts without atomic instructions, for the commands whose kernels run
on one thread (litehit_service.offline.kernels.single_threaded_refcounts).

Bugs these catch: the plain counts not taking effect (the runtime started first, or the
replacement not reaching numba); a count that never frees (numba's own switch returns the
old count: a leak that doubled optimize's peak RSS); the server, or a command called in a
process that may run threads, getting plain counts; a new command left unclassified.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from fresh import run_python
from serve_process import serve_env

from litehit_service import cli

PROBE = """
import sys
{setup}
import numba
import numpy as np
from numba.core.runtime import nrt

@numba.njit
def churn(n):
    total = 0.0
    for i in range(n):
        a = np.ones(i % 7 + 1)   # an array allocated and freed every iteration
        total += a.sum()
    return total

assert churn(10_000) == sum(i % 7 + 1 for i in range(10_000))
asm = nrt.rtsys._library.get_asm_str()
atomic = [w for w in ("xadd", "incq", "decq") if any("lock" in line and w in line
          for line in asm.splitlines())]
stats = nrt.rtsys.get_allocation_stats()
print(",".join(atomic) or "plain", stats.alloc - stats.free, stats.mi_alloc - stats.mi_free)
"""


def probe(tmp_path: Path, setup: str) -> list[str]:
    env = {**serve_env(), "NUMBA_NRT_STATS": "1"}
    code = PROBE.format(setup=setup)
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_plain_counts_take_effect_and_free_what_they_count(tmp_path: Path) -> None:
    setup = (
        "from litehit_service.offline.kernels import single_threaded_refcounts\n"
        "single_threaded_refcounts()"
    )
    assert probe(tmp_path, setup) == ["plain", "0", "0"]  # every allocation freed


def test_without_them_numba_counts_atomically(tmp_path: Path) -> None:
    """The probe's own check: the same kernel, untouched, shows the lock prefixes."""
    assert probe(tmp_path, "") == ["xadd,incq,decq", "0", "0"]


def test_numbas_own_switch_leaks_which_is_why_it_is_not_used(tmp_path: Path) -> None:
    """numba's ``_disable_atomicity`` returns the old count, so nothing reaches 0."""
    setup = "import numba.core.runtime.nrtdynmod as m\nm._disable_atomicity = 1"
    kind, leaked_allocs, leaked_infos = probe(tmp_path, setup)
    assert kind == "plain" and int(leaked_allocs) > 1000 and int(leaked_infos) > 1000


def test_too_late_to_switch_keeps_atomic_counts(tmp_path: Path) -> None:
    """After the runtime started, the switch changes nothing (never half of each)."""
    setup = (
        "import numba, numpy as np\n"
        "numba.njit(lambda n: np.ones(n).sum())(3)\n"
        "from litehit_service.offline.kernels import single_threaded_refcounts\n"
        "single_threaded_refcounts()"
    )
    assert probe(tmp_path, setup)[0] == "xadd,incq,decq"


EXEMPT = {
    "serve": "its kernels run on several threads at once (the batch threads)",
    "feed": "a client: it streams to a server and runs no kernel of its own",
    "health": "a client call",
    "instances": "a client call",
}


def test_every_command_is_classified() -> None:
    """Deny by default, walking the real parser: a command has plain counts only when
    listed; a new command must be listed or exempted here with its reason."""
    parser = cli.build_parser(None)
    (sub,) = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    commands = set(sub.choices)
    assert cli.SINGLE_THREADED_KERNELS | set(EXEMPT) == commands
    assert not cli.SINGLE_THREADED_KERNELS & set(EXEMPT)


@pytest.mark.parametrize(
    ("argv", "own_process", "expected"),
    [
        (["convert", "missing.jsonl", "-o", "x.parquet"], True, 1),
        (["convert", "missing.jsonl", "-o", "x.parquet"], False, 0),  # called in a process
        (["instances", "--server", "127.0.0.1:1", "--timeout", "0.2"], True, 0),
    ],
)
def test_the_cli_switches_only_its_own_process_and_only_for_listed_commands(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, argv: list[str], own_process: bool,
    expected: int,
) -> None:  # fmt: skip
    calls: list[int] = []
    monkeypatch.setattr(cli, "single_threaded_refcounts", lambda: calls.append(1))
    monkeypatch.chdir(tmp_path)
    if own_process:
        monkeypatch.setattr(sys, "argv", ["litehit", *argv])
        cli.main()
    else:
        cli.main(argv)
    assert len(calls) == expected


def test_a_real_command_runs_with_plain_counts(tmp_path: Path) -> None:
    """``python -m litehit_service`` (what the console script runs) switches before any
    kernel: the warm-up's kernels then run on plain counts (no leak either)."""
    code = (
        "import sys, runpy\n"
        "sys.argv = ['litehit', 'warm-up']\n"
        "try:\n"
        "    runpy.run_module('litehit_service', run_name='__main__')\n"
        "except SystemExit as exit:\n"
        "    assert not exit.code, exit.code\n"
        "from numba.core.runtime import nrt\n"
        "asm = nrt.rtsys._library.get_asm_str()\n"
        "print(any('lock' in l and 'incq' in l for l in asm.splitlines()))\n"
    )
    done = run_python(tmp_path, code=code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == "False"
