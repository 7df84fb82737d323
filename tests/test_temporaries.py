"""No temporary files left behind: SIGTERM/SIGINT clean up (exit 143/130), and a run killed
outright leaves a temporary that the next run writing the same output removes, while a live
writer's temporary is never touched.

The signal tests run real ``python -m litehit_service`` processes reading their input from
a FIFO: the test writes some lines and keeps the FIFO open, so the command is certainly
still running (its temporary created, waiting for more input) when the signal arrives; it
is sent once the command sleeps in that read (:func:`wait_blocked`). Linux (/proc) lets the
tests see that; elsewhere they wait half a second instead.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import require, write_replay_config
from long_lines import fact, std

from litehit_core import FACTS_HEADER, FactRow, FactsWriter, read_facts
from litehit_core.temporaries import pid_alive, remove_stale_temps, temp_path
from litehit_service.offline.outputs import atomic_outputs

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 60.0
PREVIOUS = FACTS_HEADER + '\nold,i,1,13,4,1024,"[]"\n'


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert not pid_alive(proc.pid)
    return proc.pid


def temps(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*.tmp"))


# ----------------------------------------------------------------------------- the helper


def test_temp_path_names_the_writing_process(tmp_path: Path) -> None:
    assert temp_path(tmp_path / "a.csv") == f"{tmp_path / 'a.csv'}.{os.getpid()}.tmp"


def test_sweep_removes_only_dead_writers_temporaries(tmp_path: Path) -> None:
    out = tmp_path / "out.csv"
    dead = tmp_path / f"out.csv.{dead_pid()}.tmp"
    mine = Path(temp_path(out))
    others = [
        tmp_path / "out.csv.tmp",  # no pid
        tmp_path / "out.csv.abc.tmp",
        tmp_path / "out.csv.0.tmp",
        tmp_path / "out.csv.-5.tmp",
        tmp_path / f"out.csv.0{dead_pid()}.tmp",  # not as this code names it
        tmp_path / f"out.csv.{10**30}.tmp",  # beyond any pid
        tmp_path / f"other.csv.{dead_pid()}.tmp",  # another output's
        tmp_path / f"out.csv.x.{dead_pid()}.tmp",  # the output "out.csv.x"'s
    ]
    for path in [dead, mine, *others]:
        path.write_text("x")
    assert remove_stale_temps(out) == [str(dead)]
    assert not dead.exists() and mine.exists() and all(p.exists() for p in others)
    assert remove_stale_temps(tmp_path / "missing" / "out.csv") == []


def test_a_parent_process_counts_as_alive() -> None:
    assert pid_alive(os.getpid()) and pid_alive(os.getppid())
    assert pid_alive(1)  # init: kill() may be refused (another user's), it exists


def test_facts_writer_and_atomic_outputs_sweep_their_outputs(tmp_path: Path) -> None:
    ledger, out = tmp_path / "litehit_facts.csv", tmp_path / "hits.jsonl"
    stale = [tmp_path / f"{name}.{dead_pid()}.tmp" for name in ("litehit_facts.csv", "hits.jsonl")]
    live = tmp_path / f"hits.jsonl.{os.getppid()}.tmp"  # a concurrent writer's
    for path in [*stale, live]:
        path.write_text("partial")
    with FactsWriter(ledger) as writer:
        writer.write(FactRow("r", "i", 1, 13, 4, 1024, ()))
        assert not stale[0].exists()
    with atomic_outputs([out]) as (tmp,):
        assert not stale[1].exists()
        Path(tmp).write_text("new")
    assert out.read_text() == "new" and live.read_text() == "partial"
    assert temps(tmp_path) == [live.name]


def test_replay_removes_a_killed_runs_temporary_and_keeps_a_live_one(tmp_path: Path) -> None:
    config = replay_config(tmp_path, tmp_path / "trace.jsonl")
    (tmp_path / "trace.jsonl").write_text(std(1) + "\n" + std(2) + "\n")
    out = tmp_path / "out"
    out.mkdir()
    stale = out / f"litehit_facts.csv.{dead_pid()}.tmp"
    stale.write_text("left by SIGKILL")
    live = out / f"litehit_facts.csv.{os.getpid()}.tmp"  # this test's process: alive
    live.write_text("a concurrent replay's")
    proc = start(["replay", str(config), "--quiet"])
    _, err = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == 0, err
    assert not stale.exists()
    assert live.read_text() == "a concurrent replay's"
    assert len(list(read_facts(out / "litehit_facts.csv"))) == 2


# ----------------------------------------------------------------------------- signals


def replay_config(tmp: Path, trace: Path, workers: int = 1) -> Path:
    return write_replay_config(
        tmp / "config.json", trace, output=tmp / "out", pipeline_worker_count=workers
    )


def start(argv: list[str], new_group: bool = False) -> subprocess.Popen[str]:
    """``python -m litehit_service ARGV`` with stdout and stderr captured.

    SIGINT must reach it as Python's KeyboardInterrupt: a child inherits an ignored SIGINT
    (a background shell's), so it is handled here while the child starts (no preexec_fn:
    that would run gRPC's at-fork hooks in the child, if another test loaded gRPC)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "litehit_service", *argv],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=new_group,
        )
    finally:
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextmanager
def feeding(fifo: Path, proc: subprocess.Popen[str], lines: list[str]) -> Iterator[None]:
    """Open ``fifo`` for writing once ``proc`` reads it, write ``lines`` (from a thread: more
    than a pipe holds blocks until read) and keep it open (the reader blocks, waiting for
    more) until the block ends."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError as exc:
            if exc.errno != errno.ENXIO:  # ENXIO: no reader yet
                raise
        if proc.poll() is not None or time.monotonic() > deadline:
            out, err = proc.communicate()
            pytest.fail(f"the command never opened its input (rc {proc.returncode}): {err}")
        time.sleep(0.01)
    data = "".join(line + "\n" for line in lines).encode()

    def write() -> None:
        try:
            os.write(fd, data)
        except BrokenPipeError:  # the reader is gone
            pass

    os.set_blocking(fd, True)
    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        yield
    finally:
        writer.join(TIMEOUT_S)
        os.close(fd)


def children(pid: int) -> list[int]:
    """The pids of ``pid``'s child processes (Linux /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


