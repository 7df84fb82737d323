"""A fault in the policy replay's compiled loops is a named error, never a hang: each loop
that could spin forever on broken state checks that it makes progress. Each test breaks
the state the way a planted fault did in a mutation audit (a block chosen as a victim
that is not cached, a removal that frees no bytes, a node deleted twice, a TTL list that
does not shrink) and asserts the error names the instance, the tier and the records."""

from __future__ import annotations

import pytest

from litehit_core.policy_replay import Replayer
from litehit_core.policy_replay.state import ReplayStalled
from tests.test_policy_replay import to_arrays
from tests.test_replay_stream import _instances, _part, _setup


def _two_batches(
    policy: str, quota: int, first: list, second: list, break_state, mode: int = 3
) -> str:
    """Replay ``first``, break the state, replay ``second`` (eviction ``mode``, batch 1):
    the error's message."""
    setup = _setup(_instances([policy], [0], 1, 1.0), [quota], [(0,)], mode, 1, 0)
    records = first + second
    ttl_values = sorted({r[5] for r in records if r[5]})
    arrays = to_arrays(records, ttl_values)
    replayer = Replayer(setup._replace(ttl_values=tuple(ttl_values)))
    replayer.feed(_part(arrays, 0, len(first)))
    break_state(replayer.arrays)
    with pytest.raises(ReplayStalled) as caught:
        replayer.feed(_part(arrays, len(first), len(records)))
    return str(caught.value)


def test_a_victim_that_is_not_cached() -> None:
    """The LRU list's oldest block is marked uncached but left in the list (a fault that
    removes a block twice): the eviction's call for victims keeps choosing it."""

    def uncache_the_oldest(a) -> None:
        a.flags[a.head[0]] = 0

    message = _two_batches("lru", 2, [("write", 0, 10, [1, 2], [0, 0], 0)],
                           [("write", 0, 20, [3], [0], 0)], uncache_the_oldest)  # fmt: skip
    assert message == (
        "internal error: the policy replay made no progress (victims chosen, none cached) "
        "at instance 0 (configuration order), tier 0, time 20 ns, records 0..0 of the "
        "batch; please report it with the configuration and trace"
    )


def test_an_eviction_round_that_frees_no_bytes() -> None:
    """Blocks are removed but the group's usage does not fall (their bytes per block
    lost): the quota loop would go on forever."""

    def weightless(a) -> None:
        a.usage[0] = 5
        a.bpb[0] = 0

    message = _two_batches("lru", 2, [("write", 0, 10, [1, 2], [0, 0], 0)],
                           [("write", 0, 20, [3], [0], 0)], weightless, mode=2)  # fmt: skip
    assert "no progress (an eviction round freed no bytes) at instance 0" in message
    assert "tier 0, time 20 ns, records 0..0 of the batch" in message


def test_a_node_deleted_twice() -> None:
    """The index lost a node (a fault that frees a node twice): its deletion would probe
    the table forever."""

    def forget_the_index(a) -> None:
        a.table[:] = 0

    message = _two_batches("lru", 1, [("write", 0, 10, [1], [0], 0)],
                           [("write", 0, 20, [2], [0], 0)], forget_the_index)  # fmt: skip
    assert "no progress (a node deleted twice (not in the index))" in message
    assert "time 20 ns, records 0..0 of the batch" in message


def test_a_ttl_list_that_does_not_shrink() -> None:
    """The expired block's expiry list points from it to itself (a fault in the list's
    links): unlinking it leaves it at the head, and the expiry loop would remove it
    forever."""

    def self_linked(a) -> None:
        node = a.thead[0]  # instance 0's list of its one TTL
        a.tnext[node] = node

    message = _two_batches("ttl", -1, [("write", 0, 10, [1], [0], 5)],
                           [("get", 0, 100, [1], [0], 0)], self_linked)  # fmt: skip
    assert message.startswith(
        "internal error: the policy replay made no progress (TTL expiry did not end) at "
        "instance 0 (configuration order), tier 0, time 100 ns, records 0..0 of the batch"
    )


def test_the_guards_cost_nothing_on_a_healthy_replay() -> None:
    """A long healthy replay with every policy raises nothing (the guards only fire on
    broken state)."""
    for policy in ("lru", "random_lru", "leaf_aware_lru", "ttl"):
        setup = _setup(_instances([policy], [0], 2, 0.5), [5], [(0,)], 1, 2, 0)
        records = [("request", 0, 10 * t, [t % 4, t % 7, t], [0, 0, 0], 30 if t % 3 else 0)
                   for t in range(1, 400)]  # fmt: skip
        ttl_values = [30]
        replayer = Replayer(setup._replace(ttl_values=(30,)), check=True)
        replayer.feed(to_arrays(records, ttl_values))
        assert int(replayer.finish().written[0]) == 3 * 399
