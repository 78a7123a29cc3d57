"""Routers over llm-d's scorers: ``precise-prefix`` (:class:`PrecisePrefixRouter`) and
``weighted`` (:class:`WeightedRouter`).

Peer files followed (docs/cluster_routers.md has the table of what kvmm does differently):

* llm-d/llm-d-kv-cache-manager v0.4.0: ``pkg/kvcache/kvblock_scorer.go`` (``LongestPrefixScorer``:
  per block of the prefix, the pod's largest medium weight, summed while the pod holds every
  block so far; an unnamed medium weighs 1.0) and ``pkg/kvcache/backend.go``
  (``DefaultKVCacheBackendConfig``: gpu 1.0, cpu 0.8); names are matched in lower case, as the
  later llm-d/llm-d-router ``tierWeightsFromBackends`` does;
* llm-d/llm-d-inference-scheduler v0.8.0: ``pkg/epp/framework/plugins/scheduling/scorer/
  preciseprefixcache/utils.go`` (``indexedScoresToNormalizedScoredPods``: min-max over the
  pods the index scored, 1.0 when they are equal, 0 for the others) and
  ``deploy/config/epp-precise-prefix-cache-config.yaml`` (the precise sample profile: prefix
  2, kv-cache utilisation 1, queue 1, max-score picker);
* llm-d/llm-d-router (the scheduler renamed, commit 520af478, 2026-05-17):
  ``pkg/epp/config/loader/defaults.go`` (``loadDefaultConfig``: queue 2, kv-cache utilisation
  2, approximate prefix 3), the scorers ``scorer/queuedepth/queue.go``,
  ``scorer/kvcacheutilization/kvcache_utilization.go``, ``scorer/prefix/plugin.go`` (matched /
  total blocks) and ``picker/maxscore/picker.go`` (shuffle, then the highest score).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from kvmm._validate import MAX_INSTANCES, as_count, as_positive_float
from kvmm.cluster._router_base import (
    MediumWeights,
    Ties,
    check_medium_weights,
    check_route_args,
    index_hits,
    lowest_among,
    run_credit,
)
from kvmm.cluster.routers_dynamo import KvCostRouter
from kvmm.cluster.routers_sglang import PrefixMemory
from kvmm.errors import BadInputError, DTypeError

__all__ = ["PrecisePrefixRouter", "WeightedRouter", "LLMD_MEDIUM_WEIGHTS", "PROFILES", "prefix_scores",
           "holders_normalised"]

#: llm-d-kv-cache-manager v0.4.0 DefaultKVCacheBackendConfig (pkg/kvcache/backend.go)
LLMD_MEDIUM_WEIGHTS = {"gpu": 1.0, "cpu": 0.8}
#: llm-d's scheduling profiles by name: (score weights, prefix scorer)
PROFILES = {
    # deploy/config/epp-precise-prefix-cache-config.yaml (llm-d-inference-scheduler v0.8.0)
    "precise": ({"prefix": 2.0, "load": 1.0, "kv": 1.0}, "precise"),
    # pkg/epp/config/loader/defaults.go (llm-d-router, the code's default profile)
    "approximate": ({"prefix": 3.0, "load": 2.0, "kv": 2.0}, "approximate"),
}
BALANCES = ("dynamo", "none", "linear")


def prefix_scores(hits: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """llm-d's longest-prefix score per instance from per-medium runs (float64): block ``j``
    counts the largest weight among the media whose run covers it, summed over the blocks the
    instance holds on some medium.  With the media in descending weight order (stable) and
    ``R_k`` the longest run on the first ``k`` of them: ``sum_k w_k * (R_k - R_{k-1})``, added
    medium by medium.  Runtime complexity: O(instances x media)."""
    if weights.shape[0] == 1:  # the same sum, one medium (the simulator's GPU-only index)
        return weights[0] * hits[:, 0]
    if (weights == 1.0).all():  # every step weighs 1: the sum is the longest run, exactly
        return hits.max(axis=1).astype(np.float64)
    return run_credit(hits, weights, sorted(range(weights.shape[0]), key=lambda m: -weights[m]))


def holders_normalised(score: np.ndarray, holds: np.ndarray) -> np.ndarray:
    """llm-d's precise scorer normalisation: min-max over the instances that hold the first
    block (1.0 when their scores are equal), 0 for the others."""
    out = np.zeros(score.shape[0], dtype=np.float64)
    if holds.any():
        s = score[holds]
        lo, hi = s.min(), s.max()
        out[holds] = 1.0 if hi == lo else (s - lo) / (hi - lo)
    return out


@dataclass
class PrecisePrefixRouter:
    """Prefix-cache routing from the cluster's block index (llm-d's precise prefix scorer),
    balanced as a peer does.

    ``balance`` (``None``: ``"linear"`` when ``load_weight`` is given, else ``"dynamo"``):

    * ``"dynamo"`` (the default): NVIDIA Dynamo's KV router, exactly :class:`KvCostRouter` with
      its defaults (the index's prefix credited against each instance's queued prefill and
      held KV blocks); the only peer rule that kept every instance busy in the README's
      16-instance example (docs/cluster_routers.md);
    * ``"none"``: the load-blind ablation: the largest prefix score; ties: lower load
      (waiting + running), then ``tie_break``;
    * ``"linear"``: the largest ``prefix score - load_weight * load`` (blocks per request);
      ties as ``"none"``.

    The prefix score (``"none"``, ``"linear"``) is llm-d's (:func:`prefix_scores`): the
    request's blocks each instance holds from the first, each weighted by its best medium,
    ``medium_weights`` by case-insensitive name over llm-d's defaults (gpu 1.0, cpu 0.8; any
    other medium 1.0).  A view without an index is a :class:`BadInputError`.
    Runtime complexity: one ``prefix_hits`` call plus O(instances x media) per request.
    """

    num_instances: int
    balance: str | None = None
    load_weight: float | None = None
    medium_weights: dict | None = None
    tie_break: str = "random"
    seed: int = 0
    name: ClassVar[str] = "precise-prefix"
    uses_index: ClassVar[bool] = True
    _ties: Ties = field(default=None, init=False, repr=False, compare=False)
    _weights: MediumWeights = field(default=None, init=False, repr=False, compare=False)
    _dynamo: KvCostRouter = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.num_instances = as_count(self.num_instances, "num_instances", minimum=1, maximum=MAX_INSTANCES)
        if self.load_weight is not None:
            self.load_weight = as_positive_float(self.load_weight, "load_weight", allow_zero=True)
        if self.balance is None:
            self.balance = "linear" if self.load_weight is not None else "dynamo"
        if self.balance not in BALANCES:
            raise BadInputError(f"balance must be one of {list(BALANCES)} (dynamo: NVIDIA Dynamo's cost, the default; "
                                f"none: the load-blind ablation; linear: prefix - load_weight x load), got {self.balance!r}")
        if self.balance == "linear" and self.load_weight is None:
            raise BadInputError("balance='linear' needs load_weight (blocks of prefix one queued request is worth)")
        if self.balance != "linear" and self.load_weight:
            raise BadInputError(f"load_weight applies to balance='linear', not {self.balance!r}; expected no "
                                "load_weight (or balance='linear')")
        self.medium_weights = check_medium_weights(self.medium_weights, "medium_weights")
        if self.balance == "dynamo" and self.medium_weights is not None:
            raise BadInputError("medium_weights weighs llm-d's prefix score (balance 'none' or 'linear'); "
                                "balance='dynamo' credits media as router 'kv-cost' does (configure that one)")
        self._ties = Ties(self.tie_break, self.seed, self.name)
        self.seed = int(self.seed)
        self._weights = MediumWeights(self.medium_weights, LLMD_MEDIUM_WEIGHTS, (1.0,), "medium_weights")
        if self.balance == "dynamo":
            self._dynamo = KvCostRouter(self.num_instances, tie_break=self.tie_break, seed=self.seed)

    def route(self, request: Any, view: Any) -> int:
        check_route_args(self, request, view)
        hits = index_hits(self, view, request)
        if self._dynamo is not None:
            return self._dynamo.pick(self._dynamo.costs(request, view, hits))
        score = prefix_scores(hits, self._weights.vector(view.index))
        load = view.load()
        if self.balance == "linear" and self.load_weight:
            score = score - self.load_weight * load
        return self._ties.pick(lowest_among(load, np.flatnonzero(score == score.max())))


@dataclass
class WeightedRouter:
    """llm-d's scheduler: the argmax of a weighted sum of scores in [0, 1] (higher is better),
    ties shuffled (``tie_break="random"``, seeded) as llm-d's max-score picker does.

    ``profile`` picks the weights (unless ``weights`` gives them) and the prefix scorer:

    * ``"precise"`` (default): llm-d's precise sample profile, prefix 2, load 1, kv 1, with the
      precise prefix scorer: :func:`prefix_scores` over ``view.index`` (``medium_weights`` over
      llm-d's gpu 1.0 / cpu 0.8), min-max normalised over the instances that hold the request's
      first block (:func:`holders_normalised`); with no index in the view, the approximate
      scorer below;
    * ``"approximate"``: llm-d's code-default profile, prefix 3, load 2, kv 2, with the
      approximate prefix scorer: matched blocks / request blocks (0 for a request without
      blocks) from the router's own LRU memory of where it sent blocks (``max_blocks`` pairs,
      as :class:`ApproxPrefixRouter`'s).

    ``load``: llm-d's queue scorer, ``(max(q) - q_i) / (max(q) - min(q))``, 1 for every instance
    when all are equal, ``q`` the queue (``load_metric="waiting"``: ``view.queue_lengths``) or
    waiting + running (``"total"``); ``kv``: ``1 - kv_utilisation``.  The sum is taken prefix,
    load, kv, in that order.  Runtime complexity: O(instances x media) plus one ``prefix_hits``
    call (or O(blocks) in the memory) per request.
    """

    num_instances: int
    profile: str = "precise"
    weights: dict | None = None
    load_metric: str = "waiting"
    max_blocks: int = 1 << 20
    medium_weights: dict | None = None
    tie_break: str = "random"
    seed: int = 0
    name: ClassVar[str] = "weighted"
    SCORES: ClassVar[tuple] = ("prefix", "load", "kv")
    _memory: PrefixMemory = field(default=None, init=False, repr=False, compare=False)
    _ties: Ties = field(default=None, init=False, repr=False, compare=False)
    _weights: MediumWeights = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.num_instances = as_count(self.num_instances, "num_instances", minimum=1, maximum=MAX_INSTANCES)
        if self.profile not in PROFILES:
            raise BadInputError(f"profile must be one of {sorted(PROFILES)} (llm-d's precise sample profile, its "
                                f"code-default one), got {self.profile!r}")
        if self.weights is None:
            self.weights = dict(PROFILES[self.profile][0])
        if not isinstance(self.weights, dict) or not self.weights:
            raise DTypeError(f"weights must be a non-empty dict score -> weight over {list(self.SCORES)}, "
                             f"got {self.weights!r}")
        unknown = sorted(set(self.weights) - set(self.SCORES), key=str)
        if unknown:
            raise BadInputError(f"weights names an unknown score {unknown[0]!r}; expected some of {list(self.SCORES)}")
        self.weights = {k: as_positive_float(w, f"weights[{k!r}]", allow_zero=True) for k, w in self.weights.items()}
        if not any(self.weights.values()):
            raise BadInputError(f"weights are all zero ({self.weights}); expected at least one positive weight")
        if self.load_metric not in ("waiting", "total"):
            raise BadInputError(f"load_metric must be 'waiting' or 'total', got {self.load_metric!r}")
        self.max_blocks = as_count(self.max_blocks, "max_blocks", minimum=1)
        self.medium_weights = check_medium_weights(self.medium_weights, "medium_weights")
        if self.medium_weights is not None and PROFILES[self.profile][1] != "precise":
            raise BadInputError("medium_weights weighs the precise prefix scorer; profile 'approximate' does not "
                                "read the index")
        self._memory = PrefixMemory(self.num_instances, self.max_blocks)
        self._ties = Ties(self.tie_break, self.seed, self.name)
        self.seed = int(self.seed)
        self._weights = MediumWeights(self.medium_weights, LLMD_MEDIUM_WEIGHTS, (1.0,), "medium_weights")

    @property
    def uses_index(self) -> bool:
        """Does it read the block index (so the simulator builds one)?  The precise profile does."""
        return PROFILES[self.profile][1] == "precise" and bool(self.weights.get("prefix"))

    def route(self, request: Any, view: Any) -> int:
        check_route_args(self, request, view)
        total = np.zeros(self.num_instances, dtype=np.float64)
        w_prefix = self.weights.get("prefix", 0.0)
        blocks = None
        if w_prefix:
            n_blocks = int(request.block_ids.shape[0])
            if self.uses_index and view.index is not None:
                hits = index_hits(self, view, request)
                total += w_prefix * holders_normalised(prefix_scores(hits, self._weights.vector(view.index)),
                                                       hits.max(axis=1) > 0)
            else:
                blocks = request.block_ids.tolist()
                if n_blocks:
                    total += w_prefix * (self._memory.matches(blocks) / n_blocks)
        w_load = self.weights.get("load", 0.0)
        if w_load:
            q = view.queue_lengths if self.load_metric == "waiting" else view.load()
            lo, hi = int(q.min()), int(q.max())
            total += w_load * ((hi - q) / (hi - lo) if hi > lo else 1.0)
        w_kv = self.weights.get("kv", 0.0)
        if w_kv:
            total += w_kv * (1.0 - view.kv_utilisation)
        choice = self._ties.pick(np.flatnonzero(total == total.max()))
        if blocks is not None:
            self._memory.remember(blocks, choice)
        return choice
