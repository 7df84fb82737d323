"""A deliberately naive policy replay: the spec (optimizer-replay.md §2-§6) read literally.

Dicts keyed by block path (the tuple of keys from the first block), lists sorted from
scratch at every eviction, the RandomLRU dense array kept exactly as §5 describes. No
cleverness: it is the reference the compiled replay (litehit_core.policy_replay) must match
row for row. Records: (kind, instance, time, keys, mask, ttl_ns) with kind "get", "write"
or "request", mask a tuple of 0/1 per key, ttl_ns the write's TTL (0 = never), sorted by
time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

MASK64 = (1 << 64) - 1


@dataclass
class Block:
    seq: int
    last_access: int
    anchor: int
    ttl: int


@dataclass
class Inst:
    policy: str
    group: int
    bpb: int
    sample: int = 0
    fallback: bool = True
    refresh: bool = True
    cached: dict = field(default_factory=dict)
    dense: list = field(default_factory=list)
    rng: int = 0x12345678ABCDEF01
    acc_write: int = 0


class Oracle:
    def __init__(self, instances, quotas, members, mode, batch, delay):
        self.insts = [Inst(**i) for i in instances]
        self.quotas, self.members, self.mode, self.batch = quotas, members, mode, batch
        self.delay = delay
        self.seq = 0

    def _next(self):
        self.seq += 1
        return self.seq

    def usage(self, g):
        return sum(len(i.cached) * i.bpb for i in self.insts if i.group == g)

    def _remove(self, inst, path):
        del inst.cached[path]
        if inst.policy == "random_lru":
            pos = inst.dense.index(path)
            last = inst.dense.pop()
            if pos < len(inst.dense):
                inst.dense[pos] = last

    def expire(self, inst, now):
        if inst.policy != "ttl":
            return
        for path, b in list(inst.cached.items()):
            if b.ttl > 0 and now - b.anchor > b.ttl:
                self._remove(inst, path)

    def read(self, i, keys, mask, now):
        inst = self.insts[i]
        self.expire(inst, now)
        local = remote = 0
        for j in range(len(keys)):
            path = tuple(keys[: j + 1])
            b = inst.cached.get(path)
            if b is not None:
                if mask[j]:
                    local += 1
                else:
                    remote += 1
                b.seq, b.last_access = self._next(), now
                if inst.policy == "ttl" and inst.refresh:
                    b.anchor = now
            elif not mask[j]:
                break
        return local, remote

    def write(self, i, keys, now, ttl):
        inst = self.insts[i]
        self.expire(inst, now)
        for j in range(len(keys)):
            path = tuple(keys[: j + 1])
            b = inst.cached.get(path)
            if b is not None:
                b.seq, b.last_access, b.anchor, b.ttl = self._next(), now, now, ttl
            else:
                inst.cached[path] = Block(self._next(), now, now, ttl)
                if inst.policy == "random_lru":
                    inst.dense.append(path)
        inst.acc_write += len(keys)
        self.evict(i)

    def victims(self, inst, m):
        """The victims one call gives (leaf-aware: all m, recomputed after each)."""
        out = []
        if inst.policy in ("lru", "ttl"):
            if inst.policy == "ttl" and not inst.fallback:
                return []
            for path in sorted(inst.cached, key=lambda p: inst.cached[p].seq)[:m]:
                self._remove(inst, path)
                out.append(path)
        elif inst.policy == "leaf_aware_lru":
            while len(out) < m:
                leaves = [
                    p
                    for p in inst.cached
                    if not any(len(q) == len(p) + 1 and q[: len(p)] == p for q in inst.cached)
                ]
                if not leaves:
                    break
                path = min(leaves, key=lambda p: inst.cached[p].seq)
                self._remove(inst, path)
                out.append(path)
        else:
            n = len(inst.dense)
            k = min(m, n, inst.sample)
            if k <= 0:
                return []
            drawn = []
            for _ in range(min(inst.sample, n)):
                x = inst.rng
                x ^= (x << 13) & MASK64
                x ^= x >> 7
                x ^= (x << 17) & MASK64
                inst.rng = x
                drawn.append(inst.dense[x % n])
            drawn.sort(key=lambda p: (inst.cached[p].last_access, inst.cached[p].seq))
            for path in drawn[:k]:
                if path in inst.cached:
                    self._remove(inst, path)
                    out.append(path)
        return out

    def evict(self, i):
        inst = self.insts[i]
        g = inst.group
        q = self.quotas[g]
        if q < 0:
            return
        while self.usage(g) > q:
            excess = self.usage(g) - q
            if self.mode == 1:
                got = sum(len(self.victims(self.insts[j], self.batch)) for j in self.members[g])
            elif self.mode == 2:
                got = len(self.victims(inst, self.batch))
            else:
                got = len(self.victims(inst, min(self.batch, math.ceil(excess / inst.bpb))))
            if got == 0:
                return

    def run(self, records):
        """Rows (record index, local, remote, cached, cached_all, acc_write) per read."""
        rows, pending = [], []
        for r, (kind, i, t, keys, mask, ttl) in enumerate(records):
            while pending and pending[0][0] <= t:
                due, pi, pkeys, pttl = pending.pop(0)
                self.write(pi, pkeys, due, pttl)
            if kind == "write":
                self.write(i, keys, t, ttl)
                continue
            local, remote = self.read(i, keys, mask, t)
            rows.append(
                (
                    r,
                    local,
                    remote,
                    len(self.insts[i].cached),
                    sum(len(x.cached) for x in self.insts),
                    self.insts[i].acc_write,
                )
            )
            if kind == "request":
                pending.append((t + self.delay, i, keys, ttl))
        for due, pi, pkeys, pttl in pending:
            self.write(pi, pkeys, due, pttl)
        return rows
