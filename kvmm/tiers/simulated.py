"""A tier that models capacity and timing only: :class:`SimulatedTier`.

It records each entry's size, dtype and shape but keeps no bytes, so a simulator can replay a
trace against a 300 TB appliance on a laptop.  ``get`` returns a *read-only placeholder*: an
array of the recorded shape and dtype, all zeros, that occupies no memory (a zero-stride view
of one element, ``np.broadcast_to``).  Code that only looks at shapes, sizes and timings runs
unchanged; code that reads values sees zeros, and code that tries to write into it gets
numpy's ``ValueError: assignment destination is read-only``.
"""

from __future__ import annotations

from collections.abc import Hashable
from functools import partial
from typing import Any

import numpy as np

from kvmm._validate import as_count
from kvmm.errors import CapacityExceededError, UnknownKeyError
from kvmm.tiers._base import TierBase, as_value_array, normalize_key
from kvmm.tiers.spec import TierSpec

__all__ = ["SimulatedTier"]

_UINT8 = np.dtype(np.uint8)


class SimulatedTier(TierBase):
    """Capacity and timing model of a tier, without data.

    ``put(key, data)`` records ``data``'s nbytes, dtype and shape; ``put_size(key, nbytes)``
    records a ``uint8`` entry of ``nbytes`` bytes without needing an array at all.
    Runtime complexity: O(1) per call (``put`` does not read the array's bytes).
    """

    def __init__(self, capacity_bytes: int | None = None, *, spec: TierSpec | str = "dram",
                 name: str | None = None) -> None:
        super().__init__(spec, capacity_bytes, name)
        # key -> (nbytes, dtype, shape)
        self._entries: dict[Hashable, tuple[int, np.dtype, tuple[int, ...]]] = {}
        self._used = 0

    @property
    def used_bytes(self) -> int:
        return self._used

    def put(self, key: Hashable, data: Any) -> None:
        arr = as_value_array(data)
        self._record(normalize_key(key), int(arr.nbytes), arr.dtype, arr.shape)

    def put_size(self, key: Hashable, nbytes: int) -> None:
        """Record an entry of ``nbytes`` bytes (``uint8``, shape ``(nbytes,)``)."""
        nbytes = as_count(nbytes, "nbytes")
        self._record(normalize_key(key), nbytes, np.dtype(np.uint8), (nbytes,))

    def size_writer(self, nbytes: int) -> Any:
        """``store(key)``: :meth:`put_size` of ``nbytes`` (validated here, once) for callers that
        give normal keys and have checked the room (``ManagedTier``'s batch path), so a batch
        does not re-check each key.  Same records and statistics as :meth:`put_size`.
        Runtime complexity: O(1) per stored key.
        """
        nbytes = as_count(nbytes, "nbytes")
        entry = (nbytes, np.dtype(np.uint8), (nbytes,))
        seconds = self.spec.transfer_seconds(nbytes, write=True)
        entries, stats = self._entries, self.stats

        def store(k: Hashable) -> None:
            old = entries.get(k)
            after = self._used - (old[0] if old is not None else 0) + nbytes
            if after > self.capacity_bytes:
                self._record(k, nbytes, entry[1], entry[2])  # raises the capacity error, changes nothing
            entries[k] = entry
            self._used = after
            stats["puts"] += 1
            stats["bytes_written"] += nbytes
            stats["write_seconds"] += seconds

        return store

    def size_writer_many(self, nbytes: int) -> Any:
        """``store_many(keys)``: :meth:`size_writer`'s ``store`` of each key in order, in one call,
        for callers that give distinct normal keys not yet stored and have checked the room
        (``ManagedTier``'s batch path).  Same records and statistics as ``put_size`` of each
        (the write seconds are summed one entry at a time, so the totals are bit-identical).
        Runtime complexity: O(len(keys)).
        """
        nbytes = as_count(nbytes, "nbytes")
        return partial(self._store_many, nbytes, self.spec.transfer_seconds(nbytes, write=True))

    def _store_many(self, nbytes: int, seconds: float, keys: list) -> None:
        entries, stats = self._entries, self.stats
        if not entries.keys().isdisjoint(keys):  # a stored key: its old size leaves the count
            store = self.size_writer(nbytes)
            for k in keys:
                store(k)
            return
        n = len(keys)
        after = self._used + n * nbytes
        if after > self.capacity_bytes:
            raise CapacityExceededError(
                f"tier {self.name!r}: storing {n} entries of {nbytes} bytes needs {after} bytes in use; "
                f"capacity is {self.capacity_bytes} (in use {self._used})")
        entries.update(dict.fromkeys(keys, (nbytes, _UINT8, (nbytes,))))
        self._used = after
        stats["puts"] += n
        stats["bytes_written"] += n * nbytes
        total = stats["write_seconds"]
        for _ in range(n):  # one addition per entry, as n put_size calls would make
            total += seconds
        stats["write_seconds"] = total

    def get(self, key: Hashable) -> np.ndarray:
        nbytes, dtype, shape = self._lookup(key)
        self._count_get(nbytes)
        return np.broadcast_to(np.zeros((), dtype=dtype), shape)

    def delete(self, key: Hashable) -> None:
        k = normalize_key(key)
        nbytes, _, _ = self._lookup(k)
        del self._entries[k]
        self._used -= nbytes
        self._count_delete()

    def contains(self, key: Hashable) -> bool:
        return normalize_key(key) in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def keys(self) -> list[Hashable]:
        return list(self._entries)

    def nbytes_of(self, key: Hashable) -> int:
        return self._lookup(key)[0]

    def check(self) -> None:
        """Assert every invariant (used by tests)."""
        # used_bytes is the sum of the recorded sizes.
        assert self._used == sum(e[0] for e in self._entries.values())
        # Each record's size agrees with its dtype and shape.
        for nbytes, dtype, shape in self._entries.values():
            assert nbytes == int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        # Capacity is never exceeded.
        assert 0 <= self._used <= self.capacity_bytes

    def _record(self, k: Hashable, nbytes: int, dtype: np.dtype, shape: tuple[int, ...]) -> None:
        old = self._entries.get(k)
        after = self._used - (old[0] if old is not None else 0) + nbytes
        if after > self.capacity_bytes:
            raise CapacityExceededError(
                f"tier {self.name!r}: storing {nbytes} bytes under {k!r} needs {after} bytes in use; "
                f"capacity is {self.capacity_bytes} (in use {self._used})")
        self._entries[k] = (nbytes, dtype, tuple(shape))
        self._used = after
        self._count_put(nbytes)

    def _lookup(self, key: Hashable) -> tuple[int, np.dtype, tuple[int, ...]]:
        k = normalize_key(key)
        try:
            return self._entries[k]
        except KeyError:
            raise UnknownKeyError(f"tier {self.name!r} holds no entry {k!r}") from None
