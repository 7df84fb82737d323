"""LogLimiter: the first event of a (kind, instance, peer) per interval in full, the
repeats summarised once, a bounded number of keys; exact counts with an injected clock."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pytest

from litehit_service.log_limits import KEY_CHARS, LogLimiter, peer_host

PEER = "ipv4:10.0.0.7:53412"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def lines() -> Iterator[list[logging.LogRecord]]:
    """Every record the limiter's logger receives."""
    logger = logging.getLogger("test.limits")
    handler = Records()
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield handler.records
    logger.removeHandler(handler)


def limiter(clock: Clock, **kwargs) -> LogLimiter:
    return LogLimiter(logging.getLogger("test.limits"), clock=clock, **kwargs)


def bad(lim: LogLimiter, n: int, instance: str = "i", peer: str = PEER, kind: str = "bad"):
    return [
        lim.log(logging.INFO, kind, instance, peer, "query %d rejected", k, extra={"peer": peer})
        for k in range(n)
    ]


def test_peer_host():
    assert peer_host("ipv4:10.0.0.7:53412") == "ipv4:10.0.0.7"
    assert peer_host("ipv6:[::1]:5000") == "ipv6:[::1]"
    assert peer_host("unix:/tmp/s") == "unix:/tmp/s"
    assert peer_host("") == ""


def test_a_flood_is_one_line_and_one_summary(clock: Clock, lines):
    lim = limiter(clock)
    assert bad(lim, 5338) == [True] + [False] * 5337
    assert [r.getMessage() for r in lines] == ["query 0 rejected"]
    clock.now += 9.9
    assert lim.flush() == 0  # the interval has not passed
    clock.now += 0.1
    assert lim.flush() == 1
    assert lines[-1].getMessage() == (
        "… 5,337 more like this (bad, instance 'i') from ipv4:10.0.0.7 in the last 10 s"
    )
    assert lines[-1].levelno == logging.INFO
    assert lines[-1].peer == "ipv4:10.0.0.7"
    assert len(lines) == 2
    assert len(lim) == 0  # forgotten once summarised


def test_the_next_event_after_the_interval_writes_the_summary(clock: Clock, lines):
    lim = limiter(clock)
    bad(lim, 3)
    clock.now += 10
    # an event of another key sweeps the due summary; the same key then starts anew
    bad(lim, 1, instance="other")
    assert [r.getMessage() for r in lines][-2:] == [
        "… 2 more like this (bad, instance 'i') from ipv4:10.0.0.7 in the last 10 s",
        "query 0 rejected",
    ]
    assert bad(lim, 2) == [True, False]
    assert len(lines) == 4


def test_a_sustained_flood_is_two_lines_per_interval(clock: Clock, lines):
    lim = limiter(clock)
    for _ in range(6):  # one minute, 1,000 bad queries every 10 s (one per 10 ms)
        for _ in range(1000):
            bad(lim, 1)
            clock.now += 0.01
    lim.flush(everything=True)
    assert len(lines) == 12
    summaries = [r.getMessage() for r in lines if r.getMessage().startswith("…")]
    assert len(summaries) == 6
    # every event is accounted for: 6 logged in full, the rest summarised
    counted = sum(int(m.split()[1].replace(",", "")) for m in summaries)
    assert counted + 6 == 6000


def test_keys_are_per_kind_instance_and_peer_host(clock: Clock, lines):
    lim = limiter(clock)
    bad(lim, 3)
    bad(lim, 3, peer="ipv4:10.0.0.7:60000")  # same host, another port: same key
    bad(lim, 3, instance="j")
    bad(lim, 3, kind="worse")
    bad(lim, 3, peer="ipv4:10.0.0.8:1")
    assert len(lines) == 4
    assert lim.flush(everything=True) == 4
    assert "5 more like this (bad, instance 'i')" in lines[4].getMessage()


def test_keys_are_bounded_and_the_rest_is_overflow(clock: Clock, lines):
    lim = limiter(clock, max_keys=8)
    for k in range(1000):
        bad(lim, 2, instance=f"nope-{k}")
    assert len(lim) == 9  # 8 keys and the overflow key
    assert len(lines) == 8
    assert lim.flush(everything=True) == 9
    assert lines[-1].getMessage() == (
        "… 1,984 more like this (events) from other clients or instances in the last 0 s"
    )
    bad(lim, 2, instance="x" * 100_000)  # a client's instance id: the key holds a prefix
    assert len(lim) == 1
    lim.flush(everything=True)
    assert f"instance '{'x' * KEY_CHARS}')" in lines[-1].getMessage()


def test_the_overflow_key_is_not_one_of_the_held_keys(clock: Clock, lines):
    """Two keys fill max_keys=2 and a third goes to the overflow key; once the two are
    summarised and forgotten, two new keys are logged in full while the overflow key
    still waits for its interval (counting it among the held keys would leave room for
    one only)."""
    lim = limiter(clock, max_keys=2)
    bad(lim, 1, instance="a")
    bad(lim, 1, instance="b")
    clock.now += 5
    assert bad(lim, 1, instance="c") == [False]  # the overflow key, started now
    clock.now += 5.5  # a and b are due, the overflow key is not
    assert bad(lim, 1, instance="d") == [True]
    assert bad(lim, 1, instance="e") == [True]
    assert bad(lim, 1, instance="f") == [False]
    assert [r.getMessage() for r in lines] == ["query 0 rejected"] * 4


def test_a_key_without_repeats_is_never_summarised(clock: Clock, lines):
    """One event and nothing more: no '… 0 more like this' line, by the sweep or a stop."""
    lim = limiter(clock)
    bad(lim, 1, instance="a")
    clock.now += 11
    bad(lim, 1, instance="b")  # sweeps a, which had no repeat
    assert lim.flush(everything=True) == 0
    assert [r.getMessage() for r in lines] == ["query 0 rejected"] * 2


def test_level_and_exception_of_the_first_event(clock: Clock, lines):
    lim = limiter(clock)
    exc = ValueError("boom")
    for _ in range(3):
        lim.log(logging.ERROR, "bug", "", PEER, "failed: %s", exc, exc_info=exc)
    lim.flush(everything=True)
    assert [r.levelno for r in lines] == [logging.ERROR, logging.ERROR]
    assert lines[0].exc_info is not None and lines[1].exc_info is None


def test_thread_safe_exact_counts(clock: Clock, lines):
    lim = limiter(clock)
    threads = [threading.Thread(target=bad, args=(lim, 2500)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lim.flush(everything=True)
    assert [r.getMessage() for r in lines][1] == (
        "… 19,999 more like this (bad, instance 'i') from ipv4:10.0.0.7 in the last 0 s"
    )


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="interval"):
        LogLimiter(logging.getLogger(), interval=0)
    with pytest.raises(ValueError, match="max_keys"):
        LogLimiter(logging.getLogger(), max_keys=0)
