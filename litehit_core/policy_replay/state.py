"""The arrays one policy replay works on, and how they grow between compiled chunks.

A policy replay (:mod:`litehit_core.policy_replay`) keeps every instance's cache in flat
numpy arrays held by one :class:`ReplayArrays` (a named tuple numba takes as one argument):

- **nodes** (one slot per block path currently known): ``key``, ``parent`` (the parent's
  slot, or ``-1 - instance`` for a first block), ``seq`` (the global recency counter at the
  latest insert or touch), ``flags`` (:data:`CACHED`), ``children`` (child nodes that
  exist), ``cached_children`` (children that are cached), ``prev``/``next`` (the policy's
  list links: an LRU list, or a RandomLRU node's position in its dense array; ``next``
  also links the free slots), and for TTL runs ``anchor`` (ns of the latest TTL anchor),
  ``bucket`` (the index of the block's TTL in ``ttl_values``, -1 = never expires) and
  ``tprev``/``tnext`` (the per-(instance, TTL) expiry list, oldest anchor first);
- **index**: ``table``, an open-addressing table (power of two, linear probing) of
  ``slot + 1`` keyed by ``(parent, key)`` (:mod:`~litehit_core.policy_replay.index`);
- **instances** (configuration order): ``kind`` (the policy's code), ``group``, ``bpb``
  (bytes per block), ``cached``, ``head``/``tail`` (the policy's list ends),
  ``acc_write`` (keys written so far), ``peak`` (most cached blocks after a write),
  ``evicted`` / ``expired`` (blocks evicted for capacity / removed by TTL), ``sample``
  (RandomLRU's draws per call), ``rng`` (its xorshift64 state), ``fallback`` and
  ``refresh`` (TTL's options), ``dense_start``, ``dense_cap`` (RandomLRU's segment of
  ``dense`` and of ``dense_seq``, the same blocks' ``seq``, so a draw reads one array);
- **groups**: ``quota`` (bytes, -1 = infinite), ``usage`` (bytes), ``members`` (instance
  indices in configuration order, group g's at ``member_off[g]:member_off[g + 1]``);
- ``scalars`` (:data:`SEQ`, :data:`FREE_HEAD`, :data:`NODES`, :data:`CACHED_ALL`,
  :data:`MODE`, :data:`BATCH`, :data:`HIGH`, :data:`PENDING`); scratch: ``victims`` (one
  eviction call's) and ``path`` (the nodes a read found, for the write of the same keys
  right after it).

A node is freed as soon as it is neither cached nor has children (so memory follows the
cached blocks and their uncached ancestors, not every path ever written). Growth happens
in Python between chunks (:func:`reserve`): the compiled loop never allocates. Per node
~45-53 bytes without TTL (the table at load 1/4 to 1/2), 65-73 with it; slots are taken
from the freed ones first, then from the high-water mark, and arrays grow by
:data:`GROWTH` with ``np.empty`` so the unused tail is never touched.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from numba import njit, types
from numba.experimental import structref

__all__ = [
    "BATCH",
    "CACHED",
    "CACHED_ALL",
    "FREE_HEAD",
    "HIGH",
    "PENDING",
    "MODE",
    "NODES",
    "MIN_NODES",
    "NONE",
    "SEQ",
    "ReplayArrays",
    "allocate",
    "as_struct",
    "memory_bytes",
    "room_needed",
    "reserve",
]

NONE = -1
"""No node (list ends, empty links)."""
CACHED = np.uint8(1)
"""``flags`` bit: the block is cached."""

SEQ, FREE_HEAD, NODES, CACHED_ALL, MODE, BATCH, HIGH, PENDING = range(8)
"""Indices into ``scalars``: the next recency value, the first freed slot (-1: none),
live nodes, cached blocks over every instance, the eviction mode, the batch size per
instance, the high-water mark (slots from it on were never used), the keys of writes still
pending (requests read, not yet written)."""
_N_SCALARS = 8
MIN_NODES = 1024
"""Node slots a replay starts with (then grown as needed)."""
_NODE_DTYPES = {"key": np.int64, "parent": np.int32, "seq": np.int64, "flags": np.uint8,
                "children": np.int32, "cached_children": np.int32, "prev": np.int32,
                "next": np.int32}  # fmt: skip
_TTL_DTYPES = {"anchor": np.int64, "bucket": np.int32, "tprev": np.int32, "tnext": np.int32}
"""The per-node arrays (TTL runs only: the second table), with their dtypes."""
GROWTH = 1.5
"""Node arrays grow by this factor (memory per block vs copies: 1.5 keeps at most a third
of the slots unused)."""


class ReplayArrays(NamedTuple):
    """Every array of one replay (see the module docstring for each field)."""

    key: np.ndarray
    parent: np.ndarray
    seq: np.ndarray
    flags: np.ndarray
    children: np.ndarray
    cached_children: np.ndarray
    prev: np.ndarray
    next: np.ndarray
    anchor: np.ndarray
    bucket: np.ndarray
    tprev: np.ndarray
    tnext: np.ndarray
    table: np.ndarray
    kind: np.ndarray
    group: np.ndarray
    bpb: np.ndarray
    cached: np.ndarray
    head: np.ndarray
    tail: np.ndarray
    acc_write: np.ndarray
    peak: np.ndarray
    evicted: np.ndarray
    expired: np.ndarray
    sample: np.ndarray
    rng: np.ndarray
    fallback: np.ndarray
    refresh: np.ndarray
    dense_start: np.ndarray
    dense_cap: np.ndarray
    dense: np.ndarray
    dense_seq: np.ndarray
    ttl_values: np.ndarray
    thead: np.ndarray
    ttail: np.ndarray
    quota: np.ndarray
    usage: np.ndarray
    member_off: np.ndarray
    members: np.ndarray
    scalars: np.ndarray
    victims: np.ndarray
    path: np.ndarray


@structref.register
class _StateType(types.StructRef):
    """The numba type of :class:`_State` (fields: :class:`ReplayArrays`'s, same order)."""

    def preprocess_fields(self, fields: tuple) -> tuple:
        return tuple((name, types.unliteral(typ)) for name, typ in fields)


class _State(structref.StructRefProxy):
    """Every array of a replay behind one pointer, for compiled code only: a call passes
    one pointer instead of the ~40 array descriptors of a :class:`ReplayArrays` (measured
    170 ns a call for a tuple of 30 arrays, 4 ns for a structref: bench notes of issue 22)."""


structref.define_proxy(_State, _StateType, list(ReplayArrays._fields))


@njit(cache=True, nogil=True)
def as_struct(a: ReplayArrays) -> _State:
    """The kernels' view of ``a``: the same arrays (shared, not copied) behind one pointer.
    Compiled code only (a top-level kernel calls it once per chunk). O(fields)."""
    return _State(
        a.key,
        a.parent,
        a.seq,
        a.flags,
        a.children,
        a.cached_children,
        a.prev,
        a.next,
        a.anchor,
        a.bucket,
        a.tprev,
        a.tnext,
        a.table,
        a.kind,
        a.group,
        a.bpb,
        a.cached,
        a.head,
        a.tail,
        a.acc_write,
        a.peak,
        a.evicted,
        a.expired,
        a.sample,
        a.rng,
        a.fallback,
        a.refresh,
        a.dense_start,
        a.dense_cap,
        a.dense,
        a.dense_seq,
        a.ttl_values,
        a.thead,
        a.ttail,
        a.quota,
        a.usage,
        a.member_off,
        a.members,
        a.scalars,
        a.victims,
        a.path,
    )


class InstanceSetup(NamedTuple):
    """One instance as the replay needs it: ``kind`` (its policy's code), ``group``
    (index), ``bytes_per_block``, ``sample`` (RandomLRU's draws per call, else 0),
    ``fallback`` and ``refresh`` (TTL options), ``dense`` (True for a policy with a dense
    array of its blocks: RandomLRU)."""

    kind: int
    group: int
    bytes_per_block: int
    sample: int
    fallback: bool
    refresh: bool
    dense: bool


RNG_SEED = np.uint64(0x12345678ABCDEF01)
"""Every RandomLRU generator's initial state (spec §5)."""


def allocate(
    instances: Sequence[InstanceSetup],
    quotas: Sequence[int],
    members: Sequence[Sequence[int]],
    ttl_values: Sequence[int],
    *,
    eviction_mode: int,
    batch: int,
    with_ttl: bool,
    longest: int = 0,
) -> ReplayArrays:
    """Fresh arrays for ``instances`` in ``len(quotas)`` groups (``quotas`` in bytes, -1
    infinite; ``members[g]`` the instance indices of group g in configuration order),
    ``ttl_values`` the distinct block TTLs in ns (> 0) and ``with_ttl`` whether any
    instance expires blocks, ``longest`` the most keys of one record. Node arrays start
    small; :func:`reserve` grows them.
    O(instances + groups + TTLs)."""
    n_inst = len(instances)
    n_nodes = MIN_NODES
    ttl_nodes = n_nodes if with_ttl else 0
    n_buckets = len(ttl_values)
    member_off = np.zeros(len(quotas) + 1, dtype=np.int64)
    member_off[1:] = np.cumsum([len(m) for m in members])
    flat = [i for m in members for i in m]
    largest_draw = max([s.sample for s in instances] + [batch])
    arrays = ReplayArrays(
        **{name: np.empty(n_nodes, dtype=dtype) for name, dtype in _NODE_DTYPES.items()},
        **{name: np.empty(ttl_nodes, dtype=dtype) for name, dtype in _TTL_DTYPES.items()},
        table=np.zeros(4 * n_nodes, dtype=np.int32),
        kind=np.array([s.kind for s in instances], dtype=np.int8),
        group=np.array([s.group for s in instances], dtype=np.int32),
        bpb=np.array([s.bytes_per_block for s in instances], dtype=np.int64),
        cached=np.zeros(n_inst, dtype=np.int64),
        head=np.full(n_inst, NONE, dtype=np.int32),
        tail=np.full(n_inst, NONE, dtype=np.int32),
        acc_write=np.zeros(n_inst, dtype=np.int64),
        peak=np.zeros(n_inst, dtype=np.int64),
        evicted=np.zeros(n_inst, dtype=np.int64),
        expired=np.zeros(n_inst, dtype=np.int64),
        sample=np.array([s.sample for s in instances], dtype=np.int64),
        rng=np.full(n_inst, RNG_SEED, dtype=np.uint64),
        fallback=np.array([s.fallback for s in instances], dtype=np.uint8),
        refresh=np.array([s.refresh for s in instances], dtype=np.uint8),
        dense_start=np.zeros(n_inst, dtype=np.int64),
        dense_cap=np.zeros(n_inst, dtype=np.int64),
        dense=np.zeros(0, dtype=np.int32),
        dense_seq=np.zeros(0, dtype=np.int64),
        ttl_values=np.array(ttl_values, dtype=np.int64),
        thead=np.full(n_inst * n_buckets, NONE, dtype=np.int32),
        ttail=np.full(n_inst * n_buckets, NONE, dtype=np.int32),
        quota=np.array(quotas, dtype=np.int64),
        usage=np.zeros(len(quotas), dtype=np.int64),
        member_off=member_off,
        members=np.array(flat, dtype=np.int32),
        scalars=np.zeros(_N_SCALARS, dtype=np.int64),
        victims=np.zeros(max(largest_draw, 1), dtype=np.int32),
        path=np.zeros(max(longest, 1), dtype=np.int32),
    )
    arrays.scalars[MODE] = eviction_mode
    arrays.scalars[BATCH] = batch
    arrays.scalars[FREE_HEAD] = NONE
    return arrays


@njit(cache=True, nogil=True)
def room_needed(a: ReplayArrays, extra: np.int64) -> bool:
    """Whether ``extra`` more nodes (and as many dense entries per dense instance) may not
    fit: too few free slots, the table over half full, or a dense segment too small. The
    loop asks before each record; the driver then calls :func:`reserve`. O(instances)."""
    want = a.scalars[NODES] + extra
    if want > len(a.key) or 2 * want > len(a.table):
        return True
    for inst in range(len(a.dense_cap)):
        if a.sample[inst] and a.cached[inst] + extra > a.dense_cap[inst]:
            return True
    return False


def reserve(arrays: ReplayArrays, new_nodes: int, rebuild_table: object) -> ReplayArrays:
    """``arrays``, grown (new arrays where needed, the rest shared) so that ``new_nodes``
    more nodes fit with the table at most half full, and each dense instance has room for
    ``new_nodes`` more blocks in its segment. ``rebuild_table(arrays)`` fills a fresh
    (zeroed) table from the live nodes (the index module's kernel). Amortised O(1) per
    node: capacities grow geometrically."""
    n = len(arrays.key)
    live = int(arrays.scalars[NODES])
    want = live + new_nodes
    if want > n:
        arrays = _grow_nodes(arrays, max(int(GROWTH * n), want))
    if 2 * want > len(arrays.table):
        size = len(arrays.table)
        while 2 * want > size:
            size *= 2
        arrays = arrays._replace(table=np.zeros(size, dtype=np.int32))
        rebuild_table(arrays)
    return _grow_dense(arrays, new_nodes)


def _grow_nodes(arrays: ReplayArrays, n: int) -> ReplayArrays:
    used = int(arrays.scalars[HIGH])
    names = [*_NODE_DTYPES, *(_TTL_DTYPES if len(arrays.anchor) else ())]
    grown: dict[str, np.ndarray] = {}
    for name in names:
        old = getattr(arrays, name)
        grown[name] = np.empty(n, dtype=old.dtype)  # pages past the high-water mark stay untouched
        grown[name][:used] = old[:used]
    return arrays._replace(**grown)


def _grow_dense(arrays: ReplayArrays, extra: int) -> ReplayArrays:
    """Re-lay the dense segments when one lacks room for ``extra`` more blocks (each new
    capacity: :data:`GROWTH` times what it needs). O(dense blocks) when it happens."""
    dense_needs = [extra if s else -1 for s in arrays.sample]
    need = [
        int(arrays.cached[i]) + int(want) if want >= 0 else 0 for i, want in enumerate(dense_needs)
    ]
    caps = arrays.dense_cap
    if all(n <= int(c) for n, c in zip(need, caps, strict=True)):
        return arrays
    new_caps = np.array(
        [int(GROWTH * n) + 1 if n > int(c) else int(c) for n, c in zip(need, caps, strict=True)],
        dtype=np.int64,
    )
    starts = np.zeros(len(new_caps), dtype=np.int64)
    starts[1:] = np.cumsum(new_caps)[:-1]
    dense = np.zeros(int(new_caps.sum()), dtype=np.int32)
    dense_seq = np.zeros(int(new_caps.sum()), dtype=np.int64)
    for i, extra in enumerate(dense_needs):
        if extra >= 0 and caps[i]:
            count = int(arrays.cached[i])
            old = int(arrays.dense_start[i])
            dense[starts[i] : starts[i] + count] = arrays.dense[old : old + count]
            dense_seq[starts[i] : starts[i] + count] = arrays.dense_seq[old : old + count]
    arrays.dense_start[:] = starts
    arrays.dense_cap[:] = new_caps
    return arrays._replace(dense=dense, dense_seq=dense_seq)


def memory_bytes(arrays: ReplayArrays) -> int:
    """Bytes the arrays of ``arrays`` hold in use: the node arrays up to the high-water
    mark (slots past it were allocated with ``np.empty`` and never touched, so the OS has
    not backed them), every other array whole. O(fields)."""
    used = int(arrays.scalars[HIGH])
    node_fields = {*_NODE_DTYPES, *_TTL_DTYPES}
    return sum(
        int(a.itemsize) * min(used, len(a)) if name in node_fields else int(a.nbytes)
        for name, a in zip(ReplayArrays._fields, arrays, strict=True)
    )
