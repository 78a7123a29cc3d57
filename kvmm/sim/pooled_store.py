"""A shared level modelled like Mooncake Store: per-instance segments, a high-watermark
eviction, replicas (``ClusterConfig(store=PooledStore(...))``, docs/cluster.md).

Mooncake Store (``kvcache-ai/Mooncake``, ``docs/source/design/store/mooncake-store.md``) pools
the DRAM that each serving node mounts as a *segment*; an object lives in the segments its
replicas were allocated in.  What kvmm models of it:

* **Segments.** ``PooledStore(segments=k)`` splits the level's capacity into ``k`` equal
  segments on the instances' nodes: instance ``i`` is on node ``i * k // N`` and writes every
  block into its own segment (Mooncake's ``local_first`` allocation strategy: the writer's host
  first).  A block read from the reader's own segment does not cross the fabric: the reader
  sees a level ``<name>@local`` (the level's own spec, no link) before the shared level (the
  spec with the fabric's link folded in).  ``segments=None``: one segment per instance.
  ``segments=1`` is one pool that no instance hosts (an appliance): every read crosses the
  fabric, as the plain shared level does.
* **Eviction from a high watermark.** A segment evicts when a write would take it past
  ``watermark`` x its capacity, then goes on evicting in the level's eviction order (LRU by
  default; Mooncake's is an approximate LRU over lease times) until it holds at most
  ``watermark - evict_fraction`` of it: Mooncake's ``eviction_high_watermark_ratio`` 0.9 and
  ``eviction_ratio`` 0.05 (``PooledStore.mooncake()``).  Mooncake's trigger is the store-wide
  ratio, checked by a background thread or by a ``PutStart`` that finds no room; with writes
  kept in the writer's segment, kvmm triggers per segment, at the write.
* **Replicas.** ``replicas=r > 1``: a block one instance reads from another's segment is
  copied into the reader's segment while it has fewer than ``r`` copies (Mooncake's
  ``replica_num`` places copies on distinct segments; hot prefixes read from many nodes then
  become local reads).  The copy is written from the bytes the reader just received, so it
  adds no fabric traffic.  A block is held while any copy is; a read touches the reader's copy
  when it has one, else the lowest-numbered segment's.
* **Writes on the fabric.** A write into a segment not on the writer's node (every write into
  a one-segment pool) crosses the fabric in the write direction; ``stats["fabric_write_bytes"]``
  counts it.  Links are full duplex and the simulator's writes are off the critical path, so
  writes do not delay reads.

``PooledStore()`` (``segments=1, replicas=1, watermark=1.0, evict_fraction=0.0``) is the plain
shared pool: the same ManagedTier calls in the same order, so the same results bit for bit
(tests/sim/test_cluster_pooled_store.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from kvmm.errors import BadInputError
from kvmm.policies.admission import WriteAll
from kvmm.sim.cluster_config import PooledStore
from kvmm.sim.demotion import LoggedSimulatedTier
from kvmm.sim.levels import TierLevel, make_eviction
from kvmm.tiers.managed import ManagedTier, _key_list

__all__ = ["SegmentedStore"]


class SegmentedStore:
    """One shared level under a :class:`PooledStore`: its segments (each a ManagedTier over a
    logging SimulatedTier, with the level's eviction order) and where each block is.
    :meth:`view` is what one instance's hierarchy holds.  Runtime complexity: O(blocks +
    segments touched) per call, plus the policies' events."""

    def __init__(self, level: TierLevel, store: PooledStore, instances: int, logged: bool) -> None:
        self.level, self.store, self.instances, self.logged = level, store, instances, logged
        k = self.num_segments = store.segments or instances
        capacity = level.spec.capacity_bytes // k
        self.high = int(capacity * store.watermark)
        self.low = int(capacity * (store.watermark - store.evict_fraction))
        self.segments = [ManagedTier(LoggedSimulatedTier(self.high, spec=level.spec), make_eviction(level.eviction))
                         for _ in range(k)]
        self.where: dict = {}  # block -> bitmask of the segments holding a copy
        self.stats = {"fabric_write_bytes": 0, "local_write_bytes": 0, "replicas_written": 0, "watermark_evictions": 0}

    def home(self, instance: int) -> int:
        """The segment on ``instance``'s node (-1: a one-segment pool is on no instance's node)."""
        return instance * self.num_segments // self.instances if self.num_segments > 1 else -1

    def view(self, instance: int) -> SegmentView:
        return SegmentView(self, instance)

    def local_view(self, instance: int) -> LocalSegmentView:
        return LocalSegmentView(self, instance)

    def _sync(self, s: int, sink: list | None) -> bool:
        """Apply segment ``s``'s write/delete log to ``where`` (and hand it to ``sink``); True if it deleted any."""
        log = self.segments[s].backend.drain()
        bit = 1 << s
        where = self.where
        deleted = False
        for key, stored in log:
            if stored:
                where[key] = where.get(key, 0) | bit
            else:
                deleted = True
                rest = where.get(key, 0) & ~bit
                if rest:
                    where[key] = rest
                else:
                    where.pop(key, None)
        if sink is not None:
            sink.extend(log)
        return deleted

    def _down_to_low(self, s: int, sink: list | None) -> int:
        """After a write that evicted, evict on to the low mark (Mooncake's batch of ``eviction_ratio``)."""
        seg = self.segments[s]
        if self.low >= self.high or seg.used_bytes <= self.low:
            return 0
        gone = seg.evict_until(self.low)
        self._sync(s, sink)
        self.stats["watermark_evictions"] += len(gone)
        return len(gone)

    def check(self) -> None:
        """``where`` names exactly the segments holding each block; no segment past its high mark."""
        want: dict = {}
        for s, seg in enumerate(self.segments):
            seg.check()
            for key in seg.keys():
                want[key] = want.get(key, 0) | (1 << s)
        assert want == self.where, "where does not name each block's segments"
        assert all(bin(m).count("1") <= max(self.store.replicas, 1) for m in self.where.values())


