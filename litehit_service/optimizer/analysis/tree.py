"""``litehit export-tree``: each instance's compressed trie of every path it wrote.

A *node* of the exported tree is a maximal chain of blocks without branching (spec §9):
a block starts a node when it is a first block or its parent has a number of children
other than one; the node ends at the first block whose children are not exactly one.
Node ids are per instance, in the order the nodes' first blocks were first written, so a
parent's id is below its children's. Per node: ``total_blocks``; ``cached_blocks`` at the
end of the replay (after every write, delayed ones too; ``held_blocks`` counts a block
held by some tier once, ``cached_blocks`` counts a block held by two tiers twice, as
``CachedBlocks`` does); ``access_count``: the gets (``get`` and ``request`` reads) that
hit at least one of its blocks, each get counted once per node, exact with block masks;
``last_access_time``: ns of the latest such get (null: never hit); ``is_leaf``;
``first_key``/``last_key``: the keys of its first and last block (with prefix-chained keys
the last key names the whole path); with ``keys`` every block key. The JSON
(:func:`tree_json`) is the reference optimizer's shape, our fields added.

Everything is computed with numpy from the replay's final node arrays (pointer jumping
for roots and chain heads): O(paths x log(depth)), no Python loop per block; the JSON text
is one line per node.

The gets per node are gathered while the trace streams (:class:`PathHits`), before the
nodes are known (a node's extent depends on paths written later), with nothing kept per
get: a get's hits lie on one path, so the blocks it hits within one node are consecutive
among its hits, and the get touches the node exactly when (its hit blocks in the node)
minus (pairs of consecutive hits of the get both in the node) is 1, else 0. So per path
the batch adds its hits and the hits that follow another hit of the same get -- kept per
path when that previous hit is the parent (always, without block masks) and as counted
(previous, path) pairs otherwise -- and a node's gets are its paths' hits minus the pairs
inside it. Cost per batch O(hit keys x log(hit keys)).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

import numpy as np

from litehit_core.policy_replay import Replayer
from litehit_core.policy_replay.state import CACHED, GROWTH, STRIDE
from litehit_service.optimizer.analysis.replay import Analysis, InstanceInfo
from litehit_service.optimizer.optimize.stream import Fed

__all__ = [
    "InstanceTree",
    "PathHits",
    "ancestors",
    "build_trees",
    "hot_nodes",
    "hot_paths_text",
    "path_sums",
    "tree_json",
    "tree_summary",
]


@dataclass(frozen=True, slots=True)
class InstanceTree:
    """One instance's compressed trie (module docstring), one entry per node in id order:
    ``parent`` (-1 for a root), ``total_blocks``, ``cached_blocks`` (tier copies),
    ``held_blocks`` (blocks some tier holds), ``access_count``,
    ``last_access`` (ns, -1 never), ``first_key``, ``last_key`` (all int64); ``keys``:
    every block key, node after node, head to tail (``key_off[i]:key_off[i + 1]`` is node
    i's), and ``key_cached`` (bool, per entry of ``keys``: the block is held by some tier
    at the end), or None when not asked for."""

    info: InstanceInfo
    parent: np.ndarray
    total_blocks: np.ndarray
    cached_blocks: np.ndarray
    held_blocks: np.ndarray
    access_count: np.ndarray
    last_access: np.ndarray
    first_key: np.ndarray
    last_key: np.ndarray
    keys: np.ndarray | None = None
    key_off: np.ndarray | None = None
    key_cached: np.ndarray | None = None

    @property
    def size(self) -> int:
        """Nodes."""
        return len(self.parent)

    def without_keys(self) -> InstanceTree:
        """The same tree without its block keys (what the JSON writes unless asked)."""
        return replace(self, keys=None, key_off=None, key_cached=None)

    @property
    def children(self) -> np.ndarray:
        """Child nodes per node (int64). O(nodes)."""
        has = self.parent >= 0
        return np.bincount(self.parent[has], minlength=self.size)

    @property
    def is_leaf(self) -> np.ndarray:
        """Per node, whether it has no child node (bool). O(nodes)."""
        return self.children == 0


class PathHits:
    """The gets' hits per block path (base slot // stride), gathered batch by batch
    (module docstring): ``hits`` (gets that hit the path), ``after_parent`` (those whose
    previous hit in the get is the path's parent), ``last`` (ns of the latest hit, -1
    none) and ``pairs`` (``previous << 32 | path`` codes -> gets, where the previous hit
    is not the parent). Use :meth:`add` as the analysis replay's ``on_batch``. Memory
    O(paths + distinct skipping pairs)."""

    def __init__(self) -> None:
        self.hits = np.zeros(0, dtype=np.int64)
        self.after_parent = np.zeros(0, dtype=np.int64)
        self.last = np.zeros(0, dtype=np.int64)
        self.pairs: dict[int, int] = {}

    def add(self, replayer: Replayer, fed: Fed) -> None:
        """Count the hits of the batch just replayed. O(hit keys x log(hit keys))."""
        hit_slots = replayer.key_hits
        keys = np.flatnonzero(hit_slots >= 0)
        if not len(keys):
            return
        a = replayer.arrays
        stride = int(a.scalars[STRIDE])
        path = hit_slots[keys].astype(np.int64) // stride
        off = fed.records.key_off
        rec = np.searchsorted(off, keys + off[0], "right") - 1  # key_hits start at off[0]
        self._grow(int(path.max()) + 1)
        paths, counts = np.unique(path, return_counts=True)
        self.hits[paths] += counts
        np.maximum.at(self.last, path, fed.records.times[rec])
        same = rec[1:] == rec[:-1]  # consecutive hits of one get
        prev, cur = path[:-1][same], path[1:][same]
        parent = a.parent[cur * stride].astype(np.int64)
        by_parent = (parent >= 0) & (parent // stride == prev)
        paths, counts = np.unique(cur[by_parent], return_counts=True)
        self.after_parent[paths] += counts
        if not by_parent.all():  # a block mask let a get read past an uncached block
            codes, counts = np.unique(prev[~by_parent] << 32 | cur[~by_parent],
                                      return_counts=True)  # fmt: skip
            for code, count in zip(codes.tolist(), counts.tolist(), strict=True):
                self.pairs[code] = self.pairs.get(code, 0) + count

    def _grow(self, n: int) -> None:
        if n <= len(self.hits):
            return
        size = max(n, int(GROWTH * len(self.hits)))
        for name, fill in (("hits", 0), ("after_parent", 0), ("last", -1)):
            old = getattr(self, name)
            new = np.full(size, fill, dtype=np.int64)
            new[: len(old)] = old
            setattr(self, name, new)

    def per_node(
        self, node_of: np.ndarray, head: np.ndarray, n_nodes: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per compressed node (``node_of``: each path's node; ``head``: whether the path
        starts its node): the gets that hit it and the latest one's ns (-1 none).
        O(paths + pairs)."""
        self._grow(len(node_of))
        n = len(node_of)
        inner = ~head  # a path in its parent's node: a hit after the parent's is inside
        gets = self.hits[:n] - np.where(inner, self.after_parent[:n], 0)
        access = np.bincount(node_of, weights=gets, minlength=n_nodes).astype(np.int64)
        if self.pairs:
            codes = np.fromiter(self.pairs, dtype=np.int64, count=len(self.pairs))
            counts = np.fromiter(self.pairs.values(), dtype=np.int64, count=len(self.pairs))
            prev, cur = codes >> 32, codes & 0xFFFFFFFF
            inside = node_of[prev] == node_of[cur]
            access -= np.bincount(node_of[cur[inside]], weights=counts[inside],
                                  minlength=n_nodes).astype(np.int64)  # fmt: skip
        last = np.full(n_nodes, -1, dtype=np.int64)
        np.maximum.at(last, node_of, self.last[:n])
        return access, last


