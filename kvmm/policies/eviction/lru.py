"""LRU, an :class:`~kvmm.protocols.EvictionPolicy`: least recently used first (``OrderedDict``).

The calling convention every order follows is in :mod:`kvmm.policies.eviction`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

from kvmm._validate import as_count, as_hashable
from kvmm.policies.eviction._checks import check_size, first_unprotected, require_absent, require_present
from kvmm.protocols import EvictionPolicyBase, FastHooks

__all__ = ["LRUPolicy"]


@dataclass
class LRUPolicy(EvictionPolicyBase):
    """Least recently used first.  Insert and access move a key to the most-recent end.

    Runtime complexity: O(1) per event.
    """

    # key -> None, least recently used first
    _order: OrderedDict = field(default_factory=OrderedDict, init=False, repr=False)

    def on_insert(self, key: Hashable, size: int = 1, protected: Iterable[Hashable] = ()) -> tuple:
        as_count(size, "size")
        require_absent(self._order, key, self)
        self._order[key] = None
        return ()

    def on_access(self, key: Hashable, size: int | None = None, protected: Iterable[Hashable] = ()) -> tuple:
        check_size(size)
        require_present(self._order, key, self)
        self._order.move_to_end(key)
        return ()

    def on_remove(self, key: Hashable) -> None:
        require_present(self._order, key, self)
        del self._order[key]

    def victims(self, n: int, protected: Iterable[Hashable] = (), *, incoming: Hashable = None,
                incoming_size: int = 1) -> list[Hashable]:
        as_count(incoming_size, "incoming_size")
        as_hashable(incoming, "incoming")
        return first_unprotected(iter(self._order), n, protected)

    def fast_hooks(self) -> FastHooks | None:
        """All four :class:`~kvmm.protocols.FastHooks`, ``insert_many`` and ``evict_first``
        included: a batch owner (``ManagedTier``) evicts and inserts a request's new keys at once.
        None for a subclass, whose own hooks must run.  Runtime complexity: O(1) per event.
        """
        if type(self) is LRUPolicy:
            return FastHooks(self._order.move_to_end, self._insert_unchecked, self._insert_many_unchecked,
                             self._evict_first)
        return None

    def _evict_first(self) -> Hashable:
        return self._order.popitem(last=False)[0]

    def _insert_unchecked(self, key: Hashable, size: int) -> None:
        self._order[key] = None

    def _insert_many_unchecked(self, keys: Iterable[Hashable]) -> None:
        # one C-level update appends the keys in order, as on_insert of each would
        self._order.update(dict.fromkeys(keys))

    def keys(self) -> list[Hashable]:
        """Tracked keys in eviction order (next victim first)."""
        return list(self._order)

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._order

    def check(self) -> None:
        """Assert every invariant (used by tests)."""
        # The order holds each tracked key exactly once (an OrderedDict cannot repeat keys).
        assert len(self._order) == len(set(self._order))


