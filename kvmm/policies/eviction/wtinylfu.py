"""W-TinyLFU as an :class:`~kvmm.protocols.EvictionPolicy`, libCacheSim's ``WTinyLFU``."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from kvmm._validate import as_count, as_hashable, as_key_set
from kvmm.errors import BadInputError, DTypeError, UnknownKeyError
from kvmm.policies.eviction._checks import require_absent, require_present
from kvmm.policies.eviction.slru import Segments, segment_maxima
from kvmm.protocols import EvictionPolicyBase, FastHooks

__all__ = ["WTinyLFUPolicy", "split_capacity", "sketch_shape", "validate_options"]


@dataclass
class WTinyLFUPolicy(EvictionPolicyBase):
    """Window TinyLFU, exactly libCacheSim's ``WTinyLFU(main_cache='SLRU', window_size=0.01)``.

    A window LRU of ``int(capacity * window_size)`` size units in front of a main SLRU of the
    rest (two segments, 1:4, :class:`~kvmm.policies.SLRUPolicy`'s rules), and a frequency sketch:
    libCacheSim's counting Bloom filter (``minimalIncrementCBF``) sized for ``main`` entries at
    error 0.001 (10 hashes, ``ceil(14.38 * main)`` counters), each key's counters at
    ``(a + i*b) mod 2^32 mod width`` with ``a``, ``b`` the low 32 bits of XXH64 of the key's 8
    bytes under libCacheSim's seeds (:func:`sketch_slots`; integer keys as libCacheSim hashes
    ``obj_id``, any other key by its Python ``hash``).

    * insert: at the window's head (the window may exceed its share; nothing moves until an
      eviction), and the key is added to the sketch;
    * access: in the window, LRU; in main, SLRU's hit (which may evict, see SLRUPolicy), then the
      key is added to the sketch; every ``32 * main`` main hits all counters are halved;
    * one eviction: while the window holds > 0 units, its LRU key ``w`` moves to main if main has
      room; otherwise ``w`` competes with main's victim ``m``: if ``estimate(w) > estimate(m)``
      ``m`` is evicted and ``w`` moves to main (main evicting more if ``w`` is larger), else ``w``
      is evicted; ``w`` is added to the sketch either way.  An empty window: main evicts.

    Where libCacheSim differs from the paper (Einziger et al. 2017: a window of 1 %, TinyLFU
    admission with a doorkeeper Bloom filter and 4-bit counters reset by halving after W
    samples, the window's victim admitted when its frequency beats main's): no doorkeeper; full
    32-bit counters, every counter of a key incremented (not minimal increment, despite the
    name); the sample period counts only main hits; the window is not held to its share (the
    cache fills the window first); and libCacheSim caches no key larger than the window or
    main's first segment (:meth:`admits`).  With a capacity below ``1 / window_size`` the window
    is 0 and libCacheSim caches nothing.

    Evictions planned by :meth:`victims` (the ``incoming`` key does not change them) run step by
    step in ``on_remove``; keys evicted without being asked for are evicted on the policy's own:
    main's cooling on a hit (``on_access`` returns them), and the extra keys main evicts for a
    larger window key during a planned step, which stay tracked as *dropped* (first in
    :meth:`victims`) until the next ``on_insert`` or ``on_access`` returns them (ManagedTier
    deletes them then).  An access to a dropped key inserts it afresh.  ``on_remove`` of any other key (an explicit
    delete) forgets it from its list; the sketch keeps its counts.  Protected keys (libCacheSim
    has none) still move from the window to main, but are skipped when picking the contest's
    ``w`` and ``m``.

    ``capacity=None``: the tier's capacity when a ManagedTier adopts the policy (:meth:`attach`,
    before any event: the sketch is sized then); standalone, the largest resident total seen
    sizes the window and main, and the sketch keeps the size it had at the first event.

    Runtime complexity: O(hashes) per insert and access (plus SLRU's cooling); ``victims`` O(n)
    steps, each O(hashes + window keys handed to main); O(width) per halving.
    """

    #: main's cooling and a planned step's extra evictions are evictions on its own (returned
    #: by ``on_insert`` / ``on_access``)
    self_evicting: ClassVar[bool] = True

    capacity: int | None = None
    main_cache: str = "SLRU"
    window_size: float = 0.01
    _window: OrderedDict = field(default_factory=OrderedDict, init=False, repr=False)
    _window_bytes: int = field(default=0, init=False, repr=False)
    _main: Any = field(default=None, init=False, repr=False)
    _sketch: Any = field(default=None, init=False, repr=False)
    _c: int = field(default=0, init=False, repr=False)
    _window_cap: int = field(default=0, init=False, repr=False)
    _main_cap: int = field(default=0, init=False, repr=False)
    _main_hits: int = field(default=0, init=False, repr=False)
    _events: int = field(default=0, init=False, repr=False)
    _pending: Any = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        validate_options(self.main_cache, self.window_size)
        if self.capacity is not None:
            self.capacity = as_count(self.capacity, "capacity", minimum=1)
        self._main = Segments(2, (1, 4), 0)
        self._main.fixed = True  # main's size follows the split, not its own residents
        self._resize(self.capacity or 0)
        self._sketch = Sketch(self._main_cap)

    # -- sizes --------------------------------------------------------------------------------
    def attach(self, capacity: int) -> None:
        """Told the capacity of the tier that adopts it (ManagedTier does this first)."""
        capacity = as_count(capacity, "capacity")
        if self.capacity is None and capacity > self._c:
            self._resize(capacity)
            if self._events == 0:
                self._sketch = Sketch(self._main_cap)

    def _resize(self, c: int) -> None:
        self._c = c
        self._window_cap, self._main_cap, maxima = split_capacity(c, self.window_size)
        self._main.c, self._main.maxima = self._main_cap, maxima

    def admits(self, size: int) -> bool:
        """Whether libCacheSim would cache an entry of ``size`` (``WTinyLFU_can_insert``)."""
        size = as_count(size, "size")
        return size <= self._c and size <= self._window_cap and size <= self._main.maxima[0]

    @property
    def window_capacity(self) -> int:
        return self._window_cap

    @property
    def main_capacity(self) -> int:
        return self._main_cap

    # -- events -------------------------------------------------------------------------------
    def on_insert(self, key: Hashable, size: int = 1, protected: Iterable[Hashable] = ()) -> list[Hashable] | tuple:
        """Insert ``key`` at the window's head; returns the keys still dropped by the planned
        steps before it (handed over first, as an owner removes a step's victims before it writes)."""
        size = as_count(size, "size")
        require_absent(self, key, self)
        return self._insert_unchecked(key, size)

    def _insert_unchecked(self, key: Hashable, size: int = 1) -> list[Hashable] | tuple:
        evicted = self._main.hand_over()
        self._insert_new(key, size)
        return evicted

    def _insert_new(self, key: Hashable, size: int) -> None:
        self._pending = None
        self._events += 1
        if self.capacity is None:
            total = self._window_bytes + self._main.used() + sum(self._main.dropped.values()) + size
            if total > self._c:
                self._resize(total)
        self._window[key] = size
        self._window_bytes += size
        self._sketch.add(key)

    def on_access(self, key: Hashable, size: int | None = None,
                  protected: Iterable[Hashable] = ()) -> list[Hashable] | tuple:
        """A hit (an access to a dropped key inserts it afresh); returns the keys main's cooling
        evicted and any still dropped by the planned steps, oldest first."""
        if size is not None:
            size = as_count(size, "size")
        require_present(self, key, self)
        return self._access(key, size)

    def _access(self, key: Hashable, size: int | None = None) -> list[Hashable] | tuple:
        self._pending = None
        self._events += 1
        window, main = self._window, self._main
        if key in window:
            if size is not None:
                self._window_bytes += size - window[key]
                window[key] = size
            window.move_to_end(key)
            return main.hand_over()
        if key in main.dropped:
            old = main.dropped.pop(key)
            self._insert_new(key, old if size is None else size)  # the others still count as residents here
            return main.hand_over()
        main.hit(key, size)
        self._sketch.add(key)
        self._main_hits += 1
        if self._main_hits >= 32 * self._main_cap:
            self._main_hits = 0
            self._sketch.halve()
        return main.hand_over()

    def on_remove(self, key: Hashable) -> None:
        main = self._main
        if as_hashable(key) in main.dropped:
            del main.dropped[key]
            return
        if key not in self._window and key not in main.where:
            raise UnknownKeyError(f"WTinyLFUPolicy does not track {key!r}; expected a key passed to on_insert")
        plan = self._pending
        if plan is not None and plan[1] and plan[1][0] == key:
            # the next planned eviction: run that step for real (it evicts key first)
            evicted = self._evict_step(plan[0], None)
            assert evicted and evicted[0][0] == key, (key, evicted)
            del plan[1][:len(evicted)]
            for other, size in evicted[1:]:  # main evicted more for a larger window key
                main.dropped[other] = size
            return
        self._pending = None
        if key in self._window:
            self._window_bytes -= self._window.pop(key)
        else:
            main.remove(key)

    def victims(self, n: int, protected: Iterable[Hashable] = (), *, incoming: Hashable = None,
                incoming_size: int = 1) -> list[Hashable]:
        """The next ``n`` victims without changing state: the dropped keys, then the evictions
        libCacheSim's loop would make (computed on the live state, then undone), then any keys
        that loop cannot reach (zero-size keys of empty lists)."""
        n = as_count(n, "n")
        as_count(incoming_size, "incoming_size")
        protected = as_key_set(protected, "protected")
        as_hashable(incoming, "incoming")
        out = [k for k in self._main.dropped if k not in protected][:n]
        planned: list = []
        undo: list = []
        while len(out) + len(planned) < n:
            step = self._evict_step(protected, undo)
            if not step:
                break
            planned.extend(k for k, _ in step)
        self._undo(undo)
        self._pending = (protected, list(planned))
        out.extend(planned[: n - len(out)])
        if len(out) < n:  # the keys no eviction step reaches, in list order
            seen = set(out)
            rest = [k for k in self._window if k not in protected and k not in seen]
            rest += [k for k in self._main.victims(len(self._main.where), protected) if k not in seen]
            out.extend(rest[: n - len(out)])
        return out

    # -- one eviction step of libCacheSim's WTinyLFU_evict, with an undo log ----------------------
    def _evict_step(self, protected: Any, undo: list | None) -> list[tuple[Hashable, int]]:
        """Evict as libCacheSim's ``WTinyLFU_evict`` does once; returns the (key, size) evicted,
        in order (empty when nothing is left).  With ``undo`` every change is logged there."""
        window, main = self._window, self._main
        while True:
            if self._window_bytes > 0:
                w = next(iter(window))  # moving to main evicts nothing: protection does not matter
                if main.used() + window[w] <= self._main_cap:
                    self._window_to_main(w, [], protected, undo)
                    self._sketch_add(w, undo)
                    continue
            w, skipped = self._window_victim(protected) if self._window_bytes > 0 else (None, ())
            if w is None:
                m = self._main_victim(protected)
                return [] if m is None else [self._main_pop(m, undo)]
            m = self._main_victim(protected)
            if m is not None and self._sketch.estimate(w) > self._sketch.estimate(m[0]):
                out = [self._main_pop(m, undo)]
                out += self._window_to_main(w, skipped, protected, undo)
            else:
                out = [self._window_pop(w, skipped, undo)]
            self._sketch_add(w, undo)
            return out

    def _window_victim(self, protected: Any) -> tuple[Hashable, list]:
        skipped = []
        for key in self._window:
            if key not in protected:
                return key, skipped
            skipped.append(key)
        return None, ()

    def _main_victim(self, protected: Any) -> tuple | None:
        """libCacheSim's SLRU ``to_evict`` (the tail of the lowest segment holding > 0 units),
        skipping protected keys: (key, segment, the protected keys skipped)."""
        main = self._main
        for i, seg in enumerate(main.segs):
            if main.bytes[i] > 0:
                skipped = []
                for key in seg:
                    if key not in protected:
                        return key, i, skipped
                    skipped.append(key)
        return None

    def _window_pop(self, w: Hashable, skipped: list, undo: list | None) -> tuple[Hashable, int]:
        size = self._window.pop(w)
        self._window_bytes -= size
        if undo is not None:
            undo.append(("window", w, size, skipped))
        return w, size

    def _main_pop(self, victim: tuple, undo: list | None) -> tuple[Hashable, int]:
        key, i, skipped = victim
        size = self._main.remove(key)
        if undo is not None:
            undo.append(("main", key, size, skipped, i))
        return key, size

    def _window_to_main(self, w: Hashable, skipped: list, protected: Any, undo: list | None) -> list:
        """Move ``w`` into main (SLRU_insert: main evicts first when no segment has room and the
        key does not fit); returns what main evicted."""
        _, size = self._window_pop(w, skipped, undo)
        main = self._main
        evicted = []
        if not any(b + size <= most for b, most in zip(main.bytes, main.maxima)):
            while main.used() + size > self._main_cap:
                m = self._main_victim(protected)
                if m is None:
                    break
                evicted.append(self._main_pop(m, undo))
        main.insert(w, size)
        if undo is not None:
            undo.append(("insert", w))
        return evicted

    def _sketch_add(self, key: Hashable, undo: list | None) -> None:
        if self._sketch.add(key) and undo is not None:
            undo.append(("sketch", key))

    def _undo(self, undo: list) -> None:
        window, main = self._window, self._main
        for entry in reversed(undo):
            kind, key = entry[0], entry[1]
            if kind == "sketch":
                self._sketch.sub(key)
            elif kind == "insert":
                main.remove(key)
            elif kind == "window":  # back at the tail, behind the protected keys it was after
                window[key] = entry[2]
                window.move_to_end(key, last=False)
                for k in reversed(entry[3]):
                    window.move_to_end(k, last=False)
                self._window_bytes += entry[2]
            else:
                _, _, size, skipped, i = entry
                seg = main.segs[i]
                seg[key] = size
                seg.move_to_end(key, last=False)
                for k in reversed(skipped):
                    seg.move_to_end(k, last=False)
                main.bytes[i] += size
                main.where[key] = i

    # -- fast hooks, inspection, invariants ---------------------------------------------------
    def fast_hooks(self) -> FastHooks | None:
        """``access`` and ``insert`` (:class:`~kvmm.protocols.FastHooks`) without the per-event
        checks, for a caller that guarantees them (an accessed key is tracked, an inserted one is
        not, the size is an integer >= 0); the same state changes and the same keys returned.  No
        ``insert_many`` / ``evict_first``: an eviction step depends on the sketch and the window,
        so a caller asks :meth:`victims`.  None for a subclass.  Runtime complexity: O(hashes) per
        event.
        """
        if type(self) is WTinyLFUPolicy:
            return FastHooks(self._access, self._insert_unchecked)
        return None

    def keys(self) -> list[Hashable]:
        """Tracked keys: the dropped ones, the window (least recent first), main's segments."""
        return list(self._main.dropped) + list(self._window) + [k for s in self._main.segs for k in s]

    def lists(self) -> dict[str, list[Hashable]]:
        """The window and main's segments, least recent first (for inspection and tests)."""
        return {"window": list(self._window), "probation": list(self._main.segs[0]),
                "protected": list(self._main.segs[1]), "dropped": list(self._main.dropped)}

    def estimate(self, key: Hashable) -> int:
        """The sketch's frequency estimate of ``key``."""
        return self._sketch.estimate(as_hashable(key))

    def __len__(self) -> int:
        return len(self._window) + len(self._main.where) + len(self._main.dropped)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._window or key in self._main.where or key in self._main.dropped

    def check(self) -> None:
        """Assert every invariant (used by tests)."""
        window, main = self._window, self._main
        # The window's sizes are integers >= 0 and its total is recorded.
        assert all(isinstance(v, int) and v >= 0 for v in window.values())
        assert self._window_bytes == sum(window.values())
        # Main's segments hold their invariants (see SLRUPolicy.check).
        main.check(None)
        # Window, main and the dropped keys are disjoint.
        assert not any(k in main.where or k in main.dropped for k in window)
        # The split is libCacheSim's for the current capacity.
        assert (self._window_cap, self._main_cap, main.maxima) == split_capacity(self._c, self.window_size)
        # A fixed capacity stays the capacity.
        if self.capacity is not None:
            assert self._c == self.capacity
        # The sketch has libCacheSim's shape for its entries, stores only positive counts in
        # range, and the hit count is below its period.
        assert (self._sketch.width, self._sketch.hashes) == sketch_shape(self._sketch.entries)
        assert all(0 <= x < self._sketch.width and 0 < c <= 0xFFFFFFFF for x, c in self._sketch.counters.items())
        assert self._main_hits < max(32 * self._main_cap, 1)
        # A pending plan never repeats a key.
        if self._pending is not None:
            assert len(self._pending[1]) == len(set(self._pending[1]))


class Sketch:
    """libCacheSim's counting Bloom filter (``minimalIncrementCBF``): ``width`` 32-bit counters,
    ``hashes`` of them per key (:func:`sketch_slots`), stored sparsely (slot -> count, zeros
    left out): libCacheSim sizes it by main's *size units*, 14.4 counters per byte under a
    byte-sized tier, of which only the slots of the keys seen are ever touched."""

    def __init__(self, entries: int) -> None:
        self.entries = entries
        self.width, self.hashes = sketch_shape(entries)
        self.counters: dict[int, int] = {}
        self._slots: dict = {}  # key -> its slots, a memo emptied when it outgrows _MEMO_KEYS

    def slots(self, key: Hashable) -> list[int]:
        slots = self._slots.get(key)
        if slots is None:
            if len(self._slots) >= _MEMO_KEYS:
                self._slots.clear()
            slots = self._slots[key] = sketch_slots(key, self.width, self.hashes)
        return slots

    def estimate(self, key: Hashable) -> int:
        get = self.counters.get
        return min([get(x, 0) for x in self.slots(key)])

    def add(self, key: Hashable) -> bool:
        """Increment the key's counters (all of them, repeats included) unless its minimum is
        saturated (2^32 - 1, libCacheSim's unsigned int); whether it did."""
        counters, slots = self.counters, self.slots(key)
        if min([counters.get(x, 0) for x in slots]) == 0xFFFFFFFF:
            return False
        for x in slots:
            counters[x] = counters.get(x, 0) + 1
        return True

    def sub(self, key: Hashable) -> None:
        counters = self.counters
        for x in self.slots(key):
            counters[x] -= 1
            if counters[x] == 0:
                del counters[x]

    def halve(self) -> None:
        self.counters = {x: c >> 1 for x, c in self.counters.items() if c > 1}


def sketch_slots(key: Hashable, width: int, hashes: int) -> list[int]:
    """The key's counters: ``(a + i*b) mod 2^32 mod width`` for ``i < hashes``, ``a``, ``b`` the
    low 32 bits of XXH64 of the key's 8 little-endian bytes under seeds 0x12345678 and
    0x12344321 (an integer key as libCacheSim's uint64 ``obj_id``, any other by ``hash(key)``)."""
    value = (int(key) if isinstance(key, (int, np.integer)) else hash(key)) & _M64
    a = xxh64_u64(value, 0x12345678) & 0xFFFFFFFF
    b = xxh64_u64(value, 0x12344321) & 0xFFFFFFFF
    return [((a + i * b) & 0xFFFFFFFF) % width for i in range(hashes)]


_M64 = (1 << 64) - 1
_MEMO_KEYS = 1 << 16
_P1, _P2, _P3, _P4, _P5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9,
                           0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5)


def xxh64_u64(value: int, seed: int) -> int:
    """XXH64 (xxHash specification) of the 8 little-endian bytes of the uint64 ``value``."""
    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (64 - r))) & _M64

    h = (seed + _P5 + 8) & _M64
    h ^= rotl(value * _P2 & _M64, 31) * _P1 & _M64
    h = (rotl(h, 27) * _P1 + _P4) & _M64
    h = (h ^ (h >> 33)) * _P2 & _M64
    h = (h ^ (h >> 29)) * _P3 & _M64
    return h ^ (h >> 32)


