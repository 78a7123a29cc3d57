"""Pieces every kvmm router shares: tie-breaking, the checks on ``route``'s arguments, and the
reads of the block index (hits per medium, weights per medium by name).

Tie-breaking is documented in docs/cluster_routers.md ("Ties") because reference models in
``kvmm.testing.models.routers`` reproduce it draw for draw: a router that breaks ties at random
owns ``numpy.random.default_rng(seed)`` and, for a tie among ``k > 1`` candidates listed in
ascending instance order, draws ``rng.integers(k)`` once and takes that candidate; a softmax
sample (kv-cost's temperature) draws ``rng.random()`` once.  Nothing else draws.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kvmm._validate import as_count, as_positive_float
from kvmm.cluster.view import ClusterView, RouteRequest
from kvmm.errors import BadInputError, DTypeError

TIE_BREAKS = ("random", "lowest")


class Ties:
    """Picks one of several tied instances: ``"lowest"`` (the lowest index) or ``"random"``
    (uniformly, seeded; see the module docstring for the exact draws).
    Runtime complexity: O(1) per pick."""

    __slots__ = ("random", "rng")

    def __init__(self, tie_break: Any, seed: Any, router: str) -> None:
        if tie_break not in TIE_BREAKS:
            raise BadInputError(f"router {router!r}: tie_break must be 'random' or 'lowest', got {tie_break!r}")
        self.random = tie_break == "random"
        self.rng = np.random.default_rng(as_count(seed, "seed"))

    def pick(self, candidates: np.ndarray) -> int:
        """One of ``candidates`` (instance indices, ascending, at least one)."""
        k = candidates.shape[0]
        if k == 1 or not self.random:
            return int(candidates[0])
        return int(candidates[int(self.rng.integers(k))])

    def uniform(self) -> float:
        """One draw in [0, 1) (a softmax sample)."""
        return float(self.rng.random())


def check_route_args(router: Any, request: Any, view: Any) -> None:
    """A RouteRequest and a ClusterView of the router's size, else a KvmmError naming the router
    (not an AttributeError from deep inside it on a None view or request)."""
    if not isinstance(view, ClusterView):
        raise DTypeError(f"router {router.name!r}: view must be a kvmm.cluster.ClusterView, got {type(view).__name__}")
    if not isinstance(request, RouteRequest):
        raise DTypeError(f"router {router.name!r}: request must be a kvmm.cluster.RouteRequest, got "
                         f"{type(request).__name__}")
    if view.num_instances != router.num_instances:
        raise BadInputError(f"router {router.name!r} was built for {router.num_instances} instances but the view has "
                            f"{view.num_instances}; expected the same count")


def lowest_among(values: np.ndarray, candidates: np.ndarray | None = None) -> np.ndarray:
    """The candidates (all instances when None) whose value is the smallest, ascending."""
    if candidates is None:
        return np.flatnonzero(values == values.min())
    if candidates.shape[0] == 1:  # the common case: nothing to compare
        return candidates
    sub = values[candidates]
    return candidates[sub == sub.min()]


def index_hits(router: Any, view: Any, request: Any) -> np.ndarray:
    """``view.index.prefix_hits(request.block_ids)``, checked: (instances x media) int64."""
    index = view.index
    if index is None:
        raise BadInputError(f"router {router.name!r} reads the cluster's block index, but view.index is None; "
                            "build the cluster with a BlockIndex (or use 'approx-prefix')")
    hits = np.asarray(index.prefix_hits(request.block_ids))
    expected = (router.num_instances, len(index.media))
    if hits.shape != expected:
        raise BadInputError(f"index.prefix_hits returned shape {hits.shape}; expected {expected} (instances x media)")
    return hits


def run_credit(hits: np.ndarray, weights: np.ndarray, order: list | None = None) -> np.ndarray:
    """Per instance, each prefix block weighted once, by the first medium in ``order`` (None: the
    index's order, fastest first) whose run covers it: with ``R_k`` the longest run on the first
    ``k`` media of ``order``, ``sum_k weights[order[k]] * (R_k - R_{k-1})`` (float64), added
    medium by medium.  Dynamo's overlap credit (the index's order) and llm-d's longest-prefix
    score (media by descending weight).  Runtime complexity: O(instances x media)."""
    first = 0 if order is None else order[0]
    run = hits[:, first]
    credit = weights[first] * run
    for m in range(1, hits.shape[1]) if order is None else order[1:]:
        longer = np.maximum(run, hits[:, m])
        credit = credit + weights[m] * (longer - run)
        run = longer
    return credit


def check_medium_weights(weights: Any, name: str, *, upper: float | None = None) -> dict | None:
    """``weights`` as {medium name in lower case: non-negative float}, or None; bad values raise."""
    if weights is None:
        return None
    if not isinstance(weights, dict) or not weights:
        raise DTypeError(f"{name} must be a non-empty dict medium -> weight, got {weights!r}")
    out: dict[str, float] = {}
    for medium, w in weights.items():
        if not isinstance(medium, str):
            raise DTypeError(f"{name} keys must be medium names (text), got {medium!r}")
        value = as_positive_float(w, f"{name}[{medium!r}]", allow_zero=True)
        if upper is not None and value > upper:
            raise BadInputError(f"{name}[{medium!r}] must be in [0, {upper}], got {w!r}")
        key = medium.lower()
        if key in out:
            raise BadInputError(f"{name} names medium {medium!r} twice (names are case-insensitive)")
        out[key] = value
    return out


class MediumWeights:
    """Per-medium weights of an index's media, by case-insensitive name: ``given`` (the user's,
    which must each name a medium of the index) over ``defaults`` (the peer's, which may name
    media the index lacks) over ``by_position[min(position, len - 1)]`` (media fastest first);
    cached per ``index.media``.  Plain data, so routers pickle (sweeps ship them).
    Runtime complexity: O(media) when the media change, O(1) otherwise."""

    __slots__ = ("given", "defaults", "by_position", "label", "_media", "_vector")

    def __init__(self, given: dict | None, defaults: dict, by_position: tuple, label: str) -> None:
        self.given, self.defaults, self.by_position, self.label = given, defaults, tuple(by_position), label
        self._media: tuple | None = None
        self._vector = np.zeros(0)

    def vector(self, index: Any) -> np.ndarray:
        media = tuple(index.media)
        if media != self._media:
            lower = [str(m).lower() for m in media]
            if self.given is not None:
                unknown = sorted(set(self.given) - set(lower))
                if unknown:
                    raise BadInputError(f"{self.label} names {unknown[0]!r}, which the index does not have; its media "
                                        f"are {list(media)} (names are case-insensitive)")
            weights = []
            for position, name in enumerate(lower):
                if self.given is not None and name in self.given:
                    weights.append(self.given[name])
                elif name in self.defaults:
                    weights.append(self.defaults[name])
                else:
                    weights.append(float(self.by_position[min(position, len(self.by_position) - 1)]))
            self._media, self._vector = media, np.array(weights, dtype=np.float64)
        return self._vector


def router_name(router: Any) -> str:
    name = getattr(router, "name", None)
    return repr(name) if isinstance(name, str) else type(router).__name__
