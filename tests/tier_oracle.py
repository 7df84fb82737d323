"""A deliberately naive tiered policy replay: spec §7 and §7a (per-edge flows) read
literally, on top of the untiered oracle (tests/policy_oracle.py).

Every (instance, tier) is an oracle ``Inst`` of its own (its own dict of cached paths, its
own RandomLRU array and generator), with its tier's group quota; the victims of a tier come
from the untiered oracle's ``victims``. Per read: hits per serving tier; per row also the
blocks each tier holds. ``write_count`` is kept per instance and path: 1 when a write finds
the path in no tier, +1 when a write finds it in some tier.
"""

from __future__ import annotations

import math

from tests.policy_oracle import Block, Inst, Oracle

WRITE_THROUGH, SELECTIVE, CASCADING = "write_through", "write_through_selective", "cascading"
INERT = "inert"  # an edge that neither places nor demotes (§7a)


def edges_of(strategy: dict, tiers: int) -> list[dict]:
    """Every edge (tier t -> t+1): ``strategy["edges"]`` when given, else each edge alike
    from the group-wide fields, a group-wide selective mode making only edge 0 selective
    and the later edges inert (§7a)."""
    if strategy.get("edges"):
        return strategy["edges"]
    mode = strategy["write_mode"]
    return [
        dict(write_mode=INERT if mode == SELECTIVE and e > 0 else mode,
             access=strategy["propagate"], write=True, promote=strategy["promote"])
        for e in range(tiers - 1)
    ]  # fmt: skip


