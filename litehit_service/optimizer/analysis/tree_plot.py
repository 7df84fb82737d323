"""The pictures of ``litehit export-tree``: the top of a tree, and its hot paths.

A tree of 100k nodes cannot be drawn node by node, so :func:`tree_figure` draws its *top*:
best first by gets, starting from the roots, at most :data:`MAX_DRAWN` nodes that some
get hit, each showing at most :data:`MAX_CHILDREN` children (the most-hit ones);
everything not drawn is folded into one grey ``+N more`` box per drawn parent (N hidden
nodes: the hidden children and everything below them, with their blocks and the most
gets among them). The JSON keeps every node. :func:`hot_paths_figure` draws the top-k
nodes by gets with their ancestor chains, ranked. Boxes read ``#id``, blocks (cached)
and gets, coloured by gets (log scale). Layout: a tidy tree, leaves left to right in
drawing order, a parent centred over its children. Cost: O(nodes) numpy to choose,
O(drawn) to draw; matplotlib (Agg) is imported here only.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

import numpy as np

from litehit_service.optimizer.analysis.tree import InstanceTree, ancestors, hot_nodes

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["MAX_CHILDREN", "MAX_DRAWN", "hot_paths_figure", "tree_figure"]

MAX_DRAWN = 30
"""Nodes :func:`tree_figure` draws at most (the rest is folded into ``+N more`` boxes)."""
MAX_CHILDREN = 6
"""Children one drawn node shows at most."""
_ROOT = -1
"""The drawing's virtual root (the instance itself), above the tree's roots."""


def _children_of(tree: InstanceTree) -> tuple[np.ndarray, np.ndarray]:
    """CSR of the children, most gets first (ties: lower id): ``order[off[p]:off[p+1]]``
    are node p's; index ``size`` holds the roots."""
    key = np.where(tree.parent >= 0, tree.parent, tree.size)
    order = np.lexsort((np.arange(tree.size), -tree.access_count, key))
    off = np.zeros(tree.size + 2, dtype=np.int64)
    np.cumsum(np.bincount(key, minlength=tree.size + 1), out=off[1:])
    return order, off


