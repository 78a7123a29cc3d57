"""Eviction orders: LRU, FIFO, LFU and ARC, each an :class:`~kvmm.protocols.EvictionPolicy`.

A policy only *orders* keys; the structure that owns the data removes them.  The calling
convention (what :class:`kvmm.tiers.ManagedTier` does):

* a new key was stored: ``on_insert(key)``; an existing one was read or overwritten:
  ``on_access(key)``; one was evicted or deleted: ``on_remove(key)``;
* to make room: ``victims(n, protected)`` lists up to ``n`` keys in eviction order, skipping
  ``protected``, *without* removing them; the caller removes some prefix of that list and calls
  ``on_remove`` for each.  Asking twice without changes in between gives the same answer.

ARC also takes ``victims(..., incoming=key)``: the key whose insertion needs the room.  ARC
adapts its target size ``p`` when that key is a ghost (recently evicted), *before* choosing
the victim; passing ``incoming`` reproduces Megiddo & Modha's algorithm exactly (the tests
replay it against a line-by-line transcription of the paper).  The other policies accept and
ignore it, so callers can always pass it.

Keys are any hashable values.  Calling ``on_access``/``on_remove`` for a key the policy does
not track raises :class:`~kvmm.errors.UnknownKeyError`; ``on_insert`` of a tracked key raises
:class:`~kvmm.errors.BadInputError` (use ``on_access``).  Either way nothing changes.

Policies are small dataclasses (kvpress style): configuration is validated in
``__post_init__``, state lives in private ordered containers.  Runtime complexity: O(1) per
event for LRU/FIFO/ARC (``OrderedDict``), O(log n) for LFU (``SortedDict``); ``victims`` is
O(n + number of protected keys skipped).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from itertools import count
from typing import Any, Callable, Hashable, Iterable, Iterator

from sortedcontainers import SortedDict

from kvmm._validate import as_count
from kvmm.errors import BadInputError, UnknownKeyError

__all__ = ["LRUPolicy", "FIFOPolicy", "LFUPolicy", "ARCPolicy", "EVICTION_POLICIES", "make_eviction_policy"]


@dataclass
class LRUPolicy:
    """Least recently used first.  Insert and access move a key to the most-recent end.

    Runtime complexity: O(1) per event.
    """

    # key -> None, least recently used first
    _order: OrderedDict = field(default_factory=OrderedDict, init=False, repr=False)

    def on_insert(self, key: Hashable) -> None:
        _require_absent(self._order, key, self)
        self._order[key] = None

    def on_access(self, key: Hashable) -> None:
        _require_present(self._order, key, self)
        self._order.move_to_end(key)

    def on_remove(self, key: Hashable) -> None:
        _require_present(self._order, key, self)
        del self._order[key]

    def victims(self, n: int, protected: Iterable[Hashable] = (), *, incoming: Hashable = None) -> list[Hashable]:
        return _first_unprotected(iter(self._order), n, protected)

    def keys(self) -> list[Hashable]:
        """Tracked keys in eviction order (next victim first)."""
        return list(self._order)

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._order

    def check(self) -> None:
        """Assert every invariant (used by tests)."""
        # The order holds each tracked key exactly once (an OrderedDict cannot repeat keys).
        assert len(self._order) == len(set(self._order))


@dataclass
class FIFOPolicy(LRUPolicy):
    """First in, first out: accesses do not change the order.  Runtime complexity: O(1) per event."""

    def on_access(self, key: Hashable) -> None:
        _require_present(self._order, key, self)


@dataclass
class LFUPolicy:
    """Least frequently used first; ties go to the least recently used.

    A key's count starts at 1 on insert and grows by 1 per access; a removed key forgets its
    count.  Runtime complexity: O(log n) per event.
    """

    _tick: Iterator[int] = field(default_factory=count, init=False, repr=False)
    # key -> (count, last tick); the SortedDict maps (count, last tick) -> key: eviction order.
    _rank: dict = field(default_factory=dict, init=False, repr=False)
    _order: SortedDict = field(default_factory=SortedDict, init=False, repr=False)

    def on_insert(self, key: Hashable) -> None:
        _require_absent(self._rank, key, self)
        rank = (1, next(self._tick))
        self._rank[key] = rank
        self._order[rank] = key

    def on_access(self, key: Hashable) -> None:
        _require_present(self._rank, key, self)
        hits, _ = self._rank[key]
        del self._order[self._rank[key]]
        rank = (hits + 1, next(self._tick))
        self._rank[key] = rank
        self._order[rank] = key

    def on_remove(self, key: Hashable) -> None:
        _require_present(self._rank, key, self)
        del self._order[self._rank.pop(key)]

    def victims(self, n: int, protected: Iterable[Hashable] = (), *, incoming: Hashable = None) -> list[Hashable]:
        return _first_unprotected(iter(self._order.values()), n, protected)

    def frequency(self, key: Hashable) -> int:
        _require_present(self._rank, key, self)
        return self._rank[key][0]

    def keys(self) -> list[Hashable]:
        return list(self._order.values())

    def __len__(self) -> int:
        return len(self._rank)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._rank

    def check(self) -> None:
        """Assert every invariant (used by tests)."""
        # The two maps are inverse of each other.
        assert len(self._rank) == len(self._order)
        for key, rank in self._rank.items():
            assert self._order[rank] == key
            # Counts are positive.
            assert rank[0] >= 1


@dataclass
class ARCPolicy:
    """Adaptive Replacement Cache (Megiddo & Modha, FAST 2003).

    Residents are split into T1 (seen once recently) and T2 (seen at least twice); ghost lists
    B1 and B2 remember keys recently evicted from each.  A hit on a B1 ghost grows the target
    size ``p`` of T1, a hit on a B2 ghost shrinks it; the victim comes from T1 when
    ``|T1| > p`` (or ``|T1| == p`` and the incoming key is a B2 ghost), else from T2.

    ``capacity`` is ARC's ``c``, the cache size in entries, which bounds the ghost lists
    (``|T1| + |B1| <= c``, ``|T1| + |T2| + |B1| + |B2| <= 2c``).  ``None`` (or a value smaller
    than the number of residents) lets ``c`` follow the largest number of residents seen, which
    suits tiers whose entries vary in size and whose capacity is in bytes.

    ``on_remove`` turns a resident into a ghost (an explicit delete counts as an eviction).
    Runtime complexity: O(1) per event, ``victims`` O(n + protected).
    """

    capacity: int | None = None
    p: float = field(default=0.0, init=False)
    _t1: OrderedDict = field(default_factory=OrderedDict, init=False, repr=False)
    _t2: OrderedDict = field(default_factory=OrderedDict, init=False, repr=False)
    _b1: OrderedDict = field(default_factory=OrderedDict, init=False, repr=False)
    _b2: OrderedDict = field(default_factory=OrderedDict, init=False, repr=False)
    _c: int = field(default=0, init=False, repr=False)
    # (incoming key, adapted p, victims offered) from the last victims(incoming=...) call: the
    # paper adapts p *before* REPLACE, i.e. with the ghost list sizes seen before the victims
    # become ghosts.  Any other event in between (removing a key that was not offered, say
    # after the caller gave up on the insert) makes it stale: then p is adapted afresh.
    _pending: tuple | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.capacity is not None:
            self.capacity = as_count(self.capacity, "capacity", minimum=1)
            self._c = self.capacity

    @property
    def c(self) -> int:
        """The cache size in entries that bounds the ghost lists (see class docstring)."""
        return self._c

    def on_insert(self, key: Hashable) -> None:
        if key in self._t1 or key in self._t2:
            raise BadInputError(f"ARCPolicy already tracks {key!r}; call on_access for a resident key")
        pending, self._pending = self._pending, None
        if key in self._b1 or key in self._b2:
            # Ghost hit: B1 means the recency side was too small, B2 the frequency side.
            self.p = pending[1] if pending is not None and pending[0] == key else self._adapted_p(key)
            del (self._b1 if key in self._b1 else self._b2)[key]
            self._t2[key] = None
        else:
            self._t1[key] = None
        self._c = max(self._c, len(self._t1) + len(self._t2))
        self._trim_ghosts()

    def on_access(self, key: Hashable) -> None:
        if key in self._t1:
            del self._t1[key]
            self._t2[key] = None
            self._pending = None
        elif key in self._t2:
            self._t2.move_to_end(key)
            self._pending = None
        else:
            raise UnknownKeyError(f"ARCPolicy does not track {key!r} as resident; expected a key passed to on_insert")

    def on_remove(self, key: Hashable) -> None:
        if self._pending is not None and key not in self._pending[2]:
            self._pending = None
        if key in self._t1:
            del self._t1[key]
            self._b1[key] = None
        elif key in self._t2:
            del self._t2[key]
            self._b2[key] = None
        else:
            raise UnknownKeyError(f"ARCPolicy does not track {key!r} as resident; expected a key passed to on_insert")
        self._trim_ghosts()

    def victims(self, n: int, protected: Iterable[Hashable] = (), *, incoming: Hashable = None) -> list[Hashable]:
        """ARC's REPLACE applied ``n`` times (without changing state), skipping protected keys."""
        n = as_count(n, "n")
        protected = _as_set(protected)
        p = self._adapted_p(incoming)
        incoming_in_b2 = incoming is not None and incoming in self._b2
        t1_left, t2_left = len(self._t1), len(self._t2)
        t1_iter = (k for k in self._t1 if k not in protected)
        t2_iter = (k for k in self._t2 if k not in protected)
        out: list[Hashable] = []
        while len(out) < n:
            from_t1 = t1_left >= 1 and ((incoming_in_b2 and t1_left == p) or t1_left > p)
            first, second = (t1_iter, t2_iter) if from_t1 else (t2_iter, t1_iter)
            key = next(first, None)
            took_first = key is not None
            if key is None:  # the preferred list has nothing evictable left: take the other
                key = next(second, None)
                if key is None:
                    break
            if took_first == from_t1:
                t1_left -= 1
            else:
                t2_left -= 1
            out.append(key)
        if incoming is not None:
            ghost_hit = incoming in self._b1 or incoming in self._b2
            self._pending = (incoming, p, frozenset(out)) if ghost_hit else None
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

    def __len__(self) -> int:
        return len(self._t1) + len(self._t2)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._t1 or key in self._t2

    def check(self) -> None:
        """Assert every invariant (used by tests)."""
        lists = (self._t1, self._t2, self._b1, self._b2)
        # The four lists are disjoint.
        assert sum(len(x) for x in lists) == len(set().union(*lists))
        c = self._c
        # c covers every resident (it only grows).
        assert len(self._t1) + len(self._t2) <= c or c == 0
        # ARC's directory bounds: L1 = T1 + B1 <= c, and L1 + L2 <= 2c.
        assert len(self._t1) + len(self._b1) <= c
        assert sum(len(x) for x in lists) <= 2 * c
        # The target size of T1 stays in [0, c].
        assert 0.0 <= self.p <= c
        # A fixed capacity is a lower bound of c.
        if self.capacity is not None:
            assert c >= self.capacity

    def _adapted_p(self, incoming: Hashable) -> float:
        """``p`` after a ghost hit on ``incoming`` (unchanged when it is not a ghost)."""
        if incoming is None:
            return self.p
        if incoming in self._b1:
            delta = max(len(self._b2) / len(self._b1), 1.0)
            return min(self.p + delta, float(self._c))
        if incoming in self._b2:
            delta = max(len(self._b1) / len(self._b2), 1.0)
            return max(self.p - delta, 0.0)
        return self.p

    def _trim_ghosts(self) -> None:
        c = self._c
        # Keep |T1| + |B1| <= c by forgetting the oldest B1 ghosts ...
        while len(self._t1) + len(self._b1) > c and self._b1:
            self._b1.popitem(last=False)
        # ... and the whole directory within 2c by forgetting the oldest B2 ghosts.
        while len(self._t1) + len(self._t2) + len(self._b1) + len(self._b2) > 2 * c and self._b2:
            self._b2.popitem(last=False)
        while len(self._t1) + len(self._t2) + len(self._b1) + len(self._b2) > 2 * c and self._b1:
            self._b1.popitem(last=False)


