"""Plain-Python models of the nontrivial routers, written from docs/cluster_routers.md.

Slow and obvious: the approximate memory is a list of (block, instance) pairs, oldest first;
matches are counted by walking the request's blocks per instance; scores are Python floats
summed in the documented order.  tests/test_cluster_routers_reference.py compares each model
with its router in ``kvmm.cluster.routers`` on Hypothesis-generated request and view
sequences.  A model reads the same view attributes a router does and never changes them.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ApproxPrefixModel", "PrecisePrefixModel", "WeightedModel"]


class PairMemoryModel:
    """(block, instance) pairs, least recently used first, at most ``max_blocks`` of them."""

    def __init__(self, max_blocks: int) -> None:
        self.max_blocks = max_blocks
        self.pairs: list[tuple[int, int]] = []

    def matched(self, blocks: list[int], num_instances: int) -> list[int]:
        """Per instance: how many of ``blocks``, from the first, it has without a gap."""
        held = set(self.pairs)
        out = []
        for instance in range(num_instances):
            k = 0
            while k < len(blocks) and (blocks[k], instance) in held:
                k += 1
            out.append(k)
        return out

    def size(self, instance: int) -> int:
        return sum(1 for _, owner in self.pairs if owner == instance)

    def remember(self, blocks: list[int], instance: int) -> None:
        """Each block becomes most recent for ``instance``, the last block first, so the first
        block ends up the most recent of all; then the oldest pairs go beyond the bound."""
        for block in reversed(blocks):
            pair = (block, instance)
            if pair in self.pairs:
                self.pairs.remove(pair)
            self.pairs.append(pair)
        while len(self.pairs) > self.max_blocks:
            self.pairs.pop(0)


def _loads(view: Any) -> list[int]:
    return [q + r for q, r in zip(view.queue_lengths.tolist(), view.running.tolist())]


def _first_lowest(values: list, candidates: list[int]) -> int:
    """The candidate with the smallest value; ties: the lowest index."""
    return min(candidates, key=lambda i: (values[i], i))


class ApproxPrefixModel:
    """SGLang's cache-aware rule: least loaded when imbalanced (both thresholds exceeded), else
    the best match when its ratio is strictly above ``cache_threshold`` (ties: lower load, then
    lower index), else the instance with the fewest remembered pairs (or the least loaded);
    then the request's blocks are remembered for the chosen instance."""

    def __init__(self, num_instances: int, max_blocks: int = 1 << 20, cache_threshold: float = 0.3,
                 balance_abs_threshold: int = 64, balance_rel_threshold: float = 1.5,
                 miss_route: str = "smallest") -> None:
        self.n = num_instances
        self.memory = PairMemoryModel(max_blocks)
        self.cache_threshold = cache_threshold
        self.abs_threshold = balance_abs_threshold
        self.rel_threshold = balance_rel_threshold
        self.miss_route = miss_route

    def route(self, request: Any, view: Any) -> int:
        blocks = [int(b) for b in request.block_ids]
        load = _loads(view)
        everyone = list(range(self.n))
        if max(load) - min(load) > self.abs_threshold and max(load) > self.rel_threshold * min(load):
            choice = _first_lowest(load, everyone)
        else:
            matched = self.memory.matched(blocks, self.n)
            best = max(matched)
            if blocks and best / len(blocks) > self.cache_threshold:
                choice = _first_lowest(load, [i for i in everyone if matched[i] == best])
            elif self.miss_route == "smallest":
                choice = _first_lowest([self.memory.size(i) for i in everyone], everyone)
            else:
                choice = _first_lowest(load, everyone)
        self.memory.remember(blocks, choice)
        return choice


def _longest_over_media(index: Any, blocks: list[int], weights: dict | None) -> list[float]:
    """Per instance: the largest (weighted) count of leading blocks held in one medium."""
    hits = index.prefix_hits(blocks).tolist()
    media = list(index.media)
    out = []
    for row in hits:
        if weights is None:
            out.append(max(row))
        else:
            out.append(max(weights.get(m, 0.0) * h for m, h in zip(media, row)))
    return out


class PrecisePrefixModel:
    """Largest ``longest prefix over media - load_weight * load``; ties: lower load, then lower index."""

    def __init__(self, num_instances: int, load_weight: float = 0.0, medium_weights: dict | None = None) -> None:
        self.n = num_instances
        self.load_weight = load_weight
        self.medium_weights = medium_weights

    def route(self, request: Any, view: Any) -> int:
        blocks = [int(b) for b in request.block_ids]
        score = _longest_over_media(view.index, blocks, self.medium_weights)
        load = _loads(view)
        if self.load_weight:
            score = [s - self.load_weight * l for s, l in zip(score, load)]
        top = max(score)
        return _first_lowest(load, [i for i in range(self.n) if score[i] == top])


class WeightedModel:
    """Argmax (lowest index on ties) of ``w_prefix * matched/blocks + w_load * minmax(queue)
    + w_kv * (1 - kv)``, matched from the index, or from a pair memory when there is none."""

    def __init__(self, num_instances: int, weights: dict | None = None, load_metric: str = "waiting",
                 max_blocks: int = 1 << 20) -> None:
        self.n = num_instances
        self.weights = {"prefix": 2.0, "load": 1.0, "kv": 1.0} if weights is None else dict(weights)
        self.load_metric = load_metric
        self.memory = PairMemoryModel(max_blocks)

    def route(self, request: Any, view: Any) -> int:
        blocks = [int(b) for b in request.block_ids]
        total = [0.0] * self.n
        w_prefix = self.weights.get("prefix", 0.0)
        from_memory = bool(w_prefix) and view.index is None
        if w_prefix:
            matched = (self.memory.matched(blocks, self.n) if from_memory
                       else _longest_over_media(view.index, blocks, None))
            if blocks:
                total = [t + w_prefix * (m / len(blocks)) for t, m in zip(total, matched)]
        w_load = self.weights.get("load", 0.0)
        if w_load:
            q = view.queue_lengths.tolist() if self.load_metric == "waiting" else _loads(view)
            lo, hi = min(q), max(q)
            total = [t + w_load * ((hi - qi) / (hi - lo) if hi > lo else 1.0) for t, qi in zip(total, q)]
        w_kv = self.weights.get("kv", 0.0)
        if w_kv:
            total = [t + w_kv * (1.0 - u) for t, u in zip(total, view.kv_utilisation.tolist())]
        top = max(total)
        choice = min(i for i in range(self.n) if total[i] == top)
        if from_memory:
            self.memory.remember(blocks, choice)
        return choice
