"""A deliberately naive multi-capacity LRU: the exactness oracle for the tests.

One OrderedDict per capacity; hits are evaluated on the snapshot before the request
(consecutive cached blocks from the head); then every block is touched tail first.
With a TTL, entries whose age (now - last access) is >= ttl are purged before the
request, so they miss and occupy no capacity. ``expired`` counts TTL purges, ``evicted``
capacity evictions (both cumulative); an eviction is a block that leaves the cache over a
request (one the one-by-one touch evicts and re-inserts within a request is not counted, as
the engine applies a request whole).
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Sequence

INF = None  # capacity None = unbounded


class NaiveLRU:
    def __init__(self, capacity: int | None, ttl: int = 0, order: str = "tail-first") -> None:
        self.capacity = capacity
        self.ttl = ttl
        self.order = order  # "tail-first" (head ends most recent) or "head-first"
        self.cache: OrderedDict[int, int] = OrderedDict()  # key -> last access time
        self.expired = 0
        self.evicted = 0

    def request(self, keys: Sequence[int], now: int = 0) -> int:
        keys = list(dict.fromkeys(keys))  # contract: dedupe by first occurrence
        if self.ttl:
            for k in [k for k, ts in self.cache.items() if now - ts >= self.ttl]:
                del self.cache[k]
                self.expired += 1
        hits = 0
        for k in keys:
            if k not in self.cache:
                break
            hits += 1
        reached = len(self.cache) + sum(1 for k in keys if k not in self.cache)
        touched = reversed(keys) if self.order == "tail-first" else keys
        for k in touched:  # tail first: the head ends most recent; head first: the tail
            self.cache[k] = now
            self.cache.move_to_end(k)
            if self.capacity is not None:
                while len(self.cache) > self.capacity:
                    self.cache.popitem(last=False)
        self.evicted += reached - len(self.cache)
        return hits


def oracle_hits(
    requests: Sequence[Sequence[int]],
    capacities: Sequence[int | None],
    times: Sequence[int] | None = None,
    ttl: int = 0,
    order: str = "tail-first",
) -> list[list[int]]:
    """hits[i][c] for request i at capacities[c] (None = infinite)."""
    lrus = [NaiveLRU(c, ttl, order) for c in capacities]
    out = []
    for i, keys in enumerate(requests):
        now = times[i] if times is not None else 0
        out.append([lru.request(keys, now) for lru in lrus])
    return out


def tree_trace(
    rng: random.Random, n_requests: int, max_new: int = 6, min_new: int = 0
) -> list[list[int]]:
    """Prefix-chained requests: each extends a random existing prefix with ``min_new`` to
    ``max_new`` fresh blocks."""
    paths: list[list[int]] = [[]]
    next_key = 1
    out = []
    for _ in range(n_requests):
        base = rng.choice(paths)
        cut = rng.randint(0, len(base))
        path = base[:cut] + list(range(next_key, next_key + rng.randint(min_new, max_new)))
        next_key += len(path) - cut
        paths.append(path)
        out.append(path)
    return out


class NaiveHybridLRU:
    """One byte LRU of typed objects (hybrid linear-attention / Mamba instances).

    ``Full(key)`` costs ``full_bytes`` and ``Linear(key)`` ``linear_bytes``; both share one
    recency order and one budget of ``capacity`` bytes (None = unbounded). Each touch makes
    an object most recent (inserting it), then least recent objects are evicted until the
    total fits (an object larger than the budget leaves nothing). The hit, read before the
    request, is the longest prefix ending at p with Linear(key_p) and Full(key_0..p)
    resident. Then, tail to head: at a write position ((p+1) % step == 0 or the last block)
    Linear(key_p) then Full(key_p) are touched, elsewhere Full(key_p) only. With a TTL,
    objects whose age (now - last access) is >= ttl are purged before the request.
    """

    def __init__(
        self, capacity: int | None, full_bytes: int, linear_bytes: int, step: int, ttl: int = 0
    ) -> None:
        self.capacity = capacity
        self.charge = {"F": full_bytes, "L": linear_bytes}
        self.step = step
        self.ttl = ttl
        self.cache: OrderedDict[tuple[str, int], int] = OrderedDict()
        self.used = 0

    def _touch(self, obj: tuple[str, int], now: int) -> None:
        if obj in self.cache:
            self.cache.move_to_end(obj)
        else:
            self.used += self.charge[obj[0]]
        self.cache[obj] = now
        if self.capacity is not None:
            while self.used > self.capacity:
                old, _ = self.cache.popitem(last=False)
                self.used -= self.charge[old[0]]

    def request(self, keys: Sequence[int], now: int = 0) -> int:
        keys = list(dict.fromkeys(keys))
        if self.ttl:
            for obj in [o for o, ts in self.cache.items() if now - ts >= self.ttl]:
                del self.cache[obj]
                self.used -= self.charge[obj[0]]
        hit = 0
        for p, k in enumerate(keys):
            if ("F", k) not in self.cache:
                break
            if ("L", k) in self.cache:
                hit = p + 1
        n = len(keys)
        for p in range(n - 1, -1, -1):
            if (p + 1) % self.step == 0 or p == n - 1:
                self._touch(("L", keys[p]), now)
            self._touch(("F", keys[p]), now)
        return hit

    def full_objects(self) -> int:
        """Full objects resident now."""
        return sum(1 for kind, _ in self.cache if kind == "F")


class SequentialLRU:
    """LMCache's documented cache, one chunk at a time: read the hit prefix on the cache,
    then for each chunk head to tail (or tail to head) move it to the most recent end,
    inserting an absent one and evicting the least recent first when full (each such
    eviction counted). Capacity in chunks (>= 1). Also records what the report needs:
    per request the hit prefix and, per hit chunk, its position (0 = most recent)."""

    def __init__(self, capacity: int, order: str = "head-first") -> None:
        self.capacity = capacity
        self.order = order
        self.cache: OrderedDict[int, None] = OrderedDict()
        self.evictions = 0

    def request(self, keys: Sequence[int]) -> tuple[int, list[int]]:
        keys = list(dict.fromkeys(keys))
        prefix = 0
        for k in keys:
            if k not in self.cache:
                break
            prefix += 1
        order = list(self.cache)[::-1]  # most recent first
        positions = [order.index(k) for k in keys[:prefix]]
        for k in keys if self.order == "head-first" else reversed(keys):
            if k in self.cache:
                self.cache.move_to_end(k)
                continue
            if len(self.cache) >= self.capacity:
                self.cache.popitem(last=False)
                self.evictions += 1
            self.cache[k] = None
        return prefix, positions


def naive_report(
    requests: Sequence[tuple[Sequence[int], int, int]], capacity: int, order: str = "head-first"
) -> dict:
    """LMCache's report numbers at ``capacity`` chunks, the naive way: one SequentialLRU,
    each request (keys, seq_len, chunk_size) read then touched chunk by chunk; per hit
    chunk its reuse count, its span since the chunk was last seen (global chunk index) and
    its position; evictions as the LRU counts them."""
    lru = SequentialLRU(capacity, order)
    rates, prefixes, positions, spans = [], [], [], []
    reuse: dict[int, int] = {}
    last_seen: dict[int, int] = {}
    seen = 0
    hit_total = total = 0
    rolling = []
    for keys, seq_len, chunk in requests:
        keys = list(dict.fromkeys(keys))
        prefix, where = lru.request(keys)
        hits = prefix * chunk
        hit_total += hits
        total += seq_len
        rates.append(hits / seq_len)
        prefixes.append(prefix)
        rolling.append(hit_total / total)
        positions.extend(where)
        for i, k in enumerate(keys[:prefix]):
            reuse[k] = reuse.get(k, 0) + 1
            spans.append(seen + i - last_seen[k])
        for i, k in enumerate(keys):
            last_seen[k] = seen + i
        seen += len(keys)
    return {
        "hit_tokens": hit_total,
        "total_tokens": total,
        "rates": rates,
        "prefixes": prefixes,
        "rolling": rolling,
        "reuse": sorted(reuse.values()),
        "spans": spans,
        "positions": positions,
        "evictions": lru.evictions,
        "occupancy": len(lru.cache),
    }