class SegmentView:
    """The shared level as instance ``instance``'s hierarchy sees it (the interface of a
    ManagedTier that the hierarchy uses): lookups see every segment, writes go to the
    instance's segment (to the one pool when there is one segment), reads touch the copy read."""

    read_only = False

    def __init__(self, store: SegmentedStore, instance: int) -> None:
        self.store, self.instance = store, instance
        self.home = store.home(instance)
        self.target = max(self.home, 0)
        self.name = store.level.name
        self.evictions = 0  # evictions this instance's calls caused (the results sum them over instances)
        self.log: list | None = [] if store.logged else None
        self.backend = self  # the hierarchy drains ``tier.backend``

    @property
    def policy(self) -> Any:
        return self.store.segments[self.target].policy

    @property
    def capacity_bytes(self) -> int:
        return sum(s.capacity_bytes for s in self.store.segments)

    @property
    def used_bytes(self) -> int:
        return sum(s.used_bytes for s in self.store.segments)

    def drain(self) -> list:
        log, self.log = self.log, ([] if self.log is not None else None)
        return log or []

    def contains_many(self, keys: Any) -> np.ndarray:
        ks = _key_list(keys)
        return np.fromiter(map(self.store.where.__contains__, ks), dtype=bool, count=len(ks))

    def prefix_hits(self, keys: Any) -> int:
        where = self.store.where
        for i, k in enumerate(_key_list(keys)):
            if k not in where:
                return i
        return len(keys)

    def delete(self, key: Any) -> None:
        """Every copy goes (an exclusive level hands the block to the GPU)."""
        store = self.store
        mask = store.where.get(key, 0)
        for s in range(store.num_segments):
            if mask >> s & 1:
                store.segments[s].delete(key)
                store._sync(s, self.log)

    def access_or_put_size_many(self, keys: Any, nbytes: int, write: Any) -> np.ndarray:
        """ManagedTier's call of the same name over the segments: held blocks are accessed
        where they are read, missing ones whose ``write`` flag is set are written into this
        instance's segment, with replicas and the watermark (module docstring).  Returns the
        mask of blocks held."""
        store = self.store
        t = self.target
        if store.num_segments == 1 and store.store.replicas == 1:  # one pool: exactly the plain level's call
            seg = store.segments[0]
            before = seg.evictions
            used = []  # the flags the call used (an admission policy is asked once, by the tier)

            def flags(cached: np.ndarray) -> Any:
                used.append(write(cached) if callable(write) else write)
                return used[-1]
            hits = seg.access_or_put_size_many(keys, nbytes, flags)
            self._after(0, before, int(np.count_nonzero(~hits & np.asarray(used[0], dtype=bool))), nbytes)
            return hits
        ks = _key_list(keys)
        where = store.where
        found = np.fromiter(map(where.__contains__, ks), dtype=bool, count=len(ks))
        flags = np.asarray(write(found.copy()) if callable(write) else write, dtype=bool)
        if flags.shape != (len(ks),):
            raise BadInputError(f"write must be one flag per key ({len(ks)}), got shape {flags.shape}")
        replicate = store.store.replicas > 1 and self.home >= 0
        mine_keys, mine_flags, mine_pos = [], [], []
        others: dict = {}
        for p, k in enumerate(ks):
            mask = where.get(k, 0)
            if mask >> t & 1 or not mask:  # held here, or to be written here
                if mask or flags[p]:
                    mine_keys.append(k)
                    mine_flags.append(bool(flags[p]))
                    mine_pos.append(p)
                continue
            s = (mask & -mask).bit_length() - 1  # the lowest-numbered segment with a copy
            others.setdefault(s, []).append(k)
            if replicate and bin(mask).count("1") < store.store.replicas:
                mine_keys.append(k)  # a copy of what this instance just read
                mine_flags.append(True)
                mine_pos.append(-1)
                store.stats["replicas_written"] += 1
        hits = found.copy()
        for s, sub in others.items():
            before = store.segments[s].evictions
            store.segments[s].access_or_put_size_many(sub, nbytes, np.zeros(len(sub), dtype=bool))
            self._after(s, before, 0, nbytes)
        if mine_keys:
            seg = store.segments[t]
            before = seg.evictions
            got = seg.access_or_put_size_many(mine_keys, nbytes, np.array(mine_flags, dtype=bool))
            written = 0
            for p, g, w in zip(mine_pos, got.tolist(), mine_flags):
                if p >= 0:
                    hits[p] = g
                    written += w and not g
            self._after(t, before, written, nbytes)
        return hits

    def _after(self, s: int, before: int, written: int, nbytes: int) -> None:
        """Bookkeeping after a call on segment ``s``: where, the log, evictions down to the low mark, write bytes."""
        store = self.store
        seg = store.segments[s]
        store._sync(s, self.log)
        if seg.evictions > before:
            store._down_to_low(s, self.log)
        self.evictions += seg.evictions - before
        key = "local_write_bytes" if s == self.home else "fabric_write_bytes"
        store.stats[key] += written * nbytes


