"""One serving instance's KV memory, composed from kvmm's own structures.

* **GPU pool**: a :class:`~kvmm.allocators.BlockAllocator` of the trace's blocks (Mooncake traces
  hash 512-token blocks; other formats carry their own ``block_tokens``),
  ``gpu_kv_bytes // (512 x KV bytes per token)`` of them.  A
  scheduled request takes its blocks with ``admit`` (prefix hits touched, the rest allocated
  and keyed); a finished one frees them last-first into the prefix cache (vLLM semantics).
* **Lower tiers**: one :class:`~kvmm.tiers.ManagedTier` per :class:`TierLevel`, a
  :class:`~kvmm.tiers.SimulatedTier` (capacity and timing, no bytes) driven by the level's
  eviction policy; the level's admission policy decides which of a prefilled request's blocks
  are written to it.  Every level is written independently (write-through to each level its
  admission admits; no demotion of victims).

Nothing here keeps an eviction order of its own: the GPU order is the allocator's free queue,
each tier's order is its policy's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kvmm.allocators.block_allocator import BlockAllocator
from kvmm.errors import BadInputError, OutOfBlocksError
from kvmm.policies.admission import AdmissionRequest, WriteAll, admission_mask
from kvmm.sim.config import SimConfig
from kvmm.sim.demotion import GpuKeyMirror, LoggedSimulatedTier
from kvmm.sim.levels import make_admission, make_eviction
from kvmm.tiers.managed import ManagedTier
from kvmm.tiers.simulated import SimulatedTier

__all__ = ["Hierarchy", "pool_keys"]


class Hierarchy:
    """GPU pool + lower tiers of one instance.  ``record_ops`` logs every pool call (tests replay it).

    Runtime complexity: pool calls O(blocks of the request) in numba; tier calls O(blocks)
    policy events.
    """

    def __init__(self, cfg: SimConfig, block_bytes: int, *, gpu_kv_bytes: int, block_tokens: int = 512,
                 with_tiers: bool = True, prefix_cache: bool | None = None, record_ops: bool = False, shared: tuple = (),
                 events: Any = None, key_space: np.ndarray | None = None) -> None:
        num_blocks = gpu_kv_bytes // block_bytes
        if num_blocks < 1:
            raise BadInputError(f"gpu_kv_bytes={gpu_kv_bytes} holds no {block_bytes}-byte block; expected at least one block")
        self.block_bytes = block_bytes
        self.pool = BlockAllocator(num_blocks, block_tokens, secret=bytes(16))
        self.prefix_cache = cfg.gpu_prefix_cache if prefix_cache is None else prefix_cache
        levels = tuple(cfg.tiers) if with_tiers else ()
        self.levels = levels + tuple(s.level for s in shared)
        self.write_back = [lv.write_back for lv in self.levels]
        self.exclusive = [not lv.inclusive for lv in self.levels]
        # what moves is logged only when something reads it: demotion, or an index (events)
        self.events = events  # events(medium, stored ids, removed ids): medium 0 is the GPU, i + 1 private level i
        self.logged = any(self.write_back) or events is not None
        backend = LoggedSimulatedTier if self.logged else SimulatedTier
        self.tiers = [ManagedTier(backend(lv.spec.capacity_bytes, spec=lv.spec), make_eviction(lv.eviction))
                      for lv in levels] + [s.tier for s in shared]
        self.private = len(levels)  # the levels after these are shared with other instances
        # where a level's victims (and the GPU's: below[-1]) go down to: the next level that is
        # written (a pooled store's own-segment level only answers lookups)
        written = [i for i, t in enumerate(self.tiers) if not getattr(t, "read_only", False)]
        self.below = {i: next((j for j in written if j > i), len(self.tiers)) for i in range(-1, len(self.tiers))}
        self.admission = [make_admission(lv.admission, lv.spec.capacity_bytes // block_bytes) for lv in levels]
        self.admission += [s.admission for s in shared]
        self.mirror = None
        if self.logged and self.prefix_cache:
            if key_space is None:
                raise BadInputError("a hierarchy that demotes or feeds an index needs the run's key_space")
            self.mirror = GpuKeyMirror(num_blocks, key_space)
        self.demoted = [0] * len(self.levels)  # blocks written into each level by demotion
        # kvmm's own WriteAll is stateless and admits every block the tier lacks; with the cached
        # ones kept (offer) that is every block, so offer skips its admission call
        self.writes_all = [type(a) is WriteAll for a in self.admission]
        self.tier_hits = [0] * len(self.levels)  # blocks found when offered
        self.tier_offered = [0] * len(self.levels)  # blocks offered
        self.ops: list | None = [] if record_ops else None

    @property
    def num_blocks(self) -> int:
        return self.pool.num_blocks

    # ------------------------------------------------------------------ lookups
    def lookup(self, keys: np.ndarray, ids: np.ndarray) -> tuple[int, np.ndarray]:
        """Longest prefix of the request's blocks found (``keys``: pool keys ``(n, 2)`` uint64;
        ``ids``: the same blocks' trace ids, the tiers' keys): ``(gpu blocks, source tier of each next hit block)``.

        The first ``gpu`` blocks are in the GPU prefix cache; the following ``len(src)`` blocks
        are each in some lower tier (``src[i]``: the fastest that holds it).  No policy event: a
        lookup is not an access (the blocks are accessed when the request offers them).
        """
        gpu = self.gpu_prefix(keys)
        rest = ids[gpu:]
        if not self.tiers or rest.shape[0] == 0:
            return gpu, np.zeros(0, dtype=np.int64)
        if len(self.tiers) == 1:  # the usual case: the leading run of blocks the one tier holds
            return gpu, np.zeros(self.tiers[0].prefix_hits(rest), dtype=np.int64)
        src = np.full(rest.shape[0], -1, dtype=np.int64)
        for i in range(len(self.tiers) - 1, -1, -1):  # fastest last: it wins
            src[self.tiers[i].contains_many(rest)] = i
        miss = np.flatnonzero(src < 0)
        return gpu, src[: miss[0]] if miss.size else src

    def gpu_prefix(self, keys: np.ndarray) -> int:
        """Leading blocks of ``keys`` now in the GPU prefix cache."""
        if not self.prefix_cache:
            return 0
        h = int(self.pool.lookup(keys).shape[0])
        if self.ops is not None:
            self.ops.append(("lookup", keys.copy(), h))
        return h

    # ------------------------------------------------------------------ GPU pool
    def take(self, keys: np.ndarray, extra: int) -> tuple[np.ndarray, int] | None:
        """The request's blocks: ``(ids, GPU prefix hits)``, or None when the pool cannot hold them."""
        if not self.prefix_cache:
            n = keys.shape[0] + extra
            if n > self.pool.num_free:
                return None
            ids = self.pool.allocate(n)
            if self.ops is not None:
                self.ops.append(("allocate", n, ids.copy()))
            return ids, 0
        try:
            ids, hits = self.pool.admit(keys, extra)
        except OutOfBlocksError:
            return None
        if self.ops is not None:
            self.ops.append(("admit", keys.copy(), extra, ids.copy(), hits))
        if self.mirror is not None:
            stored, evicted = self.mirror.admitted(ids, hits, keys[:, 0].view(np.int64))
            if self.events is not None and (stored.shape[0] or evicted.shape[0]):
                self.events(0, stored, evicted)
            first = self.below[-1]
            if evicted.shape[0] and first < len(self.tiers) and self.write_back[first]:
                self.demote(first, evicted.tolist())
        return ids, hits

    def release(self, ids: np.ndarray) -> None:
        """A finished request frees its blocks last-first (cached ones join the eviction order)."""
        rev = ids[::-1]
        self.pool.free(rev)
        if self.ops is not None:
            self.ops.append(("free", rev.copy()))

    # ------------------------------------------------------------------ lower tiers
    def offer(self, ids: np.ndarray, gpu_hits: int = 0) -> None:
        """Write a prefilled request's blocks down: each tier's admission picks the blocks to write
        (the first ``gpu_hits`` were GPU prefix hits); blocks the tier holds are accessed, admitted
        ones written, in prefix order."""
        if not self.tiers:
            return
        n = ids.shape[0]
        for i, tier in enumerate(self.tiers):
            # a write-back level fills from above (demote): the request's blocks are only accessed there
            write_back = self.write_back[i]
            write = np.zeros(n, dtype=bool) if write_back else self._write_mask(i, ids, gpu_hits)
            hits = tier.access_or_put_size_many(ids, self.block_bytes, write)
            self.tier_hits[i] += int(np.count_nonzero(hits))
            self.tier_offered[i] += n
            if write_back:
                if self.exclusive[i] and hits.any():  # they are on the GPU now: they leave an exclusive level
                    for k in ids[hits].tolist():
                        tier.delete(k)
                    self._moved(i, demote=False)  # promoted, not evicted: nothing goes down
            elif self.logged:
                self._moved(i)

    def _write_mask(self, i: int, ids: np.ndarray, gpu_hits: int) -> Any:
        """What level ``i`` writes of ``ids`` (the first ``gpu_hits`` were GPU prefix hits): every
        block, or the mask its admission picks on what the tier holds when the call reaches it.
        A block cached then but evicted by an earlier write of the same call is written back (it
        was offered and the tier held it: the admission kept it)."""
        n = ids.shape[0]
        if self.writes_all[i]:
            return np.ones(n, dtype=bool)
        admission = self.admission[i]

        def write(cached: np.ndarray) -> np.ndarray:
            request = AdmissionRequest(ids, cached, np.arange(n) < gpu_hits)
            return admission_mask(admission.admit(request), n, admission) | cached
        return write

    # ------------------------------------------------------------------ write-back
    def demote(self, i: int, keys: list) -> None:
        """Blocks evicted from the level above are written into write-back level ``i`` (its
        admission picks among them); its own victims go on down to level ``i + 1`` when that one
        is write-back too, else they leave the hierarchy."""
        if not keys:
            return
        ids = np.asarray(keys, dtype=np.int64)
        n = ids.shape[0]
        held = self.tiers[i].access_or_put_size_many(ids, self.block_bytes, self._write_mask(i, ids, 0))
        self.demoted[i] += n - int(np.count_nonzero(held))
        self._moved(i)

    def _moved(self, i: int, *, demote: bool = True) -> None:
        """Drain level ``i``'s log: tell the index (private levels) and demote its victims."""
        log = self.tiers[i].backend.drain()
        if not log:
            return
        last = dict(log)  # a key written and evicted by one call (a request longer than the level): the last event holds
        removed = [k for k, stored in last.items() if not stored]
        if self.events is not None and i < self.private:
            self.events(i + 1, [k for k, stored in last.items() if stored], removed)
        nxt = self.below[i]
        if demote and removed and nxt < len(self.tiers) and self.write_back[nxt]:
            self.demote(nxt, removed)


def pool_keys(block_ids: np.ndarray) -> np.ndarray:
    """The GPU pool's keys of trace block ids: rows ``(id, 1)`` (uint64), never the pool's empty key ``(0, 0)``."""
    keys = np.ones((block_ids.shape[0], 2), dtype=np.uint64)
    keys[:, 0] = block_ids.astype(np.uint64)
    return keys