class TieredOracle(Oracle):
    """``instances``: the untiered oracle's dicts (with ``group``); ``tier_quotas[g]``:
    group g's quota per tier (tier 0 first); ``strategy``: write_mode, propagate, promote,
    threshold (one for every group)."""

    def __init__(self, instances, tier_quotas, members, mode, batch, delay, strategy):
        super().__init__(instances, [q[0] for q in tier_quotas], members, mode, batch, delay)
        self.tier_quotas = tier_quotas
        self.strategy = strategy
        self.tiers = []
        for i, d in enumerate(instances):
            tiers = [Inst(**d) for _ in tier_quotas[d["group"]]]
            for t, inst in enumerate(tiers):
                inst.owner, inst.tier = i, t
            self.tiers.append(tiers)
        self.wcount = [{} for _ in instances]
        self.acc = [0] * len(instances)
        self.demoting = False
        self.edges = [edges_of(strategy, len(tier_quotas[d["group"]])) for d in instances]

    def tier_usage(self, g, t):
        return sum(len(self.tiers[j][t].cached) * self.insts[j].bpb for j in self.members[g])

    def put(self, inst, path, now, ttl):
        b = inst.cached.get(path)
        if b is not None:
            b.seq, b.last_access, b.anchor, b.ttl = self._next(), now, now, ttl
            return
        inst.cached[path] = Block(self._next(), now, now, ttl)
        if inst.policy == "random_lru":
            inst.dense.append(path)

    def _remove(self, inst, path):
        tiers = self.tiers[inst.owner]
        if (
            self.demoting
            and inst.tier + 1 < len(tiers)
            and self.edges[inst.owner][inst.tier]["write_mode"] == CASCADING
        ):  # into the next tier as a fresh write
            self.put(tiers[inst.tier + 1], path, self.now, inst.cached[path].ttl)
        super()._remove(inst, path)

    def place(self, i, path, tier, now, ttl):
        """A copy into ``tier``, then on while the edge below is write_through."""
        tiers, edges = self.tiers[i], self.edges[i]
        self.put(tiers[tier], path, now, ttl)
        while tier + 1 < len(tiers) and edges[tier]["write_mode"] == WRITE_THROUGH:
            tier += 1
            self.put(tiers[tier], path, now, ttl)

    def evict_tiers(self, i):
        g = self.insts[i].group
        for t, inst in enumerate(self.tiers[i]):
            q = self.tier_quotas[g][t]
            if q < 0:
                continue
            self.demoting = True
            while self.tier_usage(g, t) > q:
                excess = self.tier_usage(g, t) - q
                if self.mode == 1:
                    got = sum(
                        len(self.victims(self.tiers[j][t], self.batch)) for j in self.members[g]
                    )
                elif self.mode == 2:
                    got = len(self.victims(inst, self.batch))
                else:
                    m = min(self.batch, math.ceil(excess / inst.bpb))
                    got = len(self.victims(inst, m))
                if got == 0:
                    break
            self.demoting = False

    def read(self, i, keys, mask, now):
        self.now = now
        tiers = self.tiers[i]
        for inst in tiers:
            self.expire(inst, now)
        local = remote = 0
        served = [0] * len(tiers)
        promoted = False
        for j in range(len(keys)):
            path = tuple(keys[: j + 1])
            holders = [t for t, inst in enumerate(tiers) if path in inst.cached]
            if not holders:
                if not mask[j]:
                    break
                continue
            serving = holders[0]
            if mask[j]:
                local += 1
            else:
                remote += 1
            served[serving] += 1
            edges = self.edges[i]
            reached = [serving]
            for t in range(serving + 1, len(tiers)):
                if not edges[t - 1]["access"]:
                    break
                if t in holders:
                    reached.append(t)
            for t in reached:
                b = tiers[t].cached[path]
                b.seq, b.last_access = self._next(), now
                if tiers[t].policy == "ttl" and tiers[t].refresh:
                    b.anchor = now
            t = serving  # into tier s-1, then s-2, ... while each edge crossed promotes
            ttl = tiers[serving].cached[path].ttl
            while t > 0 and edges[t - 1]["promote"]:
                t -= 1
                self.put(tiers[t], path, now, ttl)
                promoted = True
        if promoted:
            self.evict_tiers(i)
        self.served = served
        return local, remote

    def write(self, i, keys, now, ttl):
        self.now = now
        tiers = self.tiers[i]
        for inst in tiers:
            self.expire(inst, now)
        edges = self.edges[i]
        for j in range(len(keys)):
            path = tuple(keys[: j + 1])
            holders = [t for t, inst in enumerate(tiers) if path in inst.cached]
            if holders:  # the first tier holding it, then on while each edge crossed lets it
                reached = [holders[0]]
                for t in range(holders[0] + 1, len(tiers)):
                    if not edges[t - 1]["write"]:
                        break
                    if t in holders:
                        reached.append(t)
                for t in reached:
                    self.put(tiers[t], path, now, ttl)
                self.wcount[i][path] += 1
                if (
                    len(tiers) > 1
                    and edges[0]["write_mode"] == SELECTIVE
                    and self.wcount[i][path] >= self.strategy["threshold"]
                    and 1 not in holders
                ):
                    self.place(i, path, 1, now, ttl)
            else:
                self.wcount[i][path] = 1
                self.place(i, path, 0, now, ttl)
        self.acc[i] += len(keys)
        self.evict_tiers(i)

    def run(self, records):
        """Rows (record, local, remote, cached, cached_all, acc_write, hits per tier...,
        cached per tier...) per read."""
        rows, pending = [], []
        for r, (kind, i, t, keys, mask, ttl) in enumerate(records):
            while pending and pending[0][0] <= t:
                due, pi, pkeys, pttl = pending.pop(0)
                self.write(pi, pkeys, due, pttl)
            if kind == "write":
                self.write(i, keys, t, ttl)
                continue
            local, remote = self.read(i, keys, mask, t)
            held = [len(inst.cached) for inst in self.tiers[i]]
            every = sum(len(inst.cached) for tiers in self.tiers for inst in tiers)
            rows.append((r, local, remote, sum(held), every, self.acc[i], *self.served, *held))
            if kind == "request":
                pending.append((t + self.delay, i, keys, ttl))
        for due, pi, pkeys, pttl in pending:
            self.write(pi, pkeys, due, pttl)
        return rows