class LocalSegmentView:
    """The reader's own segment as a level of its own (``<name>@local``: the level's spec, no
    fabric), placed before the shared level so that the lookup takes a block from it when it is
    there.  It only answers lookups: the shared level's view does the accesses and writes."""

    read_only = True
    evictions = 0

    def __init__(self, store: SegmentedStore, instance: int) -> None:
        self.store = store
        home = store.home(instance)
        self.bit = 1 << home
        self.segment = store.segments[home]
        self.name = store.level.name + "@local"
        self.backend = self
        self.policy = self.segment.policy

    # the reader's own segment: its capacity and use (the shared level's view counts every segment)
    capacity_bytes = property(lambda self: self.segment.capacity_bytes)
    used_bytes = property(lambda self: self.segment.used_bytes)

    def drain(self) -> list:
        return []

    def contains_many(self, keys: Any) -> np.ndarray:
        where, bit = self.store.where, self.bit
        return np.array([bool(where.get(k, 0) & bit) for k in _key_list(keys)], dtype=bool)

    def prefix_hits(self, keys: Any) -> int:
        held = self.contains_many(keys)
        return int(np.argmin(held)) if not held.all() else len(held)

    def access_or_put_size_many(self, keys: Any, nbytes: int, write: Any) -> np.ndarray:
        return self.contains_many(keys)  # counted as this level's hits; the shared level's view touches them


def local_level(level: TierLevel) -> TierLevel:
    """The reader's own segment as a level: the level's own spec (no fabric link), named ``@local``."""
    return replace(level, spec=replace(level.spec, name=level.spec.name + "@local"), capacity_bytes=None,
                   fill="write-through", inclusive=True, admission=WriteAll())
