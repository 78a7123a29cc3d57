"""Plain-Python reference of ``kvmm.allocators.BlockAllocator`` (same semantics, OrderedDicts).

Slow and obviously correct: the free queue is an ``OrderedDict`` (head first), the prefix cache
a ``dict`` key -> ``dict`` of block ids in cache order (vLLM v1's ``cached_block_hash_to_block``).
Written from the documented behaviour (docs/allocator.md, the BlockAllocator docstrings), not
from the kernels.  The model of :class:`kvmm.testing.BlockAllocatorMachine` and the same-run
baseline of the benchmarks.  Errors
are plain ``ValueError``/``IndexError`` raised before any change.
"""

from __future__ import annotations

from collections import OrderedDict

from kvmm.testing.models import siphash


def _ids(ids) -> list[int]:
    return [int(b) for b in ids]


def _keys(keys) -> list[tuple[int, int]]:
    return [(int(k[0]), int(k[1])) for k in keys]


class NaiveBlockAllocator:
    def __init__(self, num_blocks: int, block_size: int, *, secret: bytes = bytes(16), salt: int = 0) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.secret = secret
        self.salt = salt
        self.ref = [0] * num_blocks
        self.free_q: OrderedDict[int, None] = OrderedDict((b, None) for b in range(num_blocks))
        self.block_key: dict[int, tuple[int, int]] = {}
        self.cached: dict[tuple[int, int], dict[int, None]] = {}
        self.queries = self.hits = self.evictions = 0

    @property
    def num_free(self) -> int:
        return len(self.free_q)

    @property
    def usage(self) -> float:
        return 1.0 - len(self.free_q) / self.num_blocks

    def free_queue(self) -> list[int]:
        return list(self.free_q)

    def cached_map(self) -> dict[tuple[int, int], list[int]]:
        return {k: list(v) for k, v in self.cached.items()}

    @property
    def stats(self) -> dict[str, int]:
        return {"queries": self.queries, "hits": self.hits, "evictions": self.evictions,
                "cached_blocks": len(self.block_key), "cached_keys": len(self.cached)}

    # -- blocks
    def _block_ids(self, ids) -> list[int]:
        """``ids`` as ints; IndexError for one outside [0, num_blocks)."""
        ids = _ids(ids)
        for b in ids:
            if not 0 <= b < self.num_blocks:
                raise IndexError(b)
        return ids

    def _uncache(self, b: int) -> None:
        key = self.block_key.pop(b)
        del self.cached[key][b]
        if not self.cached[key]:
            del self.cached[key]

    def allocate(self, n: int) -> list[int]:
        if n < 0 or n > len(self.free_q):
            raise ValueError(f"cannot allocate {n}")
        out = []
        for _ in range(n):
            b, _ = self.free_q.popitem(last=False)
            if b in self.block_key:
                self._uncache(b)
                self.evictions += 1
            self.ref[b] = 1
            out.append(b)
        return out

    def allocate_many(self, counts: list[int]) -> list[list[int]]:
        if any(c < 0 for c in counts) or sum(counts) > len(self.free_q):
            raise ValueError("cannot allocate")
        return [self.allocate(c) for c in counts]

    def free(self, ids: list[int]) -> None:
        ids = self._block_ids(ids)
        need: dict[int, int] = {}
        for b in ids:
            need[b] = need.get(b, 0) + 1
            if need[b] > self.ref[b]:
                raise ValueError(f"double free of {b}")
        to_head = []
        for b in ids:
            self.ref[b] -= 1
            if self.ref[b] == 0:
                if b in self.block_key:
                    self.free_q[b] = None  # tail
                else:
                    to_head.append(b)
        for b in reversed(to_head):
            self.free_q[b] = None
            self.free_q.move_to_end(b, last=False)

    def touch(self, ids: list[int]) -> None:
        ids = self._block_ids(ids)
        for b in ids:
            if self.ref[b] == 0:
                del self.free_q[b]
            self.ref[b] += 1

    # -- prefix cache
    def hash_blocks(self, tokens, parent=None, extra=None, salt=None):
        return siphash.block_keys(self.secret, self.salt if salt is None else salt, [int(t) for t in tokens],
                                  self.block_size, parent, extra)

    def cache_blocks(self, ids: list[int], keys: list[tuple[int, int]]) -> None:
        ids, keys = _ids(ids), _keys(keys)
        if len(ids) != len(keys) or len(set(ids)) != len(ids):
            raise ValueError("bad cache_blocks")
        for b, k in zip(ids, keys):
            if not 0 <= b < self.num_blocks:
                raise IndexError(b)
            if self.ref[b] == 0 or self.block_key.get(b, k) != k:  # free, or holding another key
                raise ValueError(f"cannot cache {b}")
        for b, k in zip(ids, keys):
            if b not in self.block_key:  # a block already holding this key is left as it is
                self.block_key[b] = k
                self.cached.setdefault(k, {})[b] = None

    def _prefix(self, keys) -> list[int]:
        out = []
        for k in keys:
            blocks = self.cached.get(k)
            if not blocks:
                break
            out.append(next(iter(blocks)))
        return out

    def lookup(self, keys) -> list[int]:
        keys = _keys(keys)
        out = self._prefix(keys)
        self.queries += len(keys)
        self.hits += len(out)
        return out

    def lookup_many(self, requests) -> list[list[int]]:
        return [self.lookup(keys) for keys in requests]

    def evict(self, ids: list[int]) -> int:
        ids = self._block_ids(ids)
        n = 0
        for b in ids:
            if b in self.block_key:
                self._uncache(b)
                n += 1
        self.evictions += n
        return n

    def reset_prefix_cache(self) -> bool:
        if len(self.free_q) != self.num_blocks:
            return False
        self.block_key.clear()
        self.cached.clear()
        return True

    # -- fused request API
    def admit(self, keys, num_extra: int = 0) -> tuple[list[int], int]:
        keys = _keys(keys)
        hits = self._prefix(keys)
        free_hits = len({b for b in hits if self.ref[b] == 0})
        if len(keys) - len(hits) + num_extra > len(self.free_q) - free_hits:
            raise ValueError("out of blocks")
        self.queries += len(keys)
        self.hits += len(hits)
        self.touch(hits)
        new = self.allocate(len(keys) - len(hits) + num_extra)
        self.cache_blocks(new[:len(keys) - len(hits)], list(keys[len(hits):]))
        return hits + new, len(hits)

    def admit_many(self, requests, num_extra=None):
        out = []
        for i, keys in enumerate(requests):
            try:
                out.append(self.admit(keys, 0 if num_extra is None else num_extra[i]))
            except ValueError:
                break
        return out
