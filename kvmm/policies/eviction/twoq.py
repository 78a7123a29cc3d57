"""2Q (Johnson & Shasha, VLDB 1994, "full version"), as libCacheSim's ``TwoQ`` implements it.

Three queues: **A1in** (a FIFO of keys seen once, resident), **A1out** (a FIFO of ghosts: keys
that left A1in, not resident) and **Am** (an LRU of keys seen again after leaving A1in, resident).
A hit in A1in changes nothing (the paper's "correlated references"); a hit in Am makes the key
most recent.  A miss on an A1out ghost puts the key in Am; any other miss puts it in A1in.

Accounting is in size units (bytes under :class:`~kvmm.tiers.ManagedTier`), with libCacheSim's
quotas of the capacity ``c``: A1in ``Kin = int(c * a_in_size_ratio)``, A1out
``Kout = int(c * a_out_size_ratio)``, Am ``c - Kin`` (defaults 0.25 and 0.5, libCacheSim's).
"""

from __future__ import annotations

import numbers
from collections import OrderedDict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from kvmm._validate import as_count, as_hashable, as_key_set
from kvmm.errors import BadInputError, DTypeError, UnknownKeyError
from kvmm.policies.eviction._checks import NO_KEY, check_size, require_absent
from kvmm.protocols import EvictionPolicyBase, FastHooks

__all__ = ["TwoQPolicy", "check_twoq_ratios"]


