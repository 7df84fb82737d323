"""A deliberately naive tiered policy replay: spec §7 read literally, on top of the
untiered oracle (tests/policy_oracle.py).

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
        if self.demoting and self.strategy["write_mode"] == CASCADING:
            tiers = self.tiers[inst.owner]
            if inst.tier + 1 < len(tiers):  # into the next tier as a fresh write
                self.put(tiers[inst.tier + 1], path, self.now, inst.cached[path].ttl)
        super()._remove(inst, path)

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
            for t in holders if self.strategy["propagate"] else [serving]:
                b = tiers[t].cached[path]
                b.seq, b.last_access = self._next(), now
                if tiers[t].policy == "ttl" and tiers[t].refresh:
                    b.anchor = now
            if self.strategy["promote"] and serving > 0:
                ttl = tiers[serving].cached[path].ttl
                for t in range(serving):
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
        mode = self.strategy["write_mode"]
        for j in range(len(keys)):
            path = tuple(keys[: j + 1])
            holders = [t for t, inst in enumerate(tiers) if path in inst.cached]
            if holders:
                for t in holders:
                    self.put(tiers[t], path, now, ttl)
                self.wcount[i][path] += 1
                if (
                    mode == SELECTIVE
                    and len(tiers) > 1
                    and self.wcount[i][path] >= self.strategy["threshold"]
                    and 1 not in holders
                ):
                    self.put(tiers[1], path, now, ttl)
            else:
                self.wcount[i][path] = 1
                for t in range(len(tiers) if mode == WRITE_THROUGH else 1):
                    self.put(tiers[t], path, now, ttl)
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
