"""``approx-prefix``: SGLang's cache-aware router over the router's own memory of where it sent
blocks (:class:`ApproxPrefixRouter`), and that memory (:class:`PrefixMemory`).

Peer files followed (docs/cluster_routers.md has what kvmm does differently):

* ``rule="smg"`` (default): smg-project/smg ``model_gateway/src/policies/cache_aware.rs`` at
  commit f8daa8835 (2026-08-22, after v1.9.0): ``select_worker`` (the fleet mean load and the
  ``(load, processed, index)`` least-loaded worker), ``select_matched_candidate`` /
  ``argmax_with_random_ties`` (least-loaded among the workers holding the matched prefix,
  uniform among ties) and ``gate_selected_candidate`` (the per-request spill gate against the
  fleet mean); defaults from ``model_gateway/src/main.rs`` (cache_threshold 0.3,
  balance_abs_threshold 64, balance_rel_threshold 1.5);
* ``rule="sgl-router-2025"``: sgl-router's cache-aware policy before its December 2025 change
  (sgl-project/sglang PR #14650 "pick min load instead of min tenant size"): a fleet
  imbalance gate on max/min load, the best match above the threshold, else the smallest tree.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from kvmm._validate import MAX_INSTANCES, as_count, as_fraction, as_positive_float
from kvmm.cluster._router_base import Ties, check_route_args, lowest_among
from kvmm.errors import BadInputError

__all__ = ["ApproxPrefixRouter", "PrefixMemory", "APPROX_RULES"]

APPROX_RULES = ("smg", "sgl-router-2025")


@dataclass
class ApproxPrefixRouter:
    """SGLang's cache-aware router over the router's own memory of where it sent blocks.

    The memory holds up to ``max_blocks`` (block id, instance) pairs in LRU order; routing a
    request to an instance remembers each of its blocks for that instance, the first block
    most recently (pairs are refreshed last block first), so the LRU forgets prefix tails
    before heads.  An instance's match is the longest run of the request's blocks, from the
    first, remembered for it; the match ratio is the best match / the request's blocks (0 for
    a request without blocks).  With ``load = waiting + running`` per instance:

    ``rule="smg"`` (default, smg's current rule):

    1. if the match ratio is greater than ``cache_threshold`` (strictly): among the instances
       with the best match, the least loaded, ties by ``tie_break`` (smg: random); then the
       spill gate: if that instance's load exceeds ``balance_rel_threshold`` x the mean load
       **and** the mean + ``balance_abs_threshold``, the least-loaded instance instead;
    2. else the least-loaded instance.

    "The least-loaded instance" is smg's: the smallest ``(load, requests this router has sent
    it, index)``.

    ``rule="sgl-router-2025"`` (sgl-router before December 2025):

    1. imbalanced (``max(load) - min(load) > balance_abs_threshold`` and ``max(load) >
       balance_rel_threshold * min(load)``): the least-loaded instance (ties by ``tie_break``);
    2. else, if the match ratio is greater than ``cache_threshold``: the best-matching
       instance (ties: lower load, then ``tie_break``);
    3. else ``miss_route``: ``"smallest"`` (the instance with the fewest remembered pairs, ties
       by ``tie_break``) or ``"least-loaded"``.

    Either way the request's blocks are then remembered for the chosen instance.  Defaults are
    smg's (cache_threshold 0.3, balance_abs_threshold 64, balance_rel_threshold 1.5; the same
    as sgl-router's 2025 ``RouterArgs``).  ``miss_route`` applies to the 2025 rule only.
    Runtime complexity: O(blocks + num_instances) per request (amortised LRU upkeep).
    """

    num_instances: int
    rule: str = "smg"
    max_blocks: int = 1 << 20
    cache_threshold: float = 0.3
    balance_abs_threshold: int = 64
    balance_rel_threshold: float = 1.5
    miss_route: str | None = None
    tie_break: str = "random"
    seed: int = 0
    name: ClassVar[str] = "approx-prefix"
    uses_index: ClassVar[bool] = False
    _memory: PrefixMemory = field(default=None, init=False, repr=False, compare=False)
    _ties: Ties = field(default=None, init=False, repr=False, compare=False)
    _sent: np.ndarray = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.num_instances = as_count(self.num_instances, "num_instances", minimum=1, maximum=MAX_INSTANCES)
        if self.rule not in APPROX_RULES:
            raise BadInputError(f"rule must be one of {list(APPROX_RULES)} (smg's current cache-aware rule, or "
                                f"sgl-router's before December 2025), got {self.rule!r}")
        self.max_blocks = as_count(self.max_blocks, "max_blocks", minimum=1)
        self.cache_threshold = as_fraction(self.cache_threshold, "cache_threshold", include_zero=True)
        self.balance_abs_threshold = as_count(self.balance_abs_threshold, "balance_abs_threshold")
        self.balance_rel_threshold = as_positive_float(self.balance_rel_threshold, "balance_rel_threshold")
        if self.rule == "smg" and self.miss_route is not None:
            raise BadInputError(f"miss_route applies to rule='sgl-router-2025'; smg sends a miss to the least-loaded "
                                f"instance (got miss_route={self.miss_route!r})")
        if self.rule == "sgl-router-2025":
            self.miss_route = "smallest" if self.miss_route is None else self.miss_route
            if self.miss_route not in ("smallest", "least-loaded"):
                raise BadInputError(f"miss_route must be 'smallest' or 'least-loaded', got {self.miss_route!r}")
        self._ties = Ties(self.tie_break, self.seed, self.name)
        self.seed = int(self.seed)
        self._memory = PrefixMemory(self.num_instances, self.max_blocks)
        self._sent = np.zeros(self.num_instances, dtype=np.int64)

    def route(self, request: Any, view: Any) -> int:
        check_route_args(self, request, view)
        load = view.load()
        blocks = request.block_ids.tolist()
        choice = self._smg(blocks, load) if self.rule == "smg" else self._sgl_router_2025(blocks, load)
        self._memory.remember(blocks, choice)
        self._sent[choice] += 1
        return choice

    def _smg(self, blocks: list, load: np.ndarray) -> int:
        matched = self._memory.matches(blocks)
        best = int(matched.max())
        if not (blocks and best / len(blocks) > self.cache_threshold):
            return self._smg_least_loaded(load)
        choice = self._ties.pick(lowest_among(load, np.flatnonzero(matched == best)))
        mean = int(load.sum()) / self.num_instances
        if load[choice] > mean * self.balance_rel_threshold and load[choice] > mean + self.balance_abs_threshold:
            return self._smg_least_loaded(load)  # the per-request spill gate
        return choice

    def _smg_least_loaded(self, load: np.ndarray) -> int:
        return int(lowest_among(self._sent, lowest_among(load))[0])

    def _sgl_router_2025(self, blocks: list, load: np.ndarray) -> int:
        lo, hi = int(load.min()), int(load.max())
        if hi - lo > self.balance_abs_threshold and hi > self.balance_rel_threshold * lo:
            return self._ties.pick(lowest_among(load))
        matched = self._memory.matches(blocks)
        best = int(matched.max())
        if blocks and best / len(blocks) > self.cache_threshold:
            return self._ties.pick(lowest_among(load, np.flatnonzero(matched == best)))
        if self.miss_route == "smallest":
            return self._ties.pick(lowest_among(self._memory.sizes))
        return self._ties.pick(lowest_among(load))

    @property
    def remembered(self) -> int:
        """(block, instance) pairs in the memory now."""
        return len(self._memory)


class PrefixMemory:
    """A bounded LRU set of (block id, instance) pairs, with per-block instance bitmasks for
    matching: what an approximate prefix router remembers about where it sent blocks.

    ``matches(blocks)``: per instance, the longest run of ``blocks`` from the first remembered
    for it (int64 array); ``remember(blocks, instance)``: refresh or add each pair, last block
    first (so the first block is the most recent), then forget least recently used pairs
    beyond ``max_pairs``; ``sizes``: pairs remembered per instance.
    Runtime complexity: O(blocks + instances whose match ends) per call, amortised.
    """

    def __init__(self, num_instances: int, max_pairs: int) -> None:
        self.num_instances = num_instances
        self.max_pairs = max_pairs
        self.sizes = np.zeros(num_instances, dtype=np.int64)
        self._lru: OrderedDict = OrderedDict()  # (block, instance) -> None, oldest first
        self._mask: dict[int, int] = {}  # block -> bitmask of instances remembering it

    def __len__(self) -> int:
        return len(self._lru)

    def matches(self, blocks: list) -> np.ndarray:
        lengths = np.full(self.num_instances, len(blocks), dtype=np.int64)
        alive = (1 << self.num_instances) - 1
        mask = self._mask
        for pos, block in enumerate(blocks):
            held = mask.get(block, 0)
            ended = alive & ~held
            if ended:
                alive &= held
                while ended:
                    low = ended & -ended
                    lengths[low.bit_length() - 1] = pos
                    ended ^= low
                if not alive:
                    break
        return lengths

    def remember(self, blocks: list, instance: int) -> None:
        lru, mask, bit = self._lru, self._mask, 1 << instance
        added = 0
        for block in reversed(blocks):
            key = (block, instance)
            if key in lru:
                lru.move_to_end(key)
            else:
                lru[key] = None
                mask[block] = mask.get(block, 0) | bit
                added += 1
        self.sizes[instance] += added
        while len(lru) > self.max_pairs:
            (block, owner), _ = lru.popitem(last=False)
            left = mask[block] & ~(1 << owner)
            if left:
                mask[block] = left
            else:
                del mask[block]
            self.sizes[owner] -= 1
