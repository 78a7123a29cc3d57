"""Plain-Python model of ``kvmm.cluster.BlockIndex``, written from docs/cluster_index.md
("Semantics") alone.

A ``dict`` key -> ``set`` of ``(instance, medium)`` holders, and an ``OrderedDict`` of entries,
least recently used first, kept only under a budget.  With ``max_holders`` each key also keeps
its holders oldest first (a store makes its holder the newest; a new holder of a full key
pushes the oldest out), as llm-d's per-key pod LRU (``podCacheSize``) does.  Slow and obviously correct: the model of
the stateful test and the same-run baseline ("dict-of-sets index") of the benchmarks.  Keys are
whatever hashable values the caller uses (ints, or ``(int, int)`` pairs); media are names.
Errors are plain ``ValueError`` raised before any change.
"""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["NaiveBlockIndex"]


class NaiveBlockIndex:
    def __init__(self, num_instances: int, media=("GPU", "CPU"), max_entries: int | None = None,
                 max_holders: int | None = None) -> None:
        self.num_instances = num_instances
        self.media = tuple(media)
        self.max_entries = max_entries
        self.max_holders = max_holders
        self.holders: dict = {}  # key -> OrderedDict of (instance, medium name), oldest first
        self.lru: OrderedDict = OrderedDict()  # least recently used first; only with a budget
        self.stats = {"stored": 0, "removed": 0, "lenient_ignored": 0, "budget_evictions": 0, "cleared": 0,
                      "lookups": 0, "holder_evictions": 0}

    def __len__(self) -> int:
        return len(self.holders)

    def _touch(self, key) -> None:
        if self.max_entries is not None:
            self.lru[key] = None
            self.lru.move_to_end(key)

    def _drop(self, key) -> None:
        del self.holders[key]
        self.lru.pop(key, None)

    def stored(self, instance: int, keys, medium: str) -> None:
        for key in reversed(list(keys)):
            if key not in self.holders:
                if self.max_entries is not None and len(self.holders) >= self.max_entries:
                    oldest = next(iter(self.lru))
                    self._drop(oldest)
                    self.stats["budget_evictions"] += 1
                self.holders[key] = OrderedDict()
            held = self.holders[key]
            if (instance, medium) in held:
                held.move_to_end((instance, medium))
            else:
                if self.max_holders is not None and len(held) >= self.max_holders:
                    held.popitem(last=False)
                    self.stats["holder_evictions"] += 1
                held[(instance, medium)] = None
            self._touch(key)
            self.stats["stored"] += 1

    def removed(self, instance: int, keys, medium: str, lenient: bool = False) -> None:
        keys = list(keys)
        if not lenient:  # check the whole call first: a repeat of a key is not held the second time
            held = set()
            for key in keys:
                if (instance, medium) not in self.holders.get(key, ()) or key in held:
                    raise ValueError(f"instance {instance} does not hold {key!r} on {medium}")
                held.add(key)
        for key in keys:
            holders = self.holders.get(key)
            if holders is None or (instance, medium) not in holders:
                self.stats["lenient_ignored"] += 1
                continue
            del holders[(instance, medium)]
            if not holders:
                self._drop(key)
            self.stats["removed"] += 1

    def cleared(self, instance: int, medium: str | None = None) -> None:
        for key in list(self.holders):
            holders = self.holders[key]
            for m in self.media if medium is None else (medium,):
                holders.pop((instance, m), None)
            if not holders:
                self._drop(key)
        self.stats["cleared"] += 1

    def prefix_hits(self, keys) -> list[list[int]]:
        """``out[i][m]``: how many of the first keys, consecutively, instance i holds on medium m."""
        keys = list(keys)
        out = []
        for i in range(self.num_instances):
            row = []
            for m in self.media:
                n = 0
                while n < len(keys) and (i, m) in self.holders.get(keys[n], ()):
                    n += 1
                row.append(n)
            out.append(row)
        longest = max((n for row in out for n in row), default=0)
        for key in reversed(keys[:longest]):
            self._touch(key)
        self.stats["lookups"] += 1
        return out

    def holders_of(self, key) -> list[tuple[int, str]]:
        return sorted(self.holders.get(key, ()), key=lambda h: (h[0], self.media.index(h[1])))

    def as_dict(self) -> dict:
        return {key: self.holders_of(key) for key in self.holders}

    def lru_order(self) -> list:
        """Entries, least recently used first (under a budget)."""
        return list(self.lru)