@dataclass
class TwoQPolicy(EvictionPolicyBase):
    """2Q with libCacheSim's parameters: ``a_in_size_ratio`` (Kin, A1in's share of the capacity)
    and ``a_out_size_ratio`` (Kout, A1out's ghosts' share).

    Eviction (libCacheSim's ``TwoQ_evict``, one step while ``|A1in| + |Am| + incoming > c``): when
    A1in holds more than ``Kin``, its oldest leaves and becomes an A1out ghost (A1out forgets its
    oldest ghosts until the new one fits in ``Kout``; a key larger than ``Kout`` is not
    remembered); otherwise Am's least recent leaves.  A ghost that is referenced again is
    forgotten at once (before the evictions) and enters Am, which then makes room within its own
    quota ``c - Kin`` by dropping its least recent keys, even when the whole cache has room:
    ``on_insert`` evicts those keys on its own and returns them (the owner removes them; keys in
    its ``protected`` stay), as libCacheSim's Am is a cache of its own.

    Where libCacheSim differs from the paper: the paper's A1in/A1out/Am are counted in pages and
    Am takes every other page; here (libCacheSim) they are byte quotas, A1in is allowed above
    ``Kin`` until an eviction is needed, Am has its own quota ``c - Kin``, and libCacheSim never
    stores a key larger than ``Kin`` (a miss; ``replay`` follows that rule).  ManagedTier stores
    any entry that fits the tier: one larger than ``Kin`` goes to A1in like any other and is the
    next to leave.

    ``capacity=None`` takes the tier's capacity when a ManagedTier adopts the policy
    (:meth:`attach`); standalone, ``c`` follows the largest resident total seen.

    With ``victims(..., incoming=key, incoming_size=size)`` the victims are that miss's eviction
    loop, step by step, and ``on_remove`` of the plan's next victim applies that step (an A1in
    victim becomes a ghost).  ``on_remove`` of any other key is an explicit delete, as
    libCacheSim's ``TwoQ_remove``: the key leaves A1in or Am and leaves no ghost.

    Runtime complexity: O(1) per event (plus the ghosts forgotten); ``victims`` O(n + protected).
    """

    #: a ghost entering a full Am evicts from Am on its own (returned by ``on_insert``)
    self_evicting: ClassVar[bool] = True

    a_in_size_ratio: float = 0.25
    a_out_size_ratio: float = 0.5
    capacity: int | None = None
    # key -> size, oldest (A1in, A1out) or least recent (Am) first
    _a_in: OrderedDict = field(default_factory=OrderedDict, init=False, repr=False)
    _a_out: OrderedDict = field(default_factory=OrderedDict, init=False, repr=False)
    _am: OrderedDict = field(default_factory=OrderedDict, init=False, repr=False)
    _used: dict = field(default_factory=lambda: {"A1in": 0, "A1out": 0, "Am": 0}, init=False, repr=False)
    _c: int = field(default=0, init=False, repr=False)
    # The last victims(incoming=...) plan: (incoming, victims, steps applied).  Its first applied
    # step forgets the incoming key's ghost (libCacheSim does so while looking the key up).
    _pending: list | None = field(default=None, init=False, repr=False)
    # A ghost already forgotten for the key about to be inserted (it enters Am)
    _ghost_hit: Hashable = field(default=NO_KEY, init=False, repr=False)

    def __post_init__(self) -> None:
        self.a_in_size_ratio, self.a_out_size_ratio = check_twoq_ratios(self.a_in_size_ratio, self.a_out_size_ratio)
        if self.capacity is not None:
            self.capacity = as_count(self.capacity, "capacity", minimum=1)
            self._c = self.capacity

    # -- capacity and quotas -----------------------------------------------------------------
    @property
    def c(self) -> int:
        """The capacity ``c`` the quotas are taken of (size units)."""
        return self._c

    def quotas(self) -> dict[str, int]:
        """``{"A1in": Kin, "A1out": Kout, "Am": c - Kin}`` as libCacheSim rounds them."""
        kin = int(self._c * self.a_in_size_ratio)
        return {"A1in": kin, "A1out": int(self._c * self.a_out_size_ratio), "Am": self._c - kin}

    def attach(self, capacity: int) -> None:
        """Told the capacity of the tier that adopts it (ManagedTier does this)."""
        capacity = as_count(capacity, "capacity")
        if self.capacity is None:
            self._c = max(self._c, capacity)

    # -- the protocol ------------------------------------------------------------------------
    def on_insert(self, key: Hashable, size: int = 1, protected: Iterable[Hashable] = ()) -> list[Hashable]:
        """Insert ``key``; returns the Am keys it evicted on its own (a returning ghost entering a
        full Am), least recent first, none of them in ``protected``."""
        size = as_count(size, "size")
        protected = as_key_set(protected, "protected")
        require_absent(self._residents_view(), key, self)
        return self._insert_unchecked(key, size, protected)

    def _insert_unchecked(self, key: Hashable, size: int, protected: Iterable[Hashable] = ()) -> list[Hashable]:
        """``on_insert`` of an untracked key and a valid size (the fast hook)."""
        self._pending = None
        ghost_hit, self._ghost_hit = self._ghost_hit == key, NO_KEY
        if key in self._a_out:
            self._pop(key, self._a_out, "A1out")
            ghost_hit = True
        evicted: list[Hashable] = []
        if ghost_hit:
            # Am is a cache of its own (libCacheSim's): it drops its least recent unprotected keys
            # until the returning key fits its quota c - Kin, even when the whole cache has room
            room, used = self.quotas()["Am"] - size, self._used["Am"]
            for resident, resident_size in self._am.items():
                if used <= room:
                    break
                if resident not in protected:
                    evicted.append(resident)
                    used -= resident_size
            for resident in evicted:
                self._pop(resident, self._am, "Am")
            self._push(key, size, self._am, "Am")
        else:
            self._push(key, size, self._a_in, "A1in")
        self._c = max(self._c, self._used["A1in"] + self._used["Am"])
        return evicted

    def on_access(self, key: Hashable, size: int | None = None, protected: Iterable[Hashable] = ()) -> tuple:
        check_size(size)
        if as_hashable(key) in self._a_in:
            queue, name = self._a_in, "A1in"
        elif key in self._am:
            queue, name = self._am, "Am"
        else:
            raise UnknownKeyError(f"TwoQPolicy does not track {key!r} as resident; expected a key passed to on_insert")
        self._pending, self._ghost_hit = None, NO_KEY
        if size is not None:  # an overwrite with another size (libCacheSim's hits never resize)
            self._used[name] += size - queue[key]
            queue[key] = size
            self._c = max(self._c, self._used["A1in"] + self._used["Am"])
        if queue is self._am:
            queue.move_to_end(key)
        return ()  # an access never evicts: only a returning ghost does

    def _access_unchecked(self, key: Hashable) -> None:
        """``on_access(key)`` of a resident key, same size (the fast hook)."""
        self._pending, self._ghost_hit = None, NO_KEY
        if key in self._am:
            self._am.move_to_end(key)

    def on_remove(self, key: Hashable) -> None:
        if as_hashable(key) not in self._a_in and key not in self._am:
            raise UnknownKeyError(f"TwoQPolicy does not track {key!r} as resident; expected a key passed to on_insert")
        plan = self._pending
        if plan is not None and plan[2] < len(plan[1]) and plan[1][plan[2]] == key:
            incoming = plan[0]
            if plan[2] == 0 and incoming in self._a_out:  # the miss forgets its own ghost first
                self._pop(incoming, self._a_out, "A1out")
                self._ghost_hit = incoming
            plan[2] += 1
            if key in self._a_in:
                self._remember(key, self._pop(key, self._a_in, "A1in"))
            else:
                self._pop(key, self._am, "Am")
            return
        self._pending = None
        if key in self._a_in:
            self._pop(key, self._a_in, "A1in")
        else:
            self._pop(key, self._am, "Am")

    def on_evict(self, key: Hashable) -> None:
        """``key`` leaves as a victim the owner chose from :meth:`victims` (not a delete): an A1in
        key becomes A1out's newest ghost, as in libCacheSim's eviction step; an Am key just
        leaves.  For an owner that evicts without naming the incoming entry (vLLM's
        ``evict(n)``: a batch).  Runtime complexity: O(1) plus the ghosts forgotten."""
        if as_hashable(key) in self._a_in:
            self._pending, self._ghost_hit = None, NO_KEY
            self._remember(key, self._pop(key, self._a_in, "A1in"))
        elif key in self._am:
            self._pending, self._ghost_hit = None, NO_KEY
            self._pop(key, self._am, "Am")
        else:
            raise UnknownKeyError(f"TwoQPolicy does not track {key!r} as resident; expected a key passed to on_insert")

    def victims(self, n: int, protected: Iterable[Hashable] = (), *, incoming: Hashable = NO_KEY,
                incoming_size: int = 1) -> list[Hashable]:
        """The next ``n`` victims, without changing the order: libCacheSim's eviction loop
        (A1in's oldest while A1in holds more than ``Kin``, else Am's least recent), skipping
        protected keys; when the queue the rule picks has no unprotected key left, the other one
        is used.  With ``incoming`` the plan is remembered for ``on_remove`` (see the class)."""
        n = as_count(n, "n")
        as_count(incoming_size, "incoming_size")
        protected = as_key_set(protected, "protected")
        as_hashable(incoming, "incoming")
        kin = self.quotas()["A1in"]
        used_in = self._used["A1in"]
        a_in = ((k, s) for k, s in self._a_in.items() if k not in protected)
        am = ((k, s) for k, s in self._am.items() if k not in protected)
        out: list[Hashable] = []
        while len(out) < n:
            first, second = (a_in, am) if used_in > kin else (am, a_in)
            entry = next(first, None)
            if entry is None:
                entry = next(second, None)
                if entry is None:
                    break
                first = second
            out.append(entry[0])
            if first is a_in:
                used_in -= entry[1]
        if incoming is not NO_KEY:
            self._pending = [incoming, out, 0]
        return out

    def fast_hooks(self) -> FastHooks | None:
        """``access`` and ``insert`` (:class:`~kvmm.protocols.FastHooks`): ``on_access`` /
        ``on_insert`` without the per-event checks, for a caller that guarantees them
        (ManagedTier); ``insert`` returns the Am keys it evicted, as ``on_insert`` does.  No
        ``insert_many`` / ``evict_first``: a batch evicted before its inserts would see A1in's
        occupancy of before the batch, not of each insert.  None for a subclass.
        Runtime complexity: O(1) per event."""
        if type(self) is TwoQPolicy:
            return FastHooks(self._access_unchecked, self._insert_unchecked)
        return None

    # -- inspection --------------------------------------------------------------------------
    def keys(self) -> list[Hashable]:
        """Resident keys: A1in oldest first, then Am least recent first (ghosts not included)."""
        return list(self._a_in) + list(self._am)

    def ghosts(self) -> list[Hashable]:
        """A1out's ghosts, oldest first."""
        return list(self._a_out)

    def queues(self) -> dict[str, list[Hashable]]:
        """The three queues, oldest / least recent first."""
        return {"A1in": list(self._a_in), "A1out": list(self._a_out), "Am": list(self._am)}

    def queue_sizes(self) -> dict[str, int]:
        """Each queue's total size (size units)."""
        return dict(self._used)

    def __len__(self) -> int:
        return len(self._a_in) + len(self._am)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._a_in or key in self._am

    def check(self) -> None:
        """Assert every invariant (used by tests)."""
        queues = {"A1in": self._a_in, "A1out": self._a_out, "Am": self._am}
        # The three queues are disjoint: a key is resident once, or a ghost, or neither.
        assert sum(map(len, queues.values())) == len(set().union(*queues.values()))
        for name, queue in queues.items():
            # Each queue's recorded total is the sum of its entries' sizes (integers >= 0).
            assert all(isinstance(s, int) and s >= 0 for s in queue.values())
            assert self._used[name] == sum(queue.values())
        quotas = self.quotas()
        # Ghosts never exceed A1out's quota (the quota only grows with c).
        assert self._used["A1out"] <= quotas["A1out"]
        # c covers the residents and is at least a fixed capacity.
        assert self._used["A1in"] + self._used["Am"] <= self._c
        assert self.capacity is None or self._c >= self.capacity
        # A pending plan names distinct keys and has not run past its end.
        if self._pending is not None:
            assert len(self._pending[1]) == len(set(self._pending[1])) and self._pending[2] <= len(self._pending[1])
        # A forgotten ghost awaiting its insert is not resident.
        assert self._ghost_hit is NO_KEY or self._ghost_hit not in self

    # -- helpers -----------------------------------------------------------------------------
    def _residents_view(self) -> _Residents:
        return _Residents(self._a_in, self._am)

    def _push(self, key: Hashable, size: int, queue: OrderedDict, name: str) -> None:
        queue[key] = size
        self._used[name] += size

    def _pop(self, key: Hashable, queue: OrderedDict, name: str) -> int:
        size = queue.pop(key)
        self._used[name] -= size
        return size

    def _remember(self, key: Hashable, size: int) -> None:
        """An A1in key left: it becomes A1out's newest ghost (libCacheSim's FIFO ``get`` on A1out)."""
        kout = self.quotas()["A1out"]
        if size > kout:
            return
        while self._used["A1out"] + size > kout:
            self._used["A1out"] -= self._a_out.popitem(last=False)[1]
        self._push(key, size, self._a_out, "A1out")


