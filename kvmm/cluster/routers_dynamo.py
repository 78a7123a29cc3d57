"""``kv-cost``: NVIDIA Dynamo's KV router (:class:`KvCostRouter`).

Follows ai-dynamo/dynamo v1.6 (docs.nvidia.com/dynamo/v1.6.2, "Routing Concepts": the cost
model): ``lib/kv-router/src/scheduling/selector/default.rs`` (``DefaultWorkerScorer::worker_logit``,
``minimum_cost_index``, ``softmax_sample_index``) and the defaults of ``KvRouterConfig`` in
``lib/kv-router/src/scheduling/config.rs`` (``overlap_score_credit`` 1.0, ``prefill_load_scale``
1.0, ``host_cache_hit_weight`` 0.75, ``disk_cache_hit_weight`` 0.25, ``router_temperature``
0.0) and ``decode_active_request_weight`` 0.0.  docs/cluster_routers.md gives the rule and what
kvmm does differently.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from kvmm._validate import MAX_INSTANCES, as_count, as_fraction, as_positive_float
from kvmm.cluster._router_base import (
    MediumWeights,
    Ties,
    check_medium_weights,
    check_route_args,
    index_hits,
    lowest_among,
    run_credit,
)
from kvmm.errors import BadInputError

__all__ = ["KvCostRouter", "dynamo_softmax_pick"]

#: the medium of the index's speculative entries (kvmm.cluster.event_stream.SPECULATIVE_MEDIUM)
SPECULATIVE = "speculative"


@dataclass
class KvCostRouter:
    """NVIDIA Dynamo's KV router: the instance of least cost, in KV blocks.

    From the view and one ``view.index.prefix_hits`` call, per instance ``i`` (``bt`` =
    ``view.block_tokens``, media in the index's order, fastest first):

    * overlap credit: ``sum over media m of credit_m * extra_m``, where ``extra_m`` is the
      prefix blocks held on medium ``m`` beyond the longest run held on the media before it
      (``extra_0`` = the run on medium 0), so a block counts once, on its fastest medium;
      ``credit`` is ``overlap_score_credit`` for medium 0 (device), ``host_cache_hit_weight``
      for medium 1, ``disk_cache_hit_weight`` for media 2 and later (``overlap_score_credit``
      for the index's ``speculative`` medium: Dynamo counts predicted blocks as device overlap),
      unless ``medium_credits`` names the medium (case-insensitive);
    * prefill blocks: ``(view.prefill_tokens[i] + request.input_length) / bt``;
    * decode blocks: ``view.running_blocks[i] + view.queued_blocks[i] + len(request.block_ids)``;
    * ``cost = prefill_load_scale * max(0, prefill blocks - overlap credit) + decode blocks
      + decode_active_request_weight * (waiting + running requests)``.

    ``router_temperature`` 0: the least cost, ties by ``tie_break`` (``"random"``: Dynamo's);
    > 0: a softmax sample over the min-max normalised costs, ``p_i`` proportional to
    ``exp(-(cost_i - min) / ((max - min) * T))`` (uniform when all costs are equal), one
    uniform draw walked along the cumulative probabilities in instance order.  Seeded by
    ``seed``.  A view without an index or without ``block_tokens`` is a :class:`BadInputError`.
    Runtime complexity: one ``prefix_hits`` call plus O(instances x media) per request.
    """

    num_instances: int
    overlap_score_credit: float = 1.0
    host_cache_hit_weight: float = 0.75
    disk_cache_hit_weight: float = 0.25
    prefill_load_scale: float = 1.0
    decode_active_request_weight: float = 0.0
    router_temperature: float = 0.0
    medium_credits: dict | None = None
    tie_break: str = "random"
    seed: int = 0
    name: ClassVar[str] = "kv-cost"
    uses_index: ClassVar[bool] = True
    _ties: Ties = field(default=None, init=False, repr=False, compare=False)
    _credits: MediumWeights = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.num_instances = as_count(self.num_instances, "num_instances", minimum=1, maximum=MAX_INSTANCES)
        # Dynamo validates each credit in [0, 1] (config.rs: overlap_score_credit, *_cache_hit_weight)
        self.overlap_score_credit = as_fraction(self.overlap_score_credit, "overlap_score_credit", include_zero=True)
        self.host_cache_hit_weight = as_fraction(self.host_cache_hit_weight, "host_cache_hit_weight", include_zero=True)
        self.disk_cache_hit_weight = as_fraction(self.disk_cache_hit_weight, "disk_cache_hit_weight", include_zero=True)
        self.prefill_load_scale = as_positive_float(self.prefill_load_scale, "prefill_load_scale", allow_zero=True)
        self.decode_active_request_weight = as_positive_float(self.decode_active_request_weight,
                                                              "decode_active_request_weight", allow_zero=True)
        self.router_temperature = as_positive_float(self.router_temperature, "router_temperature", allow_zero=True)
        self.medium_credits = check_medium_weights(self.medium_credits, "medium_credits", upper=1.0)
        self._ties = Ties(self.tie_break, self.seed, self.name)
        self.seed = int(self.seed)
        by_position = (self.overlap_score_credit, self.host_cache_hit_weight, self.disk_cache_hit_weight)
        # a routed-but-unconfirmed entry (kvmm's speculative indexing) counts as device overlap, as
        # Dynamo's predict-on-route side indexer does (its overlap is maxed with the event-driven one)
        self._credits = MediumWeights(self.medium_credits, {SPECULATIVE: self.overlap_score_credit}, by_position,
                                      "medium_credits")

    def route(self, request: Any, view: Any) -> int:
        check_route_args(self, request, view)
        return self.pick(self.costs(request, view, index_hits(self, view, request)))

    def costs(self, request: Any, view: Any, hits: np.ndarray) -> np.ndarray:
        """Each instance's cost (float64), as the class docstring says."""
        bt = view.block_tokens
        if bt <= 0:
            raise BadInputError(f"router {self.name!r} counts prompt tokens in KV blocks, but view.block_tokens is "
                                f"{bt}; expected the tokens per block (the simulator sets it from the trace)")
        # each block once, on the fastest medium holding the run up to it
        credit = run_credit(hits, self._credits.vector(view.index))
        prefill = (view.prefill_tokens + request.input_length) / bt
        cost = self.prefill_load_scale * np.maximum(prefill - credit, 0.0)
        cost = cost + (view.running_blocks + view.queued_blocks + request.block_ids.shape[0])
        if self.decode_active_request_weight:
            cost = cost + self.decode_active_request_weight * view.load()
        return cost

    def pick(self, cost: np.ndarray) -> int:
        if self.router_temperature > 0.0:
            return dynamo_softmax_pick(cost.tolist(), self.router_temperature, self._ties.uniform())
        return self._ties.pick(lowest_among(cost))


def dynamo_softmax_pick(costs: list, temperature: float, sample: float) -> int:
    """Dynamo's ``softmax_sample_index`` over ``costs`` (lower is likelier) with one uniform
    ``sample`` in [0, 1): min-max normalised, so only a cost's place in the spread matters.
    Python floats and ``math.exp`` throughout (a reference model repeats the arithmetic exactly).
    Runtime complexity: O(len(costs))."""
    lo, hi = min(costs), max(costs)
    n = len(costs)
    if lo == hi:
        probabilities = [1.0 / n] * n
    else:
        scale = -1.0 / ((hi - lo) * temperature)
        top = lo * scale
        probabilities = [math.exp(c * scale - top) for c in costs]
    total = sum(probabilities)
    cumulative = 0.0
    for row, p in enumerate(probabilities):
        cumulative += p / total
        if sample <= cumulative:
            return row
    return n - 1
