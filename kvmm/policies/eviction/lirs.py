"""LIRS (Jiang & Zhang, SIGMETRICS 2002) as libCacheSim's ``LIRS`` implements it, accounted in bytes.

The stack S holds recently seen keys (LIR, resident HIR, non-resident HIR), the queue Q the
resident HIR keys, NH the non-resident HIR keys of S.  ``hirs_limit = max(1, int(hirs_ratio *
c))`` bytes go to the resident HIR keys, ``c - hirs_limit`` to the LIR keys (``hirs_ratio``
0.01, libCacheSim's ``hirs_ratio``).  The rules, step by step, are those of
:mod:`kvmm.policies.eviction._kernels.lirs` (and ``kvmm/testing/models/lirs.py``).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from kvmm._validate import as_count, as_hashable, as_key_set
from kvmm.errors import BadInputError, DTypeError, UnknownKeyError
from kvmm.policies.eviction._checks import NO_KEY, check_size
from kvmm.protocols import EvictionPolicyBase, FastHooks

__all__ = ["LIRSPolicy", "check_hirs_ratio"]

_MISSING = object()
_UNBOUNDED = 1 << 62  # c of a policy that was given no capacity: every key is LIR


@dataclass
class LIRSPolicy(EvictionPolicyBase):
    """LIRS with libCacheSim's HIR share ``hirs_ratio`` (default 0.01) and its rules.

    libCacheSim's rules where they differ from the paper: a hit on a resident HIR key that is
    not in S demotes LIR keys until its size would fit the LIR set; every eviction step is in
    bytes; S is bounded at ``2 * c`` bytes (oldest non-resident keys forgotten first).  A
    reference can evict keys even when the cache has room, a hit included (a demoted LIR key
    pushes out Q's oldest): ``on_insert`` / ``on_access`` evict them on their own and return them
    (:class:`~kvmm.tiers.ManagedTier` deletes them, on ``get`` too).

    Where this policy is not libCacheSim (only outside libCacheSim's own domain, or where its C
    code reads freed memory): the key being referenced is never pushed out by its own reference
    (libCacheSim can push a hit key out of Q and still count its next reference as a hit); an
    entry libCacheSim refuses (larger than either limit) is stored (LIR if the LIR set has room,
    else a resident HIR, Q's oldest leaving while the HIR set or the cache is over its limit);
    protected keys are skipped (Q's oldest unprotected key leaves instead; a protected LIR key
    too large for Q stays in Q).  A key coming back keeps the size of its new reference.

    ``capacity=None`` takes the tier's capacity when a ManagedTier adopts the policy
    (:meth:`attach`); standalone without one, ``c`` is unbounded (every key is LIR: S's order,
    least recent first).  ``on_remove`` of a key that is not the next victim of the pending plan
    is an explicit delete (libCacheSim's ``LIRS_remove``: the key leaves S and Q, an LIR removal
    prunes S).  ``victims(n)`` without an incoming key lists Q oldest first, then the LIR keys in
    the order they would be demoted (S's bottom first).

    Runtime complexity: O(1) amortised per event (each demotion, eviction and pruning step is
    O(1)); ``victims(..., incoming=)`` runs the event and undoes it (O(its steps)); ``len()``
    O(|S| + |Q|).
    """

    #: a reference can push keys out on its own (returned by ``on_insert`` / ``on_access``)
    self_evicting: ClassVar[bool] = True

    hirs_ratio: float = 0.01
    capacity: int | None = None
    _c: int = field(default=_UNBOUNDED, init=False, repr=False)
    # the three orders; head = top of S / newest of Q and NH, tail = bottom / oldest
    _s: _Links = field(default=None, init=False, repr=False)
    _q: _Links = field(default=None, init=False, repr=False)
    _nh: _Links = field(default=None, init=False, repr=False)
    _lir: dict = field(default_factory=dict, init=False, repr=False)  # S key -> is LIR
    _res: dict = field(default_factory=dict, init=False, repr=False)  # S key -> resident
    _s_size: dict = field(default_factory=dict, init=False, repr=False)
    _q_size: dict = field(default_factory=dict, init=False, repr=False)
    _n: dict = field(default_factory=lambda: {"lir": 0, "hir": 0, "occ": 0, "s": 0}, init=False, repr=False)
    _journal: list | None = field(default=None, init=False, repr=False)
    # the last planned event: [key, size, dropped keys, how many of them were removed, protected]
    _pending: list | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.hirs_ratio = check_hirs_ratio(self.hirs_ratio)
        self._s, self._q, self._nh = _Links(), _Links(), _Links()
        if self.capacity is not None:
            self.capacity = as_count(self.capacity, "capacity", minimum=1)
            self._c = self.capacity

    # -- capacity ----------------------------------------------------------------------------
    def attach(self, capacity: int) -> None:
        """Told the capacity of the tier that adopts it (ManagedTier does this)."""
        capacity = as_count(capacity, "capacity")
        if self.capacity is None and capacity > 0:
            self._c = capacity if self._c == _UNBOUNDED else max(self._c, capacity)

    def limits(self) -> tuple[int, int]:
        """``(hirs_limit, lirs_limit)`` in size units."""
        hirs = max(1, int(self.hirs_ratio * self._c))
        return hirs, self._c - hirs

    # -- the protocol ------------------------------------------------------------------------
    def on_insert(self, key: Hashable, size: int = 1, protected: Iterable[Hashable] = ()) -> list[Hashable]:
        """The reference to a new ``key``; returns the keys it pushed out on its own (none in
        ``protected``), less those the owner already removed as the first victims of this
        reference's plan (``victims(..., incoming=key)``)."""
        size = as_count(size, "size")
        protected = as_key_set(protected, "protected")
        if as_hashable(key) in self:
            raise BadInputError(f"LIRSPolicy already tracks {key!r}; call on_access for a present key")
        return self._commit(key, size, protected)

    def on_access(self, key: Hashable, size: int | None = None, protected: Iterable[Hashable] = ()) -> list[Hashable]:
        """A reference to a resident ``key``; returns the keys it pushed out, as ``on_insert``."""
        check_size(size)
        protected = as_key_set(protected, "protected")
        self._require_resident(key)
        return self._commit(key, size, protected)

    def _commit(self, key: Hashable, size: int | None, protected: Iterable[Hashable] = ()) -> list[Hashable]:
        """Run the reference to ``key`` for real; returns the keys it dropped that the owner has
        not removed yet.  A planned reference keeps its plan's protection, and the first keys of
        its plan the owner removed (``on_remove`` only counted them) are not returned again."""
        size = self._event_size(key, size)
        plan, self._pending = self._pending, None
        if plan is not None and plan[0] == key and plan[1] == size:
            return self._event(key, size, plan[4])[plan[3]:]
        return self._event(key, size, frozenset(protected) | {key})

    def _access_fast(self, key: Hashable) -> list[Hashable]:
        """``on_access(key)`` of a resident key without the checks (the fast hook)."""
        return self._commit(key, None)

    def _event_size(self, key: Hashable, size: int | None) -> int | None:
        """The size an event takes: None for a resident keeping its size."""
        if size is not None and key in self and size == self._size_of(key):
            return None
        return size

    def on_remove(self, key: Hashable) -> None:
        self._require_resident(key)
        plan = self._pending
        if plan is not None and plan[3] < len(plan[2]) and plan[2][plan[3]] == key:
            plan[3] += 1  # the planned event drops it when it runs (on_insert / on_access)
            return
        self._pending = None
        self._delete(key)

    def on_evict(self, key: Hashable) -> None:
        """``key`` leaves as a victim the owner chose from :meth:`victims` (not a delete): a
        resident HIR key stays in S as non-resident, as libCacheSim's eviction step leaves it, so
        a reference that comes back while it is in S makes it LIR; an LIR key (listed after Q
        when Q has too few) is removed as :meth:`on_remove` removes it.  For an owner that
        evicts without naming the incoming entry (vLLM's ``evict(n)``: a batch).
        Runtime complexity: O(1) amortised."""
        self._require_resident(key)
        self._pending = None
        if key in self._q.prev:
            self._leave_q(key)
        else:
            self._delete(key)

    def victims(self, n: int, protected: Iterable[Hashable] = (), *, incoming: Hashable = NO_KEY,
                incoming_size: int = 1) -> list[Hashable]:
        """The next ``n`` victims without changing the order.  With ``incoming``: the keys its
        reference evicts (the event is run and undone), then further keys in the order of
        ``victims(n)`` without it, so a caller that needs more room finds it."""
        n = as_count(n, "n")
        incoming_size = as_count(incoming_size, "incoming_size")
        protected = as_key_set(protected, "protected")
        as_hashable(incoming, "incoming")
        out: list[Hashable] = []
        if incoming is not NO_KEY:
            out = self._plan(incoming, self._event_size(incoming, incoming_size), frozenset(protected) | {incoming})
        if len(out) < n:
            seen = set(out)
            for key in self._order():
                if len(out) >= n:
                    break
                if key not in protected and key not in seen and key != incoming:
                    out.append(key)
        return out[:n]

    def fast_hooks(self) -> FastHooks | None:
        """``access`` and ``insert`` (:class:`~kvmm.protocols.FastHooks`): the reference without
        the tracked / untracked checks; each returns the keys it pushed out, as the checked events
        do.  None for a subclass.  Runtime complexity: O(1) amortised per event."""
        if type(self) is LIRSPolicy:
            return FastHooks(self._access_fast, self._commit)
        return None

    def admits(self, key: Hashable, size: int) -> bool:
        """Whether libCacheSim's LIRS stores a miss on ``key`` of ``size``: a key larger than the
        cache never; a non-resident HIR key of S always; a new key only within both limits."""
        size = as_count(size, "size")
        as_hashable(key)
        if size > self._c:
            return False
        if key in self._s.prev and not self._res[key]:
            return True
        hirs_limit, lirs_limit = self.limits()
        return size <= hirs_limit and size <= lirs_limit

    # -- inspection --------------------------------------------------------------------------
    def keys(self) -> list[Hashable]:
        """Resident keys in ``victims`` order."""
        return list(self._order())

    def stack(self) -> list[tuple[Hashable, str]]:
        """S from bottom to top: ``(key, "LIR" | "HIR" | "nonresident")``."""
        return [(k, "LIR" if self._lir[k] else ("HIR" if self._res[k] else "nonresident")) for k in self._s.bottom_up()]

    def queue(self) -> list[Hashable]:
        """Q (resident HIR keys), oldest first."""
        return list(self._q.bottom_up())

    def __len__(self) -> int:
        return len(self._q) + sum(1 for k in self._s.prev if self._lir[k])

    def __contains__(self, key: Hashable) -> bool:
        return key in self._q.prev or bool(self._lir.get(key, False))

    def check(self) -> None:
        """Assert every invariant (used by tests)."""
        s, q, nh = set(self._s.prev), set(self._q.prev), set(self._nh.prev)
        for links in (self._s, self._q, self._nh):
            links.check()
        # S's flags and sizes cover exactly S's keys; Q's sizes exactly Q's.
        assert set(self._lir) == set(self._res) == set(self._s_size) == s and set(self._q_size) == q
        # An LIR key is resident and not in Q; NH is exactly S's non-resident keys.
        assert all(self._res[k] and k not in q for k in s if self._lir[k])
        assert nh == {k for k in s if not self._res[k]}
        # A resident HIR key of S is in Q (this policy keeps no resident outside S's LIR and Q).
        assert all(k in q for k in s if self._res[k] and not self._lir[k])
        # The byte counters are the sums they name.  The residents may exceed c: an owner may
        # overfill (docs/eviction_orders.md, "Overfill"); the next reference's event makes room.
        lir = sum(self._s_size[k] for k in s if self._lir[k])
        hir = sum(self._q_size.values())
        assert self._n == {"lir": lir, "hir": hir, "occ": lir + hir, "s": sum(self._s_size.values())}
        # No undo journal is left open, and a plan's removed prefix is within its victims.
        assert self._journal is None
        assert self._pending is None or self._pending[3] <= len(self._pending[2])

    # -- the event (libCacheSim's rules), journaled so that a plan can be undone ------------
    def _plan(self, key: Hashable, size: int | None, protected: frozenset) -> list[Hashable]:
        """Run the event for ``key`` with an undo journal, undo it; remember and return its drops."""
        self._journal = []
        try:
            dropped = self._event(key, size, protected)
        finally:
            journal, self._journal = self._journal, None
            for entry in reversed(journal):
                entry[0](*entry[1:])
        self._pending = [key, size, dropped, 0, protected]
        return list(dropped)

    def _event(self, key: Hashable, size: int | None, protected: frozenset) -> list[Hashable]:
        dropped: list[Hashable] = []
        hirs_limit, lirs_limit = self.limits()
        n = self._n
        if size is not None and key in self:  # an overwrite with another size: resize first
            self._resize(key, size)
        in_s = key in self._s.prev
        if in_s:
            self._move_top(self._s, key)
        if key in self._q.prev:
            self._move_top(self._q, key)
        if in_s and self._lir[key]:  # an LIR hit
            self._prune()
        elif in_s and self._res[key]:  # a resident HIR in S becomes LIR
            q_size = self._q_size[key]
            self._unlink(self._q, key, self._q_size)
            self._add("hir", -q_size)
            self._add("occ", -q_size)
            while n["lir"] + self._s_size[key] > lirs_limit and self._demote(hirs_limit, protected, dropped):
                pass
            self._put(self._lir, key, True)
            self._add("lir", self._s_size[key])
            self._add("occ", self._s_size[key])
        elif key in self._q.prev:  # a resident HIR only in Q enters S's top, still HIR
            q_size = self._q_size[key]
            while n["lir"] + q_size > lirs_limit and self._demote(hirs_limit, protected, dropped):
                pass
            self._push_s(key, False, True, q_size)
        elif in_s:  # a non-resident HIR of S comes back as LIR
            if size is not None and size != self._s_size[key]:  # the tier stores the new size
                self._add("s", size - self._s_size[key])
                self._put(self._s_size, key, size)
            old = self._s_size[key]
            while n["lir"] + old > lirs_limit and self._demote(hirs_limit, protected, dropped):
                pass
            self._unlink(self._nh, key)
            while n["occ"] + old > self._c:
                while n["hir"] >= hirs_limit and self._evict_hir(protected, dropped):
                    pass
                if not self._demote(hirs_limit, protected, dropped):
                    break
            self._make_room(old, hirs_limit, protected, dropped)
            self._put(self._lir, key, True)
            self._put(self._res, key, True)
            self._add("lir", old)
            self._add("occ", old)
        else:  # a new key
            if n["lir"] + size > lirs_limit:
                while n["hir"] + size > hirs_limit and self._evict_hir(protected, dropped):
                    pass
            self._make_room(size, hirs_limit, protected, dropped)
            lir = n["lir"] + size <= lirs_limit
            self._push_s(key, lir, True, size)
            if lir:
                self._add("lir", size)
            else:
                self._push(self._q, key, self._q_size, size)
                self._add("hir", size)
            self._add("occ", size)
        # S remembers at most 2c bytes: forget the oldest non-resident keys
        while n["s"] > 2 * self._c and self._nh.tail is not NO_KEY:
            old = self._nh.tail
            self._unlink(self._nh, old)
            self._drop_s(old)
        return dropped

    def _make_room(self, size: int, hirs_limit: int, protected: frozenset, dropped: list) -> None:
        """Q's oldest, then demoted LIR keys, leave until ``size`` fits (never needed within
        libCacheSim's rules; needed when protection or a large entry overfilled Q)."""
        n = self._n
        while n["occ"] + size > self._c and self._evict_hir(protected, dropped):
            pass
        while n["occ"] + size > self._c and self._demote(hirs_limit, protected, dropped):
            while n["occ"] + size > self._c and self._evict_hir(protected, dropped):
                pass

    def _prune(self) -> None:
        s = self._s
        while s.tail is not NO_KEY and s.tail != s.head:
            bottom = s.tail
            if self._lir[bottom]:
                break
            if not self._res[bottom]:
                self._unlink(self._nh, bottom)
            self._drop_s(bottom)

    def _evict_hir(self, protected: frozenset, dropped: list) -> bool:
        """Q's oldest unprotected key leaves the cache (non-resident in S if it is there)."""
        victim = next((k for k in self._q.bottom_up() if k not in protected), NO_KEY)
        if victim is NO_KEY:
            return False
        self._leave_q(victim)
        dropped.append(victim)
        return True

    def _leave_q(self, key: Hashable) -> None:
        """Resident HIR ``key`` leaves the cache: out of Q, non-resident in S if it is there."""
        size = self._q_size[key]
        self._unlink(self._q, key, self._q_size)
        self._add("hir", -size)
        self._add("occ", -size)
        if key in self._s.prev:
            self._put(self._res, key, False)
            self._push(self._nh, key)

    def _demote(self, hirs_limit: int, protected: frozenset, dropped: list) -> bool:
        """S's bottom LIR key leaves S for Q's top (or the cache, when larger than hirs_limit); prune."""
        # S's bottom, or the lowest LIR key when pruning left a lone HIR key at the bottom
        bottom = next((k for k in self._s.bottom_up() if self._lir[k]), NO_KEY)
        if bottom is NO_KEY:
            return False
        size = self._s_size[bottom]
        self._drop_s(bottom)
        self._add("lir", -size)
        self._add("occ", -size)
        if size <= hirs_limit or bottom in protected:
            while self._n["hir"] + size > hirs_limit and self._evict_hir(protected, dropped):
                pass
            self._push(self._q, bottom, self._q_size, size)
            self._add("hir", size)
            self._add("occ", size)
        else:
            dropped.append(bottom)
        self._prune()
        return True

    def _delete(self, key: Hashable) -> None:
        """libCacheSim's ``LIRS_remove`` of a resident key."""
        if key in self._s.prev:
            lir = self._lir[key]
            size = self._s_size[key]
            self._drop_s(key)
            if lir:
                self._add("lir", -size)
                self._add("occ", -size)
                self._prune()
                return
        size = self._q_size[key]
        self._unlink(self._q, key, self._q_size)
        self._add("hir", -size)
        self._add("occ", -size)

    def _resize(self, key: Hashable, size: int) -> None:
        if self._lir.get(key, False):
            delta = size - self._s_size[key]
            self._put(self._s_size, key, size)
            self._add("lir", delta)
            self._add("occ", delta)
            self._add("s", delta)
            return
        delta = size - self._q_size[key]
        self._put(self._q_size, key, size)
        self._add("hir", delta)
        self._add("occ", delta)
        if key in self._s.prev:
            self._add("s", size - self._s_size[key])
            self._put(self._s_size, key, size)

    def _order(self) -> Iterable[Hashable]:
        """Residents in victims order: Q oldest first, then LIR keys from S's bottom."""
        yield from self._q.bottom_up()
        for key in self._s.bottom_up():
            if self._lir[key]:
                yield key

    def _size_of(self, key: Hashable) -> int:
        return self._s_size[key] if self._lir.get(key, False) else self._q_size[key]

    def _require_resident(self, key: Hashable) -> None:
        if as_hashable(key) not in self:
            raise UnknownKeyError(f"LIRSPolicy does not track {key!r} as resident; expected a key passed to on_insert")

    # -- journaled primitives ----------------------------------------------------------------
    def _log(self, *entry) -> None:
        if self._journal is not None:
            self._journal.append(entry)

    def _put(self, table: dict, key: Hashable, value) -> None:
        self._log(_restore, table, key, table.get(key, _MISSING))
        table[key] = value

    def _add(self, counter: str, delta: int) -> None:
        self._put(self._n, counter, self._n[counter] + delta)

    def _push(self, links: _Links, key: Hashable, sizes: dict | None = None, size: int = 0) -> None:
        links.push_top(key)
        self._log(links.unlink, key)
        if sizes is not None:
            self._put(sizes, key, size)

    def _unlink(self, links: _Links, key: Hashable, sizes: dict | None = None) -> None:
        self._log(links.relink, key, *links.unlink(key))
        if sizes is not None:
            self._log(_restore, sizes, key, sizes.pop(key))

    def _move_top(self, links: _Links, key: Hashable) -> None:
        if links.head != key:
            self._unlink(links, key)
            self._push(links, key)

    def _push_s(self, key: Hashable, lir: bool, resident: bool, size: int) -> None:
        self._push(self._s, key, self._s_size, size)
        self._put(self._lir, key, lir)
        self._put(self._res, key, resident)
        self._add("s", size)

    def _drop_s(self, key: Hashable) -> None:
        self._add("s", -self._s_size[key])
        self._unlink(self._s, key, self._s_size)
        for table in (self._lir, self._res):
            self._log(_restore, table, key, table.pop(key))


def _restore(table: dict, key: Hashable, old) -> None:
    if old is _MISSING:
        table.pop(key, None)
    else:
        table[key] = old


class _Links:
    """A doubly linked order over keys: ``head`` the top / newest, ``tail`` the bottom / oldest;
    ``NO_KEY`` past either end (None is a key)."""

    __slots__ = ("prev", "next", "head", "tail")

    def __init__(self) -> None:
        self.prev: dict = {}  # key -> the neighbour towards the head
        self.next: dict = {}  # key -> the neighbour towards the tail
        self.head = self.tail = NO_KEY

    def __len__(self) -> int:
        return len(self.prev)

    def push_top(self, key: Hashable) -> None:
        self.relink(key, NO_KEY, self.head)

    def relink(self, key: Hashable, before: Hashable, after: Hashable) -> None:
        """Put ``key`` between ``before`` (towards the head, NO_KEY: at the head) and ``after``."""
        self.prev[key], self.next[key] = before, after
        if before is NO_KEY:
            self.head = key
        else:
            self.next[before] = key
        if after is NO_KEY:
            self.tail = key
        else:
            self.prev[after] = key

    def unlink(self, key: Hashable) -> tuple:
        before, after = self.prev.pop(key), self.next.pop(key)
        if before is NO_KEY:
            self.head = after
        else:
            self.next[before] = after
        if after is NO_KEY:
            self.tail = before
        else:
            self.prev[after] = before
        return before, after

    def bottom_up(self):
        key = self.tail
        while key is not NO_KEY:
            before = self.prev[key]
            yield key
            key = before

    def check(self) -> None:
        walked = list(self.bottom_up())
        # The links form one chain through every key.
        assert len(walked) == len(set(walked)) == len(self.prev) == len(self.next)
        assert (self.head is NO_KEY) == (self.tail is NO_KEY) == (not walked)


def check_hirs_ratio(hirs_ratio) -> float:
    """``hirs_ratio`` as a float in (0, 1) (the HIR residents' share of the capacity)."""
    if isinstance(hirs_ratio, bool) or not isinstance(hirs_ratio, numbers.Real):
        raise DTypeError(f"hirs_ratio must be a number, got {hirs_ratio!r}")
    value = float(hirs_ratio)
    if math.isnan(value) or not 0.0 < value < 1.0:
        raise BadInputError(f"hirs_ratio must be in (0, 1) (the HIR residents' share of the capacity), got {hirs_ratio!r}")
    return value
