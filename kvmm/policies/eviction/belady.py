"""Belady's MIN (the offline optimum), as libCacheSim's ``Belady``: an :class:`~kvmm.protocols.EvictionPolicy`
that knows the future reference stream.

The victim is the resident key whose next use is farthest in the future; keys never used again
come first (their next use is "never", ``2**63 - 1``, as libCacheSim's ``INT64_MAX``).  libCacheSim
keeps the residents in a binary max-heap on the next-use time (``pqueue``, after Volkan Yazıcı's
libpqueue: 1-based, strict ``<`` comparisons, ``pop`` moves the last leaf to the root and sifts it
down); kvmm runs the same heap step for step, so ties (only "never" can tie: every other next use
is a distinct reference index) break exactly as libCacheSim's do.  Where this differs from the
papers, kvmm follows libCacheSim:

* every miss that fits is inserted, even when its own next use is farther than every resident's
  (Belady's MIN for demand paging; the bypassing OPT would not cache it);
* with sizes the victim is still the farthest next use, whatever its size (Belady is optimal
  only for unit sizes; libCacheSim's ``BeladySize`` is a different order).

**The future.**  ``BeladyPolicy.from_trace(keys)`` (or ``BeladyPolicy(trace=keys)``) precomputes
each reference's next use in one backward pass (numba).  The policy then consumes the stream as
events arrive: each ``on_insert`` / ``on_access`` is the next reference of the trace (a cursor
advances by one) and must name that reference's key, else :class:`~kvmm.errors.BadInputError`
(nothing changes); the key's priority becomes that reference's next use.  A reference the cache
does not see as an event (a miss too large to store, or one an admission filter refused) is
consumed with :meth:`advance`.  ``on_remove`` and ``victims`` do not move the cursor.  Once the
whole trace is consumed (and for ``BeladyPolicy()``, whose trace is empty) the policy knows no
future: any key may be inserted or accessed and its next use is "never", so the order is the
heap's tie order (deterministic, but no optimum).  A tier inside :mod:`kvmm.sim` cannot know its
own future stream (it depends on the tiers above it and on admission), so the simulator refuses
``belady`` (see :attr:`BeladyPolicy.offline`); replay a trace with
``kvmm.policies.replay("belady", keys, capacity, sizes)`` instead.

``victims(n, protected)`` is the order successive ``pop``\\ s of the heap would remove, skipping
protected keys (run on a copy of the heap: the state does not change); ``on_remove`` of any key is
libCacheSim's ``pqueue_remove`` at that key's place, which for the heap's top is exactly the pop
of an eviction (so an explicit delete and an eviction need no plan).  ``incoming`` /
``incoming_size`` are accepted and ignored.

Runtime complexity: O(n) for ``from_trace``; O(log r) per insert, access and remove (r residents);
``victims(n)`` O(r) for the copy plus O((n + protected skipped) log r).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from kvmm._validate import as_count, as_hashable, as_key_set
from kvmm.errors import BadInputError, ShapeError
from kvmm.policies.eviction._checks import check_size, require_absent, require_present
from kvmm.protocols import EvictionPolicyBase, FastHooks

__all__ = ["BeladyPolicy", "NEVER"]

#: The next use of a key never referenced again (libCacheSim's ``INT64_MAX``).
NEVER = 2**63 - 1


@dataclass
class BeladyPolicy(EvictionPolicyBase):
    """Farthest next use first, ties as libCacheSim's heap (see the module docstring).

    ``trace``: the future reference stream, a 1-D integer array (int64 / uint64) or any sequence
    of hashable keys; ``None`` or empty: no future known.  Runtime complexity: O(log r) per event.
    """

    trace: Any = field(default=None, repr=False, compare=False)
    #: Needs its own future reference stream: the simulator and engine adapters refuse it.
    offline: ClassVar[bool] = True
    # The heap, 1-based as libpqueue's (slot 0 unused): keys and their priorities side by side.
    _heap: list = field(default_factory=lambda: [None], init=False, repr=False)
    _pri: list = field(default_factory=lambda: [0], init=False, repr=False)
    _pos: dict = field(default_factory=dict, init=False, repr=False)  # key -> its heap slot
    _keys: Any = field(default=(), init=False, repr=False)  # the trace's keys (array or list)
    _next: Any = field(default=None, init=False, repr=False)  # next use of each reference (int64)
    _int_trace: bool = field(default=False, init=False, repr=False)
    _cursor: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        keys, dense, n_unique, int_trace = _trace_arrays(self.trace)
        self._keys, self._int_trace = keys, int_trace
        if len(dense):
            # imported here on purpose: importing a policy module loads no numba kernel
            from kvmm.policies.eviction._kernels.belady import next_uses

            self._next = next_uses(dense, n_unique)
        else:
            self._next = np.zeros(0, np.int64)

    @classmethod
    def from_trace(cls, keys: Any) -> BeladyPolicy:
        """A policy that will see exactly ``keys``, in order (see the module docstring)."""
        return cls(trace=keys)

    @property
    def position(self) -> int:
        """How many references of the trace were consumed (the cursor)."""
        return self._cursor

    def next_use(self, key: Hashable) -> int:
        """The index (0-based, in the trace) of a resident key's next reference, or :data:`NEVER`."""
        require_present(self._pos, key, self)
        return self._pri[self._pos[key]]

    def on_insert(self, key: Hashable, size: int = 1, protected: Iterable[Hashable] = ()) -> tuple:
        as_count(size, "size")
        require_absent(self._pos, key, self)
        self._insert_unchecked(key, size)
        return ()

    def on_access(self, key: Hashable, size: int | None = None, protected: Iterable[Hashable] = ()) -> tuple:
        check_size(size)
        require_present(self._pos, key, self)
        self._access_unchecked(key)
        return ()

    def on_remove(self, key: Hashable) -> None:
        require_present(self._pos, key, self)
        # libpqueue's pqueue_remove: the last leaf takes the slot, then moves up or down
        slot = self._pos.pop(key)
        removed_pri = self._pri[slot]
        last_key, last_pri = self._heap.pop(), self._pri.pop()
        if slot < len(self._heap):
            self._heap[slot], self._pri[slot] = last_key, last_pri
            if removed_pri < last_pri:
                self._bubble_up(slot)
            else:
                self._percolate_down(slot, self._heap, self._pri, self._pos)

    def advance(self, n: int = 1) -> None:
        """Consume ``n`` references the cache did not see as events (misses not stored).  A
        reference to a resident key is refused (a resident key's reference is a hit: call
        :meth:`on_access`), and so is going past the end; either way nothing changes."""
        n = as_count(n, "n")
        end = self._cursor + n
        if end > len(self._next):
            raise BadInputError(f"BeladyPolicy.advance({n}): only {len(self._next) - self._cursor} references of the "
                                f"trace are left (consumed {self._cursor} of {len(self._next)})")
        for i in range(self._cursor, end):
            key = self._key_at(i)
            if key in self._pos:
                raise BadInputError(f"BeladyPolicy.advance: reference {i} is to {key!r}, which is resident; "
                                    f"a reference to a resident key is a hit (call on_access)")
        self._cursor = end

    def victims(self, n: int, protected: Iterable[Hashable] = (), *, incoming: Hashable = None,
                incoming_size: int = 1) -> list[Hashable]:
        """The keys successive evictions (heap pops) would remove, skipping ``protected``; the
        state does not change.  Runtime complexity: O(r + (n + skipped) log r)."""
        n = as_count(n, "n")
        as_count(incoming_size, "incoming_size")
        protected = as_key_set(protected, "protected")
        as_hashable(incoming, "incoming")
        out: list[Hashable] = []
        if n == 0:
            return out
        heap, pri = list(self._heap), list(self._pri)
        while len(out) < n and len(heap) > 1:
            top = heap[1]
            last_key, last_pri = heap.pop(), pri.pop()
            if len(heap) > 1:
                heap[1], pri[1] = last_key, last_pri
                self._percolate_down(1, heap, pri, None)
            if top not in protected:
                out.append(top)
        return out

    def fast_hooks(self) -> FastHooks | None:
        """``access`` and ``insert`` (:class:`~kvmm.protocols.FastHooks`): ``on_access`` / ``on_insert`` without
        the tracked / untracked checks (the caller guarantees them; the trace is still checked).
        No ``insert_many`` / ``evict_first``: a request's new keys can be each other's victims (a
        key never used again is evicted first), so evicting before inserting them all is not the
        same as one key at a time.  None for a subclass.  Runtime complexity: O(log r) per event.
        """
        if type(self) is BeladyPolicy:
            return FastHooks(self._access_unchecked, self._insert_unchecked)
        return None

    def _insert_unchecked(self, key: Hashable, size: int = 1) -> None:
        pri = self._consume(key, "on_insert")
        self._heap.append(key)
        self._pri.append(pri)
        self._pos[key] = len(self._heap) - 1
        self._bubble_up(len(self._heap) - 1)

    def _access_unchecked(self, key: Hashable) -> None:
        new = self._consume(key, "on_access")
        slot = self._pos[key]
        old = self._pri[slot]
        self._pri[slot] = new  # libpqueue's pqueue_change_priority
        if old < new:
            self._bubble_up(slot)
        else:
            self._percolate_down(slot, self._heap, self._pri, self._pos)

    def _consume(self, key: Hashable, event: str) -> int:
        """The next use after the current reference, which must be to ``key``; moves the cursor."""
        i = self._cursor
        if i >= len(self._next):
            return NEVER  # past the trace: no future known
        expected = self._key_at(i)
        if key != expected:
            raise BadInputError(f"BeladyPolicy.{event}({key!r}): reference {i} of the trace is to {expected!r}; "
                                f"events must follow the trace (use advance() for a reference the cache skips)")
        self._cursor = i + 1
        return int(self._next[i])

    def _key_at(self, i: int) -> Hashable:
        return int(self._keys[i]) if self._int_trace else self._keys[i]

    def _bubble_up(self, slot: int) -> None:
        heap, pri, pos = self._heap, self._pri, self._pos
        key, p = heap[slot], pri[slot]
        while slot > 1 and pri[slot >> 1] < p:
            parent = slot >> 1
            heap[slot], pri[slot] = heap[parent], pri[parent]
            pos[heap[slot]] = slot
            slot = parent
        heap[slot], pri[slot] = key, p
        pos[key] = slot

    @staticmethod
    def _percolate_down(slot: int, heap: list, pri: list, pos: dict | None) -> None:
        """libpqueue's percolate_down on ``heap``/``pri`` (``pos`` updated unless None)."""
        size = len(heap)
        key, p = heap[slot], pri[slot]
        while True:
            child = slot << 1
            if child >= size:
                break
            if child + 1 < size and pri[child] < pri[child + 1]:
                child += 1
            if not p < pri[child]:
                break
            heap[slot], pri[slot] = heap[child], pri[child]
            if pos is not None:
                pos[heap[slot]] = slot
            slot = child
        heap[slot], pri[slot] = key, p
        if pos is not None:
            pos[key] = slot

    def keys(self) -> list[Hashable]:
        """Resident keys in heap-slot order (the top, the next victim, first).  The eviction
        order is ``victims(len(policy))``."""
        return self._heap[1:]

    def __len__(self) -> int:
        return len(self._pos)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._pos

    def check(self) -> None:
        """Assert every invariant (used by tests)."""
        heap, pri, pos = self._heap, self._pri, self._pos
        # The heap and its priorities are side by side; each resident has exactly one slot.
        assert len(heap) == len(pri) == len(pos) + 1
        for slot in range(1, len(heap)):
            assert pos[heap[slot]] == slot
            # Max-heap: no child's next use is later than its parent's.
            if slot > 1:
                assert not pri[slot >> 1] < pri[slot], (slot, pri[slot >> 1], pri[slot])
            # A priority is "never" or a reference to this very key not consumed yet.
            p = pri[slot]
            assert p == NEVER or (self._cursor <= p < len(self._next) and self._key_at(p) == heap[slot]), (heap[slot], p)
        # The cursor stays within the trace, and the precomputed next uses point forward.
        assert 0 <= self._cursor <= len(self._next) == len(self._keys)