def _jump(target: np.ndarray) -> np.ndarray:
    """Follow ``target`` (a forest whose roots point to themselves) to the roots: each
    entry's root. O(n log depth)."""
    while True:
        nxt = target[target]
        if np.array_equal(nxt, target):
            return target
        target = nxt


def build_trees(
    analysis: Analysis, hits: PathHits, *, with_keys: bool = False
) -> list[InstanceTree]:
    """Every configured instance's tree, in configuration order (an instance that wrote
    nothing has an empty one), its gets from ``hits`` (gathered during ``analysis``);
    ``with_keys``: also every block key. O(paths x log(depth) + pairs)."""
    a = analysis.result.arrays
    stride = analysis.stride
    n = analysis.nodes
    ids = np.arange(n, dtype=np.int64)
    base = ids * stride
    parent_slot = a.parent[base].astype(np.int64)  # the parent's base slot, or -1 - instance
    par = np.where(parent_slot >= 0, parent_slot // stride, -1)
    first = par < 0
    owner = -1 - parent_slot[_jump(np.where(first, ids, par))]
    below = np.bincount(par[~first], minlength=n)  # child paths per path
    head = first.copy()
    head[~first] = below[par[~first]] != 1
    heads = np.flatnonzero(head)
    gid = np.full(n, -1, dtype=np.int64)
    gid[heads] = np.arange(len(heads))
    node_of = gid[_jump(np.where(head, ids, par))]  # per path: its compressed node
    g_parent = np.where(first[heads], -1, node_of[np.maximum(par[heads], 0)])
    n_nodes = len(heads)
    total = np.bincount(node_of, minlength=n_nodes)
    held = np.zeros(n, dtype=np.int64)
    for tier in range(stride):
        held += (a.flags[base + tier] & CACHED) != 0
    cached = np.bincount(node_of, weights=held, minlength=n_nodes).astype(np.int64)
    held_any = np.bincount(node_of, weights=held > 0, minlength=n_nodes).astype(np.int64)
    keys = a.key[base]
    tails = np.flatnonzero(below != 1)
    last_key = np.empty(n_nodes, dtype=np.int64)
    last_key[node_of[tails]] = keys[tails]
    access, last = hits.per_node(node_of, head, n_nodes)
    g_owner = owner[heads]
    trees = []
    for info in analysis.instances:
        mine = np.flatnonzero(g_owner == info.index)
        local = np.full(n_nodes, -1, dtype=np.int64)
        local[mine] = np.arange(len(mine))
        gp = g_parent[mine]
        block_keys = key_off = key_cached = None
        if with_keys:
            blocks = np.flatnonzero(owner == info.index)
            order = blocks[np.lexsort((blocks, node_of[blocks]))]
            block_keys = keys[order]
            key_cached = held[order] > 0
            key_off = np.zeros(len(mine) + 1, dtype=np.int64)
            np.cumsum(total[mine], out=key_off[1:])
        trees.append(
            InstanceTree(
                info=info,
                parent=np.where(gp >= 0, local[np.maximum(gp, 0)], -1),
                total_blocks=total[mine],
                cached_blocks=cached[mine],
                held_blocks=held_any[mine],
                access_count=access[mine],
                last_access=last[mine],
                first_key=keys[heads[mine]],
                last_key=last_key[mine],
                keys=block_keys,
                key_off=key_off,
                key_cached=key_cached,
            )
        )
    return trees


def tree_json(tree: InstanceTree, *, end_ns: int) -> str:
    """The tree as JSON text in the reference optimizer's shape (its ``export_tree.py``
    reads it): ``{instance_id: {"instance_id", "nodes", "edges", ...}}``. Per node, the
    reference's fields in its order -- ``node_id``, ``access_count``,
    ``last_access_time`` (null: never hit), ``total_blocks`` and ``cached_blocks`` (the
    block keys, head to tail; cached: held by some tier at the end), ``is_leaf``,
    ``parent_id`` (null for a root) -- then ours: ``total_block_count``,
    ``cached_copies`` (a block held by two tiers counts twice, as ``CachedBlocks``
    does), ``first_key``, ``last_key``. A tree built without keys writes the counts in
    ``total_blocks``/``cached_blocks`` instead of the lists (``--counts-only``). Edges:
    ``[parent, child]``, child order. After the edges, ours: ``group_name``,
    ``eviction_policy_type``, ``tiers`` (names, tier 0 first; empty untiered),
    ``end_time_ns``, ``node_count``, ``block_count``, ``cached_copies``. One line per
    node. O(nodes + keys)."""
    info = tree.info
    parent = tree.parent.tolist()
    totals = tree.total_blocks.tolist()
    copies = tree.cached_blocks.tolist()
    if tree.keys is not None and tree.key_off is not None and tree.key_cached is not None:
        text = tree.keys.tolist()
        off = tree.key_off.tolist()
        cached = tree.key_cached.tolist()
        total_lists = [json.dumps(text[off[i] : off[i + 1]]) for i in range(tree.size)]
        cached_lists = [
            json.dumps([k for k, c in zip(text[off[i] : off[i + 1]], cached[off[i] : off[i + 1]],
                                           strict=True) if c])
            for i in range(tree.size)
        ]  # fmt: skip
    else:  # counts only: the number of blocks, and of blocks held by some tier
        total_lists = [str(t) for t in totals]
        cached_lists = [str(c) for c in tree.held_blocks.tolist()]
    columns = zip(
        range(tree.size),
        tree.access_count.tolist(),
        tree.last_access.tolist(),
        total_lists,
        cached_lists,
        tree.is_leaf.tolist(),
        parent,
        totals,
        copies,
        tree.first_key.tolist(),
        tree.last_key.tolist(),
        strict=True,
    )
    lines = [
        f'{{"node_id": {node}, "access_count": {access}, '
        f'"last_access_time": {"null" if last < 0 else last}, "total_blocks": {blocks}, '
        f'"cached_blocks": {held}, "is_leaf": {"true" if is_leaf else "false"}, '
        f'"parent_id": {"null" if p < 0 else p}, "total_block_count": {total}, '
        f'"cached_copies": {copy}, "first_key": {first}, "last_key": {final}}}'
        for node, access, last, blocks, held, is_leaf, p, total, copy, first, final in columns
    ]
    edges = ", ".join(f"[{p}, {c}]" for c, p in enumerate(parent) if p >= 0)
    tail = {
        "group_name": info.group_name,
        "eviction_policy_type": info.policy,
        "tiers": list(info.tier_names),
        "end_time_ns": end_ns,
        "node_count": tree.size,
        "block_count": int(tree.total_blocks.sum()),
        "cached_copies": int(tree.cached_blocks.sum()),
    }
    name = json.dumps(info.instance_id)
    body = ",\n".join(lines)
    return (
        f'{{{name}: {{"instance_id": {name},\n"nodes": [\n{body}\n],\n"edges": [{edges}], '
        f"{json.dumps(tail)[1:]}}}\n"
    )


def path_sums(parent: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Per node of the forest ``parent`` (-1 for a root), the sum of ``weight`` over its
    chain from the root down to itself (with ``total_blocks``: its depth in blocks),
    by pointer jumping. O(nodes x log(depth))."""
    total = weight.astype(np.int64).copy()
    up = parent.astype(np.int64).copy()
    live = np.flatnonzero(up >= 0)
    while len(live):
        target = up[live]
        total[live] += total[target]
        up[live] = up[target]
        live = live[up[live] >= 0]
    return total


def hot_nodes(tree: InstanceTree, k: int) -> np.ndarray:
    """The ``k`` nodes with the most gets (ties: the lower id first), nodes never hit
    left out. O(nodes log nodes)."""
    order = np.lexsort((np.arange(tree.size), -tree.access_count))
    order = order[tree.access_count[order] > 0]
    return order[:k]


def ancestors(tree: InstanceTree, node: int) -> list[int]:
    """``node``'s chain from its root down to itself. O(depth)."""
    chain = [node]
    while tree.parent[chain[-1]] >= 0:
        chain.append(int(tree.parent[chain[-1]]))
    return chain[::-1]


def hot_paths_text(tree: InstanceTree, k: int, max_blocks: int = 0) -> str:
    """The hot paths (spec §9) as text: per hot node its gets, the time of its latest
    (seconds), its blocks from the root and its chain of nodes ``id(blocks)`` root first;
    ``max_blocks`` > 0 (the tree built with its keys): a line with the path's first
    ``max_blocks`` block keys, root first. O(k x depth)."""
    lines = [f"{tree.info.instance_id}: top {k} nodes by gets (node: gets, latest, path)"]
    for rank, node in enumerate(hot_nodes(tree, k).tolist(), start=1):
        chain = ancestors(tree, node)
        depth = int(tree.total_blocks[chain].sum())
        path = " > ".join(f"{c}({int(tree.total_blocks[c])})" for c in chain)
        lines.append(
            f"  #{rank} node {node}: {int(tree.access_count[node])} gets, latest at "
            f"{int(tree.last_access[node]) / 1e9:.3f} s, {depth} blocks deep: {path}"
        )
        if max_blocks > 0 and tree.keys is not None and tree.key_off is not None:
            keys: list[int] = []
            for c in chain:
                keys += tree.keys[tree.key_off[c] : tree.key_off[c + 1]].tolist()
                if len(keys) >= max_blocks:
                    break
            more = depth - min(len(keys), max_blocks)
            shown = ", ".join(str(key) for key in keys[:max_blocks])
            lines.append(f"     blocks: {shown}" + (f" (+{more} more)" if more else ""))
    if len(lines) == 1:
        lines.append("  (no get hit this instance's blocks)")
    return "\n".join(lines)


def tree_summary(tree: InstanceTree) -> str:
    """One line: nodes, roots, leaves, blocks, cached blocks, deepest path (blocks), the
    nodes some get hit."""
    if not tree.size:
        return f"{tree.info.instance_id}: no path written"
    depth = path_sums(tree.parent, tree.total_blocks)
    return (
        f"{tree.info.instance_id}: {tree.size} nodes ({int((tree.parent < 0).sum())} roots, "
        f"{int(tree.is_leaf.sum())} leaves), {int(tree.total_blocks.sum())} blocks, "
        f"{int(tree.cached_blocks.sum())} cached, deepest path {int(depth.max())} blocks, "
        f"{int((tree.access_count > 0).sum())} nodes hit"
    )
