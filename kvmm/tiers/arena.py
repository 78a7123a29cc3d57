"""RAM tier with real bytes: :class:`ArenaTier`, and the paged slot arena :class:`KVArena`.

``KVArena`` is the memory a paged KV cache lives in: ``num_blocks`` blocks of ``block_size``
token slots, each slot holding one item of ``item_shape`` (for example ``(layers, 2, kv_heads,
head_dim)``).  Slots are addressed by flat slot id ``block * block_size + offset`` (int64), the
same numbering as a PagedAttention slot mapping, so a token table's repack plan (src slot ->
dst slot) can be executed with one :meth:`KVArena.copy_slots` call.

Layout example: ``KVArena(num_blocks=2, block_size=4, item_shape=(3,))``::

    data.shape == (2, 4, 3)                 # (block, offset, *item_shape)
    slot 6  ->  data[1, 2]                  # 6 = 1 * 4 + 2
    flat view: data.reshape(8, 3)[6] is the same memory as data[1, 2]

``ArenaTier`` is the :class:`~kvmm.protocols.TierBackend` for host (or any byte-addressable)
memory: each entry is a private numpy copy, capacity is enforced in bytes, and
:meth:`ArenaTier.kv_arena` carves a ``KVArena`` out of the tier's capacity.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import numpy as np

from kvmm._validate import as_count, as_index_array, check_ids_in_range
from kvmm.errors import BadInputError, CapacityExceededError, DTypeError, ShapeError, UnknownKeyError
from kvmm.tiers._base import TierBase, as_value_array, normalize_key
from kvmm.tiers.spec import TierSpec

__all__ = ["KVArena", "ArenaTier"]


class KVArena:
    """Paged slot storage: ``data`` of shape ``(num_blocks, block_size, *item_shape)``.

    ``buffer`` (optional) is any writable object exposing the buffer protocol with at least
    ``nbytes`` bytes (a ``bytearray``, a uint8 numpy array, an ``mmap``); the arena then lives
    in that memory instead of a fresh allocation.

    Runtime complexity: ``read``/``write``/``copy_slots`` are O(n * item size) for n slots.
    """

    def __init__(self, num_blocks: int, block_size: int, item_shape: tuple[int, ...] | int = (),
                 dtype: Any = np.float16, buffer: Any = None) -> None:
        num_blocks, block_size, item_shape, dtype, nbytes = _arena_layout(num_blocks, block_size, item_shape, dtype)
        shape = (num_blocks, block_size, *item_shape)
        if buffer is None:
            data = np.zeros(shape, dtype=dtype)
        else:
            try:
                raw = np.frombuffer(buffer, dtype=np.uint8)
            except (TypeError, ValueError) as exc:
                raise BadInputError(f"buffer must expose the buffer protocol: {exc}") from None
            if raw.size < nbytes:
                raise BadInputError(f"buffer holds {raw.size} bytes; the arena needs {nbytes} bytes")
            if not raw.flags.writeable:
                raise BadInputError("buffer is read-only; the arena needs writable memory")
            data = raw[:nbytes].view(dtype).reshape(shape)
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.item_shape = item_shape
        self.dtype = dtype
        self.num_slots = num_blocks * block_size
        #: (num_blocks, block_size, *item_shape); shares memory with ``buffer`` when given.
        self.data = data
        # A flat (num_slots, *item_shape) view of the same memory: slot ids index it directly.
        self._slots = data.reshape(self.num_slots, *item_shape)

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)

    def write(self, slots: Any, values: Any) -> None:
        """Store ``values[i]`` in slot ``slots[i]``.

        ``values`` has shape ``(len(slots), *item_shape)`` and a dtype castable to the arena's
        (``same_kind``: float32 into float16 is fine, complex into float is not).  Slots must
        be distinct.  Runtime complexity: O(n * item size).
        """
        slot_ids = self._check_slots(slots, "slots")
        _check_distinct(slot_ids, "slots")
        vals = np.asarray(values)
        if vals.dtype.kind not in "biufc" or not np.can_cast(vals.dtype, self.dtype, "same_kind"):
            raise DTypeError(f"values have dtype {vals.dtype}; expected one castable to {self.dtype}")
        want = (slot_ids.size, *self.item_shape)
        if vals.shape != want:
            raise ShapeError(f"values have shape {vals.shape}; expected {want} (len(slots), *item_shape)")
        self._slots[slot_ids] = vals

    def read(self, slots: Any) -> np.ndarray:
        """A copy of the items in ``slots``: shape ``(len(slots), *item_shape)``.

        Runtime complexity: O(n * item size).
        """
        return self._slots[self._check_slots(slots, "slots")]

    def copy_slots(self, src: Any, dst: Any) -> None:
        """Copy the item of slot ``src[i]`` into slot ``dst[i]`` for every ``i``.

        Semantics: every source is read before any destination is written (a gather followed
        by a scatter), so overlapping ``src`` and ``dst`` sets behave as one simultaneous move:
        ``dst[i]`` receives what ``src[i]`` held *before* the call.  ``dst`` must be distinct
        (two writes to one slot would be ambiguous); ``src`` may repeat.  Validation happens
        before any byte moves, so a call that raises leaves the arena unchanged.

        Runtime complexity: O(n * item size).
        """
        src_ids = self._check_slots(src, "src")
        dst_ids = self._check_slots(dst, "dst")
        if src_ids.size != dst_ids.size:
            raise ShapeError(f"src has {src_ids.size} slots and dst has {dst_ids.size}; expected equal lengths")
        _check_distinct(dst_ids, "dst")
        # Fancy indexing on the right-hand side materialises a copy first: gather, then scatter.
        self._slots[dst_ids] = self._slots[src_ids]

    def clear(self) -> None:
        """Zero every slot."""
        self.data[...] = 0

    def check(self) -> None:
        """Assert every invariant (used by tests)."""
        # The array has the advertised layout.
        assert self.data.shape == (self.num_blocks, self.block_size, *self.item_shape)
        assert self.data.dtype == self.dtype
        # The flat slot view aliases ``data`` (writes through one are seen through the other).
        assert self._slots.shape == (self.num_slots, *self.item_shape)
        assert np.shares_memory(self._slots, self.data)
        assert self.num_slots == self.num_blocks * self.block_size

    def _check_slots(self, slots: Any, name: str) -> np.ndarray:
        ids = as_index_array(slots, name, dtype=np.int64)
        check_ids_in_range(ids, self.num_slots, name)
        return ids

    def __repr__(self) -> str:
        return (f"KVArena(num_blocks={self.num_blocks}, block_size={self.block_size}, "
                f"item_shape={self.item_shape}, dtype={self.dtype.name})")


class ArenaTier(TierBase):
    """Real bytes in process memory, with a byte capacity.

    ``put`` stores a private copy, ``get`` returns a fresh copy (callers may mutate either side
    freely).  ``kv_arena`` reserves part of the capacity for a :class:`KVArena` that lives in
    memory owned by this tier; ``release_arena`` returns it.

    Memory is recycled, because KV entries mostly come in one size (a block): an overwrite with
    the same shape and dtype copies in place, and the buffers of deleted or resized entries are
    kept (up to ``spare_bytes`` in all) for the next entry of the same byte size.  Without this
    every put would map fresh pages from the OS and run at a fraction of copy bandwidth.

    Runtime complexity: ``put``/``get`` O(entry bytes), ``delete``/``contains`` O(1).
    """

    def __init__(self, capacity_bytes: int | None = None, *, spec: TierSpec | str = "dram",
                 name: str | None = None, spare_bytes: int = 64 << 20) -> None:
        super().__init__(spec, capacity_bytes, name)
        self._entries: dict[Hashable, np.ndarray] = {}
        self._entry_bytes = 0
        self._arenas: dict[int, tuple[KVArena, np.ndarray]] = {}
        self._reserved_bytes = 0
        self._spare_limit = as_count(spare_bytes, "spare_bytes")
        self._spare: dict[int, list[np.ndarray]] = {}  # byte size -> free uint8 buffers of that size
        self._spare_total = 0

    @property
    def used_bytes(self) -> int:
        """Bytes of stored entries plus bytes reserved by live arenas."""
        return self._entry_bytes + self._reserved_bytes

    @property
    def reserved_bytes(self) -> int:
        return self._reserved_bytes

    def put(self, key: Hashable, data: Any) -> None:
        k = normalize_key(key)
        arr = as_value_array(data)
        old = self._entries.get(k)
        after = self.used_bytes - (old.nbytes if old is not None else 0) + arr.nbytes
        if after > self.capacity_bytes:
            raise CapacityExceededError(
                f"tier {self.name!r}: storing {arr.nbytes} bytes under {k!r} needs {after} bytes in use; "
                f"capacity is {self.capacity_bytes} (in use {self.used_bytes})")
        if old is not None and old.shape == arr.shape and old.dtype == arr.dtype:
            np.copyto(old, arr)  # same layout: overwrite in place
        else:
            stored = self._take_buffer(arr.nbytes).view(arr.dtype).reshape(arr.shape)
            np.copyto(stored, arr)
            self._entries[k] = stored
            if old is not None:
                self._recycle(old)
        self._entry_bytes = after - self._reserved_bytes
        self._count_put(arr.nbytes)

    def get(self, key: Hashable) -> np.ndarray:
        arr = self._lookup(key)
        self._count_get(arr.nbytes)
        return arr.copy()

    def delete(self, key: Hashable) -> None:
        k = normalize_key(key)
        arr = self._lookup(k)
        del self._entries[k]
        self._entry_bytes -= arr.nbytes
        self._recycle(arr)
        self._count_delete()

    def contains(self, key: Hashable) -> bool:
        return normalize_key(key) in self._entries

    def keys(self) -> list[Hashable]:
        return list(self._entries)

    def nbytes_of(self, key: Hashable) -> int:
        """Bytes of the value stored under ``key``."""
        return int(self._lookup(key).nbytes)

    # -- paged arenas -------------------------------------------------------------------------
    def kv_arena(self, num_blocks: int, block_size: int, item_shape: tuple[int, ...] | int = (),
                 dtype: Any = np.float16) -> KVArena:
        """Reserve ``num_blocks * block_size * prod(item_shape) * itemsize`` bytes of this tier
        and return a zeroed :class:`KVArena` living in them.

        Raises :class:`CapacityExceededError` (reserving nothing) when they do not fit.
        """
        num_blocks, block_size, item_shape, dt, nbytes = _arena_layout(num_blocks, block_size, item_shape, dtype)
        if self.used_bytes + nbytes > self.capacity_bytes:
            raise CapacityExceededError(
                f"tier {self.name!r}: an arena of {nbytes} bytes does not fit; "
                f"capacity {self.capacity_bytes}, in use {self.used_bytes}")
        memory = np.zeros(nbytes, dtype=np.uint8)
        arena = KVArena(num_blocks, block_size, item_shape, dt, buffer=memory)
        self._arenas[id(arena)] = (arena, memory)
        self._reserved_bytes += nbytes
        return arena

    def release_arena(self, arena: KVArena) -> None:
        """Return an arena's bytes to the tier (the arena must no longer be used)."""
        entry = self._arenas.get(id(arena))
        if entry is None or entry[0] is not arena:
            raise UnknownKeyError(f"{arena!r} was not reserved from tier {self.name!r}")
        del self._arenas[id(arena)]
        self._reserved_bytes -= arena.nbytes

    def copy_slots(self, arena: KVArena, src: Any, dst: Any) -> None:
        """Execute a slot move plan inside one of this tier's arenas (see :meth:`KVArena.copy_slots`)."""
        entry = self._arenas.get(id(arena))
        if entry is None or entry[0] is not arena:
            raise UnknownKeyError(f"{arena!r} was not reserved from tier {self.name!r}")
        arena.copy_slots(src, dst)

    def check(self) -> None:
        """Assert every invariant (used by tests)."""
        # Entry bytes are the sum of the stored arrays.
        assert self._entry_bytes == sum(a.nbytes for a in self._entries.values())
        # Reserved bytes are the sum of live arenas, each backed by its own tier-owned buffer.
        assert self._reserved_bytes == sum(a.nbytes for a, _ in self._arenas.values())
        for arena, memory in self._arenas.values():
            assert np.shares_memory(arena.data, memory)
            arena.check()
        # Capacity is never exceeded.
        assert 0 <= self.used_bytes <= self.capacity_bytes
        # Keys are stored in normal form.
        for k in self._entries:
            assert normalize_key(k) == k
        # Spare buffers are counted, within their limit, sized as filed, and shared with no entry.
        assert self._spare_total == sum(b.nbytes for pool in self._spare.values() for b in pool)
        assert self._spare_total <= self._spare_limit
        for nbytes, pool in self._spare.items():
            for buf in pool:
                assert buf.nbytes == nbytes and buf.dtype == np.uint8
                assert not any(np.shares_memory(buf, a) for a in self._entries.values())

    def _take_buffer(self, nbytes: int) -> np.ndarray:
        """A uint8 buffer of ``nbytes``: a recycled one when there is one, else a new one."""
        pool = self._spare.get(nbytes)
        if pool:
            self._spare_total -= nbytes
            return pool.pop()
        return np.empty(nbytes, dtype=np.uint8)

    def _recycle(self, stored: np.ndarray) -> None:
        """Keep the buffer behind a dropped entry for reuse, within the spare limit."""
        base = stored.base if stored.base is not None else stored
        if stored.nbytes == 0 or self._spare_total + stored.nbytes > self._spare_limit:
            return
        if base.dtype != np.uint8 or base.ndim != 1 or base.nbytes != stored.nbytes:
            return  # not one of our buffers
        self._spare.setdefault(stored.nbytes, []).append(base)
        self._spare_total += stored.nbytes

    def _lookup(self, key: Hashable) -> np.ndarray:
        k = normalize_key(key)
        try:
            return self._entries[k]
        except KeyError:
            raise UnknownKeyError(f"tier {self.name!r} holds no entry {k!r}") from None


