"""The calls an owner makes on one eviction policy, resolved once: :class:`PolicyHooks`.

Every owner of an :class:`~kvmm.protocols.EvictionPolicy` (:class:`~kvmm.tiers.ManagedTier`,
which the simulator's tiers are; the vLLM and LMCache cache-policy adapters) drives it through
this one object, and reads the keys the policy evicted on its own from what ``insert`` and
``access`` return.  What an owner does with those keys is its own business (ManagedTier deletes
them; an engine adapter, whose engine still holds the chunks, hands them over at its next
eviction), but how they come back is decided here, once:

* a policy derived from :class:`~kvmm.protocols.EvictionPolicyBase`: its own bound methods,
  with every optional capability (its defaults where it has no override) and ``protected``
  passed through;
* any other object: its four Protocol methods only (the optional capabilities are absent, as
  the Protocol documents: no ``incoming`` for ``victims``, ``on_remove`` for an eviction, no
  capacity, no fast hooks), what its events return made a tuple (``None``: nothing), and, for
  a policy written before sizes, its events called with the key only (read from the
  signature here, the one place kvmm looks at a policy's signature).
"""

from __future__ import annotations

import inspect
from collections.abc import Hashable, Iterable
from typing import Any

from kvmm.protocols import EvictionPolicyBase

__all__ = ["PolicyHooks"]


class PolicyHooks:
    """How to call ``policy`` (see the module docstring).  Attributes, all callables unless said:

    * ``insert(key, size=1, protected=())`` / ``access(key, size=None, protected=())``: the
      events; each returns the keys evicted on the policy's own (falsy when none);
    * ``remove(key)``: a delete; ``evict(key)``: a victim the owner chose leaves (``on_evict``);
    * ``victims(n, protected, *, incoming=, incoming_size=)`` (``incoming`` reaches only an
      EvictionPolicyBase);
    * ``attach(capacity)``, ``touch(key)``, ``adapt(key)``, ``fast_hooks()``, ``check()``,
      ``resident_size()`` (:class:`~kvmm.protocols.FastHooks` or None, an int or None);
    * ``keys``: the policy's ``keys`` or None (not an EvictionPolicyBase);
    * ``adapts`` (bool): whether ``adapt`` does anything (the policy overrides the base's no-op:
      ARC), so an owner need not prepare for it (vLLM registers its pending stores first);
    * ``self_evicting`` (bool): whether the events may return keys (True for a policy that does
      not say), ``offline`` (bool).

    Runtime complexity: resolving O(1); each call the policy's own (plus one wrapper call for a
    policy that is not an EvictionPolicyBase).
    """

    __slots__ = ("policy", "insert", "access", "remove", "evict", "victims", "attach", "touch", "adapt",
                 "fast_hooks", "check", "resident_size", "keys", "adapts", "self_evicting", "offline")

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.remove = policy.on_remove
        if isinstance(policy, EvictionPolicyBase):
            self.insert, self.access = policy.on_insert, policy.on_access
            self.evict, self.victims = policy.on_evict, policy.victims
            self.attach, self.touch, self.adapt = policy.attach, policy.touch, policy.adapt
            self.fast_hooks, self.check, self.resident_size = policy.fast_hooks, policy.check, policy.resident_size
            self.keys = policy.keys
            self.adapts = type(policy).adapt is not EvictionPolicyBase.adapt
            self.self_evicting, self.offline = bool(policy.self_evicting), bool(policy.offline)
            return
        plain = _ProtocolOnly(policy)
        self.insert, self.access, self.victims, self.evict = plain.insert, plain.access, plain.victims, policy.on_remove
        self.attach = self.touch = self.adapt = self.check = self.fast_hooks = self.resident_size = _absent
        self.keys = None
        self.adapts = False
        self.self_evicting, self.offline = True, False


class _ProtocolOnly:
    """A policy that is not an EvictionPolicyBase, called as one: its events' results made a
    tuple, ``incoming`` and ``protected`` not passed (the Protocol has neither), sizes passed only
    to events that take them.  Bound methods of this object (not closures), so a deep copy of an
    owner copies the policy they call."""

    __slots__ = ("policy", "insert_takes_size", "access_takes_size")

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.insert_takes_size = _takes_a_size(policy.on_insert)
        self.access_takes_size = _takes_a_size(policy.on_access)

    def insert(self, key: Hashable, size: int = 1, protected: Iterable[Hashable] = ()) -> tuple:
        evicted = self.policy.on_insert(key, size) if self.insert_takes_size else self.policy.on_insert(key)
        return tuple(evicted or ())

    def access(self, key: Hashable, size: int | None = None, protected: Iterable[Hashable] = ()) -> tuple:
        sized = size is not None and self.access_takes_size
        evicted = self.policy.on_access(key, size) if sized else self.policy.on_access(key)
        return tuple(evicted or ())

    def victims(self, n: int, protected: Iterable[Hashable] = (), *, incoming: Hashable = None,
                incoming_size: int = 1) -> list:
        return self.policy.victims(n, protected)


def _takes_a_size(method: Any) -> bool:
    """Whether an event of a policy that is not an EvictionPolicyBase takes a size after the key
    (the Protocol since sizes) or the key only (the protocol before them)."""
    try:
        parameters = list(inspect.signature(method).parameters.values())
    except (TypeError, ValueError):
        return True
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in parameters)


def _absent(*args: Any) -> None:
    """An optional capability a policy that is not an EvictionPolicyBase does not have: does
    nothing, returns None (no fast hooks, no accounted size)."""
    return None