#: Policy name -> factory (used by the CLI and the simulator).
EVICTION_POLICIES: dict[str, Callable[..., Any]] = {
    "lru": LRUPolicy,
    "fifo": FIFOPolicy,
    "lfu": LFUPolicy,
    "arc": ARCPolicy,
}


def make_eviction_policy(name: str, **kwargs: Any):
    """A fresh policy by name (``lru``, ``fifo``, ``lfu``, ``arc``)."""
    try:
        factory = EVICTION_POLICIES[name.lower()]
    except (KeyError, AttributeError):
        raise BadInputError(f"unknown eviction policy {name!r}; expected one of {sorted(EVICTION_POLICIES)}") from None
    return factory(**kwargs)


def _first_unprotected(keys: Iterator[Hashable], n: int, protected: Iterable[Hashable]) -> list[Hashable]:
    n = as_count(n, "n")
    protected = _as_set(protected)
    out: list[Hashable] = []
    if n == 0:
        return out
    for key in keys:
        if key not in protected:
            out.append(key)
            if len(out) == n:
                break
    return out


def _as_set(protected: Iterable[Hashable]) -> set | frozenset:
    return protected if isinstance(protected, (set, frozenset)) else set(protected)


def _require_present(table: Any, key: Hashable, policy: Any) -> None:
    if key not in table:
        raise UnknownKeyError(f"{type(policy).__name__} does not track {key!r}; expected a key passed to on_insert")


def _require_absent(table: Any, key: Hashable, policy: Any) -> None:
    if key in table:
        raise BadInputError(f"{type(policy).__name__} already tracks {key!r}; call on_access for a present key")
