"""Eviction orders, each an :class:`~kvmm.protocols.EvictionPolicy` in its own module (LRU, FIFO,
LFU, ARC, CLOCK, S3-FIFO, SIEVE, 2Q, LIRS, SLRU, W-TinyLFU and the offline Belady), each order's
numba replay kernel in :mod:`kvmm.policies.eviction._kernels`, and the one table of them,
:data:`~kvmm.policies.eviction.orders.ORDERS`, that :data:`EVICTION_POLICIES`,
:func:`make_eviction_policy` and :func:`replay` read (docs/eviction_orders.md lists the orders
with their options and where each follows libCacheSim).

A policy only *orders* keys; the structure that owns the data removes them.  The calling
convention (what :class:`kvmm.tiers.ManagedTier` does):

* a new key was stored: ``on_insert(key, size)``; an existing one was read:
  ``on_access(key)``, or overwritten with a value of another size: ``on_access(key, size)``;
  one was evicted or deleted: ``on_remove(key)``;
* to make room: ``victims(n, protected)`` lists up to ``n`` keys in eviction order, skipping
  ``protected``, *without* removing them; the caller removes some prefix of that list and calls
  ``on_remove`` for each.  Asking twice without changes in between gives the same answer.

Sizes are in the caller's units (:class:`~kvmm.tiers.ManagedTier` passes bytes); they default
to 1, so a caller that never passes them gets entry-count semantics.  LRU, FIFO and LFU order
keys without looking at sizes (the caller evicts a prefix until the bytes fit).  ARC accounts
its lists T1, T2, B1, B2 and its target ``p`` in size units, as libCacheSim's ARC does.

ARC also takes ``victims(..., incoming=key, incoming_size=size)``: the entry whose insertion
needs the room.  ARC adapts ``p`` when that key is a ghost (recently evicted) *before* choosing
victims, and with sizes its choice depends on the incoming size; passing both reproduces
Megiddo & Modha's algorithm exactly for unit sizes (the tests replay it against a line-by-line
transcription of the paper) and libCacheSim's byte-accounted ARC for mixed sizes.  The other
policies accept and ignore them, so callers can always pass them.

Keys are any hashable values.  Calling ``on_access``/``on_remove`` for a key the policy does
not track raises :class:`~kvmm.errors.UnknownKeyError`; ``on_insert`` of a tracked key raises
:class:`~kvmm.errors.BadInputError` (use ``on_access``).  Either way nothing changes.

Policies are small dataclasses (kvpress style): configuration is validated in
``__post_init__``, state lives in private ordered containers.  Runtime complexity: O(1) per
event for LRU/FIFO/ARC (``OrderedDict``), O(log n) for LFU (``SortedDict``); ``victims`` is
O(n + number of protected keys skipped).  A size must be an integer ``>= 0``
(:class:`~kvmm.errors.DTypeError` / :class:`~kvmm.errors.BadInputError` otherwise).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvmm._lazy import lazy_exports

_ORDERS = "kvmm.policies.eviction.orders"
_LAZY = {
    "LRUPolicy": "kvmm.policies.eviction.lru",
    "FIFOPolicy": "kvmm.policies.eviction.fifo",
    "LFUPolicy": "kvmm.policies.eviction.lfu",
    "ARCPolicy": "kvmm.policies.eviction.arc",
    "ClockPolicy": "kvmm.policies.eviction.clock",
    "S3FIFOPolicy": "kvmm.policies.eviction.s3fifo",
    "SIEVEPolicy": "kvmm.policies.eviction.sieve",
    "TwoQPolicy": "kvmm.policies.eviction.twoq",
    "LIRSPolicy": "kvmm.policies.eviction.lirs",
    "SLRUPolicy": "kvmm.policies.eviction.slru",
    "WTinyLFUPolicy": "kvmm.policies.eviction.wtinylfu",
    "BeladyPolicy": "kvmm.policies.eviction.belady",
    "Order": _ORDERS,
    "ORDERS": _ORDERS,
    "EVICTION_POLICIES": _ORDERS,
    "make_eviction_policy": _ORDERS,
    "replay": "kvmm.policies.eviction._replay",
    "REPLAY_ORDERS": "kvmm.policies.eviction._replay",
    "dense_ids": "kvmm.policies.eviction._replay",
}

__all__ = sorted(_LAZY)

if TYPE_CHECKING:  # what editors and type checkers see; at run time each name loads on first use
    from kvmm.policies.eviction._replay import REPLAY_ORDERS, dense_ids, replay
    from kvmm.policies.eviction.arc import ARCPolicy
    from kvmm.policies.eviction.belady import BeladyPolicy
    from kvmm.policies.eviction.clock import ClockPolicy
    from kvmm.policies.eviction.fifo import FIFOPolicy
    from kvmm.policies.eviction.lfu import LFUPolicy
    from kvmm.policies.eviction.lirs import LIRSPolicy
    from kvmm.policies.eviction.lru import LRUPolicy
    from kvmm.policies.eviction.orders import EVICTION_POLICIES, ORDERS, Order, make_eviction_policy
    from kvmm.policies.eviction.s3fifo import S3FIFOPolicy
    from kvmm.policies.eviction.sieve import SIEVEPolicy
    from kvmm.policies.eviction.slru import SLRUPolicy
    from kvmm.policies.eviction.twoq import TwoQPolicy
    from kvmm.policies.eviction.wtinylfu import WTinyLFUPolicy

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
