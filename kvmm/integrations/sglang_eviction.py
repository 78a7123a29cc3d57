"""kvmm eviction orders as SGLang radix-cache ``EvictionStrategy`` classes (sglang==0.5.23).

SGLang's radix cache (``RadixCache.evict``) asks its strategy one thing: ``get_priority(node)``
for each evictable leaf when an eviction starts, and for each parent that becomes a leaf on the
way; it evicts the leaf of lowest priority first.  It tells the strategy of no insert, access or
removal; what it records is on the node: ``creation_time``, ``last_access_time`` (set by every
match and insert that passes the node) and ``hit_count`` (counted by inserts).

A kvmm strategy computes a node's priority from the node alone, as SGLang's own strategies do:
the key by which the kvmm order ranks a key, built from that node's records.  It reads three
attributes, walks no tree and follows no ``parent`` pointer, so it ends on any node, a mock
included (SGLang's own ``test_evict_policy.py`` runs against it:
``tests/integrations/test_sglang_upstream_evict_policy.py``); a node without the records it
needs raises :class:`~kvmm.errors.BadInputError`.

* LRU (:class:`~kvmm.policies.LRUPolicy`: least recent insert or use first): the last
  reference, ``last_access_time`` (a node's creation stamps it too);
* FIFO (:class:`~kvmm.policies.FIFOPolicy`: first inserted first): ``creation_time``;
* LFU (:class:`~kvmm.policies.LFUPolicy`: lowest count first, then least recent): the count is
  1 at the insert and 1 more per counted use, here ``1 + hit_count``; the recency is the last
  reference, counted or not (``LFUPolicy.touch``: a match stamps ``last_access_time`` on the
  node it splits and on every node it passes, without a hit).  The priority is
  ``(hit_count, last_access_time)``, the same order.

So these are SGLang's own ``lru``, ``fifo`` and ``lfu`` keys: kvmm's three orders, fed what
SGLang records, rank nodes exactly as SGLang does.  The tests replay 1500 requests of the
Mooncake conversation trace through a real ``RadixCache`` and compare every eviction three ways:
SGLang's strategy, this one, and the kvmm policy object itself fed the tree's inserts and uses
in time order.

Which kvmm orders cannot be a strategy: ARC keeps ghost lists of keys it has evicted and adapts
its target size on a ghost hit, and its victim depends on the entry coming in; SGLang gives a
strategy neither (a node it evicts is gone, and ``evict`` names no incoming node), and a
per-node priority cannot change as ARC's target moves.  Every other order ranks a key by state
beyond its own history (CLOCK's hand, S3-FIFO's and 2Q's queues, SLRU's segment quotas, LIRS's
stack, W-TinyLFU's sketch), so it is refused too, as are subclasses of the three (their
overrides could not run).

Importing this module imports SGLang's ``evict_policy``; ``import kvmm`` never does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

try:
    from sglang.srt.mem_cache.evict_policy import EvictionStrategy
except ImportError as exc:  # pragma: no cover - exercised only without SGLang
    raise ImportError(
        "kvmm.integrations.sglang_eviction needs SGLang (tested with sglang==0.5.23); see README, "
        f"'Use inside SGLang'; import failed with: {exc}") from exc

from kvmm.errors import BadInputError
from kvmm.integrations._policy_factory import policy_factory
from kvmm.policies.eviction import ARCPolicy, FIFOPolicy, LFUPolicy, LRUPolicy, make_eviction_policy

__all__ = ["KvmmEvictionStrategy", "KvmmLRUStrategy", "KvmmFIFOStrategy", "KvmmLFUStrategy",
           "make_eviction_strategy", "register_eviction_strategies", "STRATEGY_NAMES"]


def _lru_key(node: Any) -> float:
    return node.last_access_time


def _fifo_key(node: Any) -> float:
    return node.creation_time


def _lfu_key(node: Any) -> tuple:
    return node.hit_count, node.last_access_time


#: kvmm order -> (its key from a node's records, the records it reads)
_NODE_KEYS: dict[type, tuple[Callable[[Any], Any], tuple[str, ...]]] = {
    LRUPolicy: (_lru_key, ("last_access_time",)),
    FIFOPolicy: (_fifo_key, ("creation_time",)),
    LFUPolicy: (_lfu_key, ("hit_count", "last_access_time")),
}


class KvmmEvictionStrategy(EvictionStrategy):
    """A SGLang ``EvictionStrategy`` whose order is a kvmm policy's (see the module docstring).

    Subclasses set ``order`` (:class:`~kvmm.policies.LRUPolicy`, ``FIFOPolicy`` or
    ``LFUPolicy``); :func:`make_eviction_strategy` makes them.  Stateless: SGLang builds one per
    radix cache, and any number may share nodes.

    Runtime complexity: ``get_priority`` O(1).
    """

    order: ClassVar[type]

    def get_priority(self, node: Any) -> Any:
        key, records = _NODE_KEYS[self.order]
        try:
            return key(node)
        except AttributeError:
            missing = [name for name in records if not hasattr(node, name)]
            raise BadInputError(
                f"{type(self).__name__}.get_priority needs a SGLang radix-tree node (TreeNode) with "
                f"{', '.join(records)}; got {type(node).__name__} without {', '.join(missing) or records[0]}") from None


def make_eviction_strategy(policy: Any, *, name: str | None = None) -> type[KvmmEvictionStrategy]:
    """A :class:`KvmmEvictionStrategy` subclass ordered by ``policy``: ``"lru"``, ``"fifo"``,
    ``"lfu"``, or kvmm's LRUPolicy / FIFOPolicy / LFUPolicy (class, factory or object).  ARC,
    the other orders and subclasses of these three raise :class:`BadInputError`."""
    if isinstance(policy, str):
        if policy.lower() == "arc":
            policy = ARCPolicy
        else:
            make_eviction_policy(policy)  # an unknown name is named here
            policy = type(make_eviction_policy(policy))
    _, probe = policy_factory(policy)
    if isinstance(probe, ARCPolicy):
        raise BadInputError(
            "ARC cannot be a SGLang EvictionStrategy: it keeps ghost lists of evicted keys and adapts its target "
            "on a ghost hit, and its victim depends on the incoming entry, while SGLang's radix cache asks only a "
            "per-node priority fixed when an eviction starts; expected LRUPolicy, FIFOPolicy or LFUPolicy "
            "(ARC runs as the HiCache storage tier's eviction instead: extra config \"eviction\": \"arc\")")
    order = type(probe)
    if order not in _NODE_KEYS:
        base = next((cls.__name__ for cls in _NODE_KEYS if isinstance(probe, cls)), None)
        why = (f"it subclasses {base}, and a strategy computes {base}'s key from the node's records, so its "
               "overrides could not run" if base else
               "SGLang's per-node priority expresses only orders made from each node's own inserts and accesses")
        raise BadInputError(f"{order.__name__} cannot be a SGLang EvictionStrategy: {why}; expected LRUPolicy, "
                            "FIFOPolicy or LFUPolicy")
    return type(name or f"Kvmm{order.__name__.removesuffix('Policy')}Strategy", (KvmmEvictionStrategy,), {
        "order": order, "__module__": __name__,
        "__doc__": f"SGLang radix-cache eviction ordered by kvmm's {order.__name__}."})


KvmmLRUStrategy = make_eviction_strategy(LRUPolicy, name="KvmmLRUStrategy")
KvmmFIFOStrategy = make_eviction_strategy(FIFOPolicy, name="KvmmFIFOStrategy")
KvmmLFUStrategy = make_eviction_strategy(LFUPolicy, name="KvmmLFUStrategy")

#: ``--radix-eviction-policy`` name -> strategy class, added by :func:`register_eviction_strategies`.
STRATEGY_NAMES = {"kvmm_lru": KvmmLRUStrategy, "kvmm_fifo": KvmmFIFOStrategy, "kvmm_lfu": KvmmLFUStrategy}


def register_eviction_strategies() -> list[str]:
    """Add ``kvmm_lru``, ``kvmm_fifo``, ``kvmm_lfu`` to SGLang's closed table of radix-cache
    eviction policies (``sglang.srt.mem_cache.utils._EVICTION_POLICY_FACTORIES``, read by
    ``RadixCache``) and to the choices of ``--radix-eviction-policy``; returns the names.
    Idempotent.  It acts in the calling process only (see README, 'Use inside SGLang')."""
    # the optional sglang extra (a user of the other adapters need not install it)
    from sglang.srt.arg_groups import choices
    from sglang.srt.mem_cache import utils as mem_cache_utils

    mem_cache_utils._EVICTION_POLICY_FACTORIES.update(STRATEGY_NAMES)
    choices.add_radix_eviction_policy_choices([n for n in STRATEGY_NAMES if n not in choices.RADIX_EVICTION_POLICY_CHOICES])
    return sorted(STRATEGY_NAMES)
