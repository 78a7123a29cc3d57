"""kvmm eviction orders as SGLang radix-cache ``EvictionStrategy`` classes (sglang==0.5.23).

SGLang's radix cache (``RadixCache.evict``) asks its strategy one thing: ``get_priority(node)``
for each evictable leaf when an eviction starts, and for each parent that becomes a leaf on the
way; it evicts the leaf of lowest priority first.  It tells the strategy of no insert, access or
removal; what it records is on the node: ``creation_time``, ``last_access_time`` (set by every
match and insert that passes the node) and ``hit_count`` (counted by inserts).

:class:`KvmmEvictionStrategy` keeps a kvmm :class:`~kvmm.protocols.EvictionPolicy` over the
tree's node ids and feeds it those records as events, in time order: a node new since the last
look is ``on_insert`` at its creation time; a node whose ``hit_count`` grew by ``d`` gets ``d``
``on_access`` calls at its last-access time (one, if only its last-access time moved); a node no
longer in the tree is ``on_remove``.  The priority of a node is its position in the policy's
victim order.  It looks again (one walk of the tree, O(nodes)) when an eviction starts after the
tree changed: every match and insert stamps the root's last-access time, so a changed stamp
says so.

Which kvmm policies this can express, and which not:

* LRU, FIFO: exactly SGLang's own ``lru`` and ``fifo`` (the tests replay 1500 requests of the
  Mooncake conversation trace through a real RadixCache and compare every eviction);
* LFU: SGLang's ``lfu`` orders by ``(hit_count, last_access_time)``; kvmm's LFU by (count, most
  recent reference), fed count = 1 + ``hit_count``.  A touch SGLang does not count
  (``match_prefix`` stamps the last-access time of the node it splits, and of every node a match
  passes, without a hit) is fed as :meth:`LFUPolicy.touch <kvmm.policies.LFUPolicy.touch>`: the
  node becomes the most recent of its count, its count unchanged.  So kvmm's LFU strategy is
  SGLang's ``lfu`` exactly (the tests replay the same 1500 requests and compare every eviction).
  Without ``touch`` (a caller that counts every reference) kvmm's LFU breaks ties by the last
  counted use only; on that replay the two would differ on 2 of 1500 requests.
* ARC: refused.  ARC keeps ghost lists of keys it has evicted and adapts its target size on a
  ghost hit, and its victim depends on the entry coming in; SGLang gives a strategy neither
  (a node it evicts is gone, and ``evict`` names no incoming node), and a per-node priority fixed
  at the start of an eviction cannot change as ARC's target moves.  Any other policy is refused
  too: only orders that are a function of each node's own inserts and accesses fit.

Importing this module imports SGLang's ``evict_policy``; ``import kvmm`` never does.
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar

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

_EXPRESSIBLE = (LRUPolicy, FIFOPolicy, LFUPolicy)  # FIFOPolicy is an LRUPolicy subclass


class KvmmEvictionStrategy(EvictionStrategy):
    """A SGLang ``EvictionStrategy`` whose order is a kvmm policy's (see the module docstring).

    Subclasses set ``new_policy`` (a zero-argument callable returning a fresh LRU, FIFO or LFU
    policy).  SGLang builds one strategy per radix cache.

    Runtime complexity: ``get_priority`` O(1), plus one O(nodes log changed nodes) look at the
    tree when an eviction starts after the tree changed.
    """

    new_policy: ClassVar[Callable[[], Any]]
    #: whether a touch without a count (a moved last-access time, no hit) is a use: True for
    #: recency orders; False for LFU, whose count is SGLang's hit_count (it gets ``touch``)
    touch_is_use: ClassVar[bool] = True

    def __init__(self) -> None:
        self.policy = type(self).new_policy()
        self._seen: dict[int, tuple[float, int]] = {}  # node id -> (last_access_time, hit_count) fed
        self._rank: dict[int, int] = {}  # node id -> position in the victim order at the last look
        self._root: Any = None
        self._root_stamp: float | None = None

    def get_priority(self, node: Any) -> int:
        root = node
        while root.parent is not None:
            root = root.parent
        if root is not self._root or root.last_access_time != self._root_stamp or node.id not in self._rank:
            self._look(root)
        return self._rank[node.id]

    def _look(self, root: Any) -> None:
        """Feed the policy what changed in the tree since the last look, in time order."""
        if root is not self._root:  # a new tree (RadixCache.reset): forget the old one
            for node_id in self._seen:
                self.policy.on_remove(node_id)
            self._seen = {}
        nodes, stack = [], list(root.children.values())
        while stack:
            node = stack.pop()
            nodes.append(node)
            stack.extend(node.children.values())
        present = {node.id for node in nodes}
        for node_id in [i for i in self._seen if i not in present]:
            self.policy.on_remove(node_id)
            del self._seen[node_id]
        events = []  # (time, 0 insert / 1 access / 2 uncounted touch, node id, accesses)
        for node in nodes:
            before = self._seen.get(node.id)
            if before is None:
                events.append((node.creation_time, 0, node.id, 0))
                touched, grown = node.last_access_time > node.creation_time, node.hit_count
                when = max(node.last_access_time, node.creation_time)
            else:
                touched, grown = node.last_access_time != before[0], node.hit_count - before[1]
                when = node.last_access_time
            accesses = grown if grown > 0 else int(touched and self.touch_is_use)
            if accesses:
                events.append((when, 1, node.id, accesses))
            elif touched:  # LFU: an uncounted touch moves the tie-break only
                events.append((when, 2, node.id, 0))
            self._seen[node.id] = (node.last_access_time, node.hit_count)
        events.sort()
        for _, kind, node_id, accesses in events:
            if kind == 0:
                self.policy.on_insert(node_id)
            elif kind == 2:
                self.policy.touch(node_id)
            else:
                for _ in range(accesses):
                    self.policy.on_access(node_id)
        self._rank = {node_id: i for i, node_id in enumerate(self.policy.victims(len(self.policy)))}
        self._root, self._root_stamp = root, root.last_access_time


def make_eviction_strategy(policy: Any, *, name: str | None = None) -> type[KvmmEvictionStrategy]:
    """A :class:`KvmmEvictionStrategy` subclass ordered by ``policy``: ``"lru"``, ``"fifo"``,
    ``"lfu"``, one of kvmm's LRUPolicy / FIFOPolicy / LFUPolicy (class, factory or object: each
    radix cache gets a fresh copy).  ARC and other policies raise :class:`BadInputError`."""
    if isinstance(policy, str):
        if policy.lower() == "arc":
            policy = ARCPolicy
        else:
            make_eviction_policy(policy)  # an unknown name is named here
            policy = type(make_eviction_policy(policy))
    factory, probe = policy_factory(policy, need_contains=True)
    if isinstance(probe, ARCPolicy):
        raise BadInputError(
            "ARC cannot be a SGLang EvictionStrategy: it keeps ghost lists of evicted keys and adapts its target "
            "on a ghost hit, and its victim depends on the incoming entry, while SGLang's radix cache asks only a "
            "per-node priority fixed when an eviction starts; expected LRUPolicy, FIFOPolicy or LFUPolicy "
            "(ARC runs as the HiCache storage tier's eviction instead: extra config \"eviction\": \"arc\")")
    if not isinstance(probe, _EXPRESSIBLE):
        raise BadInputError(
            f"{type(probe).__name__} cannot be a SGLang EvictionStrategy: SGLang's per-node priority interface "
            "expresses only orders made from each node's own inserts and accesses; expected LRUPolicy, FIFOPolicy "
            "or LFUPolicy")
    return type(name or f"Kvmm{type(probe).__name__.removesuffix('Policy')}Strategy", (KvmmEvictionStrategy,), {
        "new_policy": staticmethod(factory), "touch_is_use": not isinstance(probe, LFUPolicy), "__module__": __name__,
        "__doc__": f"SGLang radix-cache eviction ordered by kvmm's {type(probe).__name__}."})


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
    from sglang.srt.arg_groups import choices
    from sglang.srt.mem_cache import utils as mem_cache_utils

    mem_cache_utils._EVICTION_POLICY_FACTORIES.update(STRATEGY_NAMES)
    choices.add_radix_eviction_policy_choices([n for n in STRATEGY_NAMES if n not in choices.RADIX_EVICTION_POLICY_CHOICES])
    return sorted(STRATEGY_NAMES)
