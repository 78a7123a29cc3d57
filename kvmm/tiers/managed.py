"""Any tier plus any eviction policy: :class:`ManagedTier` evicts to make room on ``put``.

::

    tier = ManagedTier(ArenaTier(1 << 20), LRUPolicy())
    evicted = tier.put("a", np.zeros(1024, np.float16))   # keys evicted to make room
    tier.get("a")                                         # counts as an access for the policy

Semantics:

* ``put`` of an entry larger than the whole capacity raises
  :class:`~kvmm.errors.CapacityExceededError` and evicts nothing.  Otherwise the policy's
  victims (skipping the key being written and any ``protected`` keys) are removed in order
  until the entry fits; if the unprotected entries cannot free enough, it raises and evicts
  nothing.  Key and value are validated before anything is evicted.
* ``get`` is an access (``on_access(key)``), an overwriting ``put`` an access with the new size
  (``on_access(key, nbytes)``); a new key is ``on_insert(key, nbytes)``; ``delete`` and
  evictions are ``on_remove``.  Sizes are the entries' bytes, so a size-aware policy (ARC)
  works in the tier's units; a policy whose ``on_insert``/``on_access`` take only the key
  (the older protocol) is called without sizes.
* A policy with ``extra_victims(key, nbytes, protected)`` (2Q: its Am queue keeps a quota of its
  own; LIRS: a demoted LIR key pushes out Q's oldest, even on a hit) also has the keys it names
  evicted: on ``put`` after the victims that make room and before the write (``put`` returns
  them too), on a read (``nbytes`` None) before the access.
* The policy is told the incoming entry (``victims(..., incoming=key, incoming_size=nbytes)``)
  when its ``victims`` accepts those keywords (ARC uses them to adapt before choosing), and
  the tier's capacity (``attach(capacity_bytes)``) when it has that method.
* A policy that evicts on an access (SLRU's and W-TinyLFU's cooling, as libCacheSim's do) lists
  those keys in ``take_dropped()``; this object deletes them right after the access.
* Entries already in the backend when the ManagedTier is built (a reopened ``MmapTier``, ...)
  are registered with the policy in the backend's key order.
* With a shared backend (``RedisTier`` used by several processes) this object only evicts the
  keys it knows; another process can still fill the pool between the eviction and the write,
  in which case the backend's ``CapacityExceededError`` propagates after the evictions.
"""

from __future__ import annotations

import inspect
from collections import deque
from typing import Any, Hashable, Iterable

import numpy as np

from kvmm._validate import as_count
from kvmm.errors import BadInputError, CapacityExceededError, DTypeError
from kvmm.tiers._base import as_value_array, normalize_key, normalize_keys

__all__ = ["ManagedTier"]