def wait_for(predicate: Any, proc: subprocess.Popen[str], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not predicate():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"never saw {what} (rc {proc.returncode}): {err}")
        time.sleep(0.01)


def blocked_reading(pid: int) -> bool:
    """Whether ``pid``'s main thread sleeps in a pipe read (Linux /proc; where the kernel
    hides wchan, sleeping is all that can be seen)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        wchan = Path(f"/proc/{pid}/wchan").read_text().strip()
    except OSError:
        return False
    return state == "S" and ("pipe" in wchan or wchan in ("", "0"))


def wait_blocked(proc: subprocess.Popen[str]) -> None:
    """Wait until ``proc`` has read everything and sleeps in a read of its FIFO (twice in a
    row, 20 ms apart). A signal sent earlier could land just before that read (in C, between
    two raw reads of a buffered read): Python would run its handler only after the read
    returns, which it never does, as the FIFO stays open. Sent now, the read is interrupted
    and the handler runs at once."""
    if not os.path.isdir("/proc"):
        time.sleep(0.5)
        return
    seen = 0
    deadline = time.monotonic() + TIMEOUT_S
    while seen < 2:
        seen = seen + 1 if blocked_reading(proc.pid) else 0
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"never saw the command waiting for input (rc {proc.poll()})")
        time.sleep(0.02)


def stop(proc: subprocess.Popen[str], signum: int) -> tuple[int, str]:
    wait_blocked(proc)
    proc.send_signal(signum)
    try:
        _, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"still running after the signal: {err}")
    return proc.returncode, err


SIGNALS = [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted")]


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize(("signum", "code", "message"), SIGNALS, ids=["SIGTERM", "SIGINT"])
def test_replay_stopped_by_a_signal_leaves_no_temporary(
    tmp_path: Path, workers: int, signum: int, code: int, message: str
) -> None:
    fifo = tmp_path / "trace.jsonl"
    os.mkfifo(fifo)
    config = replay_config(tmp_path, fifo, workers)
    out = tmp_path / "out"
    out.mkdir()
    (out / "litehit_facts.csv").write_text(PREVIOUS, encoding="utf-8")
    proc = start(["replay", str(config), "--quiet"])
    with feeding(fifo, proc, [std(ts) for ts in range(1, 50)]):
        wait_for(lambda: temps(out), proc, "the ledger's temporary")
        assert temps(out) == [f"litehit_facts.csv.{proc.pid}.tmp"]
        rc, err = stop(proc, signum)
    assert (rc, err) == (code, f"{message}\n")
    assert temps(out) == []
    assert (out / "litehit_facts.csv").read_text(encoding="utf-8") == PREVIOUS


@pytest.mark.parametrize(("signum", "code", "message"), SIGNALS, ids=["SIGTERM", "SIGINT"])
def test_replay_workers_leave_the_signal_to_the_replay(
    tmp_path: Path, signum: int, code: int, message: str
) -> None:
    require(os.path.isdir("/proc"), "no /proc to see the workers")
    # Ctrl-C in a terminal or a kill of the process group reaches the parse workers too:
    # they ignore it, the replay cleans up and shuts them down, no worker traceback.
    fifo = tmp_path / "trace.jsonl"
    os.mkfifo(fifo)
    config = replay_config(tmp_path, fifo, workers=2)
    out = tmp_path / "out"
    proc = start(["replay", str(config), "--quiet"], new_group=True)
    # more than one read (1 MiB): the first chunk goes to the workers, then the replay waits
    lines = [std(ts) for ts in range(1, 15_000)]
    with feeding(fifo, proc, lines):
        wait_for(lambda: len(children(proc.pid)) == 2, proc, "two parse workers")
        wait_blocked(proc)
        os.killpg(proc.pid, signum)
        try:
            _, err = proc.communicate(timeout=TIMEOUT_S)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    assert (proc.returncode, err) == (code, f"{message}\n")
    assert temps(out) == [] and not (out / "litehit_facts.csv").exists()


@pytest.mark.parametrize(("signum", "code", "message"), SIGNALS, ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("command", ["convert", "query", "curve"])
def test_other_commands_stopped_by_a_signal_leave_no_temporary(
    tmp_path: Path, command: str, signum: int, code: int, message: str
) -> None:
    fifo = tmp_path / "input"
    os.mkfifo(fifo)
    out = tmp_path / "out"
    out.mkdir()
    if command == "convert":
        argv = ["convert", "--from", "standard", str(fifo), "-o", str(out / "t.jsonl")]
        argv += ["--emit-config", str(out / "c.json")]
        lines, expected = [std(ts) for ts in range(1, 50)], ["t.jsonl"]  # config: at the end
    elif command == "query":
        argv = ["query", str(fifo), "--capacity-gib", "1", "-o", str(out / "hits.jsonl")]
        lines, expected = [FACTS_HEADER, *(fact(f"r{i}") for i in range(50))], ["hits.jsonl"]
    else:  # curve writes its files after reading: nothing to see while it reads
        argv = ["curve", str(fifo), "-o", str(out / "c.png"), "--csv", str(out / "c.csv")]
        lines, expected = [FACTS_HEADER, *(fact(f"r{i}") for i in range(50))], []
    proc = start(argv)
    with feeding(fifo, proc, lines):
        if expected:
            wait_for(lambda: len(temps(out)) == len(expected), proc, "the temporaries")
            assert temps(out) == [f"{name}.{proc.pid}.tmp" for name in expected]
        rc, err = stop(proc, signum)
    assert (rc, err) == (code, f"{message}\n")
    assert sorted(p.name for p in out.iterdir()) == []


def test_a_killed_replay_leaves_its_temporary_for_the_next_run(tmp_path: Path) -> None:
    fifo = tmp_path / "trace.jsonl"
    os.mkfifo(fifo)
    config = replay_config(tmp_path, fifo)
    out = tmp_path / "out"
    proc = start(["replay", str(config), "--quiet"])
    with feeding(fifo, proc, [std(1)]):
        wait_for(lambda: out.is_dir() and temps(out), proc, "the ledger's temporary")
        wait_blocked(proc)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == -signal.SIGKILL
    assert temps(out) == [f"litehit_facts.csv.{proc.pid}.tmp"]  # SIGKILL cannot clean up
    os.remove(fifo)
    (tmp_path / "trace.jsonl").write_text(std(1) + "\n", encoding="utf-8")
    proc = start(["replay", str(config), "--quiet"])
    _, err = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == 0, err
    assert temps(out) == [] and len(list(read_facts(out / "litehit_facts.csv"))) == 1
