"""Restores say what they did, and service counters survive a restart (issue 21, items 3-4).

Real ``litehit serve`` subprocesses on one data dir: the first start says there was nothing
to restore; a graceful restart logs one restore line with the instance count and a clean
previous stop; a restart after kill -9 logs an unclean stop and how many seconds of
queries may be missing; ``/metrics`` carries the standard ``process_*`` and
``python_gc_*`` families, and ``litehit_errors_total`` keeps its value across a graceful
restart (and across kill -9 as of the last snapshot round). ``restore_message`` itself is
checked in-process for the cases a subprocess cannot reach cheaply.
"""

from __future__ import annotations

import json
import logging
import signal
import time
from pathlib import Path

import pytest
from conftest import GIB, scrape
from oracle import NaiveHybridLRU
from serve_process import ServeProcess
from test_hybrid_service import hybrid_reg

from litehit_service.client import OptimizerClient
from litehit_service.errors import InstanceNotExist
from litehit_service.manager.durable import RestoreSummary
from litehit_service.model import (
    InstanceGroup,
    InstanceRegistration,
    LocationSpec,
    LocationSpecGroup,
)
from litehit_service.recovery import (
    CLEAN_STOP_FILE,
    COUNTERS_FILE,
    PreviousStop,
    load_counters,
    read_clean_stop,
    restore_message,
    save_counters,
    take_clean_stop,
    write_clean_stop,
)

ERRORS = ("litehit_errors_total", (("code", "INSTANCE_NOT_EXIST"), ("method", "TraceQuery")))


def group() -> InstanceGroup:
    return InstanceGroup("g", (1024 / GIB, 4096 / GIB))


def reg(instance_id: str) -> InstanceRegistration:
    return InstanceRegistration(
        instance_id, "g", 4, (LocationSpec("kv", 1024),), (LocationSpecGroup("full", ("kv",)),)
    )


def restore_lines(server: ServeProcess) -> list[str]:
    """The restore lines of a stopped server's log."""
    return [line for line in server.stderr().splitlines() if "restore: " in line]


def stopped(server: ServeProcess) -> ServeProcess:
    code = server.terminate()
    assert code == 0, server.stderr()
    return server


def killed(server: ServeProcess) -> None:
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait(timeout=30)


def feed(server: ServeProcess, instances: list[str]) -> None:
    with OptimizerClient(server.grpc) as c:
        c.create_instance_group(group())
        for iid in instances:
            c.register_instance(reg(iid))
            c.trace_query(iid, [1, 2, 3], 12)