#: libCacheSim's sketch: a counting Bloom filter for ``main`` entries at this false-positive rate
SKETCH_ERROR = 0.001


def validate_options(main_cache, window_size) -> None:
    if not isinstance(main_cache, str) or main_cache.upper() != "SLRU":
        raise BadInputError(f"main_cache must be 'SLRU' (the main cache kvmm reproduces), got {main_cache!r}")
    if isinstance(window_size, bool) or not isinstance(window_size, (int, float)):
        raise DTypeError(f"window_size must be a number in [0, 1), got {window_size!r}")
    if not 0 <= window_size < 1:
        raise BadInputError(f"window_size must be in [0, 1) (libCacheSim's range), got {window_size!r}")


def split_capacity(capacity: int, window_size: float) -> tuple[int, int, list[int]]:
    """(window, main, main's segment maxima) as libCacheSim's ``WTinyLFU_init`` sizes them: the
    window ``int(capacity * window_size)`` (an int64 scaled by a double, truncated), main the
    rest, main's SLRU segments ``seg-size=1:4``."""
    window = int(capacity * window_size)
    main = capacity - window
    return window, main, segment_maxima(main, seg_size=(1, 4))


def sketch_shape(entries: int, error: float = SKETCH_ERROR) -> tuple[int, int]:
    """(counters, hashes) of libCacheSim's ``minimalIncrementCBF_init(entries, error)``."""
    bpe = -math.log(error) / 0.480453013918201  # ln(2)^2
    hashes = int(math.ceil(0.693147180559945 * bpe))  # ln(2)
    width = int(min(math.ceil(bpe * entries), 2**31 - 1))
    if width < hashes:
        width = 2 * hashes
    return width, hashes
