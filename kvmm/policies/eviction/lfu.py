"""LFU, an :class:`~kvmm.protocols.EvictionPolicy`: least frequently used first, ties to the least
recently used (a ``SortedDict`` over (count, last tick))."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import count

from sortedcontainers import SortedDict

from kvmm._validate import as_count, as_hashable
from kvmm.policies.eviction._checks import check_size, first_unprotected, require_absent, require_present
from kvmm.protocols import EvictionPolicyBase

__all__ = ["LFUPolicy"]


@dataclass
class LFUPolicy(EvictionPolicyBase):
    """Least frequently used first; ties go to the least recently used.

    A key's count starts at 1 on insert and grows by 1 per access; a removed key forgets its
    count.  Runtime complexity: O(log n) per event.
    """

    _tick: Iterator[int] = field(default_factory=count, init=False, repr=False)
    # key -> (count, last tick); the SortedDict maps (count, last tick) -> key: eviction order.
    _rank: dict = field(default_factory=dict, init=False, repr=False)
    _order: SortedDict = field(default_factory=SortedDict, init=False, repr=False)

    def on_insert(self, key: Hashable, size: int = 1, protected: Iterable[Hashable] = ()) -> tuple:
        as_count(size, "size")
        require_absent(self._rank, key, self)
        rank = (1, next(self._tick))
        self._rank[key] = rank
        self._order[rank] = key
        return ()

    def on_access(self, key: Hashable, size: int | None = None, protected: Iterable[Hashable] = ()) -> tuple:
        check_size(size)
        require_present(self._rank, key, self)
        hits, _ = self._rank[key]
        del self._order[self._rank[key]]
        rank = (hits + 1, next(self._tick))
        self._rank[key] = rank
        self._order[rank] = key
        return ()

    def on_remove(self, key: Hashable) -> None:
        require_present(self._rank, key, self)
        del self._order[self._rank.pop(key)]

    def touch(self, key: Hashable) -> None:
        """A reference the caller does not count as a use: the key becomes the most recent of
        its count (the tie-break) and keeps its count.  SGLang's LFU works this way (a match
        that passes or splits a radix node stamps its last-access time, not its hit count); a
        caller with only counted uses never needs it.  Runtime complexity: O(log n)."""
        require_present(self._rank, key, self)
        hits, _ = self._rank[key]
        del self._order[self._rank[key]]
        rank = (hits, next(self._tick))
        self._rank[key] = rank
        self._order[rank] = key

    def victims(self, n: int, protected: Iterable[Hashable] = (), *, incoming: Hashable = None,
                incoming_size: int = 1) -> list[Hashable]:
        as_count(incoming_size, "incoming_size")
        as_hashable(incoming, "incoming")
        return first_unprotected(iter(self._order.values()), n, protected)

    def frequency(self, key: Hashable) -> int:
        require_present(self._rank, key, self)
        return self._rank[key][0]

    def keys(self) -> list[Hashable]:
        return list(self._order.values())

    def __len__(self) -> int:
        return len(self._rank)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._rank

    def check(self) -> None:
        """Assert every invariant (used by tests)."""
        # The two maps are inverse of each other.
        assert len(self._rank) == len(self._order)
        for key, rank in self._rank.items():
            assert self._order[rank] == key
            # Counts are positive.
            assert rank[0] >= 1
