"""vLLM 0.33's ``lru`` ranking of offloaded chunks, kept over a kvmm recency policy.

Engine-independent (imports no vLLM): :mod:`kvmm.integrations.vllm` feeds it what vLLM's
``LRUCachePolicy`` sees.  vLLM gives every chunk a rank and evicts the smallest first:

* a *fresh* rank ``(r, 0)`` from one counter: a chunk stored without a token position, and every
  chunk a ``touch`` or a finished request re-ranks (tail to head, so heads are newest);
* a running request's rank ``(R, -position)`` for its chunks with token positions (a store, or a
  load or offer that raises a lower rank): ``R`` comes from the same counter when the request is
  first seen, so all its chunks rank together, tails before heads, behind everything newer.

The *committed* chunks (fresh ranks) live in the kvmm policy, which sees one event per fresh rank
in counter order, so its victim order is the ``r`` order; the *provisional* ones (request ranks)
stay here, in a heap of ``(R, -position, key)`` (vLLM's heap breaks rank ties by key) whose
entries for chunks since re-ranked or gone are dropped when an eviction meets them.  A victim
list merges the two by rank.  A committed chunk raised to a request rank leaves the policy
(``on_remove``: for a recency order the same as the refresh it gets back when committed again).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Iterable
from typing import Any


class LruRanks:
    """The ranks of the resident chunks (see the module docstring).

    ``access(key)`` / ``insert(key, size)`` are the policy's hooks (a refresh, a new key; the
    policy evicts nothing on its own), ``evicted(key)`` what a victim gets (``on_evict``) and
    ``keys`` the policy's ``keys`` (None when it has none: :meth:`check` then skips its order).

    Runtime complexity: a fresh rank O(1) plus the policy's event; a request rank O(log p) for
    p provisional chunks; ``victims(n)`` O((n + blocked provisional chunks) log p) plus the
    policy's ``victims``.
    """

    def __init__(self, policy: Any, access: Callable, insert: Callable, evicted: Callable,
                 keys: Callable[[], list] | None) -> None:
        self.policy = policy
        self._access, self._insert, self._evicted, self._keys = access, insert, evicted, keys
        self._counter = 0
        # committed key -> r (the policy tracks it); provisional key -> (R, -position)
        self.committed: dict[Hashable, int] = {}
        self.provisional: dict[Hashable, tuple[int, int]] = {}
        self._heap: list[tuple] = []  # (R, -position, key); stale once the key's rank differs

    def new_rank(self) -> int:
        """The next value of the counter (a fresh rank, or a request's rank ``R``)."""
        self._counter += 1
        return self._counter

    def commit(self, key: Hashable) -> None:
        """A fresh rank for ``key`` (stored without a position, touched, or re-ranked by its
        finished request): the policy sees it as inserted, or refreshed when it tracks it."""
        if key in self.committed:
            self._access(key)
        else:
            self.provisional.pop(key, None)  # its heap entry is stale now
            self._insert(key, 1)
        self._counter += 1
        self.committed[key] = self._counter

    def raise_to(self, key: Hashable, rank: tuple[int, int]) -> None:
        """A request rank ``(R, -position)`` for ``key``, kept only if it ranks newer than the
        one ``key`` has (vLLM never lowers a rank): a committed key leaves the policy."""
        current = self.provisional.get(key)
        if current is None:
            r = self.committed.get(key)
            if r is not None:
                if r > rank[0]:
                    return
                self.policy.on_remove(key)
                del self.committed[key]
        elif current >= rank:
            return
        self.provisional[key] = rank
        heapq.heappush(self._heap, (*rank, key))
        self._compact()

    def forget(self, key: Hashable) -> None:
        """``key`` leaves without an eviction (a failed store): the policy forgets it."""
        if key in self.committed:
            del self.committed[key]
            self.policy.on_remove(key)
        else:
            self.provisional.pop(key, None)

    def victims(self, n: int, blocked: set) -> list[Hashable]:
        """Up to ``n`` unblocked chunks, lowest rank first (the order is unchanged)."""
        committed = self.policy.victims(n, blocked) if self.committed else []
        provisional = self._provisional_victims(n, blocked) if self.provisional else []
        ranks, out, i, j = self.committed, [], 0, 0
        while len(out) < n and (i < len(committed) or j < len(provisional)):
            if j == len(provisional) or (i < len(committed) and ranks[committed[i]] < provisional[j][0]):
                out.append(committed[i])
                i += 1
            else:
                out.append(provisional[j][2])
                j += 1
        return out

    def evict(self, keys: Iterable[Hashable]) -> None:
        """Apply a prefix of :meth:`victims`."""
        for key in keys:
            if key in self.committed:
                del self.committed[key]
                self._evicted(key)
            else:
                del self.provisional[key]

    def check(self, resident: set) -> None:
        """Assert every invariant (used by tests): each resident chunk ranked exactly once."""
        # Each provisional chunk has its current rank in the heap (stale entries may remain).
        assert {(*rank, key) for key, rank in self.provisional.items()} <= set(self._heap)
        # No chunk is both committed and provisional, and together they are the resident ones.
        assert self.committed.keys().isdisjoint(self.provisional)
        assert set(self.committed) | set(self.provisional) == resident
        # The policy tracks exactly the committed chunks, in rank order.
        if self._keys is not None:
            assert self._keys() == sorted(self.committed, key=self.committed.__getitem__)
        # Every rank came from the counter.
        assert all(0 < r <= self._counter for r in self.committed.values())
        assert all(0 < r <= self._counter for r, _ in self.provisional.values())

    def _provisional_victims(self, n: int, blocked: set) -> list[tuple]:
        """The ``n`` lowest-ranked unblocked provisional entries: popped, then the current ones
        pushed back (the stale ones met on the way are dropped for good)."""
        heap, ranks = self._heap, self.provisional
        kept, out = [], []
        while heap and len(out) < n:
            entry = heapq.heappop(heap)
            if ranks.get(entry[2]) != entry[:2]:
                continue  # re-ranked or gone since
            kept.append(entry)
            if entry[2] not in blocked:
                out.append(entry)
        for entry in kept:
            heapq.heappush(heap, entry)
        self._compact()
        return out

    def _compact(self) -> None:
        """Rebuild the heap when most of it is stale (amortised O(1) per entry pushed)."""
        if len(self._heap) > 2 * len(self.provisional) + 64:
            self._heap = [(*rank, key) for key, rank in self.provisional.items()]
            heapq.heapify(self._heap)