class _Residents:
    """``in`` over A1in and Am (for the shared ``require_absent`` check)."""

    __slots__ = ("a_in", "am")

    def __init__(self, a_in: OrderedDict, am: OrderedDict) -> None:
        self.a_in, self.am = a_in, am

    def __contains__(self, key: Hashable) -> bool:
        return key in self.a_in or key in self.am


def check_twoq_ratios(a_in_size_ratio: float, a_out_size_ratio: float) -> tuple[float, float]:
    """Both shares as floats: ``0 < a_in_size_ratio <= 0.5`` (a larger A1in would make
    libCacheSim evict from an empty Am) and ``0 <= a_out_size_ratio``; else BadInputError."""
    values = []
    for name, value in (("a_in_size_ratio", a_in_size_ratio), ("a_out_size_ratio", a_out_size_ratio)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise DTypeError(f"{name} must be a number, got {value!r}")
        values.append(float(value))
    a_in, a_out = values
    if not 0.0 < a_in <= 0.5:
        raise BadInputError(f"a_in_size_ratio must be in (0, 0.5] (A1in's share of the capacity), got {a_in_size_ratio!r}")
    if not 0.0 <= a_out <= 1e6:  # also refuses NaN
        raise BadInputError(f"a_out_size_ratio must be >= 0 (A1out's ghosts' share of the capacity), got {a_out_size_ratio!r}")
    return a_in, a_out