def wait_for(predicate, what: str, timeout: float = 60.0) -> None:
    """Poll ``predicate`` until it holds (a bound on waiting, not an assertion on time)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what}: not reached in {timeout} s"
        time.sleep(0.02)


# ------------------------------------------------------------------ real servers


def test_first_start_says_there_was_nothing_to_restore(tmp_path: Path, serve) -> None:
    server = stopped(serve("--data-dir", str(tmp_path / "d")))
    (line,) = restore_lines(server)
    assert "INFO" in line and "nothing to restore (first start with this data dir)" in line


def test_start_loads_full_attention_kernels_first_and_hybrid_ones_in_the_background(
    tmp_path: Path, serve
) -> None:
    """The start waits only for the kernels most instances use; the hybrid engine's are
    loaded (compiled after an install) on a thread once the server serves, and a hybrid
    instance registered meanwhile answers as ever."""
    server = serve("--data-dir", str(tmp_path / "d"))
    with OptimizerClient(server.grpc) as c:
        c.create_instance_group(group())
        c.register_instance(hybrid_reg("h"))
        oracles = [NaiveHybridLRU(capacity, 1024, 2048, 2) for capacity in (1024, 4096)]
        for keys in ([1, 2, 3], [1, 2, 3], [1, 2, 4]):
            answer = c.trace_query("h", keys, 12)
            hits = [r.cache_hit_count for r in answer.capacity_results]
            assert hits == [o.request(keys) for o in oracles]
    wait_for(lambda: "(hybrid (linear/Mamba), in the background)" in server.stderr(), "warm")
    lines = [line for line in stopped(server).stderr().splitlines() if "kernels" in line]
    assert "loading the compiled engine kernels" in lines[0]
    assert "compiled engine kernels ready in" in lines[1]
    assert "(full attention, packed stream)" in lines[1]
    assert any("(hybrid (linear/Mamba), in the background)" in line for line in lines[2:])


def test_graceful_restart_logs_a_clean_restore_with_the_instance_count(
    tmp_path: Path, serve
) -> None:
    data = tmp_path / "d"
    first = serve("--data-dir", str(data), "--snapshot-interval-seconds", "0")
    feed(first, ["a", "b", "c"])
    assert not (data / CLEAN_STOP_FILE).exists()
    stopped(first)
    marker = json.loads((data / CLEAN_STOP_FILE).read_text())
    assert marker["instances"] == 3
    second = serve("--data-dir", str(data), "--snapshot-interval-seconds", "0")
    assert not (data / CLEAN_STOP_FILE).exists()  # taken: a crash from now on is unclean
    with OptimizerClient(second.grpc) as c:
        assert [i.total_queries for i in c.list_instances().instances] == [1, 1, 1]
    stopped(second)
    (line,) = restore_lines(second)
    assert "INFO" in line, line
    assert "restore: 3 of 3 instances restored from snapshots " in line, line
    assert "the previous stop was clean" in line and "NOT clean" not in line, line
    assert "started fresh" not in line and "may be missing" not in line, line


def test_kill_9_restart_logs_an_unclean_stop_and_the_interval_that_may_be_missing(
    tmp_path: Path, serve
) -> None:
    """Snapshots from a graceful stop, then a server that is killed: the next start
    restores them and warns that up to the snapshot interval of queries may be missing.
    An instance registered after the last snapshot starts fresh, and the line says why."""
    data = tmp_path / "d"
    first = serve("--data-dir", str(data), "--snapshot-interval-seconds", "30")
    feed(first, ["a", "b"])
    stopped(first)
    second = serve("--data-dir", str(data), "--snapshot-interval-seconds", "30")
    with OptimizerClient(second.grpc) as c:
        c.register_instance(reg("z"))  # no snapshot before the kill (interval 30 s)
    killed(second)
    third = serve("--data-dir", str(data), "--snapshot-interval-seconds", "30")
    stopped(third)
    (line,) = restore_lines(third)
    assert "WARNING" in line, line
    assert "restore: 2 of 3 instances restored from snapshots " in line, line
    assert "1 started fresh (1 no snapshot)" in line, line
    assert "the previous stop was NOT clean (killed or crashed" in line, line
    assert "up to 30 s (--snapshot-interval-seconds) of queries" in line, line
    assert "may be missing" in line, line


def test_metrics_export_process_and_gc_families_and_errors_survive_restarts(
    tmp_path: Path, serve
) -> None:
    """/metrics has the standard process_* and python_gc_* families; litehit_errors_total
    keeps its value across a graceful restart, and across kill -9 as of the last snapshot
    round (counters.json is written with every round)."""
    data = tmp_path / "d"
    args = ("--data-dir", str(data), "--snapshot-interval-seconds", "0.2")
    server = serve(*args)
    page = scrape(server.metrics)
    for name in (
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_start_time_seconds",
    ):
        assert page[(name, ())] > 0, name
    assert any(name == "python_gc_objects_collected_total" for name, _ in page)
    with OptimizerClient(server.grpc, retries=0) as c:
        for _ in range(3):
            with pytest.raises(InstanceNotExist):
                c.trace_query("nobody", [1], 4)
    assert scrape(server.metrics)[ERRORS] == 3
    stopped(server)
    again = serve(*args)
    assert scrape(again.metrics)[ERRORS] == 3  # survived the graceful restart
    with OptimizerClient(again.grpc, retries=0) as c, pytest.raises(InstanceNotExist):
        c.trace_query("nobody", [1], 4)
    assert scrape(again.metrics)[ERRORS] == 4
    wait_for(
        lambda: load_counters(data).get(("TraceQuery", "INSTANCE_NOT_EXIST")) == 4,
        "a snapshot round saving the error count",
    )
    killed(again)
    third = serve(*args)
    assert scrape(third.metrics)[ERRORS] == 4  # as of the last round before the kill
    stopped(third)


# ------------------------------------------------------------------ in-process


def test_restore_message_cases() -> None:
    now = 1000.0
    clean = PreviousStop(True, 990.0)
    summary = RestoreSummary(6, 5, {"corrupt": 1}, 900.0, 950.0)
    level, text = restore_message(summary, clean, 60, first_start=False, now=now)
    assert level == logging.INFO
    assert text == (
        "restore: 5 of 6 instances restored from snapshots 50.0-100.0 s old, "
        "1 started fresh (1 corrupt); the previous stop was clean 10.0 s ago"
    )
    level, text = restore_message(summary, PreviousStop(False), 0, first_start=False, now=now)
    assert level == logging.WARNING
    assert "every query it acknowledged may be missing (--snapshot-interval-seconds 0" in text
    level, text = restore_message(RestoreSummary(), PreviousStop(False), 60, False, now=now)
    assert (level, text) == (
        logging.WARNING,
        "restore: nothing to restore (no instances registered); the previous stop was NOT "
        "clean (killed or crashed: no clean-stop marker)",
    )
    assert restore_message(None, PreviousStop(False), 60, first_start=True)[1] == (
        "restore: nothing to restore (first start with this data dir)"
    )


def test_clean_stop_marker_round_trip(tmp_path: Path) -> None:
    assert read_clean_stop(tmp_path) == PreviousStop(False)
    write_clean_stop(tmp_path, 4)
    previous = read_clean_stop(tmp_path)
    assert previous.clean and previous.stopped_unix is not None
    take_clean_stop(tmp_path)
    assert not read_clean_stop(tmp_path).clean
    previous.put_back(tmp_path)  # a start that failed leaves the marker as it found it
    assert read_clean_stop(tmp_path) == previous
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.parametrize("body", [b"", b"not json", b'{"pid": 7}', b'{"stopped_unix": "x"}'])
def test_an_unreadable_marker_still_says_the_stop_was_clean(tmp_path: Path, body: bytes) -> None:
    """The marker is written after the final snapshots, so its presence alone says the stop
    finished them; a body that cannot be read (truncated, another version's) loses only
    the time. Reading it as an unclean stop would warn of lost queries that are not."""
    (tmp_path / "clean-stop.json").write_bytes(body)
    previous = read_clean_stop(tmp_path)
    assert previous == PreviousStop(True, None, body)
    level, text = restore_message(RestoreSummary(instances=1, restored=1), previous, 60,
                                  first_start=False, now=1000.0)  # fmt: skip
    assert (level, text) == (logging.INFO, "restore: 1 of 1 instances restored; the previous "
                             "stop was clean")  # fmt: skip


def test_counters_file_round_trip_and_an_unusable_one_starts_at_zero(
    tmp_path: Path, caplog
) -> None:
    assert load_counters(tmp_path) == {}
    assert save_counters(tmp_path, {("TraceQuery", "INVALID_ARGUMENT"): 7.0})
    assert load_counters(tmp_path) == {("TraceQuery", "INVALID_ARGUMENT"): 7.0}
    (tmp_path / COUNTERS_FILE).write_text("{not json")
    with caplog.at_level(logging.ERROR):
        assert load_counters(tmp_path) == {}
    assert "unusable" in caplog.text
