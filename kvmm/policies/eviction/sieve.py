"""SIEVE (Zhang et al., NSDI 2024) as libCacheSim's ``Sieve.c`` runs it: :class:`SIEVEPolicy`.

One FIFO queue, newest at the head, with a visited bit per entry and a *hand*:

* insert: at the head, not visited; a hit sets the visited bit (no move);
* evict: start at the hand (at the tail, the oldest entry, when the hand is unset); while the
  entry under it is visited, clear its bit and step towards the head, wrapping to the tail past
  the head; evict the first unvisited entry; the hand then rests on the victim's newer neighbour
  (unset when the victim was the head, so the next sweep starts at the tail again).

This is the paper's algorithm; libCacheSim matches it (the ``freq`` it keeps is the visited bit:
a hit sets it to 1, the sweep lowers it to 0).  Sizes do not change the order: the caller evicts
a prefix of ``victims`` until the bytes fit, as libCacheSim's ``get`` evicts until they do.

``victims(n, protected)`` simulates the sweep without changing anything; ``on_remove`` of the
last plan's next victim applies its step (clears the bits the hand passed on the way, moves the
hand).  Protected keys are swept as if evicted and then not listed: they stay where they are,
visited bit cleared only if the hand passed them visited.  ``on_remove`` of any other key (an
explicit delete, libCacheSim's ``Sieve_remove``) unlinks it; a hand resting on it moves to its
newer neighbour.  ``incoming`` / ``incoming_size`` are accepted and ignored.
Runtime complexity: O(1) per insert, access and delete; ``victims`` O(n + entries swept +
protected), amortised O(1) per eviction.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

from kvmm._validate import as_count, as_hashable, as_key_set
from kvmm.policies.eviction._checks import Sentinel, check_size, require_absent, require_present
from kvmm.protocols import EvictionPolicyBase, FastHooks

__all__ = ["SIEVEPolicy"]

_NEWER, _OLDER, _VISITED = 0, 1, 2  # fields of a node: [newer key, older key, visited]

_END = Sentinel(__name__, "_END")  # no neighbour / hand unset (None is a valid key)


@dataclass
class SIEVEPolicy(EvictionPolicyBase):
    """SIEVE with libCacheSim's rules (see the module docstring); no options.

    Runtime complexity: O(1) per event; ``victims`` amortised O(1) per victim.
    """

    # key -> [newer, older, visited]: a doubly linked list, newest at _head, oldest at _tail
    _nodes: dict = field(default_factory=dict, init=False, repr=False)
    _head: object = field(default=_END, init=False, repr=False)
    _tail: object = field(default=_END, init=False, repr=False)
    _hand: object = field(default=_END, init=False, repr=False)
    # the last victims() plan (None once anything else happened)
    _pending: _SievePlan | None = field(default=None, init=False, repr=False)

    def on_insert(self, key: Hashable, size: int = 1, protected: Iterable[Hashable] = ()) -> tuple:
        as_count(size, "size")
        require_absent(self._nodes, key, self)
        self._insert_unchecked(key, size)
        return ()

    def _insert_unchecked(self, key: Hashable, size: int = 1) -> None:
        """``on_insert`` of an untracked key (the fast hook): at the head, not visited."""
        self._pending = None
        head = self._head
        self._nodes[key] = [_END, head, False]
        if head is _END:
            self._tail = key
        else:
            self._nodes[head][_NEWER] = key
        self._head = key

    def on_access(self, key: Hashable, size: int | None = None, protected: Iterable[Hashable] = ()) -> tuple:
        check_size(size)
        require_present(self._nodes, key, self)
        self._access_unchecked(key)
        return ()

    def _access_unchecked(self, key: Hashable) -> None:
        """``on_access(key)`` of a tracked key (the fast hook): set its visited bit."""
        self._nodes[key][_VISITED] = True
        self._pending = None

    def on_remove(self, key: Hashable) -> None:
        require_present(self._nodes, key, self)
        plan = self._pending
        if plan is not None and plan.done < len(plan.steps) and plan.steps[plan.done][0] == key:
            _, cleared = plan.steps[plan.done]
            plan.done += 1
            for swept in cleared:
                self._nodes[swept][_VISITED] = False
            self._hand = self._nodes[key][_NEWER]  # Sieve_evict: the victim's newer neighbour
            self._unlink(key)
            return
        self._pending = None
        if self._hand is not _END and self._hand == key:
            self._hand = self._nodes[key][_NEWER]  # Sieve_remove_obj moves a hand resting on it
        self._unlink(key)

    def victims(self, n: int, protected: Iterable[Hashable] = (), *, incoming: Hashable = None,
                incoming_size: int = 1) -> list[Hashable]:
        """The next ``n`` SIEVE evictions (without changing state), skipping protected keys."""
        n = as_count(n, "n")
        as_count(incoming_size, "incoming_size")
        protected = as_key_set(protected, "protected")
        as_hashable(incoming, "incoming")
        steps = self._plan(n, protected)
        self._pending = _SievePlan(steps)
        return [step[0] for step in steps]

    def fast_hooks(self) -> FastHooks | None:
        """``access`` and ``insert`` (:class:`~kvmm.protocols.FastHooks`): ``on_access(key)`` and
        ``on_insert(key, size)`` without the per-event checks, for a caller that guarantees them
        (an accessed key is tracked, an inserted one is not).  No ``insert_many`` /
        ``evict_first``: with every older entry visited, the hand can reach an entry inserted
        earlier in the same batch, so evicting for a batch before inserting it is not the same
        as one key at a time.  None for a subclass, whose own hooks must run.
        Runtime complexity: O(1) per event.
        """
        if type(self) is SIEVEPolicy:
            return FastHooks(self._access_unchecked, self._insert_unchecked)
        return None

    # -- inspection -------------------------------------------------------------------------
    def keys(self) -> list[Hashable]:
        """Tracked keys, oldest first (the queue; ``victims`` gives the eviction order)."""
        out = []
        key = self._tail
        while key is not _END:
            out.append(key)
            key = self._nodes[key][_NEWER]
        return out

    def visited(self, key: Hashable) -> bool:
        require_present(self._nodes, key, self)
        return self._nodes[key][_VISITED]

    def hand(self) -> tuple[bool, Hashable]:
        """``(set, key)``: whether the hand is set, and the key it rests on (None when unset)."""
        return (False, None) if self._hand is _END else (True, self._hand)

    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._nodes

    def check(self) -> None:
        """Assert every invariant (used by tests)."""
        nodes = self._nodes
        # Walking from the tail towards the head visits every tracked key once, and the older
        # links mirror the newer ones.
        order = self.keys()
        assert len(order) == len(nodes) == len(set(order))
        assert (self._head is _END) == (self._tail is _END) == (not nodes)
        previous = _END
        for key in order:
            assert nodes[key][_OLDER] is previous or nodes[key][_OLDER] == previous
            previous = key
        assert not order or self._head == order[-1]
        # Visited bits are booleans.
        assert all(isinstance(node[_VISITED], bool) for node in nodes.values())
        # The hand is unset or rests on a tracked key.
        assert self._hand is _END or self._hand in nodes
        # A pending plan's victims not yet applied are distinct, tracked keys.
        if self._pending is not None:
            left = [step[0] for step in self._pending.steps[self._pending.done:]]
            assert len(left) == len(set(left)) and all(k in nodes for k in left)

    # -- helpers ----------------------------------------------------------------------------
    def _unlink(self, key: Hashable) -> None:
        newer, older, _ = self._nodes.pop(key)
        if older is _END:
            self._tail = newer
        else:
            self._nodes[older][_NEWER] = newer
        if newer is _END:
            self._head = older
        else:
            self._nodes[newer][_OLDER] = older

    def _plan(self, n: int, protected: set | frozenset) -> list[tuple]:
        """Simulate ``n`` unprotected evictions: ``(victim, keys whose bit the hand cleared on
        the way)``; swept-out keys are skipped as if unlinked."""
        nodes = self._nodes
        gone: set = set()  # keys this plan evicted (protected ones included)
        cleared: set = set()  # keys whose visited bit this plan cleared
        steps: list[tuple] = []
        swept: list = []
        left = len(nodes)
        hand = self._hand

        def newer_of(key):  # the nearest newer key not yet gone (_END past the head)
            key = nodes[key][_NEWER]
            while key is not _END and key in gone:
                key = nodes[key][_NEWER]
            return key

        def oldest():
            key = self._tail
            while key in gone:
                key = nodes[key][_NEWER]
            return key

        while len(steps) < n and left:
            key = oldest() if hand is _END else hand
            while nodes[key][_VISITED] and key not in cleared:
                cleared.add(key)
                swept.append(key)
                key = newer_of(key)
                if key is _END:
                    key = oldest()
            hand = newer_of(key)
            gone.add(key)
            left -= 1
            if key not in protected:
                steps.append((key, swept))
                swept = []
        return steps


@dataclass
class _SievePlan:
    """One ``victims`` call: ``steps[i] = (victim, keys whose bit the hand cleared before it)``;
    ``done`` counts the steps ``on_remove`` applied."""

    steps: list
    done: int = 0
