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
* The keys an ``on_insert`` / ``on_access`` returns, evicted on the policy's own (2Q's Am quota,
  LIRS's demotions, even on a hit; SLRU's and W-TinyLFU's cooling, as libCacheSim's do), are
  deleted right after that event: on ``put`` after the write (``put`` returns them too, after
  the victims that made room; ``put``'s ``protected`` keys reach the policy, which keeps them),
  on a read after the access.
* A policy derived from :class:`~kvmm.protocols.EvictionPolicyBase` is told the incoming entry
  (``victims(..., incoming=key, incoming_size=nbytes)``: ARC adapts before choosing) and the
  tier's capacity (``attach(capacity_bytes)``); any other policy is called with the four
  Protocol methods only (:class:`~kvmm._policy_hooks.PolicyHooks`).
* Entries already in the backend when the ManagedTier is built (a reopened ``MmapTier``, ...)
  are registered with the policy in the backend's key order.
* With a shared backend (``RedisTier`` used by several processes) this object only evicts the
  keys it knows; another process can still fill the pool between the eviction and the write,
  in which case the backend's ``CapacityExceededError`` propagates after the evictions.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable
from typing import Any

import numpy as np

from kvmm._policy_hooks import PolicyHooks
from kvmm._validate import as_count
from kvmm.errors import BadInputError, CapacityExceededError, DTypeError
from kvmm.protocols import FastHooks
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
        self._hooks = hooks = PolicyHooks(policy)
        hooks.attach(backend.capacity_bytes)
        # key -> nbytes of the entries this object manages (saves a backend round trip per victim).
        self._sizes: dict[Hashable, int] = {}
        for key in backend.keys():
            nbytes = backend.nbytes_of(key)
            self._sizes[key] = nbytes
            self._drop(hooks.insert(key, nbytes))  # LIRS may push out an adopted entry to take the next

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
        write(k)  # the victims freed the room: what the policy evicts on its own below frees more
        self._sizes[k] = nbytes
        event = self._hooks.access if existed else self._hooks.insert
        evicted = event(k, nbytes, protected) if protected else event(k, nbytes)
        return plan + self._drop(evicted) if evicted else plan

    def _evict(self, victim: Hashable) -> None:
        self.backend.delete(victim)
        self.policy.on_remove(victim)
        del self._sizes[victim]
        self.evictions += 1

    def _drop(self, evicted: Iterable[Hashable] | None) -> list[Hashable]:
        """Delete the keys an event returned, evicted on the policy's own (no ``on_remove``: the
        policy no longer tracks them); returns them."""
        if not evicted:
            return []
        evicted = list(evicted)
        backend, sizes = self.backend, self._sizes
        for victim in evicted:
            backend.delete(victim)
            del sizes[victim]
        self.evictions += len(evicted)
        return evicted

    def get(self, key: Hashable) -> np.ndarray:
        k = normalize_key(key)
        data = self.backend.get(k)
        if k in self._sizes:
            evicted = self._hooks.access(k)
            if evicted:
                self._drop(evicted)
        return data

    def access(self, key: Hashable) -> list[Hashable]:
        """An access that reads no value (an engine's hit on a chunk it holds already, a re-set of
        a stored page), as :meth:`get` counts one: for a key this object manages, the policy's
        ``on_access``, then the keys it evicted on its own are deleted and returned; any other key
        (not stored, or stored by another process in a shared backend) is no event.
        Runtime complexity: O(1) plus the policy's event."""
        k = normalize_key(key)
        return self._drop(self._hooks.access(k)) if k in self._sizes else []

    def get_many(self, keys: Iterable[Hashable]) -> list[np.ndarray]:
        """Several values in order (one round trip on remote tiers); each counts as an access."""
        ks = normalize_keys(keys)
        out = self.backend.get_many(ks)
        access, sizes = self._hooks.access, self._sizes
        for k in ks:
            if k in sizes:  # again per key: an earlier read of this call may have evicted it (LIRS)
                evicted = access(k)
                if evicted:
                    self._drop(evicted)
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
        trusted size writer (:class:`~kvmm.tiers.SimulatedTier`) and a built-in policy whose
        ``fast_hooks`` evict in bulk (LRU, FIFO: ``evict_first``) are driven without re-checking
        each key (this object guarantees what they would check: a managed key is tracked, a new
        one is not); the other built-in orders' fast hooks skip the checks of each access and
        insert while their evictions are still planned with ``victims``.  Any other policy gets
        its ``on_access`` / ``on_insert`` per key, as with separate calls.  Either way the keys
        an event returns (evicted on the policy's own) are deleted right after it.

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
        fast = self._hooks.fast_hooks()
        if fast is not None and fast.evict_first is not None and hasattr(backend, "size_writer_many"):
            return self._offer_batched(ks, flags.tolist(), nbytes, fast, found)
        on_access, on_insert = (fast.access, fast.insert) if fast is not None else (self._hooks.access, self._hooks.insert)
        store = backend.size_writer(nbytes) if hasattr(backend, "size_writer") else (lambda k: backend.put_size(k, nbytes))
        hit: list[bool] = []
        for k, w in zip(ks, flags.tolist()):
            managed = k in sizes  # again per key: an earlier write of this call may have evicted it
            hit.append(managed)
            if managed:
                evicted = on_access(k)
                if evicted:
                    self._drop(evicted)
            elif w:
                if backend.used_bytes + nbytes <= capacity:  # fits: no victim
                    store(k)
                    sizes[k] = nbytes
                    evicted = on_insert(k, nbytes)
                    if evicted:
                        self._drop(evicted)
                else:
                    self._put(k, nbytes, store, ())
        return np.array(hit, dtype=bool)

    def _offer_batched(self, ks: list, flags: list, nbytes: int, hooks: FastHooks, found: list) -> np.ndarray:
        """:meth:`access_or_put_size_many` for a built-in policy's fast hooks with ``evict_first``
        and a backend with ``size_writer_many`` (``found``: the keys managed at the start of the
        call).  A request shaped as usual (its hits first, then new keys, none twice) is one run of
        accesses, the victims its new keys need, and one write of the new keys.  Any other request
        (or one whose new keys could evict each other) takes one key at a time, exactly as
        separate calls.  What the events return is not read: only an order that never evicts on
        its own has ``evict_first`` (:class:`~kvmm.protocols.FastHooks`)."""
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
        self._hooks.check()
        # The policy tracks exactly the managed keys ...
        assert len(self.policy) == len(self._sizes)
        assert all(key in self.policy for key in self._sizes)
        # ... which are all in the backend, with the recorded sizes.
        for key, nbytes in self._sizes.items():
            assert self.backend.nbytes_of(key) == nbytes
        # A size-aware policy (ARC) accounts exactly the bytes of the managed entries to its residents.
        accounted = self._hooks.resident_size()
        assert accounted is None or accounted == sum(self._sizes.values())
        # Capacity is never exceeded.
        assert 0 <= self.backend.used_bytes <= self.backend.capacity_bytes

    def _plan_victims(self, need: int, protected: set, incoming: Hashable, nbytes: int) -> list[Hashable]:
        """The shortest prefix of the policy's victim order that frees ``need`` bytes."""
        n = 1
        while True:
            order = self._hooks.victims(n, protected, incoming=incoming, incoming_size=nbytes)
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