def _subtree(tree: InstanceTree) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per node: nodes, blocks in its subtree (itself included) and the most gets of
    any of them (a parent's ids are below its children's, so one pass in reverse id
    order suffices; numpy per depth level). O(nodes)."""
    nodes = np.ones(tree.size, dtype=np.int64)
    blocks = tree.total_blocks.astype(np.int64).copy()
    most = tree.access_count.astype(np.int64).copy()
    depth = np.zeros(tree.size, dtype=np.int64)
    has = np.flatnonzero(tree.parent >= 0)
    up = tree.parent.copy()
    while len(has):  # depth in nodes by pointer jumping
        depth[has] += 1
        up[has] = tree.parent[up[has]]
        has = has[up[has] >= 0]
    for level in range(int(depth.max(initial=0)), 0, -1):
        at = np.flatnonzero(depth == level)
        np.add.at(nodes, tree.parent[at], nodes[at])
        np.add.at(blocks, tree.parent[at], blocks[at])
        np.maximum.at(most, tree.parent[at], most[at])
    return nodes, blocks, most


def _choose(tree: InstanceTree) -> set[int]:
    """The nodes to draw: best first by gets from the roots (module docstring)."""
    order, off = _children_of(tree)
    drawn: set[int] = set()
    heap: list[tuple[int, int]] = []

    def offer(parent: int) -> None:
        slot = tree.size if parent == _ROOT else parent
        for child in order[off[slot] : off[slot + 1]][:MAX_CHILDREN].tolist():
            if tree.access_count[child] > 0:  # children come most-hit first
                heapq.heappush(heap, (-int(tree.access_count[child]), child))

    offer(_ROOT)
    while heap and len(drawn) < MAX_DRAWN:
        _, node = heapq.heappop(heap)
        drawn.add(node)
        offer(node)
    return drawn


def tree_figure(tree: InstanceTree) -> Figure:
    """The top of ``tree`` (module docstring)."""
    drawn = _choose(tree)
    nodes, blocks, most = _subtree(tree)
    order, off = _children_of(tree)
    kids: dict[int, list[object]] = {}
    for parent in [_ROOT, *sorted(drawn)]:
        slot = tree.size if parent == _ROOT else parent
        children = order[off[slot] : off[slot + 1]]
        shown = [c for c in children.tolist() if c in drawn]
        hidden = np.setdiff1d(children, np.array(shown, dtype=np.int64), assume_unique=True)
        entries: list[object] = list(shown)
        if len(hidden):
            entries.append(
                (int(nodes[hidden].sum()), int(blocks[hidden].sum()), int(most[hidden].max()))
            )
        kids[parent] = entries
    title = (
        f"{tree.info.instance_id}: the top {len(drawn)} of {tree.size} nodes by gets "
        f"({int(tree.total_blocks.sum())} blocks, {int(tree.cached_blocks.sum())} cached)"
    )
    return _draw(tree, kids, title, {})


def hot_paths_figure(tree: InstanceTree, k: int) -> Figure:
    """The top-``k`` nodes by gets and their ancestor chains, ranked #1.. (module
    docstring)."""
    hot = hot_nodes(tree, k).tolist()
    keep: set[int] = set()
    for node in hot:
        keep.update(ancestors(tree, node))
    order, off = _children_of(tree)
    kids: dict[int, list[object]] = {}
    for parent in [_ROOT, *sorted(keep)]:
        slot = tree.size if parent == _ROOT else parent
        kids[parent] = [c for c in order[off[slot] : off[slot + 1]].tolist() if c in keep]
    title = f"{tree.info.instance_id}: the {len(hot)} most-hit nodes and their ancestors"
    return _draw(tree, kids, title, {node: rank for rank, node in enumerate(hot, start=1)})


def _layout(kids: dict[int, list[object]]) -> tuple[dict[object, tuple[float, int]], int]:
    """(x, depth) per entry (a node id, or ``(parent, i)`` for a folded box) and the
    leaves; a tidy layout, iteratively (deep trees would overflow recursion)."""
    pos: dict[object, tuple[float, int]] = {}
    leaves = 0
    stack: list[tuple[object, int, bool]] = [(_ROOT, 0, False)]
    while stack:
        entry, depth, done = stack.pop()
        children = _entries(kids, entry)
        if done:
            xs = [pos[c][0] for c in children]
            pos[entry] = ((xs[0] + xs[-1]) / 2, depth)
        elif not children:
            pos[entry] = (float(leaves), depth)
            leaves += 1
        else:
            stack.append((entry, depth, True))
            stack.extend((c, depth + 1, False) for c in reversed(children))
    return pos, leaves


def _entries(kids: dict[int, list[object]], entry: object) -> list[object]:
    """The children entries of ``entry`` (a folded box gets a key of its own)."""
    if not isinstance(entry, int):
        return []
    return [c if isinstance(c, int) else (entry, "more") for c in kids.get(entry, [])]


def _draw(
    tree: InstanceTree, kids: dict[int, list[object]], title: str, ranks: dict[int, int]
) -> Figure:
    from matplotlib import colormaps
    from matplotlib.colors import LogNorm
    from matplotlib.figure import Figure

    pos, leaves = _layout(kids)
    depth = max(d for _, d in pos.values())
    width = min(max(8.0, 1.0 * leaves + 1), 30.0)
    height = max(3.0, 0.9 * depth + 1.5)
    fig = Figure(figsize=(width, height))
    fig.subplots_adjust(left=0.01, right=0.99, bottom=0.02, top=1 - 0.45 / height)
    ax = fig.subplots()
    ax.set_axis_off()
    ax.set_title(title + ("" if ranks else "; grey: folded nodes"), fontsize=10)
    norm = LogNorm(vmin=1, vmax=max(int(tree.access_count.max(initial=1)), 2))
    cmap = colormaps["YlOrRd"]
    folded = {parent: e for parent, es in kids.items() for e in es if not isinstance(e, int)}
    for entry, (x, d) in pos.items():
        if entry != _ROOT:
            parent = entry[0] if isinstance(entry, tuple) else int(tree.parent[entry])
            px, pd = pos[_ROOT if parent < 0 else parent]
            ax.plot([px, x], [-pd, -d], color="0.6", linewidth=0.8, zorder=1)
        if entry == _ROOT:
            label, face, style = tree.info.instance_id, "white", "round"
        elif isinstance(entry, tuple):
            n_nodes, n_blocks, gets = folded[entry[0]]  # type: ignore[misc]
            most_gets = f"<= {gets} gets" if gets else "no gets"
            label = f"+{n_nodes} more\n{n_blocks} blocks\n{most_gets}"
            face, style = "0.85", "round,pad=0.3"
        else:
            gets = int(tree.access_count[entry])
            label = (
                f"#{entry}\n{int(tree.total_blocks[entry])} blk "
                f"({int(tree.cached_blocks[entry])} cached)\n{gets} gets"
            )
            if entry in ranks:
                label = f"hot {ranks[entry]}\n" + label
            face = cmap(norm(max(gets, 1))) if gets else "white"
            style = "round,pad=0.3"
        dark = not isinstance(entry, tuple) and entry != _ROOT and norm(max(gets, 1)) > 0.6
        ax.text(x, -d, label, ha="center", va="center", fontsize=6.5, zorder=2,
                color="white" if dark else "black",
                bbox={"boxstyle": style, "facecolor": face, "edgecolor": "0.3",
                      "linewidth": 1.6 if entry in ranks else 0.6})  # fmt: skip
    ax.set_xlim(-0.8, max(leaves - 0.2, 0.8))
    ax.set_ylim(-depth - 0.6, 0.6)
    return fig
