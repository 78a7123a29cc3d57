"""ARC (Megiddo & Modha, FAST 2003), an :class:`~kvmm.protocols.EvictionPolicy` accounted in size
units as libCacheSim's ARC is (docs/eviction_orders.md)."""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

from kvmm._validate import as_count, as_hashable, as_key_set
from kvmm.errors import BadInputError, UnknownKeyError
from kvmm.policies.eviction._checks import NO_KEY
from kvmm.protocols import EvictionPolicyBase, FastHooks

__all__ = ["ARCPolicy"]


@dataclass
class ARCPolicy(EvictionPolicyBase):
    """Adaptive Replacement Cache (Megiddo & Modha, FAST 2003), accounted in size units.

    Residents are split into T1 (seen once recently) and T2 (seen at least twice); ghost lists
    B1 and B2 remember keys recently evicted from each.  A hit on a B1 ghost grows the target
    size ``p`` of T1 by ``max(|B2| / |B1|, 1)``, a hit on a B2 ghost shrinks it by
    ``max(|B1| / |B2|, 1)``; the victim comes from T1 when ``|T1| > p`` (or ``|T1| == p`` and
    the incoming key is a B2 ghost) or T2 is empty, else from T2.

    Every ``|X|`` is the total *size* of the list's entries (``on_insert(key, size)``; 1 by
    default, which is the paper's ARC over entries), and ``capacity`` is ARC's ``c`` in the same
    units (bytes under a :class:`~kvmm.tiers.ManagedTier`).  With mixed sizes this is
    libCacheSim's ARC: the ghost entering the cache is forgotten before the evictions, each
    eviction step of a miss on no list first forgets one ghost (B1's oldest when
    ``|T1| + |B1| + incoming size > c``, else B2's oldest when the whole directory holds
    ``>= 2c``), and when T1 alone exceeds ``c - incoming size`` and B1 is empty, T1's oldest
    leaves without becoming a ghost.  Ghosts are forgotten only then (and on deletes, below):
    with mixed sizes the directory can exceed ``2c``, as in libCacheSim, and it can keep growing:
    a ghost hit that evicts several small entries for one large one adds several ghosts and
    forgets none (on a 40k-request stream of half one-off keys, ghosts of 17c bytes; tested).
    ``ghost_limit`` (size units, default ``None``: unbounded, exactly libCacheSim) bounds the
    ghosts' total size: after each insert or delete the oldest are forgotten (B1's while
    ``|T1| + |B1| > c``, else B2's, else B1's) until ``|B1| + |B2| <= ghost_limit``.  With unit
    sizes and no deletes ``|B1| + |B2| <= c`` already, so ``ghost_limit >= c`` keeps the paper's
    ARC unchanged.

    ``capacity=None`` takes the tier's capacity when a ManagedTier adopts the policy
    (:meth:`attach`); standalone, or with a value smaller than the residents' total size,
    ``c`` follows the largest resident total seen.

    ``on_remove`` of a key that is not the next victim of the last ``victims(...,
    incoming=...)`` plan (an explicit delete) turns the resident into a ghost and then forgets
    the oldest ghosts until ``|T1| + |B1| <= c`` and the directory holds ``<= 2c``.
    Runtime complexity: O(1) per event (plus the ghosts forgotten), ``victims`` O(n + protected).
    """

    capacity: int | None = None
    ghost_limit: int | None = None
    p: float = field(default=0.0, init=False)
    # key -> size, least recently used first, and each list's total size
    _t1: OrderedDict = field(default_factory=OrderedDict, init=False, repr=False)
    _t2: OrderedDict = field(default_factory=OrderedDict, init=False, repr=False)
    _b1: OrderedDict = field(default_factory=OrderedDict, init=False, repr=False)
    _b2: OrderedDict = field(default_factory=OrderedDict, init=False, repr=False)
    _sizes: dict = field(default_factory=lambda: {"T1": 0, "T2": 0, "B1": 0, "B2": 0}, init=False, repr=False)
    _c: int = field(default=0, init=False, repr=False)
    # The plan of the last victims(incoming=...) call: the paper adapts p *before* REPLACE (with
    # the ghost sizes seen before the victims become ghosts), and each eviction step may forget
    # a ghost first.  on_remove of the plan's next victim applies that step exactly; any other
    # event in between (removing a key that was not offered, say after the caller gave up on
    # the insert) makes the plan stale: then p is adapted afresh on insert.
    _pending: _ArcPlan | None = field(default=None, init=False, repr=False)
    # list name -> its OrderedDict (the four above), so _push/_pop need no lookup table per call
    _lists: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    # Ghosts whose miss adapt() already counted: their next insert enters T2 without adapting again.
    _adapted: set = field(default_factory=set, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._lists = {"T1": self._t1, "T2": self._t2, "B1": self._b1, "B2": self._b2}
        if self.capacity is not None:
            self.capacity = as_count(self.capacity, "capacity", minimum=1)
            self._c = self.capacity
        if self.ghost_limit is not None:
            self.ghost_limit = as_count(self.ghost_limit, "ghost_limit")

    @property
    def c(self) -> int:
        """ARC's cache size ``c`` in size units (see class docstring)."""
        return self._c

    def attach(self, capacity: int) -> None:
        """Told the capacity of the tier that adopts it (ManagedTier does this); with
        ``capacity=None`` it becomes ``c``."""
        capacity = as_count(capacity, "capacity")
        if self.capacity is None:
            self._c = max(self._c, capacity)

    def on_insert(self, key: Hashable, size: int = 1, protected: Iterable[Hashable] = ()) -> tuple:
        size = as_count(size, "size")
        if as_hashable(key) in self._t1 or key in self._t2:
            raise BadInputError(f"ARCPolicy already tracks {key!r}; call on_access for a resident key")
        self._insert_unchecked(key, size)
        return ()

    def _insert_unchecked(self, key: Hashable, size: int = 1) -> None:
        """``on_insert`` of an untracked key and a valid size (the fast hook)."""
        pending, self._pending = self._pending, None
        if key in self._b1 or key in self._b2:
            # Ghost hit: B1 means the recency side was too small, B2 the frequency side.
            if key in self._adapted:  # adapt() counted this miss already
                self._adapted.discard(key)
            else:
                self.p = pending.p if pending is not None and pending.incoming == key else self._adapted_p(key)
            self._pop(key, "B1" if key in self._b1 else "B2")
            self._push(key, size, "T2")
        else:
            self._adapted.discard(key)  # a mark left from an earlier stay as a ghost
            self._push(key, size, "T1")
        self._c = max(self._c, self._sizes["T1"] + self._sizes["T2"])
        if self.ghost_limit is not None:
            self._limit_ghosts(self.ghost_limit)

    def on_access(self, key: Hashable, size: int | None = None, protected: Iterable[Hashable] = ()) -> tuple:
        if size is not None:
            size = as_count(size, "size")
        if as_hashable(key) in self._t1:
            old = self._pop(key, "T1")
        elif key in self._t2:
            old = self._pop(key, "T2")
        else:
            raise UnknownKeyError(f"ARCPolicy does not track {key!r} as resident; expected a key passed to on_insert")
        self._push(key, old if size is None else size, "T2")
        self._after_access()
        return ()

    def _access_unchecked(self, key: Hashable) -> None:
        """``on_access(key)`` of a resident key, same size (the fast hook): to T2's recent end."""
        t1 = self._t1
        if key in t1:
            size = t1.pop(key)
            sizes = self._sizes
            sizes["T1"] -= size
            sizes["T2"] += size
            self._t2[key] = size
        else:
            self._t2.move_to_end(key)
        self._after_access()

    def _after_access(self) -> None:
        self._pending = None
        sizes = self._sizes
        self._c = max(self._c, sizes["T1"] + sizes["T2"])
        if self.ghost_limit is not None:  # an overwrite may follow a planned eviction that made ghosts
            self._limit_ghosts(self.ghost_limit)

    def touch(self, key: Hashable) -> None:
        """A reference the owner does not count as a use (vLLM re-ranks the chunks a request only
        stored, or one still being written): the resident key moves to the recent end of its own
        list, so T1 keeps it as seen once.  Runtime complexity: O(1)."""
        try:
            order = self._t1 if key in self._t1 else self._t2 if key in self._t2 else None
        except TypeError:
            as_hashable(key)  # raises the KvmmError that says what is wrong with the key
            raise
        if order is None:
            as_hashable(key)  # a NaN key is refused as such
            raise UnknownKeyError(f"ARCPolicy does not track {key!r} as resident; expected a key passed to on_insert")
        order.move_to_end(key)
        self._pending = None

    def adapt(self, key: Hashable) -> bool:
        """A miss on ``key`` seen before the owner makes room for it (vLLM's ``on_store_miss``;
        a reference to a ghost that is not stored): when ``key`` is a ghost, adapt ``p`` now, as
        the paper does at a miss before REPLACE, and make it the most recent ghost of its list;
        its next ``on_insert`` then enters T2 without adapting again.  Each call is one miss (a
        second call adapts again).  Returns whether ``key`` is a ghost.  Runtime complexity: O(1)
        amortised."""
        ghosts = self._b1 if as_hashable(key) in self._b1 else self._b2 if key in self._b2 else None
        if ghosts is None:
            return False
        self.p = self._adapted_p(key)
        ghosts.move_to_end(key)
        self._pending = None
        if len(self._adapted) > len(self._b1) + len(self._b2):  # forget marks of ghosts since forgotten
            self._adapted = {k for k in self._adapted if k in self._b1 or k in self._b2}
        self._adapted.add(key)
        return True

    def fast_hooks(self) -> FastHooks | None:
        """``access`` and ``insert`` (:class:`~kvmm.protocols.FastHooks`): ``on_access(key)`` and
        ``on_insert(key, size)`` without the per-event checks, for a caller that guarantees them
        (an accessed key is resident, an inserted one is not, the size is an integer >= 0); the
        same state changes.  No ``insert_many`` / ``evict_first`` (see :meth:`LRUPolicy.fast_hooks`):
        ARC's victim depends on the incoming key, so a caller that evicts must ask ``victims``.
        None for a subclass, whose own hooks must run.  Runtime complexity: O(1) per event
        (plus the ghosts forgotten).
        """
        if type(self) is ARCPolicy:
            return FastHooks(self._access_unchecked, self._insert_unchecked)
        return None

    def on_remove(self, key: Hashable) -> None:
        try:
            resident = key in self._t1 or key in self._t2
        except (TypeError, RecursionError):
            as_hashable(key)  # raises the KvmmError that says what is wrong with the key
            raise
        if not resident:
            as_hashable(key)  # a NaN key is refused as such
            raise UnknownKeyError(f"ARCPolicy does not track {key!r} as resident; expected a key passed to on_insert")
        self._adapted.discard(key)  # a resident's mark is stale: it becomes a ghost anew (or is forgotten)
        plan = self._pending
        if plan is not None and plan.done < len(plan.steps) and plan.steps[plan.done][0] == key:
            # The next step of the eviction plan: forget its ghost, then evict as planned.
            _, forget, to_ghost = plan.steps[plan.done]
            plan.done += 1
            if forget is not None:
                self._pop(*forget)
            source = "T1" if key in self._t1 else "T2"
            size = self._pop(key, source)
            if to_ghost:
                self._push(key, size, "B1" if source == "T1" else "B2")
            return
        self._pending = None
        sizes = self._sizes
        if key in self._t1:
            size = self._t1.pop(key)
            sizes["T1"] -= size
            self._b1[key] = size
            sizes["B1"] += size
        else:
            size = self._t2.pop(key)
            sizes["T2"] -= size
            self._b2[key] = size
            sizes["B2"] += size
        self._trim_ghosts()

    def victims(self, n: int, protected: Iterable[Hashable] = (), *, incoming: Hashable = NO_KEY,
                incoming_size: int = 1) -> list[Hashable]:
        """The next ``n`` victims (without changing state), skipping protected keys.

        With ``incoming`` (the key about to be inserted, of ``incoming_size``), this is
        libCacheSim's eviction loop for that miss, step by step; without it, REPLACE applied
        ``n`` times.  If the list ARC picks has no unprotected key left, the other one is used.
        """
        n = as_count(n, "n")
        incoming_size = as_count(incoming_size, "incoming_size")
        protected = as_key_set(protected, "protected")
        as_hashable(incoming, "incoming")
        if incoming is NO_KEY:
            return self._replace_victims(n, protected)
        in_b1 = incoming in self._b1
        in_b2 = incoming in self._b2
        p = self._adapted_p(incoming)
        sizes = dict(self._sizes)
        if in_b1 or in_b2:  # the ghost is forgotten before the evictions (it is coming back)
            sizes["B1" if in_b1 else "B2"] -= (self._b1 if in_b1 else self._b2)[incoming]
        residents = {"T1": (k for k in self._t1 if k not in protected),
                     "T2": (k for k in self._t2 if k not in protected)}
        # Ghosts in age order: the existing ones (less the incoming key), then this plan's victims.
        ghosts = {"B1": (k for k in self._b1 if k != incoming), "B2": (k for k in self._b2 if k != incoming)}
        new_ghosts: dict[str, deque] = {"B1": deque(), "B2": deque()}
        c = self._c
        steps: list[tuple] = []
        while len(steps) < n:
            forget = None
            keep_ghost = True
            t1, t2 = sizes["T1"], sizes["T2"]
            if in_b1 or in_b2:
                pass  # REPLACE only (cases II and III)
            elif t1 + sizes["B1"] + incoming_size > c:  # case IV-A: L1 = T1 + B1 is full
                if sizes["B1"] > 0:
                    forget = "B1"
                else:
                    keep_ghost = False  # T1 alone fills c: its oldest leaves without a ghost
            elif sum(sizes.values()) >= 2 * c and sizes["B2"] > 0:  # case IV-B: directory full
                forget = "B2"
            if keep_ghost:
                first = "T1" if (t1 > 0 and (t1 > p or (t1 == p and in_b2))) or t2 == 0 else "T2"
            else:
                first = "T1"
            second = "T2" if first == "T1" else "T1"
            source, victim = first, next(residents[first], NO_KEY)
            if victim is NO_KEY:
                source, victim = second, next(residents[second], NO_KEY)
                keep_ghost = True
                if victim is NO_KEY:
                    break
            if forget is not None:
                ghost = next(ghosts[forget], NO_KEY)
                if ghost is NO_KEY:
                    ghost = new_ghosts[forget].popleft()
                    forget_size = self._t1[ghost] if forget == "B1" else self._t2[ghost]
                else:
                    forget_size = (self._b1 if forget == "B1" else self._b2)[ghost]
                sizes[forget] -= forget_size
                forget = (ghost, forget)
            size = (self._t1 if source == "T1" else self._t2)[victim]
            sizes[source] -= size
            if keep_ghost:
                ghost_list = "B1" if source == "T1" else "B2"
                sizes[ghost_list] += size
                new_ghosts[ghost_list].append(victim)
            steps.append((victim, forget, keep_ghost))
        self._pending = _ArcPlan(incoming, p, steps)
        return [step[0] for step in steps]

    def _replace_victims(self, n: int, protected: set | frozenset) -> list[Hashable]:
        """``victims`` without an incoming key: REPLACE ``n`` times (no ghost is forgotten, so
        only the residents' sizes and ``p`` decide), each step from T1 when ``|T1| > p`` or T2
        is empty, else from T2, falling back to the other list when one has no unprotected key."""
        p, sizes = self.p, self._sizes
        t1, t2 = sizes["T1"], sizes["T2"]
        t1_entries, t2_entries = iter(self._t1.items()), iter(self._t2.items())
        out: list[Hashable] = []
        while len(out) < n:
            from_t1 = (t1 > 0 and t1 > p) or t2 == 0
            victim = None
            for entries in ((t1_entries, t2_entries) if from_t1 else (t2_entries, t1_entries)):
                for entry in entries:  # resumes where the last step of this list stopped
                    if entry[0] not in protected:
                        victim = entry
                        break
                if victim is not None:
                    break
            if victim is None:
                break  # no unprotected resident left
            out.append(victim[0])
            if entries is t1_entries:
                t1 -= victim[1]
            else:
                t2 -= victim[1]
        return out

    def keys(self) -> list[Hashable]:
        """Resident keys (T1 then T2, least recent first); ghosts are not included."""
        return list(self._t1) + list(self._t2)

    def ghosts(self) -> tuple[list[Hashable], list[Hashable]]:
        """The ghost lists (B1, B2), least recent first."""
        return list(self._b1), list(self._b2)

    def lists(self) -> dict[str, list[Hashable]]:
        """All four lists, least recent first (for inspection and tests)."""
        return {"T1": list(self._t1), "T2": list(self._t2), "B1": list(self._b1), "B2": list(self._b2)}

    def resident_size(self) -> int:
        """``|T1| + |T2|``: the residents' total size (ManagedTier's ``check`` holds it to its bytes)."""
        return self._sizes["T1"] + self._sizes["T2"]

    def list_sizes(self) -> dict[str, int]:
        """The total size of each list (``|T1|``, ``|T2|``, ``|B1|``, ``|B2|`` in size units)."""
        return dict(self._sizes)

    def __len__(self) -> int:
        return len(self._t1) + len(self._t2)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._t1 or key in self._t2

    def check(self) -> None:
        """Assert every invariant (used by tests)."""
        lists = {"T1": self._t1, "T2": self._t2, "B1": self._b1, "B2": self._b2}
        # The four lists are disjoint.
        assert sum(len(x) for x in lists.values()) == len(set().union(*lists.values()))
        for name, entries in lists.items():
            # Each list's recorded total is the sum of its entries' sizes, all integers >= 0.
            assert all(isinstance(v, int) and v >= 0 for v in entries.values())
            assert self._sizes[name] == sum(entries.values())
        c = self._c
        # c covers the residents (it only grows).
        assert self._sizes["T1"] + self._sizes["T2"] <= c or c == 0
        # The target size of T1 stays in [0, c].
        assert 0.0 <= self.p <= c
        # A fixed capacity is a lower bound of c.
        if self.capacity is not None:
            assert c >= self.capacity
        # The ghosts respect the limit, when there is one (it is enforced on insert and delete).
        if self.ghost_limit is not None:
            assert self._sizes["B1"] + self._sizes["B2"] <= self.ghost_limit or self._pending is not None
        # A miss counted by adapt() is marked only while its key is not resident.
        assert self._adapted.isdisjoint(self._t1) and self._adapted.isdisjoint(self._t2)
        # A pending plan's victims not yet applied are distinct (a plan never repeats a key).
        if self._pending is not None:
            left = [step[0] for step in self._pending.steps[self._pending.done:]]
            assert len(left) == len(set(left))

    def _adapted_p(self, incoming: Hashable) -> float:
        """``p`` after a ghost hit on ``incoming`` (unchanged when it is not a ghost)."""
        if incoming is NO_KEY:
            return self.p
        b1, b2 = self._sizes["B1"], self._sizes["B2"]
        if incoming in self._b1:
            # A zero total (only zero-size ghosts) counts as the minimum step, 1.
            delta = max(b2 / b1, 1.0) if b1 > 0 else 1.0
            return min(self.p + delta, float(self._c))
        if incoming in self._b2:
            delta = max(b1 / b2, 1.0) if b2 > 0 else 1.0
            return max(self.p - delta, 0.0)
        return self.p

    def _push(self, key: Hashable, size: int, name: str) -> None:
        self._lists[name][key] = size
        self._sizes[name] += size

    def _pop(self, key: Hashable, name: str) -> int:
        size = self._lists[name].pop(key)
        self._sizes[name] -= size
        return size

    def _trim_ghosts(self) -> None:
        """After a delete: forget the oldest ghosts until the paper's directory bounds hold."""
        c, sizes, b1 = self._c, self._sizes, self._b1
        # Keep |T1| + |B1| <= c by forgetting the oldest B1 ghosts ...
        while sizes["T1"] + sizes["B1"] > c and b1:
            sizes["B1"] -= b1.popitem(last=False)[1]
        # ... and the whole directory within 2c by forgetting the oldest B2, then B1, ghosts.
        total = sizes["T1"] + sizes["T2"] + sizes["B1"] + sizes["B2"]
        for name, ghosts in (("B2", self._b2), ("B1", b1)):
            while total > 2 * c and ghosts:
                size = ghosts.popitem(last=False)[1]
                sizes[name] -= size
                total -= size
        if self.ghost_limit is not None:
            self._limit_ghosts(self.ghost_limit)

    def _limit_ghosts(self, limit: int) -> None:
        """Forget the oldest ghosts until ``|B1| + |B2| <= limit`` (see ``ghost_limit``)."""
        sizes = self._sizes
        while sizes["B1"] + sizes["B2"] > limit:
            if self._b1 and (sizes["T1"] + sizes["B1"] > self._c or not self._b2):
                self._pop(next(iter(self._b1)), "B1")
            else:
                self._pop(next(iter(self._b2)), "B2")


@dataclass
class _ArcPlan:
    """The eviction plan of one ``ARCPolicy.victims(incoming=...)`` call.

    ``steps[i] = (victim, forget, to_ghost)``: first forget the ghost ``forget = (key, list)``
    (or nothing), then evict ``victim``, which becomes a ghost when ``to_ghost``.  ``done``
    counts the steps already applied by ``on_remove``.
    """

    incoming: Hashable
    p: float
    steps: list
    done: int = 0
