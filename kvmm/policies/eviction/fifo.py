"""FIFO, an :class:`~kvmm.protocols.EvictionPolicy`: first in, first out (LRU's list, accesses
do not reorder it)."""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass

from kvmm.policies.eviction._checks import check_size, ignore_access, require_present
from kvmm.policies.eviction.lru import LRUPolicy
from kvmm.protocols import FastHooks

__all__ = ["FIFOPolicy"]


@dataclass
class FIFOPolicy(LRUPolicy):
    """First in, first out: accesses do not change the order.  Runtime complexity: O(1) per event."""

    def on_access(self, key: Hashable, size: int | None = None, protected: Iterable[Hashable] = ()) -> tuple:
        check_size(size)
        require_present(self._order, key, self)
        return ()

    def fast_hooks(self) -> FastHooks | None:
        """LRU's fast hooks (:meth:`LRUPolicy.fast_hooks`) with an access that changes nothing.
        None for a subclass, whose own hooks must run.  Runtime complexity: O(1) per event."""
        if type(self) is FIFOPolicy:
            return FastHooks(ignore_access, self._insert_unchecked, self._insert_many_unchecked, self._evict_first)
        return None