def _trace_arrays(trace: Any) -> tuple[Any, np.ndarray, int, bool]:
    """``(keys, dense ids, distinct keys, keys are an integer array)`` of a trace."""
    if trace is None:
        return (), np.zeros(0, np.int64), 0, False
    if isinstance(trace, np.ndarray):
        if trace.ndim != 1:
            raise ShapeError(f"trace must be 1-D, got shape {trace.shape}")
        if trace.dtype.kind in "iu":
            # imported here on purpose: _replay reads ORDERS, whose module imports this one
            from kvmm.policies.eviction._replay import dense_ids

            # any 64-bit unsigned array (big-endian '>u8' too) stays unsigned: as int64 its keys
            # >= 2**63 would read back negative and no event could name them
            wide_unsigned = trace.dtype.kind == "u" and trace.dtype.itemsize == 8
            keys = np.ascontiguousarray(trace, dtype=np.uint64 if wide_unsigned else np.int64)
            dense, n_unique = dense_ids(keys.view(np.int64))
            return keys, dense, n_unique, True
        trace = trace.tolist()
    if isinstance(trace, (str, bytes)) or not hasattr(trace, "__iter__"):
        raise BadInputError(f"trace must be a sequence of keys, got {type(trace).__name__}")
    # numpy integers as the Python ints they equal: the keys the trace reports (victims, messages)
    # are then the same whichever the caller passed, and an all-integer trace takes the array path
    keys = [int(k) if isinstance(k, np.integer) else k for k in trace]
    if keys and all(type(k) is int for k in keys) and -2**63 <= min(keys) and max(keys) < 2**63:
        return _trace_arrays(np.array(keys, np.int64))
    ids: dict = {}
    dense = np.empty(len(keys), np.int64)
    for i, key in enumerate(keys):
        dense[i] = ids.setdefault(as_hashable(key, f"trace[{i}]"), len(ids))
    return keys, dense, len(ids), False
