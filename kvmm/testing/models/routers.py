"""Plain-Python models of the nontrivial routers, written from docs/cluster_routers.md (and the
peer files it names), not from kvmm/cluster/routers*.py.

Slow and obvious: the approximate memory is a list of (block, instance) pairs, oldest first;
matches are counted by walking the request's blocks per instance; scores are Python floats
summed in the documented order, instance by instance.  Random tie-breaks follow the documented
protocol ("Ties" in docs/cluster_routers.md): ``numpy.random.default_rng(seed)``, one
``rng.integers(k)`` for a tie among ``k > 1`` candidates in ascending order, one
``rng.random()`` per softmax sample.  tests/cluster/test_cluster_routers_reference.py compares each
model with its router on Hypothesis-generated request and view sequences.  A model reads the
same view attributes a router does and never changes them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["LeastLoadedModel", "ApproxPrefixModel", "PrecisePrefixModel", "WeightedModel", "KvCostModel"]

#: llm-d-kv-cache-manager v0.4.0, pkg/kvcache/backend.go: DefaultKVCacheBackendConfig
LLMD_DEFAULT_WEIGHTS = {"gpu": 1.0, "cpu": 0.8}


class TieModel:
    """The documented tie-break: "lowest", or "random" with the seeded draws above."""

    def __init__(self, tie_break: str, seed: int) -> None:
        self.random = tie_break == "random"
        self.rng = np.random.default_rng(seed)

    def pick(self, candidates: list[int]) -> int:
        candidates = sorted(candidates)
        if len(candidates) == 1 or not self.random:
            return candidates[0]
        return candidates[int(self.rng.integers(len(candidates)))]


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


def _lowest(values: list, candidates: list[int]) -> list[int]:
    """The candidates whose value is the smallest."""
    best = min(values[i] for i in candidates)
    return [i for i in candidates if values[i] == best]


def _medium_weights(media: tuple, given: dict | None, defaults: dict, by_position) -> list[float]:
    """Weight of each medium: the user's (by lower-case name), else the peer's default, else by position."""
    out = []
    for position, medium in enumerate(media):
        name = str(medium).lower()
        given_lower = {k.lower(): v for k, v in (given or {}).items()}
        if name in given_lower:
            out.append(float(given_lower[name]))
        elif name in defaults:
            out.append(defaults[name])
        else:
            out.append(by_position(position))
    return out


def _llmd_prefix(row: list[int], weights: list[float]) -> float:
    """llm-d's longest-prefix score from one instance's per-medium runs: media by descending
    weight (stable); sum of weight x (blocks this medium adds to the run so far)."""
    order = sorted(range(len(weights)), key=lambda m: -weights[m])
    run, score = 0, 0.0
    for m in order:
        longer = max(run, row[m])
        score = score + weights[m] * (longer - run)
        run = longer
    return score


class LeastLoadedModel:
    """The fewest waiting + running requests; ties by the documented tie-break."""

    def __init__(self, num_instances: int, tie_break: str = "lowest", seed: int = 0) -> None:
        self.n = num_instances
        self.ties = TieModel(tie_break, seed)

    def route(self, request: Any, view: Any) -> int:
        return self.ties.pick(_lowest(_loads(view), list(range(self.n))))


class ApproxPrefixModel:
    """smg's cache-aware rule (default) or sgl-router's 2025 rule, over a pair memory; the
    request's blocks are remembered for the chosen instance, which counts one more request."""

    def __init__(self, num_instances: int, rule: str = "smg", max_blocks: int = 1 << 20, cache_threshold: float = 0.3,
                 balance_abs_threshold: int = 64, balance_rel_threshold: float = 1.5, miss_route: str | None = None,
                 tie_break: str = "random", seed: int = 0) -> None:
        self.n = num_instances
        self.rule = rule
        self.memory = PairMemoryModel(max_blocks)
        self.cache_threshold = cache_threshold
        self.abs_threshold = balance_abs_threshold
        self.rel_threshold = balance_rel_threshold
        self.miss_route = miss_route or "smallest"
        self.ties = TieModel(tie_break, seed)
        self.sent = [0] * num_instances

    def route(self, request: Any, view: Any) -> int:
        blocks = [int(b) for b in request.block_ids]
        load = _loads(view)
        choice = self._smg(blocks, load) if self.rule == "smg" else self._old(blocks, load)
        self.memory.remember(blocks, choice)
        self.sent[choice] += 1
        return choice

    def _smg_least_loaded(self, load: list[int]) -> int:
        return min(range(self.n), key=lambda i: (load[i], self.sent[i], i))

    def _smg(self, blocks: list[int], load: list[int]) -> int:
        matched = self.memory.matched(blocks, self.n)
        best = max(matched)
        if not (blocks and best / len(blocks) > self.cache_threshold):
            return self._smg_least_loaded(load)
        holding = [i for i in range(self.n) if matched[i] == best]
        choice = self.ties.pick(_lowest(load, holding))
        mean = sum(load) / self.n
        if load[choice] > mean * self.rel_threshold and load[choice] > mean + self.abs_threshold:
            return self._smg_least_loaded(load)
        return choice

    def _old(self, blocks: list[int], load: list[int]) -> int:
        everyone = list(range(self.n))
        if max(load) - min(load) > self.abs_threshold and max(load) > self.rel_threshold * min(load):
            return self.ties.pick(_lowest(load, everyone))
        matched = self.memory.matched(blocks, self.n)
        best = max(matched)
        if blocks and best / len(blocks) > self.cache_threshold:
            return self.ties.pick(_lowest(load, [i for i in everyone if matched[i] == best]))
        if self.miss_route == "smallest":
            return self.ties.pick(_lowest([self.memory.size(i) for i in everyone], everyone))
        return self.ties.pick(_lowest(load, everyone))


