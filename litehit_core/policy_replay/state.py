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
  ``tprev``/``tnext`` (the per-(instance, TTL) expiry list, oldest anchor first); for
  tiered runs ``wcount`` (writes of the block's path since it was last uncached, on the
  base slot); for analyses (``litehit lifecycle``/``export-tree``) ``life`` (the row of
  ``lives`` of the block's current life, -1 none);
- **tiers** (:mod:`~litehit_core.policy_replay.tiers`): a node is :data:`STRIDE`
  consecutive slots, one *replica* per tier (tier ``t`` of base slot ``b`` at ``b + t``;
  one slot without tiers). The index, ``key`` and ``children`` live on the base slot;
  every per-block array above (``seq``, ``flags``, the links, ``cached_children``, TTL,
  ``life``) is per replica, and a replica's ``parent`` is its parent's replica of the same
  tier, so a policy works on one tier's replicas as on an untiered cache. Tier ``t`` of
  instance ``u`` is the *internal instance* ``u + t * USERS`` (tier 0 is ``u`` itself),
  with its own policy state and its own group ``g + t * groups``; ``tiering`` (per
  instance: :data:`TIERS`, :data:`THRESHOLD`, then per edge between adjacent tiers
  :data:`EDGE_FIELDS` columns from :data:`EDGE_COLS`: the edge's write mode, and whether a
  touch, a refresh and a promotion cross it) says how its tiers are written and read;
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
- **analyses** (empty arrays otherwise): ``lives`` (one row per block life, the columns
  :data:`LIFE_FIELDS`) and ``key_node`` (per key of the records: the base slot a read hit,
  -1 otherwise); with :data:`KEEP` set no node is ever freed, so a slot names one path
  for the whole replay;
- ``scalars`` (:data:`SEQ`, :data:`FREE_HEAD`, :data:`NODES`, :data:`CACHED_ALL`,
  :data:`MODE`, :data:`BATCH`, :data:`HIGH`, :data:`PENDING`, :data:`STRIDE`,
  :data:`USERS`, :data:`NOW`, :data:`KEEP`, :data:`LIVES`); scratch: ``victims`` (one
  eviction call's), ``path`` (the nodes a read found, for the write of the same keys
  right after it) and ``tier_hits`` (one read's hits per tier).

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

from litehit_core.policy_replay.setup import InstanceSetup, TierSetup

__all__ = [
    "ALIVE",
    "EDGE_COLS",
    "EDGE_FIELDS",
    "E_ACCESS",
    "E_MODE",
    "E_PROMOTE",
    "E_WRITE",
    "BATCH",
    "CACHED",
    "CACHED_ALL",
    "EVICTED",
    "EXPIRED",
    "FREE_HEAD",
    "HIGH",
    "KEEP",
    "LIFE_FIELDS",
    "LIVES",
    "NOW",
    "PENDING",
    "MODE",
    "NODES",
    "MIN_NODES",
    "NONE",
    "SEQ",
    "STRIDE",
    "THRESHOLD",
    "TIERS",
    "USERS",
    "ReplayArrays",
    "ReplayStalled",
    "allocate",
    "grow_ttl",
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
"""Indices into ``scalars``: the next recency value, the first freed base slot (-1: none),
live nodes, cached blocks over every instance and tier, the eviction mode, the batch size
per instance, the high-water mark (slots from it on were never used), the keys of writes
still pending (requests read, not yet written)."""
STRIDE, USERS, NOW, KEEP, LIVES = range(8, 13)
"""More ``scalars``: slots per node (the most tiers of any instance; 1 untiered), the
configured instances, the time (ns) of the event being replayed, 1 when nodes are never
freed (analyses), rows of ``lives`` used."""
_N_SCALARS = 13
TIERS, THRESHOLD = range(2)
"""Columns of ``tiering`` (one row per configured instance): its tiers (1 = untiered) and
the selective write threshold (edge 0's); the edges' own columns follow
(:data:`EDGE_COLS`)."""
EDGE_COLS = 2
"""``tiering``'s per-edge columns start here: edge ``e`` (tier ``e`` -> ``e + 1``) has
:data:`EDGE_FIELDS` columns from ``EDGE_COLS + EDGE_FIELDS * e``."""
E_MODE, E_ACCESS, E_WRITE, E_PROMOTE = range(4)
"""An edge's columns (spec §7a): its write mode, and whether a read's touch, a write's
refresh and a promotion cross it."""
EDGE_FIELDS = 4
LIFE_FIELDS = ("node", "inst", "birth", "death", "hits", "last_hit", "cause")
"""Columns of ``lives`` (int64): the replica slot, the internal instance (its tier), birth
and death ns (-1 alive), read hits during the life, ns of the latest (-1 none), and how it
ended (:data:`ALIVE`, :data:`EVICTED`, :data:`EXPIRED`)."""
ALIVE, EVICTED, EXPIRED = range(3)
MIN_NODES = 1024
"""Node slots a replay starts with (then grown as needed)."""
_NODE_DTYPES = {"key": np.int64, "parent": np.int32, "seq": np.int64, "flags": np.uint8,
                "children": np.int32, "cached_children": np.int32, "prev": np.int32,
                "next": np.int32}  # fmt: skip
_TTL_DTYPES = {"anchor": np.int64, "bucket": np.int32, "tprev": np.int32, "tnext": np.int32}
_TIER_DTYPES = {"wcount": np.int32}
_LIFE_DTYPES = {"life": np.int64}
"""The per-slot arrays (TTL runs, tiered runs and analyses only: the last three tables),
with their dtypes."""
_OPTIONAL_NODE_DTYPES = {**_TTL_DTYPES, **_TIER_DTYPES, **_LIFE_DTYPES}
GROWTH = 1.5
"""Node arrays grow by this factor (memory per block vs copies: 1.5 keeps at most a third
of the slots unused)."""


class ReplayStalled(RuntimeError):
    """A compiled loop of the replay stopped making progress: an internal fault (a broken
    list, a removal that removed nothing), never bad input. Raised in the kernels with
    ``(what, internal instance, time ns)``; :class:`~.replay.Replayer` re-raises it with a
    message naming the instance, its tier and the records being replayed, so a fault is a
    named error instead of a hang."""


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
    wcount: np.ndarray
    life: np.ndarray
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
    tiering: np.ndarray
    tier_hits: np.ndarray
    lives: np.ndarray
    key_node: np.ndarray


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
        a.wcount,
        a.life,
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
        a.tiering,
        a.tier_hits,
        a.lives,
        a.key_node,
    )


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
    tiers: Sequence[TierSetup | None] = (),
    analyse_keys: int = -1,
) -> ReplayArrays:
    """Fresh arrays for ``instances`` in ``len(quotas)`` groups (``quotas`` in bytes, -1
    infinite; ``members[g]`` the instance indices of group g in configuration order),
    ``ttl_values`` the distinct block TTLs in ns (> 0) and ``with_ttl`` whether any
    instance expires blocks, ``longest`` the most keys of one record; ``tiers[g]`` a
    tiered group's tiers (its ``quotas[g]`` is then unused); ``analyse_keys`` >= 0: keep
    every node and record lives and, per key of the records, the node a read hit. Node
    arrays start small; :func:`reserve` grows them. O(instances x tiers + groups + TTLs)."""
    n_users = len(instances)
    n_groups = len(quotas)
    by_group = [*tiers, *[None] * (n_groups - len(tiers))]
    group_tiers = [len(t.quotas) if t is not None else 1 for t in by_group]
    stride = max(group_tiers, default=1)
    n_inst = n_users * stride
    n_nodes = MIN_NODES * stride
    optional = {
        **(_TTL_DTYPES if with_ttl else {}),
        **(_TIER_DTYPES if stride > 1 else {}),
        **(_LIFE_DTYPES if analyse_keys >= 0 else {}),
    }
    node_arrays = {
        name: np.empty(n_nodes if name in optional else 0, dtype=dtype)
        for name, dtype in _OPTIONAL_NODE_DTYPES.items()
    }
    n_buckets = len(ttl_values)
    tier_quota = [
        [
            (by_group[g].quotas[t] if by_group[g] is not None else quotas[g])
            if t < group_tiers[g]
            else -1
            for g in range(n_groups)
        ]
        for t in range(stride)
    ]
    all_members = [[u + t * n_users for u in m] for t in range(stride) for m in members]
    member_off = np.zeros(len(all_members) + 1, dtype=np.int64)
    member_off[1:] = np.cumsum([len(m) for m in all_members])
    tiering = np.zeros((n_users, EDGE_COLS + EDGE_FIELDS * max(stride - 1, 0)), dtype=np.int64)
    for u, s in enumerate(instances):
        setup = by_group[s.group]
        tiering[u, TIERS] = group_tiers[s.group]
        if setup is not None:
            tiering[u, THRESHOLD] = setup.threshold
            for e, edge in enumerate(setup.edge_setups()):
                col = EDGE_COLS + EDGE_FIELDS * e
                tiering[u, col + E_MODE] = edge.write_mode
                tiering[u, col + E_ACCESS] = edge.access
                tiering[u, col + E_WRITE] = edge.write
                tiering[u, col + E_PROMOTE] = edge.promote
    # internal instance u + t * n_users = tier t of instance u; a tier the instance does
    # not have is inert (never written) and draws nothing
    inner = [(s, t) for t in range(stride) for s in instances]
    sample = [s.sample if t < group_tiers[s.group] else 0 for s, t in inner]
    largest_draw = max(sample + [batch])
    arrays = ReplayArrays(
        **{name: np.empty(n_nodes, dtype=dtype) for name, dtype in _NODE_DTYPES.items()},
        **node_arrays,
        table=np.zeros(4 * MIN_NODES, dtype=np.int32),
        kind=np.array([s.kind for s, _ in inner], dtype=np.int8),
        group=np.array([s.group + t * n_groups for s, t in inner], dtype=np.int32),
        bpb=np.array([s.bytes_per_block for s, _ in inner], dtype=np.int64),
        cached=np.zeros(n_inst, dtype=np.int64),
        head=np.full(n_inst, NONE, dtype=np.int32),
        tail=np.full(n_inst, NONE, dtype=np.int32),
        acc_write=np.zeros(n_inst, dtype=np.int64),
        peak=np.zeros(n_inst, dtype=np.int64),
        evicted=np.zeros(n_inst, dtype=np.int64),
        expired=np.zeros(n_inst, dtype=np.int64),
        sample=np.array(sample, dtype=np.int64),
        rng=np.full(n_inst, RNG_SEED, dtype=np.uint64),
        fallback=np.array([s.fallback for s, _ in inner], dtype=np.uint8),
        refresh=np.array([s.refresh for s, _ in inner], dtype=np.uint8),
        dense_start=np.zeros(n_inst, dtype=np.int64),
        dense_cap=np.zeros(n_inst, dtype=np.int64),
        dense=np.zeros(0, dtype=np.int32),
        dense_seq=np.zeros(0, dtype=np.int64),
        ttl_values=np.array(ttl_values, dtype=np.int64),
        thead=np.full(n_inst * n_buckets, NONE, dtype=np.int32),
        ttail=np.full(n_inst * n_buckets, NONE, dtype=np.int32),
        quota=np.array([q for row in tier_quota for q in row], dtype=np.int64),
        usage=np.zeros(n_groups * stride, dtype=np.int64),
        member_off=member_off,
        members=np.array([i for m in all_members for i in m], dtype=np.int32),
        scalars=np.zeros(_N_SCALARS, dtype=np.int64),
        victims=_victims(largest_draw, n_nodes),
        path=np.zeros(max(longest, 1), dtype=np.int32),
        tiering=tiering,
        tier_hits=np.zeros(stride, dtype=np.int64),
        lives=np.empty((MIN_NODES if analyse_keys >= 0 else 0, len(LIFE_FIELDS)), dtype=np.int64),
        key_node=np.full(max(analyse_keys, 0), NONE, dtype=np.int32),
    )
    arrays.scalars[MODE] = eviction_mode
    arrays.scalars[BATCH] = batch
    arrays.scalars[FREE_HEAD] = NONE
    arrays.scalars[STRIDE] = stride
    arrays.scalars[USERS] = n_users
    arrays.scalars[KEEP] = analyse_keys >= 0
    return arrays


@njit(cache=True, nogil=True)
def _dense_need(a: ReplayArrays, inst: np.int64, extra: np.int64) -> np.int64:
    """Blocks a dense instance may hold before the next check: its own plus ``extra``
    (inserts and promotions), plus for a lower tier every block the tier above may demote
    (its cached plus ``extra``)."""
    need = a.cached[inst] + extra
    users = a.scalars[USERS]
    if inst >= users:
        need += a.cached[inst - users] + extra
    return need


@njit(cache=True, nogil=True)
def room_needed(a: ReplayArrays, extra: np.int64) -> bool:
    """Whether ``extra`` more nodes (and as many blocks per dense instance and tier, and
    lives) may not fit: too few free slots, the table over half full, a dense segment too
    small, ``lives`` too short. The loop asks before each record; the driver then calls
    :func:`reserve`. O(instances)."""
    want = a.scalars[NODES] + extra
    if want * a.scalars[STRIDE] > len(a.key) or 2 * want > len(a.table):
        return True
    for inst in range(len(a.dense_cap)):
        if a.sample[inst] and _dense_need(a, np.int64(inst), extra) > a.dense_cap[inst]:
            return True
    return a.scalars[KEEP] == 1 and _lives_need(a, extra) > len(a.lives)


@njit(cache=True, nogil=True)
def _lives_need(a: ReplayArrays, extra: np.int64) -> np.int64:
    """Rows of ``lives`` a record may need: one per insert into any tier (at most
    ``extra`` per tier) and one per demotion (at most every cached block plus those)."""
    stride = a.scalars[STRIDE]
    return a.scalars[LIVES] + 2 * stride * extra + a.scalars[CACHED_ALL]


def reserve(arrays: ReplayArrays, new_nodes: int, rebuild_table: object) -> ReplayArrays:
    """``arrays``, grown (new arrays where needed, the rest shared) so that ``new_nodes``
    more nodes fit with the table at most half full, each dense instance has room for
    what ``new_nodes`` more keys may bring it, and ``lives`` for their lives.
    ``rebuild_table(arrays)`` fills a fresh (zeroed) table from the live nodes (the index
    module's kernel). Amortised O(1) per node: capacities grow geometrically."""
    stride = int(arrays.scalars[STRIDE])
    n = len(arrays.key)
    live = int(arrays.scalars[NODES])
    want = live + new_nodes
    if want * stride > n:
        arrays = _grow_nodes(arrays, max(int(GROWTH * n), want * stride))
    if 2 * want > len(arrays.table):
        size = len(arrays.table)
        while 2 * want > size:
            size *= 2
        arrays = arrays._replace(table=np.zeros(size, dtype=np.int32))
        rebuild_table(arrays)
    if arrays.scalars[KEEP]:
        need = int(_lives_need(arrays, np.int64(new_nodes)))
        if need > len(arrays.lives):
            lives = np.empty((max(int(GROWTH * len(arrays.lives)), need), len(LIFE_FIELDS)),
                             dtype=np.int64)  # fmt: skip
            used = int(arrays.scalars[LIVES])
            lives[:used] = arrays.lives[:used]
            arrays = arrays._replace(lives=lives)
    largest = max(int(arrays.sample.max(initial=0)), int(arrays.scalars[BATCH]))
    if len(arrays.victims) < min(largest, len(arrays.key)):
        arrays = arrays._replace(victims=_victims(largest, len(arrays.key)))
    return _grow_dense(arrays, new_nodes)


def _victims(largest: int, slots: int) -> np.ndarray:
    """Room for one call's victims: at most the draws (or the batch), ``largest``, and
    never more than the ``slots`` hold, so a batch far beyond the cache costs nothing."""
    return np.zeros(max(min(largest, slots), 1), dtype=np.int32)


def grow_ttl(arrays: ReplayArrays, ttl_values: Sequence[int]) -> ReplayArrays:
    """``arrays`` with the TTL buckets ``ttl_values`` (the old ones first, in their order,
    then new ones): each instance's expiry lists keep their bucket numbers, the new ones
    start empty. O(instances x buckets)."""
    old = len(arrays.ttl_values)
    new = len(ttl_values)
    if tuple(arrays.ttl_values.tolist()) != tuple(ttl_values[:old]):
        raise ValueError("the known TTL buckets must keep their values and order")
    n_inst = len(arrays.cached)
    grown = {}
    for name in ("thead", "ttail"):
        table = np.full((n_inst, new), NONE, dtype=np.int32)
        table[:, :old] = getattr(arrays, name).reshape(n_inst, old)
        grown[name] = table.reshape(-1)
    return arrays._replace(ttl_values=np.array(ttl_values, dtype=np.int64), **grown)


def _grow_nodes(arrays: ReplayArrays, n: int) -> ReplayArrays:
    used = int(arrays.scalars[HIGH])
    names = [*_NODE_DTYPES, *(k for k in _OPTIONAL_NODE_DTYPES if len(getattr(arrays, k)))]
    grown: dict[str, np.ndarray] = {}
    for name in names:
        old = getattr(arrays, name)
        grown[name] = np.empty(n, dtype=old.dtype)  # pages past the high-water mark stay untouched
        grown[name][:used] = old[:used]
    return arrays._replace(**grown)


def _grow_dense(arrays: ReplayArrays, extra: int) -> ReplayArrays:
    """Re-lay the dense segments when one lacks room for what ``extra`` more keys may
    bring it (:func:`_dense_need`; each new capacity: :data:`GROWTH` times that).
    O(dense blocks) when it happens."""
    caps = arrays.dense_cap
    need = [
        int(_dense_need(arrays, np.int64(i), np.int64(extra))) if s else 0
        for i, s in enumerate(arrays.sample)
    ]
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
    for i, s in enumerate(arrays.sample):
        if s and caps[i]:
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
    not backed them), ``lives`` up to its rows used, every other array whole. O(fields)."""
    used = int(arrays.scalars[HIGH])
    node_fields = {*_NODE_DTYPES, *_OPTIONAL_NODE_DTYPES}
    total = 0
    for name, a in zip(ReplayArrays._fields, arrays, strict=True):
        if name in node_fields:
            total += int(a.itemsize) * min(used, len(a))
        elif name == "lives":
            total += int(a.itemsize) * a.shape[1] * int(arrays.scalars[LIVES])
        else:
            total += int(a.nbytes)
    return total
