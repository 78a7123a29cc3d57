"""CLOCK (second chance), as libCacheSim's ``Clock``: an :class:`~kvmm.protocols.EvictionPolicy`.

Keys sit in a FIFO queue (oldest at the *tail*, where the hand points); each has a counter
``freq``.  An insert puts the key at the head with ``freq = init_freq``; a hit adds 1 to
``freq`` unless it already holds ``max_freq = 2**n_bit_counter - 1``.  To evict, the hand looks
at the tail key: if its ``freq >= 1`` it loses 1 and goes back to the head (its second chance),
and the hand looks at the new tail; the first key found with ``freq == 0`` is evicted.

With ``n_bit_counter=1`` (the default) this is Corbató's CLOCK / second chance: one reference
bit.  With ``n_bit_counter > 1`` the bit is a saturating frequency counter and a key survives up
to ``max_freq`` passes of the hand (libCacheSim names it ``Clock-N``, a generalised CLOCK).
Where libCacheSim differs from the textbook rule, kvmm follows libCacheSim:

* a new key starts with ``init_freq = 0`` by default: no second chance until it is hit again.
  In paging CLOCK the access that loads a page sets its reference bit (``init_freq=1``);
* ``init_freq`` (libCacheSim's ``init-freq``) is *not* capped at ``max_freq``: an insert with
  ``init_freq > max_freq`` gets that many second chances, while hits never raise a counter
  above ``max_freq``;
* the hand does not stop at a fixed ring position: a key given a second chance is *moved* to
  the head (libCacheSim's list), which orders keys exactly as a ring with a hand does.

Sizes (bytes under a :class:`~kvmm.tiers.ManagedTier`) do not change the order: like
libCacheSim's ``get``, the caller evicts victims until the incoming entry fits (ManagedTier
removes a prefix of :meth:`victims`), so each eviction step is the same whatever the sizes.

``victims(n, protected)`` is the next ``n`` keys that successive evictions would remove, found
by running the hand on a *simulated* copy (counters cleared, keys moved), so the order itself
does not change; a protected key is passed over as if absent (its counter is not touched and it
keeps its place).  ``on_remove`` of the next key of the last ``victims`` answer applies that
eviction step for real (the keys passed over lose 1 and move to the head, as in libCacheSim);
``on_remove`` of any other key (an explicit delete, libCacheSim's ``Clock_remove``) takes the key
out of the queue and changes nothing else.  ``victims`` accepts ``incoming``/``incoming_size``
and ignores them (CLOCK's choice does not depend on the incoming entry).

Runtime complexity: O(1) per insert, access and delete; an eviction step O(keys passed over),
amortised O(1) with the default counter (each pass clears a counter a hit set) and at most
``max(init_freq, max_freq)`` passes over the queue in the worst case; ``victims(n)`` the same
for ``n`` steps plus the protected keys passed over.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

from kvmm._validate import as_count, as_hashable, as_key_set
from kvmm.policies.eviction._checks import check_size, require_absent, require_present
from kvmm.protocols import EvictionPolicyBase, FastHooks

__all__ = ["ClockPolicy", "clock_max_freq"]

#: libCacheSim keeps counters in a C ``int``: ``1 << n_bit_counter`` must not overflow it.
MAX_N_BIT_COUNTER = 30
MAX_INIT_FREQ = 2**31 - 1


@dataclass
class ClockPolicy(EvictionPolicyBase):
    """CLOCK with an ``n_bit_counter``-bit counter per key (see the module docstring).

    ``init_freq``: the counter of a newly inserted key (libCacheSim's default 0);
    ``n_bit_counter``: the counter's bits, ``max_freq = 2**n_bit_counter - 1`` (default 1: one
    reference bit).  Runtime complexity: O(1) per event, eviction steps amortised O(1).
    """

    init_freq: int = 0
    n_bit_counter: int = 1
    # key -> freq, in queue order: first = tail (where the hand looks first), last = head
    _queue: OrderedDict = field(default_factory=OrderedDict, init=False, repr=False)
    _max_freq: int = field(default=1, init=False, repr=False)
    # the last victims() answer: (protected keys, victims, how many were already removed);
    # any other event makes it stale (None)
    _plan: tuple | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.init_freq, self.n_bit_counter = clock_params(self.init_freq, self.n_bit_counter)
        self._max_freq = clock_max_freq(self.n_bit_counter)

    @property
    def max_freq(self) -> int:
        """The counter's saturation value, ``2**n_bit_counter - 1``."""
        return self._max_freq

    def on_insert(self, key: Hashable, size: int = 1, protected: Iterable[Hashable] = ()) -> tuple:
        as_count(size, "size")
        require_absent(self._queue, key, self)
        self._insert_unchecked(key, size)
        return ()

    def on_access(self, key: Hashable, size: int | None = None, protected: Iterable[Hashable] = ()) -> tuple:
        check_size(size)
        require_present(self._queue, key, self)
        self._access_unchecked(key)
        return ()

    def on_remove(self, key: Hashable) -> None:
        require_present(self._queue, key, self)
        plan, self._plan = self._plan, None
        if plan is not None and plan[2] < len(plan[1]) and plan[1][plan[2]] == key:
            # the next planned eviction: run the hand for real (the keys it passes lose 1)
            evicted = self._evict_step(plan[0])
            assert evicted == key, (evicted, key)  # nothing changed since victims() planned it
            self._plan = (plan[0], plan[1], plan[2] + 1)
            return
        del self._queue[key]  # an explicit delete: no other key changes

    def victims(self, n: int, protected: Iterable[Hashable] = (), *, incoming: Hashable = None,
                incoming_size: int = 1) -> list[Hashable]:
        """The keys the next ``n`` evictions would remove, in order, passing over ``protected``
        keys; the state does not change.  Runtime complexity: O(keys the hand passes over)."""
        n = as_count(n, "n")
        as_count(incoming_size, "incoming_size")
        protected = as_key_set(protected, "protected")
        as_hashable(incoming, "incoming")
        out: list[Hashable] = []
        # The hand over a simulated queue: the real queue from the tail, then the keys it sent
        # back to the head (with their lowered counters) in the order they went there.
        ahead = iter(self._queue.items())
        sent_back: deque = deque()
        while len(out) < n:
            entry = next(ahead, None)
            if entry is None:
                if not sent_back:
                    break
                entry = sent_back.popleft()
            elif entry[0] in protected:
                continue  # passed over: not touched, keeps its place
            key, freq = entry
            if freq >= 1:
                sent_back.append((key, freq - 1))
            else:
                out.append(key)
        self._plan = (frozenset(protected), out, 0)  # frozen: the caller may change its set later
        return out

    def fast_hooks(self) -> FastHooks | None:
        """``access`` and ``insert`` (:class:`~kvmm.protocols.FastHooks`): ``on_access`` / ``on_insert``
        without the per-event checks, for a caller that guarantees them (an accessed key is
        tracked, an inserted one is not, the size is valid).  No ``insert_many`` /
        ``evict_first``: evicting a request's victims before inserting its new keys is not the
        same as one key at a time (the hand can reach a key inserted earlier in the request and
        evict it, while older keys survive their second chance), so a caller that evicts asks
        :meth:`victims`.  None for a subclass, whose own hooks must run.
        Runtime complexity: O(1) per event.
        """
        if type(self) is ClockPolicy:
            return FastHooks(self._access_unchecked, self._insert_unchecked)
        return None

    def _insert_unchecked(self, key: Hashable, size: int = 1) -> None:
        self._plan = None
        self._queue[key] = self.init_freq

    def _access_unchecked(self, key: Hashable) -> None:
        self._plan = None
        queue = self._queue
        if queue[key] < self._max_freq:
            queue[key] += 1

    def _evict_step(self, protected: set | frozenset) -> Hashable:
        """One eviction of libCacheSim's ``Clock_evict``, passing over ``protected`` keys (set
        aside and put back at the tail in their order); returns the evicted key."""
        queue = self._queue
        aside: list = []
        while True:
            key = next(iter(queue))
            if key in protected:
                aside.append((key, queue.pop(key)))
                continue
            freq = queue[key]
            if freq >= 1:
                queue[key] = freq - 1
                queue.move_to_end(key)
            else:
                del queue[key]
                break
        for k, freq in reversed(aside):
            queue[k] = freq
            queue.move_to_end(k, last=False)
        return key

    def frequency(self, key: Hashable) -> int:
        """The counter of a tracked key."""
        require_present(self._queue, key, self)
        return self._queue[key]

    def keys(self) -> list[Hashable]:
        """Tracked keys in queue order, tail (where the hand looks first) first.  The eviction
        order is ``victims(len(policy))``: keys with a counter above 0 come later."""
        return list(self._queue)

    def __len__(self) -> int:
        return len(self._queue)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._queue

    def check(self) -> None:
        """Assert every invariant (used by tests)."""
        top = max(self.init_freq, self._max_freq)
        # The parameters are valid and max_freq follows from the counter's bits.
        assert self._max_freq == clock_max_freq(self.n_bit_counter) and 0 <= self.init_freq <= MAX_INIT_FREQ
        for key, freq in self._queue.items():
            # Counters are integers in [0, max(init_freq, max_freq)]: hits stop at max_freq,
            # only an insert can set more (init_freq), and the hand only lowers them.
            assert isinstance(freq, int) and 0 <= freq <= top, (key, freq)
        if self._plan is not None:
            protected, planned, done = self._plan
            # A live plan's remaining victims are distinct tracked keys, none protected.
            left = planned[done:]
            assert 0 <= done <= len(planned) and len(left) == len(set(left))
            assert all(k in self._queue and k not in protected for k in left)


def clock_params(init_freq: int, n_bit_counter: int) -> tuple[int, int]:
    """Validated ``(init_freq, n_bit_counter)`` (libCacheSim's ``Clock`` options)."""
    n_bit_counter = as_count(n_bit_counter, "n_bit_counter", minimum=1, maximum=MAX_N_BIT_COUNTER)
    init_freq = as_count(init_freq, "init_freq", maximum=MAX_INIT_FREQ)
    return init_freq, n_bit_counter


def clock_max_freq(n_bit_counter: int) -> int:
    """``2**n_bit_counter - 1``: the largest value a hit can raise a counter to."""
    return (1 << n_bit_counter) - 1