class KvCostModel:
    """NVIDIA Dynamo's KV router cost, instance by instance, in Python floats."""

    def __init__(self, num_instances: int, overlap_score_credit: float = 1.0, host_cache_hit_weight: float = 0.75,
                 disk_cache_hit_weight: float = 0.25, prefill_load_scale: float = 1.0,
                 decode_active_request_weight: float = 0.0, router_temperature: float = 0.0,
                 medium_credits: dict | None = None, tie_break: str = "random", seed: int = 0) -> None:
        self.n = num_instances
        self.by_position = (overlap_score_credit, host_cache_hit_weight, disk_cache_hit_weight)
        self.scale = prefill_load_scale
        self.active_weight = decode_active_request_weight
        self.temperature = router_temperature
        self.medium_credits = medium_credits
        self.ties = TieModel(tie_break, seed)

    def costs(self, request: Any, view: Any) -> list[float]:
        hits = view.index.prefix_hits([int(b) for b in request.block_ids]).tolist()
        credits = _medium_weights(tuple(view.index.media), self.medium_credits, {"speculative": self.by_position[0]},
                                  lambda m: self.by_position[min(m, 2)])
        bt = view.block_tokens
        load = _loads(view)
        out = []
        for i in range(self.n):
            row = hits[i]
            run = row[0]
            credit = credits[0] * run
            for m in range(1, len(row)):  # blocks beyond the longest run on the faster media
                longer = max(run, row[m])
                credit = credit + credits[m] * (longer - run)
                run = longer
            prefill = (int(view.prefill_tokens[i]) + request.input_length) / bt
            decode = int(view.running_blocks[i]) + int(view.queued_blocks[i]) + len(request.block_ids)
            cost = self.scale * max(prefill - credit, 0.0) + decode
            if self.active_weight:
                cost = cost + self.active_weight * load[i]
            out.append(cost)
        return out

    def route(self, request: Any, view: Any) -> int:
        cost = self.costs(request, view)
        if self.temperature > 0:
            return _softmax_sample(cost, self.temperature, float(self.ties.rng.random()))
        return self.ties.pick(_lowest(cost, list(range(self.n))))


def _softmax_sample(costs: list[float], temperature: float, sample: float) -> int:
    """Dynamo's softmax_sample_index: p proportional to exp(-(c - min) / ((max - min) T)),
    uniform when all equal; the first row whose cumulative probability reaches the sample."""
    lo, hi = min(costs), max(costs)
    if lo == hi:
        p = [1.0 / len(costs) for _ in costs]
    else:
        scale = -1.0 / ((hi - lo) * temperature)
        p = [math.exp(c * scale - lo * scale) for c in costs]
    total = sum(p)
    cumulative = 0.0
    for row in range(len(costs)):
        cumulative += p[row] / total
        if sample <= cumulative:
            return row
    return len(costs) - 1


