"""SLRU (segmented LRU) as an :class:`~kvmm.protocols.EvictionPolicy`, libCacheSim's ``SLRU``.

The segments (and their rules) are shared with W-TinyLFU's main cache (:mod:`kvmm.policies.eviction.wtinylfu`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from kvmm._validate import as_count, as_hashable, as_key_set
from kvmm.errors import BadInputError, UnknownKeyError
from kvmm.protocols import EvictionPolicyBase, FastHooks

__all__ = ["SLRUPolicy", "Segments", "segment_maxima"]

@dataclass
class SLRUPolicy(EvictionPolicyBase):
    """Segmented LRU, exactly libCacheSim's ``SLRU`` (``SLRU.c``).

    ``n_seg`` LRU segments (libCacheSim's ``n-seg``, default 4), segment 0 the lowest; segment
    ``i`` holds at most ``max[i]`` size units: ``capacity // n_seg`` each, or with ``seg_size``
    (libCacheSim's ``seg-size`` ratios, e.g. ``(1, 4)``, which also set the number of segments)
    ``int(ratio_i / sum * capacity)``.

    * insert: at the head of the *lowest segment with room* for the key (segment 0 when none
      has), so a filling cache places new keys in higher segments too;
    * hit: a key in the top segment moves to its head; any other moves to the head of the next
      segment up; then each segment over its maximum moves its tail down to the head of the one
      below (which is cooled the same way, depth first); segment 0 over its maximum *evicts*;
    * victim: the tail of the lowest segment whose byte count is > 0.

    Where libCacheSim differs from the paper (Karedla et al. 1994: new keys enter the
    probationary segment; a hit promotes to the protected segment; only probation evicts):
    libCacheSim inserts into the lowest segment with room, not always segment 0; a hit can evict
    (cooling segment 0); and libCacheSim does not cache a key larger than ``max[0]`` at all
    (``SLRU_can_insert``): :meth:`admits` says whether libCacheSim would; an owner that stores
    it anyway (ManagedTier does) gets it placed in segment 0.

    The keys a hit's cooling evicts are evicted on the policy's own: ``on_access`` returns them
    (ManagedTier deletes them right after the access, as libCacheSim evicts them), and the
    policy no longer tracks them.  The cooling knows no protected keys (libCacheSim's has none).

    ``capacity=None``: the tier's capacity when a ManagedTier adopts the policy (:meth:`attach`);
    standalone, the largest resident total seen.  The segment maxima follow it.
    ``on_remove`` of any tracked key forgets it and its segment's byte count (libCacheSim's
    ``SLRU_remove`` leaves the count stale; kvmm does not copy that).  An overwrite with another
    size (``on_access(key, size)``, which libCacheSim never sees: its hits keep the size) is the
    same hit, except that cooling leaves segment 0 over its maximum instead of evicting, so an
    overwrite never evicts another key.

    Runtime complexity: O(1) per insert and remove; an access O(keys moved down), amortised
    O(n_seg); ``victims`` O(n + protected).
    """

    #: a hit's cooling evicts on its own (returned by ``on_access``)
    self_evicting: ClassVar[bool] = True

    capacity: int | None = None
    n_seg: int = 4
    seg_size: tuple | None = None
    _seg: Segments = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.capacity is not None:
            self.capacity = as_count(self.capacity, "capacity", minimum=1)
        segment_maxima(1, self.n_seg, self.seg_size)  # validates n_seg / seg_size
        if self.seg_size is not None:
            self.seg_size = tuple(self.seg_size)
        self._seg = Segments(self.n_seg, self.seg_size, self.capacity)

    def attach(self, capacity: int) -> None:
        """Told the capacity of the tier that adopts it (ManagedTier does this)."""
        capacity = as_count(capacity, "capacity")
        if self.capacity is None:
            self._seg.grow(capacity)

    @property
    def maxima(self) -> list[int]:
        """Each segment's maximum size (size units)."""
        return list(self._seg.maxima)

    def admits(self, size: int) -> bool:
        """Whether libCacheSim's SLRU would cache an entry of ``size`` (``<= max[0]``)."""
        return as_count(size, "size") <= self._seg.maxima[0]

    def on_insert(self, key: Hashable, size: int = 1, protected: Iterable[Hashable] = ()) -> tuple:
        size = as_count(size, "size")
        if as_hashable(key) in self._seg.where:
            raise BadInputError(f"SLRUPolicy already tracks {key!r}; call on_access for a present key")
        self._seg.insert(key, size)
        return ()  # an insert never cools: only a hit does

    def on_access(self, key: Hashable, size: int | None = None, protected: Iterable[Hashable] = ()) -> list[Hashable]:
        """A hit; returns the keys its cooling evicted (segment 0's overflow), oldest first."""
        if size is not None:
            size = as_count(size, "size")
        if as_hashable(key) not in self._seg.where:
            raise UnknownKeyError(f"SLRUPolicy does not track {key!r}; expected a key passed to on_insert")
        self._seg.hit(key, size)
        return self._seg.hand_over()

    def on_remove(self, key: Hashable) -> None:
        if as_hashable(key) not in self._seg.where:
            raise UnknownKeyError(f"SLRUPolicy does not track {key!r}; expected a key passed to on_insert")
        self._seg.remove(key)

    def victims(self, n: int, protected: Iterable[Hashable] = (), *, incoming: Hashable = None,
                incoming_size: int = 1) -> list[Hashable]:
        """The next ``n`` victims (without changing state), skipping protected keys: each segment
        from the lowest, tail first, while its byte count (less the victims already listed) is
        > 0; last the zero-size keys that rule skips.  ``incoming`` does not change SLRU's choice."""
        n = as_count(n, "n")
        as_count(incoming_size, "incoming_size")
        protected = as_key_set(protected, "protected")
        as_hashable(incoming, "incoming")
        return self._seg.victims(n, protected)

    def fast_hooks(self) -> FastHooks | None:
        """``access`` and ``insert`` (:class:`~kvmm.protocols.FastHooks`) without the per-event
        checks, for a caller that guarantees them (an accessed key is tracked, an inserted one is
        not, the size is an integer >= 0); the same state changes, and ``access`` returns the
        keys the cooling evicted, as ``on_access`` does.  No ``insert_many`` / ``evict_first``:
        where a new key lands depends on the segments' bytes at that moment, so evicting for a
        batch before inserting it is not the same as one key at a time.  None for a subclass.
        Runtime complexity: O(1) amortised per event.
        """
        if type(self) is SLRUPolicy:
            return FastHooks(self._access_unchecked, self._seg.insert)
        return None

    def _access_unchecked(self, key: Hashable) -> list[Hashable]:
        seg = self._seg
        seg.hit(key, None)
        return seg.hand_over()

    def keys(self) -> list[Hashable]:
        """Tracked keys: the dropped ones, then each segment from the lowest, tail first."""
        return self._seg.victims(len(self), frozenset())

    def segments(self) -> list[list[Hashable]]:
        """Each segment's keys, tail (next victim) first (for inspection and tests)."""
        return [list(s) for s in self._seg.segs]

    def __len__(self) -> int:
        return len(self._seg.where) + len(self._seg.dropped)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._seg.where or key in self._seg.dropped

    def check(self) -> None:
        """Assert every invariant (used by tests)."""
        self._seg.check(self.capacity)


class Segments:
    """The segmented LRU lists (SLRU, and W-TinyLFU's main cache): ``segs[i]`` an OrderedDict
    key -> size, tail (oldest) first; ``bytes[i]`` its total; ``where`` key -> segment;
    ``dropped`` the keys evicted on the policy's own (a hit's cooling; W-TinyLFU's eviction step
    that moves a larger window key into main), still tracked until :meth:`hand_over` returns them."""

    def __init__(self, n_seg: int, seg_size: Any, capacity: int | None) -> None:
        self.n_seg, self.seg_size = n_seg, seg_size
        self.fixed = capacity is not None
        self.c = capacity or 0
        self.maxima = segment_maxima(self.c, n_seg, seg_size)
        self.segs = [OrderedDict() for _ in self.maxima]
        self.bytes = [0] * len(self.maxima)
        self.where: dict = {}
        self.dropped: OrderedDict = OrderedDict()

    def grow(self, c: int) -> None:
        """A capacity learnt (attach) or a resident total larger than the last one seen."""
        if c > self.c:
            self.c = c
            self.maxima = segment_maxima(c, self.n_seg, self.seg_size)

    def used(self) -> int:
        return sum(self.bytes)

    def insert(self, key: Hashable, size: int) -> None:
        if not self.fixed:
            self.grow(self.used() + sum(self.dropped.values()) + size)
        for i, most in enumerate(self.maxima):
            if self.bytes[i] + size <= most:
                break
        else:
            i = 0
        self.segs[i][key] = size
        self.bytes[i] += size
        self.where[key] = i

    def hand_over(self) -> list[Hashable] | tuple:
        """The dropped keys, oldest first, no longer tracked: the event that returns them hands
        them to the owner (an empty tuple when there are none)."""
        if not self.dropped:
            return ()
        out = list(self.dropped)
        self.dropped.clear()
        return out

    def remove(self, key: Hashable) -> int:
        i = self.where.pop(key)
        size = self.segs[i].pop(key)
        self.bytes[i] -= size
        return size

    def victim(self) -> Hashable:
        """libCacheSim's ``to_evict``: the tail of the lowest segment holding > 0 units."""
        for i, b in enumerate(self.bytes):
            if b > 0:
                return next(iter(self.segs[i]))
        return None

    def hit(self, key: Hashable, size: int | None) -> None:
        i = self.where[key]
        seg = self.segs[i]
        if size is not None and size != seg[key]:  # an overwrite with another size
            self.bytes[i] += size - seg[key]
            seg[key] = size
        if i == len(self.segs) - 1:
            seg.move_to_end(key)
        else:
            self.segs[i + 1][key] = self.remove(key)
            self.bytes[i + 1] += self.segs[i + 1][key]
            self.where[key] = i + 1
        self._cool(len(self.segs) - 1 if i == len(self.segs) - 1 else i + 1, evict=size is None)

    def _cool(self, top: int, evict: bool = True) -> None:
        """libCacheSim's ``SLRU_cool`` from segment ``top`` down, recursion unrolled; without
        ``evict`` (an overwrite) segment 0 is left over its maximum instead of evicting."""
        j = top
        while True:
            if self.bytes[j] > self.maxima[j]:
                if j == 0:
                    if not evict:
                        j += 1
                        if j > top:
                            return
                        continue
                    victim = self.victim()
                    self.dropped[victim] = self.remove(victim)
                    continue
                tail = next(iter(self.segs[j]))
                size = self.remove(tail)
                self.segs[j - 1][tail] = size
                self.bytes[j - 1] += size
                self.where[tail] = j - 1
                j -= 1
                continue
            if j == top:
                return
            j += 1

    def victims(self, n: int, protected: Any) -> list[Hashable]:
        """libCacheSim's eviction order, then the zero-size keys it never reaches (a segment
        holding 0 units is skipped), so the order lists every tracked key."""
        out = [k for k in self.dropped if k not in protected][:n]
        skipped: list = []
        for i, seg in enumerate(self.segs):
            if len(out) >= n:
                return out
            left = self.bytes[i]
            for key, size in seg.items():
                if key in protected:
                    continue
                if left <= 0 or len(out) >= n:
                    skipped.append(key)  # only zero-size keys: every positive one counts in left
                    continue
                out.append(key)
                left -= size
        return out + skipped[: n - len(out)]

    def check(self, capacity: int | None) -> None:
        seen: set = set()
        for i, seg in enumerate(self.segs):
            # Each segment's recorded total is the sum of its sizes, all integers >= 0 ...
            assert all(isinstance(v, int) and v >= 0 for v in seg.values())
            assert self.bytes[i] == sum(seg.values())
            # ... and where[] names the segment of each of its keys.
            assert all(self.where.get(k) == i for k in seg)
            seen.update(seg)
        # The segments are disjoint and where[] lists exactly their keys.
        assert len(seen) == sum(len(s) for s in self.segs) == len(self.where)
        # A dropped key is in no segment.
        assert not any(k in self.where for k in self.dropped)
        # The maxima are libCacheSim's for the current capacity.
        assert self.maxima == segment_maxima(self.c, self.n_seg, self.seg_size)
        # A fixed capacity stays the capacity.
        if capacity is not None:
            assert self.fixed and self.c == capacity


#: libCacheSim's limit on segments (``SLRU_MAX_N_SEG``)
MAX_SEGMENTS = 16


def segment_maxima(capacity: int, n_seg: int = 4, seg_size=None) -> list[int]:
    """Each segment's maximum in size units, as libCacheSim's ``SLRU_init`` computes them:
    ``capacity // n_seg`` each, or ``int(ratio_i / sum(ratios) * capacity)`` (a double product,
    truncated) when ``seg_size`` gives the ratios (which then also set the number of segments)."""
    if seg_size is None:
        n_seg = as_count(n_seg, "n_seg")
        if not 1 <= n_seg <= MAX_SEGMENTS:
            raise BadInputError(f"n_seg must be in [1, {MAX_SEGMENTS}], got {n_seg}")
        return [capacity // n_seg] * n_seg
    if isinstance(seg_size, (str, bytes)) or not hasattr(seg_size, "__iter__"):
        raise BadInputError(f"seg_size must be a sequence of integer ratios, got {seg_size!r}")
    try:
        ratios = [as_count(r, "seg_size ratio") for r in seg_size]
    except TypeError:
        raise BadInputError(f"seg_size must be a sequence of integer ratios, got {seg_size!r}") from None
    if not 1 <= len(ratios) <= MAX_SEGMENTS or sum(ratios) == 0:
        raise BadInputError(f"seg_size must give 1 to {MAX_SEGMENTS} ratios with a positive sum, got {seg_size!r}")
    total = sum(ratios)
    return [int(r / total * capacity) for r in ratios]
