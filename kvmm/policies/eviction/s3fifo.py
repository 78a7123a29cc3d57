"""S3-FIFO (Yang et al., SOSP 2023) as libCacheSim's ``S3FIFO.c`` runs it: :class:`S3FIFOPolicy`.

Three FIFO queues: *small* (``small_size_ratio`` of the capacity), *main* (the rest) and
*ghost* (``ghost_size_ratio`` of the capacity, keys only).  Every queue is accounted in size
units (bytes under a :class:`~kvmm.tiers.ManagedTier`), with libCacheSim's integer sizes:
``small = int(capacity * small_size_ratio)`` (truncated), ``main = capacity - small``,
``ghost = int(capacity * ghost_size_ratio)`` (no ghost queue when 0).

* A hit adds 1 to the entry's frequency (uncapped while it is counted).
* A miss first forgets the key from the ghost queue if it is there (a *ghost hit*).  After the
  evictions the key goes to main on a ghost hit; else to small, except that until the first
  eviction ever, a new key goes to main once small holds ``>= small`` units.  Its frequency
  starts at 0.
* One eviction: from main if main holds more than ``main`` units or small holds nothing, else
  from small.  Small: the oldest entry moves to main's new end (frequency reset to 0) while its
  frequency is ``>= move_to_main_threshold``; the first oldest entry below the threshold is
  evicted into the ghost queue (whose own FIFO forgets its oldest keys to fit; a key larger than
  the ghost queue is not remembered); if small empties by moves alone nothing is evicted (the
  next eviction is from main).  Main: a 2-bit clock: the oldest entry with frequency ``f >= 1``
  is reinserted at the new end with ``min(f, 3) - 1``, the first with 0 is evicted.

Where libCacheSim differs from the paper (its Algorithm 1), this follows libCacheSim:
(1) the paper inserts every key that is not a ghost into small; libCacheSim (its ``S3FIFO.c``,
not the original ``S3FIFOv0.c``), until its first eviction, sends it to main once small is full;
(2) the paper evicts from main as soon as a move from small fills it; libCacheSim lets main
overflow until an eviction finds it over its size, and a moved entry's frequency restarts at 0
(a new main entry); (3) libCacheSim counts hits uncapped and caps at 3 only when main reinserts
(``min(f, 3) - 1``), the paper's 2-bit counter except for a ``move_to_main_threshold`` above 3;
(4) the ghost queue holds ``ghost_size_ratio`` of the capacity in size units, not as many entries
as main; (5) libCacheSim does not store an entry of ``>= small`` units that is not a ghost hit
(``size > small`` is refused before evicting, ``size == small`` after evicting).
:meth:`admission` states that last rule for a caller that follows libCacheSim (the tests'
ManagedTier driver does), while ``on_insert`` of such an entry (a ManagedTier that stores it
anyway) places it in main.  libCacheSim refuses (aborts on) a capacity whose small or main queue
would be empty; ``replay`` raises then, and the policy, while ``small`` is 0, puts every entry
in main.

The eviction plan (``victims``) simulates those steps without changing anything; ``on_remove``
of the plan's next victim applies its step (the moves and reinsertions before it, the ghost
entry, and, for the plan's ``incoming`` ghost, forgetting that ghost first, as libCacheSim's
lookup does).  Protected keys are planned as if evicted and then not listed: they stay where
they are.  ``on_remove`` of any other key (an explicit delete) drops it from its queue without a
ghost entry (libCacheSim's ``S3FIFO_remove``).  ``on_access(key, size)`` (an overwrite) counts a
hit and records the new size.

``capacity=None`` takes the tier's capacity when a ManagedTier adopts the policy (``attach``);
standalone, the capacity follows the largest resident total seen.
Runtime complexity: O(1) per insert, access and delete; ``victims`` O(n + entries moved or
reinserted on the way + protected), the same steps libCacheSim takes.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

from kvmm._validate import as_count, as_fraction, as_hashable, as_key_set, as_positive_float
from kvmm.errors import BadInputError
from kvmm.policies.eviction._checks import NO_KEY, check_size, require_absent, require_present
from kvmm.protocols import EvictionPolicyBase, FastHooks

__all__ = ["S3FIFOPolicy", "queue_sizes"]


_NO_KEY = NO_KEY  # its old name: pickles made before NO_KEY was shared refer to it
_MOVE = 0  # a plan's move: small -> main with frequency 0
_REINSERT = 1  # a plan's move: main's oldest -> main's new end with min(f, 3) - 1


@dataclass
class S3FIFOPolicy(EvictionPolicyBase):
    """S3-FIFO with libCacheSim's rules and defaults (see the module docstring).

    ``capacity`` (size units; None: the tier's, see module docstring), ``small_size_ratio``
    in [0, 1], ``ghost_size_ratio`` >= 0, ``move_to_main_threshold`` an integer >= 0.
    Runtime complexity: O(1) per event; ``victims`` as the module docstring says.
    """

    capacity: int | None = None
    small_size_ratio: float = 0.1
    ghost_size_ratio: float = 0.9
    move_to_main_threshold: int = 2
    # key -> size, oldest first
    _small: OrderedDict = field(default_factory=OrderedDict, init=False, repr=False)
    _main: OrderedDict = field(default_factory=OrderedDict, init=False, repr=False)
    _ghost: OrderedDict = field(default_factory=OrderedDict, init=False, repr=False)
    _freq: dict = field(default_factory=dict, init=False, repr=False)  # resident key -> frequency
    _small_used: int = field(default=0, init=False, repr=False)
    _main_used: int = field(default=0, init=False, repr=False)
    _ghost_used: int = field(default=0, init=False, repr=False)
    _c: int = field(default=0, init=False, repr=False)
    _caps: tuple = field(default=(0, 0, 0), init=False, repr=False)  # (small, main, ghost) of _c
    _has_evicted: bool = field(default=False, init=False, repr=False)
    # the last victims() plan (None once anything else happened) and the key whose ghost entry
    # the applied plan forgot (its insert goes to main)
    _pending: _S3FIFOPlan | None = field(default=None, init=False, repr=False)
    _ghost_hit: object = field(default=NO_KEY, init=False, repr=False)

    def __post_init__(self) -> None:
        self.small_size_ratio = as_fraction(self.small_size_ratio, "small_size_ratio", include_zero=True)
        self.ghost_size_ratio = as_positive_float(self.ghost_size_ratio, "ghost_size_ratio", allow_zero=True)
        self.move_to_main_threshold = as_count(self.move_to_main_threshold, "move_to_main_threshold")
        if self.capacity is not None:
            self.capacity = as_count(self.capacity, "capacity", minimum=1)
            self._set_c(self.capacity)

    # -- the protocol ---------------------------------------------------------------------
    def attach(self, capacity: int) -> None:
        """Told the capacity of the tier that adopts it (ManagedTier does this); with
        ``capacity=None`` it sizes the queues."""
        capacity = as_count(capacity, "capacity")
        if self.capacity is None:
            self._set_c(max(self._c, capacity))

    def on_insert(self, key: Hashable, size: int = 1, protected: Iterable[Hashable] = ()) -> tuple:
        size = as_count(size, "size")
        require_absent(self._freq, key, self)
        self._insert_unchecked(key, size)
        return ()

    def _insert_unchecked(self, key: Hashable, size: int) -> None:
        """``on_insert`` of an untracked key and a valid size (the fast hook)."""
        ghost_hit = self._ghost_hit == key or key in self._ghost
        self._ghost_hit = NO_KEY
        self._pending = None
        if key in self._ghost:
            self._ghost_used -= self._ghost.pop(key)
        small_cap = self._caps[0]
        if ghost_hit or size >= small_cap or (not self._has_evicted and self._small_used >= small_cap):
            self._main[key] = size
            self._main_used += size
        else:
            self._small[key] = size
            self._small_used += size
        self._freq[key] = 0
        self._grow_c()

    def on_access(self, key: Hashable, size: int | None = None, protected: Iterable[Hashable] = ()) -> tuple:
        check_size(size)
        require_present(self._freq, key, self)
        self._access_unchecked(key)
        if size is not None:  # an overwrite: the entry now has the new size
            queue = self._small if key in self._small else self._main
            delta = size - queue[key]
            queue[key] = size
            if queue is self._small:
                self._small_used += delta
            else:
                self._main_used += delta
            self._grow_c()
        return ()

    def _access_unchecked(self, key: Hashable) -> None:
        """``on_access(key)`` of a resident key (the fast hook): one more access."""
        self._freq[key] += 1
        self._pending = None
        self._ghost_hit = NO_KEY

    def on_remove(self, key: Hashable) -> None:
        require_present(self._freq, key, self)
        plan = self._pending
        if plan is not None and plan.done < len(plan.steps) and plan.steps[plan.done][0] == key:
            self._apply_step(plan)
            return
        self._pending = None
        self._ghost_hit = NO_KEY
        self._drop(key)

    def victims(self, n: int, protected: Iterable[Hashable] = (), *, incoming: Hashable = NO_KEY,
                incoming_size: int = 1) -> list[Hashable]:
        """The next ``n`` evictions of libCacheSim's S3-FIFO (without changing state), skipping
        protected keys; ``incoming`` is the key whose miss needs the room (its ghost entry is
        forgotten when the plan is applied; default: none), ``incoming_size`` is accepted and not needed (the
        caller evicts a prefix until the bytes fit, as libCacheSim's loop does)."""
        n = as_count(n, "n")
        as_count(incoming_size, "incoming_size")
        protected = as_key_set(protected, "protected")
        as_hashable(incoming, "incoming")
        steps = self._plan(n, protected)
        self._pending = _S3FIFOPlan(incoming, steps)
        return [step[0] for step in steps]

    def fast_hooks(self) -> FastHooks | None:
        """``access`` and ``insert`` (:class:`~kvmm.protocols.FastHooks`): ``on_access(key)`` and
        ``on_insert(key, size)`` without the per-event checks, for a caller that guarantees them
        (an accessed key is resident, an inserted one is not, the size an integer >= 0).  No
        ``insert_many`` / ``evict_first``: an eviction moves entries between queues and depends
        on the incoming key (a ghost), so a caller that evicts must ask ``victims``.  None for a
        subclass, whose own hooks must run.  Runtime complexity: O(1) per event.
        """
        if type(self) is S3FIFOPolicy:
            return FastHooks(self._access_unchecked, self._insert_unchecked)
        return None

    # -- inspection -------------------------------------------------------------------------
    def admission(self, key: Hashable, size: int) -> tuple[bool, bool]:
        """``(makes_room, stores)`` of libCacheSim's ``get`` on a miss of ``key`` with ``size``:
        whether it evicts to make room, and whether it then stores the entry (see the module
        docstring: no larger than the small queue to make room; a ghost hit, or smaller than the
        small queue, to be stored).  No state changes.  libCacheSim also forgets a ghost on a
        miss it refuses; a caller that stores nothing does not tell the policy, so with one size
        per key (a ghost is always smaller than the small queue, hence stored) the two agree, and
        with sizes that change between references only ``replay`` follows libCacheSim there.
        Runtime complexity: O(1).
        """
        size = as_count(size, "size")
        small_cap = self._caps[0]
        if size > small_cap or size > self._c:
            return False, False
        return True, as_hashable(key) in self._ghost or size < small_cap

    def queue_sizes(self) -> tuple[int, int, int]:
        """The ``(small, main, ghost)`` queue sizes in size units (from the capacity)."""
        return self._caps

    def queues(self) -> dict[str, list[Hashable]]:
        """The three queues, oldest first (for inspection and tests)."""
        return {"small": list(self._small), "main": list(self._main), "ghost": list(self._ghost)}

    def frequency(self, key: Hashable) -> int:
        require_present(self._freq, key, self)
        return self._freq[key]

    def keys(self) -> list[Hashable]:
        """Resident keys: small then main, oldest first (``victims`` gives the eviction order)."""
        return list(self._small) + list(self._main)

    def __len__(self) -> int:
        return len(self._freq)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._freq

    def check(self) -> None:
        """Assert every invariant (used by tests)."""
        small, main, ghost = self._small, self._main, self._ghost
        # Small and main are disjoint and together are exactly the keys with a frequency.
        assert not (small.keys() & main.keys())
        assert self._freq.keys() == small.keys() | main.keys()
        # A ghost is never resident (a ghost hit forgets the ghost before the insert).
        assert not (ghost.keys() & self._freq.keys())
        # Each queue's recorded total is the sum of its entries' sizes, all integers >= 0.
        for queue, used in ((small, self._small_used), (main, self._main_used), (ghost, self._ghost_used)):
            assert all(isinstance(s, int) and s >= 0 for s in queue.values())
            assert used == sum(queue.values())
        # Frequencies are integers >= 0.
        assert all(isinstance(f, int) and f >= 0 for f in self._freq.values())
        # The queue sizes are libCacheSim's, from c; without a capacity c follows the residents (with
        # one, an owner may overfill it: docs/eviction_orders.md, "Overfill", and victims empties it).
        assert self._caps == queue_sizes(self._c, self.small_size_ratio, self.ghost_size_ratio)
        assert self.capacity is not None or self._small_used + self._main_used <= self._c or self._c == 0
        if self.capacity is not None:
            assert self._c == self.capacity
        # The ghost queue never holds more than its size.
        assert self._ghost_used <= self._caps[2]
        # A pending plan's victims not yet applied are distinct, resident keys.
        if self._pending is not None:
            left = [step[0] for step in self._pending.steps[self._pending.done:]]
            assert len(left) == len(set(left)) and all(k in self._freq for k in left)

    # -- helpers ----------------------------------------------------------------------------
    def _set_c(self, c: int) -> None:
        self._c = c
        self._caps = queue_sizes(c, self.small_size_ratio, self.ghost_size_ratio)

    def _grow_c(self) -> None:
        used = self._small_used + self._main_used
        if used > self._c and self.capacity is None:
            self._set_c(used)

    def _drop(self, key: Hashable) -> None:
        if key in self._small:
            self._small_used -= self._small.pop(key)
        else:
            self._main_used -= self._main.pop(key)
        del self._freq[key]

    def _plan(self, n: int, protected: set | frozenset) -> list[tuple]:
        """Simulate evictions until ``n`` unprotected victims (or none left): a list of
        ``(victim, moves before it)``, moves ``(key, _MOVE | _REINSERT)``."""
        small_cap, main_cap, _ = self._caps
        threshold = self.move_to_main_threshold
        freq = self._freq
        small_used, main_used = self._small_used, self._main_used
        small_left, main_left = len(self._small), len(self._main)
        small_items, main_items = iter(self._small.items()), iter(self._main.items())
        appended: deque = deque()  # entries put at main's new end by this plan, oldest first
        planned: dict = {}  # key -> its frequency after this plan's moves
        steps: list[tuple] = []
        moves: list[tuple] = []
        while len(steps) < n and (small_left or main_left):
            if small_used + main_used > 0:
                from_main = main_used > main_cap or small_used == 0
            else:  # only entries of size 0 are left (libCacheSim never evicts then): list them too
                from_main = small_left == 0
            victim = NO_KEY
            if from_main:
                while victim is NO_KEY:
                    key, size = next(main_items, None) or appended.popleft()
                    f = planned.get(key, freq[key])
                    if f >= 1:
                        appended.append((key, size))
                        planned[key] = min(f, 3) - 1
                        moves.append((key, _REINSERT))
                    else:
                        main_left -= 1
                        main_used -= size
                        victim = key
            else:
                drain_all = small_used + main_used == 0
                while victim is NO_KEY and small_left and (small_used > 0 or drain_all):
                    key, size = next(small_items)
                    small_left -= 1
                    small_used -= size
                    if freq[key] >= threshold:
                        appended.append((key, size))
                        main_left += 1
                        main_used += size
                        planned[key] = 0
                        moves.append((key, _MOVE))
                    else:
                        victim = key
                if victim is NO_KEY:
                    continue  # small emptied by moves alone: the next eviction is from main
            if victim not in protected:
                steps.append((victim, moves))
                moves = []
        return steps

    def _apply_step(self, plan: _S3FIFOPlan) -> None:
        """Apply the plan's next step: its moves, then the eviction of its victim."""
        if plan.done == 0 and plan.incoming in self._ghost:
            # libCacheSim's lookup forgets the missed key's ghost before any eviction
            self._ghost_used -= self._ghost.pop(plan.incoming)
            self._ghost_hit = plan.incoming
        victim, moves = plan.steps[plan.done]
        plan.done += 1
        self._has_evicted = True
        small, main, freq = self._small, self._main, self._freq
        for key, kind in moves:
            if kind == _MOVE:
                size = small.pop(key)
                self._small_used -= size
                main[key] = size
                self._main_used += size
                freq[key] = 0
            else:
                main.move_to_end(key)
                freq[key] = min(freq[key], 3) - 1
        if victim in small:
            size = small.pop(victim)
            self._small_used -= size
            self._remember(victim, size)
        else:
            self._main_used -= main.pop(victim)
        del freq[victim]

    def _remember(self, key: Hashable, size: int) -> None:
        """The ghost FIFO's own ``get`` of an entry evicted from small."""
        ghost_cap = self._caps[2]
        if ghost_cap <= 0 or size > ghost_cap or key in self._ghost:
            return
        ghost = self._ghost
        while self._ghost_used + size > ghost_cap:
            self._ghost_used -= ghost.popitem(last=False)[1]
        ghost[key] = size
        self._ghost_used += size


@dataclass
class _S3FIFOPlan:
    """One ``victims`` call: ``steps[i] = (victim, moves before it)``; ``done`` counts the steps
    ``on_remove`` applied; ``incoming`` the key whose miss needs the room."""

    incoming: Hashable
    steps: list
    done: int = 0


def queue_sizes(capacity: int, small_size_ratio: float, ghost_size_ratio: float) -> tuple[int, int, int]:
    """``(small, main, ghost)`` queue sizes as libCacheSim's ``S3FIFO_init`` computes them:
    ``small = (int64)(capacity * small_size_ratio)``, ``main = capacity - small``,
    ``ghost = (int64)(capacity * ghost_size_ratio)`` (double products truncated toward zero,
    as in C).  Runtime complexity: O(1)."""
    small = int(capacity * float(small_size_ratio))
    return small, capacity - small, int(capacity * float(ghost_size_ratio))


def check_replay_options(capacity: int, small_size_ratio, ghost_size_ratio, move_to_main_threshold) -> tuple:
    """Validated ``(small, main, ghost, threshold)`` for a replay; libCacheSim refuses (aborts on)
    a capacity whose small or main queue is empty, so this raises :class:`BadInputError` then."""
    small_size_ratio = as_fraction(small_size_ratio, "small_size_ratio", include_zero=True)
    ghost_size_ratio = as_positive_float(ghost_size_ratio, "ghost_size_ratio", allow_zero=True)
    threshold = as_count(move_to_main_threshold, "move_to_main_threshold")
    small, main, ghost = queue_sizes(capacity, small_size_ratio, ghost_size_ratio)
    if small <= 0 or main <= 0:
        raise BadInputError(f"S3-FIFO at capacity {capacity} with small_size_ratio={small_size_ratio} has a small "
                            f"queue of {small} and a main queue of {main}; libCacheSim needs both >= 1 "
                            f"(capacity >= {_min_capacity(small_size_ratio)})")
    return small, main, ghost, threshold


def _min_capacity(ratio: float) -> str:
    return "1/small_size_ratio" if ratio > 0 else "a small_size_ratio > 0"
