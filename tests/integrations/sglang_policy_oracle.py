"""A SGLang eviction strategy that runs a kvmm policy *object* (sglang venv only): the oracle the
per-node priorities of kvmm.integrations.sglang_eviction are checked against.

It keeps an LRU, FIFO or LFU policy over the tree's node ids and feeds it what the nodes record,
in time order, when an eviction starts after the tree changed (one walk of the tree): a node new
since the last look is ``on_insert`` at its creation time; a node whose ``hit_count`` grew by
``d`` gets ``d`` ``on_access`` calls at its last-access time (one, if only its last-access time
moved; LFU gets ``touch`` instead, which moves its tie-break only); a node gone is ``on_remove``.
The priority of a node is its position in the policy's victim order.  (Until issue 33 this was
kvmm's strategy; it walks the tree from the node to the root, so a node without a real tree
under it, a mock, has no answer: here that is a clear error, never an endless walk.)
"""

from __future__ import annotations

from typing import Any

from sglang.srt.mem_cache.evict_policy import EvictionStrategy

from kvmm.errors import BadInputError
from kvmm.policies import LFUPolicy


class PolicyFedStrategy(EvictionStrategy):
    """``PolicyFedStrategy(policy)``: the order of ``policy`` (a fresh LRU/FIFO/LFU object)."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.touch_is_use = not isinstance(policy, LFUPolicy)
        self._seen: dict[int, tuple[float, int]] = {}  # node id -> (last_access_time, hit_count) fed
        self._rank: dict[int, int] = {}  # node id -> position in the victim order at the last look
        self._root: Any = None
        self._root_stamp: float | None = None

    def get_priority(self, node: Any) -> int:
        root, seen = node, set()
        while root.parent is not None:
            if id(root) in seen:
                raise BadInputError(f"PolicyFedStrategy: the parents of {node!r} form a cycle; expected a radix tree")
            seen.add(id(root))
            root = root.parent
        if root is not self._root or root.last_access_time != self._root_stamp or node.id not in self._rank:
            self._look(root)
        return self._rank[node.id]

    def _look(self, root: Any) -> None:
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