def _check_distinct(ids: np.ndarray, name: str) -> None:
    if ids.size > 1:
        uniq = np.unique(ids)
        if uniq.size != ids.size:
            counts = np.bincount(np.searchsorted(uniq, ids))
            raise BadInputError(f"{name} repeats slot {int(uniq[np.argmax(counts)])}; expected distinct slots")


def _arena_layout(num_blocks: Any, block_size: Any, item_shape: Any, dtype: Any):
    """Validated ``(num_blocks, block_size, item_shape, dtype, nbytes)`` of an arena (no allocation)."""
    nb = as_count(num_blocks, "num_blocks", minimum=1)
    bs = as_count(block_size, "block_size", minimum=1)
    if isinstance(item_shape, (int, np.integer)) and not isinstance(item_shape, bool):
        item_shape = (int(item_shape),)
    if not isinstance(item_shape, (tuple, list)):
        raise ShapeError(f"item_shape must be a tuple of ints, got {item_shape!r}")
    shape = tuple(as_count(d, "item_shape entry", minimum=1) for d in item_shape)
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise DTypeError(f"dtype {dtype!r} is not a numpy dtype") from None
    if dt.kind not in "biufc":
        raise DTypeError(f"KVArena dtype must be numeric or bool, got {dt}")
    items = 1
    for d in shape:
        items *= d
    return nb, bs, shape, dt, nb * bs * items * dt.itemsize