class PrecisePrefixModel:
    """balance 'dynamo' (default unless load_weight is given): the kv-cost model with its
    defaults; 'none' / 'linear': the largest llm-d prefix score (less load_weight x load),
    ties: lower load, then the tie-break."""

    def __init__(self, num_instances: int, balance: str | None = None, load_weight: float | None = None,
                 medium_weights: dict | None = None, tie_break: str = "random", seed: int = 0) -> None:
        self.n = num_instances
        self.balance = balance or ("linear" if load_weight is not None else "dynamo")
        self.load_weight = load_weight or 0.0
        self.medium_weights = medium_weights
        self.ties = TieModel(tie_break, seed)
        self.dynamo = KvCostModel(num_instances, tie_break=tie_break, seed=seed)

    def route(self, request: Any, view: Any) -> int:
        if self.balance == "dynamo":
            return self.dynamo.route(request, view)
        hits = view.index.prefix_hits([int(b) for b in request.block_ids]).tolist()
        weights = _medium_weights(tuple(view.index.media), self.medium_weights, LLMD_DEFAULT_WEIGHTS, lambda m: 1.0)
        load = _loads(view)
        score = [_llmd_prefix(hits[i], weights) for i in range(self.n)]
        if self.balance == "linear" and self.load_weight:
            score = [s - self.load_weight * queued for s, queued in zip(score, load)]
        top = max(score)
        return self.ties.pick(_lowest(load, [i for i in range(self.n) if score[i] == top]))


class WeightedModel:
    """Argmax of ``w_prefix * prefix + w_load * minmax(queue) + w_kv * (1 - kv)`` (added in that
    order), ties by the tie-break.  Profile 'precise': prefix from the index (llm-d's score,
    min-max over the instances holding the first block; from a pair memory when the view has no
    index); 'approximate': from the pair memory (matched / request blocks)."""

    PROFILES = {"precise": {"prefix": 2.0, "load": 1.0, "kv": 1.0},
                "approximate": {"prefix": 3.0, "load": 2.0, "kv": 2.0}}

    def __init__(self, num_instances: int, profile: str = "precise", weights: dict | None = None,
                 load_metric: str = "waiting", max_blocks: int = 1 << 20, medium_weights: dict | None = None,
                 tie_break: str = "random", seed: int = 0) -> None:
        self.n = num_instances
        self.profile = profile
        self.weights = dict(self.PROFILES[profile] if weights is None else weights)
        self.load_metric = load_metric
        self.medium_weights = medium_weights
        self.memory = PairMemoryModel(max_blocks)
        self.ties = TieModel(tie_break, seed)

    def route(self, request: Any, view: Any) -> int:
        blocks = [int(b) for b in request.block_ids]
        total = [0.0] * self.n
        w_prefix = self.weights.get("prefix", 0.0)
        from_memory = bool(w_prefix) and (self.profile == "approximate" or view.index is None)
        if w_prefix and not from_memory:
            hits = view.index.prefix_hits(blocks).tolist()
            weights = _medium_weights(tuple(view.index.media), self.medium_weights, LLMD_DEFAULT_WEIGHTS,
                                      lambda m: 1.0)
            score = [_llmd_prefix(hits[i], weights) for i in range(self.n)]
            holders = [i for i in range(self.n) if max(hits[i]) > 0]
            norm = [0.0] * self.n
            if holders:
                lo, hi = min(score[i] for i in holders), max(score[i] for i in holders)
                for i in holders:
                    norm[i] = 1.0 if hi == lo else (score[i] - lo) / (hi - lo)
            total = [t + w_prefix * x for t, x in zip(total, norm)]
        elif from_memory and blocks:
            matched = self.memory.matched(blocks, self.n)
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
        choice = self.ties.pick([i for i in range(self.n) if total[i] == top])
        if from_memory:
            self.memory.remember(blocks, choice)
        return choice