class ManagedTier:
    """A :class:`~kvmm.protocols.TierBackend` that owns a backend and an eviction policy.

    Runtime complexity: ``put`` O(entry bytes + victims examined); ``get`` O(entry bytes);
    policy events O(1) or O(log n) depending on the policy.
    """

    def __init__(self, backend: Any, policy: Any) -> None:
        _require_methods(backend, "backend", ("name", "capacity_bytes", "used_bytes", "put", "get", "get_many",
                                              "delete", "contains", "keys", "nbytes_of"), "a tier (ArenaTier, ...)")
        _require_methods(policy, "policy", ("on_insert", "on_access", "on_remove", "victims"),
                         "an EvictionPolicy (LRUPolicy, ...)")
        self.backend = backend
        self.policy = policy
        self.name = backend.name
        self.evictions = 0
        victims_parameters = inspect.signature(policy.victims).parameters
        self._victims_takes_incoming = "incoming" in victims_parameters
        self._victims_takes_size = "incoming_size" in victims_parameters
        self._insert_takes_size = _takes_second_argument(policy.on_insert)
        self._access_takes_size = _takes_second_argument(policy.on_access)
        self._take_dropped = getattr(policy, "take_dropped", None)
        if hasattr(policy, "attach"):
            policy.attach(backend.capacity_bytes)
        # An order that evicts even when the tier has room (2Q's Am keeps its own quota) names
        # those keys with extra_victims(incoming, nbytes, protected); None for the others.
        self._extra_victims = getattr(policy, "extra_victims", None)
        # key -> nbytes of the entries this object manages (saves a backend round trip per victim).
        self._sizes: dict[Hashable, int] = {}
        for key in backend.keys():
            nbytes = backend.nbytes_of(key)
            if self._extra_victims is not None:  # LIRS may push out an adopted entry to take the next
                self._evict_extra(key, nbytes)
            self._sizes[key] = nbytes
            self._policy_insert(key, nbytes)

    @property
    def capacity_bytes(self) -> int:
        return self.backend.capacity_bytes

    @property
    def used_bytes(self) -> int:
        return self.backend.used_bytes

    def transfer_seconds(self, nbytes: int, *, write: bool = False) -> float:
        return self.backend.transfer_seconds(nbytes, write=write)

    def put(self, key: Hashable, data: Any, *, protected: Iterable[Hashable] = ()) -> list[Hashable]:
        """Store ``data`` under ``key``, evicting as needed; returns the evicted keys in order."""
        arr = as_value_array(data)
        return self._put(normalize_key(key), int(arr.nbytes), lambda k: self.backend.put(k, arr), protected)

    def put_size(self, key: Hashable, nbytes: int, *, protected: Iterable[Hashable] = ()) -> list[Hashable]:
        """Record an entry of ``nbytes`` bytes without data (backends with ``put_size``, i.e.
        :class:`~kvmm.tiers.SimulatedTier`), evicting as needed; returns the evicted keys."""
        if not hasattr(self.backend, "put_size"):
            raise BadInputError(f"{type(self.backend).__name__} stores real bytes; use put(key, array)")
        nbytes = as_count(nbytes, "nbytes")
        return self._put(normalize_key(key), nbytes, lambda k: self.backend.put_size(k, nbytes), protected)

    def _put(self, k: Hashable, nbytes: int, write: Any, protected: Iterable[Hashable]) -> list[Hashable]:
        protected = set(normalize_keys(protected, "protected"))
        capacity = self.backend.capacity_bytes
        if nbytes > capacity:
            raise CapacityExceededError(
                f"tier {self.name!r}: an entry of {nbytes} bytes can never fit in a capacity of {capacity} bytes")
        existed = k in self._sizes
        need = self.backend.used_bytes - self._sizes.get(k, 0) + nbytes - capacity
        plan = self._plan_victims(need, protected | {k}, k, nbytes) if need > 0 else []
        for victim in plan:
            self._evict(victim)
        if self._take_dropped is not None:  # a planned step may evict more than the plan's prefix
            self._delete_dropped()
        if self._extra_victims is not None:
            plan = plan + self._evict_extra(k, nbytes, protected)
        write(k)
        self._sizes[k] = nbytes
        if existed:
            if self._access_takes_size:
                self.policy.on_access(k, nbytes)
            else:
                self.policy.on_access(k)
            if self._take_dropped is not None:
                self._delete_dropped()
        else:
            self._policy_insert(k, nbytes)
        return plan

    def _evict_extra(self, k: Hashable, nbytes: int | None, protected: Iterable[Hashable] = ()) -> list[Hashable]:
        """Evict the keys the policy's ``extra_victims`` names for a reference to ``k`` (an insert
        or overwrite of ``nbytes``, or a read: ``nbytes`` None); returns them."""
        extra = list(self._extra_victims(k, nbytes, set(protected) | {k}))
        for victim in extra:
            self._evict(victim)
        return extra

    def _evict(self, victim: Hashable) -> None:
        self.backend.delete(victim)
        self.policy.on_remove(victim)
        del self._sizes[victim]
        self.evictions += 1

    def _policy_insert(self, key: Hashable, nbytes: int) -> None:
        if self._insert_takes_size:
            self.policy.on_insert(key, nbytes)
        else:
            self.policy.on_insert(key)

    def get(self, key: Hashable) -> np.ndarray:
        k = normalize_key(key)
        data = self.backend.get(k)
        if k in self._sizes:
            if self._extra_victims is not None:
                self._evict_extra(k, None)
            self.policy.on_access(k)
            if self._take_dropped is not None:
                self._delete_dropped()
        return data

    def get_many(self, keys: Iterable[Hashable]) -> list[np.ndarray]:
        """Several values in order (one round trip on remote tiers); each counts as an access."""
        ks = normalize_keys(keys)
        out = self.backend.get_many(ks)
        for k in ks:
            if k in self._sizes:  # again per key: an earlier read of this call may have evicted it (LIRS)
                if self._extra_victims is not None:
                    self._evict_extra(k, None)
                self.policy.on_access(k)
                if self._take_dropped is not None:
                    self._delete_dropped()
        return out

    def contains_many(self, keys: Iterable[Hashable]) -> np.ndarray:
        """Which of ``keys`` this object manages (a bool mask); no policy event.  An integer
        numpy array of keys is read in one ``tolist`` (its items are already normal keys).

        Runtime complexity: O(len(keys)).
        """
        ks = _key_list(keys)
        return np.fromiter(map(self._sizes.__contains__, ks), dtype=bool, count=len(ks))

    def prefix_hits(self, keys: Iterable[Hashable]) -> int:
        """How many leading ``keys`` this object manages (stops at the first it does not): the
        prefix of a request the tier can serve.  No policy event.

        Runtime complexity: O(returned count + 1).
        """
        ks = _key_list(keys)
        sizes = self._sizes
        for i, k in enumerate(ks):
            if k not in sizes:
                return i
        return len(ks)

    def access_or_put_size_many(self, keys: Iterable[Hashable], nbytes: int, write: Any) -> np.ndarray:
        """Offer a request's blocks in order: a managed key is accessed (``on_access``), a missing
        key whose ``write`` flag is set is stored with :meth:`put_size` (evicting as needed; an
        earlier key of the same call may be evicted by a later one, exactly as with separate
        calls).  Returns the mask of keys found (the hits).  Needs a backend with ``put_size``.

        ``write``: one flag per key, or a function that takes the mask of keys managed now
        (:meth:`contains_many` of ``keys``) and returns the flags: an admission decision made on
        what the tier holds, without a second pass over the keys.

        Keys, size and flags are validated once for the batch; then a backend that offers a
        trusted size writer (:class:`~kvmm.tiers.SimulatedTier`) and a built-in policy that
        offers ``fast_hooks`` (LRU, FIFO) are driven without re-checking each key (this object
        guarantees what they would check: a managed key is tracked, a new one is not); ARC's
        hooks (no ``evict_first``: its victims depend on the incoming key) skip the checks of
        each access and insert while its evictions are still planned with ``victims``.  Any
        other policy gets its ``on_access`` / ``on_insert`` per key, as with separate calls.

        Runtime complexity: O(len(keys)) policy events plus the victims examined.
        """
        if not hasattr(self.backend, "put_size"):
            raise BadInputError(f"{type(self.backend).__name__} stores real bytes; use put(key, array)")
        nbytes = as_count(nbytes, "nbytes")
        ks = _key_list(keys)
        sizes = self._sizes
        found = list(map(sizes.__contains__, ks))
        if callable(write):
            write = write(np.array(found, dtype=bool))
        try:
            flags = np.asarray(write, dtype=bool)
        except (TypeError, ValueError):
            raise BadInputError(f"write must be one flag per key ({len(ks)}), got {write!r:.60}") from None
        if flags.shape != (len(ks),):
            raise BadInputError(f"write must be one flag per key ({len(ks)}), got shape {flags.shape}")
        backend = self.backend
        capacity = backend.capacity_bytes
        if nbytes > capacity and flags.any():
            raise CapacityExceededError(
                f"tier {self.name!r}: an entry of {nbytes} bytes can never fit in a capacity of {capacity} bytes")
        hooks = self.policy.fast_hooks() if hasattr(self.policy, "fast_hooks") else None
        if hooks is not None and hooks[3] is not None and hasattr(backend, "size_writer_many"):
            return self._offer_batched(ks, flags.tolist(), nbytes, hooks, found)
        on_access, on_insert = hooks[:2] if hooks is not None else (self.policy.on_access, self._policy_insert)
        if self._take_dropped is not None:
            on_access = self._access_then_delete_dropped(on_access)
        store = backend.size_writer(nbytes) if hasattr(backend, "size_writer") else (lambda k: backend.put_size(k, nbytes))
        hit: list[bool] = []
        for k, w in zip(ks, flags.tolist()):
            managed = k in sizes  # again per key: an earlier write of this call may have evicted it
            hit.append(managed)
            if managed:
                if self._extra_victims is not None:
                    self._evict_extra(k, None)
                on_access(k)
            elif w:
                if backend.used_bytes + nbytes <= capacity and self._extra_victims is None:  # fits: no victim
                    store(k)
                    sizes[k] = nbytes
                    on_insert(k, nbytes)
                else:
                    self._put(k, nbytes, store, ())
        return np.array(hit, dtype=bool)

    def _offer_batched(self, ks: list, flags: list, nbytes: int, hooks: tuple, found: list) -> np.ndarray:
        """:meth:`access_or_put_size_many` for a built-in policy's fast hooks and a backend with
        ``size_writer_many`` (``found``: the keys managed at the start of the call).  A request
        shaped as usual (its hits first, then new keys, none twice) is one run of accesses, the
        victims its new keys need, and one write of the new keys.  Any other request (or one whose
        new keys could evict each other) takes one key at a time, exactly as separate calls."""
        backend, sizes = self.backend, self._sizes
        on_access, insert, insert_many, evict_first = hooks
        store_many = backend.size_writer_many(nbytes)
        capacity = backend.capacity_bytes
        # every backend entry is managed: evicting in the policy's order frees any bytes needed
        # up to the whole capacity, the first victims one at a time, as _put would
        all_managed = len(backend) == len(sizes)
        first_new = found.index(False) if False in found else len(ks)
        if True not in found[first_new:] and len(set(ks)) == len(ks):
            # the usual shape of a request: its hits first, then new blocks, no key twice.  The new
            # keys all go after the accesses, so with every entry managed and the new keys no more
            # than the capacity, the victims are the same first entries of the policy's order
            # whether evicted one new key at a time or all before one write
            new = [k for k, w in zip(ks[first_new:], flags[first_new:]) if w]
            need = len(new) * nbytes - (capacity - backend.used_bytes)
            if need <= 0 or (all_managed and len(new) * nbytes <= capacity):
                deque(map(on_access, ks[:first_new]), maxlen=0)
                self._evict_first(need, evict_first)
                if new:
                    store_many(new)
                    sizes.update(dict.fromkeys(new, nbytes))
                    insert_many(new)
                return np.array(found, dtype=bool)
        hit = [False] * len(ks)
        for i, (k, w) in enumerate(zip(ks, flags)):
            if k in sizes:  # again per key: an earlier write of this call may have stored or evicted it
                on_access(k)
                hit[i] = True
            elif w:
                need = nbytes - (capacity - backend.used_bytes)
                if need > 0 and not all_managed:  # entries this object does not manage: plan victims
                    self._put(k, nbytes, lambda key: store_many([key]), ())
                    continue
                self._evict_first(need, evict_first)
                store_many([k])
                sizes[k] = nbytes
                insert(k, nbytes)
        return np.array(hit, dtype=bool)

    def _delete_dropped(self) -> None:
        """Delete the keys the policy evicted on its own during an access (``take_dropped``)."""
        for victim in self._take_dropped():
            self._evict(victim)

    def _access_then_delete_dropped(self, on_access: Any) -> Any:
        def access(key: Hashable) -> None:
            on_access(key)
            self._delete_dropped()
        return access

    def _evict_first(self, need: int, evict_first: Any) -> None:
        """Evict the policy's first victims until ``need`` bytes are freed (none if ``need <= 0``)."""
        backend, sizes = self.backend, self._sizes
        while need > 0:
            victim = evict_first()
            backend.delete(victim)
            need -= sizes.pop(victim)
            self.evictions += 1

    def evict_until(self, used_bytes: int) -> list[Hashable]:
        """Evict the policy's victims, in its order, until the tier holds at most ``used_bytes``
        (a batch eviction down to a low watermark, as Mooncake Store's).  Returns them.
        Runtime complexity: O(victims) policy events."""
        need = self.backend.used_bytes - as_count(used_bytes, "used_bytes")
        if need <= 0:
            return []
        plan = self._plan_victims(need, set(), None, 0)
        for victim in plan:
            self._evict(victim)
        return plan

    def delete(self, key: Hashable) -> None:
        k = normalize_key(key)
        self.backend.delete(k)
        if k in self._sizes:
            del self._sizes[k]
            self.policy.on_remove(k)

    def contains(self, key: Hashable) -> bool:
        return self.backend.contains(key)

    def keys(self) -> list[Hashable]:
        return self.backend.keys()

    def nbytes_of(self, key: Hashable) -> int:
        return self.backend.nbytes_of(key)

    def __len__(self) -> int:
        return len(self._sizes)

    def __contains__(self, key: Hashable) -> bool:
        return self.contains(key)

    def check(self) -> None:
        """Assert every invariant, including the backend's and the policy's own (used by tests)."""
        if hasattr(self.backend, "check"):
            self.backend.check()
        if hasattr(self.policy, "check"):
            self.policy.check()
        # The policy tracks exactly the managed keys ...
        assert len(self.policy) == len(self._sizes)
        assert all(key in self.policy for key in self._sizes)
        # ... which are all in the backend, with the recorded sizes.
        for key, nbytes in self._sizes.items():
            assert self.backend.nbytes_of(key) == nbytes
        # A size-aware ARC accounts exactly the bytes of the managed entries as residents.
        if self._insert_takes_size and hasattr(self.policy, "list_sizes"):
            sizes = self.policy.list_sizes()
            assert sizes["T1"] + sizes["T2"] == sum(self._sizes.values())
        # Capacity is never exceeded.
        assert 0 <= self.backend.used_bytes <= self.backend.capacity_bytes

    def _plan_victims(self, need: int, protected: set, incoming: Hashable, nbytes: int) -> list[Hashable]:
        """The shortest prefix of the policy's victim order that frees ``need`` bytes."""
        n = 1
        while True:
            if self._victims_takes_size:
                order = self.policy.victims(n, protected, incoming=incoming, incoming_size=nbytes)
            elif self._victims_takes_incoming:
                order = self.policy.victims(n, protected, incoming=incoming)
            else:
                order = self.policy.victims(n, protected)
            freed = 0
            for i, victim in enumerate(order):
                freed += self._sizes[victim]
                if freed >= need:
                    return list(order[: i + 1])
            if len(order) < n:
                raise CapacityExceededError(
                    f"tier {self.name!r}: evicting every unprotected entry frees {freed} bytes; "
                    f"{need} more bytes are needed (protected: {len(protected)} keys)")
            n *= 2


def _key_list(keys: Any) -> list:
    """Batch keys as a list of normal keys: an integer numpy array in one ``tolist``."""
    if isinstance(keys, np.ndarray) and keys.ndim == 1 and keys.dtype.kind in "iu":
        return keys.tolist()
    return normalize_keys(keys)


def _require_methods(obj: Any, name: str, attrs: tuple[str, ...], what: str) -> None:
    missing = [a for a in attrs if not hasattr(obj, a)]
    if missing:
        raise DTypeError(f"{name} must be {what}; {type(obj).__name__} lacks {missing}")


def _takes_second_argument(method: Any) -> bool:
    """Whether a policy hook accepts a size after the key (the size-aware protocol)."""
    try:
        parameters = list(inspect.signature(method).parameters.values())
    except (TypeError, ValueError):
        return True
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in parameters)
