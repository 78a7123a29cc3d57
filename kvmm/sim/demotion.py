"""What the hierarchy needs to know about what moves: a tier that logs its writes and deletions,
and the GPU prefix cache's evictions.

Both feed two things: **write-back demotion** (a block evicted from a level is written into the
next level down when that level is ``fill="write-back"``) and a cluster's
:class:`~kvmm.cluster.BlockIndex` (which instance holds which block in which medium).  Neither
is needed by a plain write-through hierarchy, which uses the unlogged
:class:`~kvmm.tiers.SimulatedTier` and pays nothing for them.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import numpy as np

from kvmm.tiers.simulated import SimulatedTier

__all__ = ["LoggedSimulatedTier", "GpuKeyMirror"]


class LoggedSimulatedTier(SimulatedTier):
    """A :class:`SimulatedTier` that appends every write and deletion to ``log`` as
    ``(key, True)`` (stored) or ``(key, False)`` (deleted), in order, until the caller drains it.

    The simulator drains it after each call on the tier: the deletions of an offer are its
    evictions (the victims demoted to the next level), the writes are what an index learns.
    Runtime complexity: O(1) extra per logged entry.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.log: list[tuple[Hashable, bool]] = []

    def drain(self) -> list[tuple[Hashable, bool]]:
        """The events since the last drain (and forget them)."""
        log, self.log = self.log, []
        return log

    def put(self, key: Hashable, data: Any) -> None:
        super().put(key, data)
        self.log.append((key, True))

    def put_size(self, key: Hashable, nbytes: int) -> None:
        super().put_size(key, nbytes)
        self.log.append((key, True))

    def size_writer(self, nbytes: int) -> Any:
        store = super().size_writer(nbytes)

        def logged_store(k: Hashable) -> None:
            store(k)
            self.log.append((k, True))  # self.log, not a captured list: drain replaces it

        return logged_store

    def _store_many(self, nbytes: int, seconds: float, keys: list) -> None:
        super()._store_many(nbytes, seconds, keys)
        self.log.extend((k, True) for k in keys)

    def delete(self, key: Hashable) -> None:
        super().delete(key)
        self.log.append((key, False))


class GpuKeyMirror:
    """Which trace block each GPU pool block holds, so a request's admission can tell which
    cached blocks it evicted (the allocator drops a free cached block's key when it hands the
    block out, and reports only the count).

    ``key_space``: the sorted distinct trace block ids of the run (a block's dense id is its
    position there).  ``holder[b]``: the dense id pool block ``b`` was keyed with (-1: none);
    ``copies[k]``: how many pool blocks hold dense id ``k`` (a key can be cached in two blocks
    when a request recomputes a block it could not reach through its prefix), so a block leaves
    the GPU only with its last copy.  Runtime complexity: O(blocks of the request x log keys)
    per admission, in numpy.
    """

    def __init__(self, num_blocks: int, key_space: np.ndarray) -> None:
        self.key_space = key_space
        self.holder = np.full(num_blocks, -1, dtype=np.int64)
        self.copies = np.zeros(key_space.shape[0], dtype=np.int32)

    def admitted(self, ids: np.ndarray, hits: int, trace_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A request took pool blocks ``ids`` for trace blocks ``trace_ids`` (its first ``hits``
        were prefix hits, the blocks after ``len(trace_ids)`` hold no key).  Returns
        ``(stored, evicted)`` trace ids: blocks now on the GPU that were not, and those no
        longer on it (a block evicted and keyed again by the same admission is in neither)."""
        fresh = ids[hits:]
        old = self.holder[fresh]
        old = old[old >= 0]
        new = np.searchsorted(self.key_space, trace_ids[hits:])
        keyed = new.shape[0]
        self.holder[fresh[:keyed]] = new
        self.holder[fresh[keyed:]] = -1
        copies = self.copies
        before = copies[new]
        if old.shape[0]:
            np.subtract.at(copies, old, 1)  # .at: two blocks of one key may be handed out together
        np.add.at(copies, new, 1)
        stored = new[before == 0]
        evicted = old[copies[old] == 0] if old.shape[0] else old
        if evicted.shape[0] > 1:
            distinct = list(dict.fromkeys(evicted.tolist()))  # both copies of a key handed out: once
            if len(distinct) != evicted.shape[0]:
                evicted = np.array(distinct, dtype=np.int64)
        return self.key_space[stored], self.key_space[evicted]
