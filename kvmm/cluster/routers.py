"""Routers: which instance of a cluster serves a request (:class:`kvmm.protocols.Router`).

By name through :func:`make_router` (``ROUTERS``), or any object with ``route(request, view)``:

* ``round-robin`` (:class:`RoundRobinRouter`): instances in turn.
* ``least-loaded`` (:class:`LeastLoadedRouter`): the smallest waiting + running count.
* ``session`` (:class:`SessionRouter`): sticky by conversation id.
* ``approx-prefix`` (:class:`ApproxPrefixRouter`): SGLang's cache-aware router over the
  router's own bounded LRU memory of which blocks it sent where.
* ``precise-prefix`` (:class:`PrecisePrefixRouter`): the longest prefix an instance holds,
  read from the cluster's :class:`~kvmm.cluster.BlockIndex` (llm-d's precise prefix scorer).
* ``weighted`` (:class:`WeightedRouter`): llm-d's scheduler, a weighted sum of normalised
  prefix, queue and KV-utilisation scores.

Ties always go to the lowest instance index (after the tie-breaks each router documents), so
every router is deterministic.  docs/cluster_routers.md gives each rule with its source.
Routers are small dataclasses validated in ``__post_init__``; their state is a few Python
containers or numpy arrays, touched O(blocks) per request.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field, fields
from typing import Any, Callable, ClassVar

import numpy as np

from kvmm._validate import MAX_INSTANCES, as_count, as_fraction, as_positive_float
from kvmm.cluster.view import ClusterView, RouteRequest
from kvmm.errors import BadInputError, DTypeError, InvalidIdError

__all__ = ["RoundRobinRouter", "LeastLoadedRouter", "SessionRouter", "ApproxPrefixRouter", "PrecisePrefixRouter",
           "WeightedRouter", "ROUTERS", "INDEX_ROUTERS", "make_router", "checked_route"]

#: routers (by name) that read the global block index; the simulator builds and feeds it for them
INDEX_ROUTERS = ("precise-prefix", "weighted")


@dataclass
class RoundRobinRouter:
    """Instances in turn: 0, 1, ..., n-1, 0, ...  Runtime complexity: O(1) per request."""

    num_instances: int
    name: ClassVar[str] = "round-robin"
    _next: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        self.num_instances = as_count(self.num_instances, "num_instances", minimum=1, maximum=MAX_INSTANCES)

    def route(self, request: Any, view: Any) -> int:
        _check_route_args(self, request, view)
        choice = self._next
        self._next = (choice + 1) % self.num_instances
        return choice


@dataclass
class LeastLoadedRouter:
    """The instance with the fewest waiting + running requests; ties: lowest index.
    Runtime complexity: O(num_instances) per request."""

    num_instances: int
    name: ClassVar[str] = "least-loaded"

    def __post_init__(self) -> None:
        self.num_instances = as_count(self.num_instances, "num_instances", minimum=1, maximum=MAX_INSTANCES)

    def route(self, request: Any, view: Any) -> int:
        _check_route_args(self, request, view)
        return _least_loaded(view)


@dataclass
class SessionRouter:
    """Sticky by conversation: a session's first request goes to the least-loaded instance
    (``first="least-loaded"``, ties lowest index) or the next in round-robin order
    (``first="round-robin"``); its later requests go to the same instance.  Requests without a
    session (``session == -1``) go to the least-loaded instance and are not remembered.

    ``max_sessions`` bounds the memory (LRU over sessions; a forgotten session is placed again
    as a first request); ``None``: unbounded.  Runtime complexity: O(1) per request (plus
    O(num_instances) to place a new session).
    """

    num_instances: int
    first: str = "least-loaded"
    max_sessions: int | None = None
    name: ClassVar[str] = "session"
    _home: OrderedDict = field(default_factory=OrderedDict, init=False, repr=False)
    _next: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        self.num_instances = as_count(self.num_instances, "num_instances", minimum=1, maximum=MAX_INSTANCES)
        if self.first not in ("least-loaded", "round-robin"):
            raise BadInputError(f"first must be 'least-loaded' or 'round-robin', got {self.first!r}")
        if self.max_sessions is not None:
            self.max_sessions = as_count(self.max_sessions, "max_sessions", minimum=1)

    def route(self, request: Any, view: Any) -> int:
        _check_route_args(self, request, view)
        session = int(request.session)
        if session < 0:
            return _least_loaded(view)
        home = self._home.get(session)
        if home is not None:
            self._home.move_to_end(session)
            return home
        if self.first == "round-robin":
            home = self._next
            self._next = (home + 1) % self.num_instances
        else:
            home = _least_loaded(view)
        self._home[session] = home
        if self.max_sessions is not None and len(self._home) > self.max_sessions:
            self._home.popitem(last=False)
        return home


@dataclass
class ApproxPrefixRouter:
    """SGLang's cache-aware router over the router's own memory of where it sent blocks.

    The memory holds up to ``max_blocks`` (block id, instance) pairs in LRU order; routing a
    request to an instance remembers each of its blocks for that instance, the first block
    most recently (pairs are refreshed last block first), so the LRU forgets prefix tails
    before heads.  An instance's match is the longest run of the request's blocks, from the
    first, remembered for it.  With ``load = waiting + running`` per instance:

    1. imbalanced (``max(load) - min(load) > balance_abs_threshold`` and
       ``max(load) > balance_rel_threshold * min(load)``): the least-loaded instance;
    2. else, if the best match ratio (matched blocks / request blocks) is greater than
       ``cache_threshold`` (strictly, as SGLang): the best-matching instance (ties: lower
       load, then lowest index);
    3. else ``miss_route``: ``"smallest"`` (SGLang: the instance with the fewest remembered
       blocks, ties lowest index) or ``"least-loaded"``.

    Defaults are sgl-router's (``RouterArgs``: cache_threshold 0.3, balance_abs_threshold 64,
    balance_rel_threshold 1.5).  A request with no blocks has match ratio 0.
    Runtime complexity: O(blocks + num_instances) per request (amortised LRU upkeep).
    """

    num_instances: int
    max_blocks: int = 1 << 20
    cache_threshold: float = 0.3
    balance_abs_threshold: int = 64
    balance_rel_threshold: float = 1.5
    miss_route: str = "smallest"
    name: ClassVar[str] = "approx-prefix"
    _memory: "PrefixMemory" = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.num_instances = as_count(self.num_instances, "num_instances", minimum=1, maximum=MAX_INSTANCES)
        self.max_blocks = as_count(self.max_blocks, "max_blocks", minimum=1)
        self.cache_threshold = as_fraction(self.cache_threshold, "cache_threshold", include_zero=True)
        self.balance_abs_threshold = as_count(self.balance_abs_threshold, "balance_abs_threshold")
        self.balance_rel_threshold = as_positive_float(self.balance_rel_threshold, "balance_rel_threshold")
        if self.miss_route not in ("smallest", "least-loaded"):
            raise BadInputError(f"miss_route must be 'smallest' or 'least-loaded', got {self.miss_route!r}")
        self._memory = PrefixMemory(self.num_instances, self.max_blocks)

    def route(self, request: Any, view: Any) -> int:
        _check_route_args(self, request, view)
        load = view.load()
        blocks = request.block_ids.tolist()
        lo, hi = int(load.min()), int(load.max())
        if hi - lo > self.balance_abs_threshold and hi > self.balance_rel_threshold * lo:
            choice = int(np.argmin(load))
        else:
            matched = self._memory.matches(blocks)
            best = int(matched.max())
            if blocks and best / len(blocks) > self.cache_threshold:
                choice = _lowest_load_among(np.flatnonzero(matched == best), load)
            elif self.miss_route == "smallest":
                choice = int(np.argmin(self._memory.sizes))
            else:
                choice = int(np.argmin(load))
        self._memory.remember(blocks, choice)
        return choice

    @property
    def remembered(self) -> int:
        """(block, instance) pairs in the memory now."""
        return len(self._memory)


@dataclass
class PrecisePrefixRouter:
    """The instance holding the longest prefix of the request, from the cluster's block index.

    One ``view.index.prefix_hits(block_ids)`` call gives ``hits`` (instances x media): per
    instance and medium, the longest consecutive run of the request's blocks from the first.
    An instance's prefix score is ``max over media of medium_weights[m] * hits[m]`` (weights
    default 1.0 for every medium: the longest prefix held in any one medium; give e.g.
    ``{"GPU": 1.0, "CPU": 0.8}`` to prefer GPU-resident prefixes, the split llm-d's indexer
    uses for its gpu/cpu backends, assumed here).  The router picks the largest
    ``prefix score - load_weight * (waiting + running)``; ties: lower load, then lowest index.
    ``load_weight`` is in blocks per request and defaults to 0: every request then goes to an
    instance holding its longest prefix.  A view without an index is a :class:`BadInputError`.
    Runtime complexity: one ``prefix_hits`` call plus O(num_instances x media).
    """

    num_instances: int
    load_weight: float = 0.0
    medium_weights: dict | None = None
    name: ClassVar[str] = "precise-prefix"
    _weights: tuple = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.num_instances = as_count(self.num_instances, "num_instances", minimum=1, maximum=MAX_INSTANCES)
        self.load_weight = as_positive_float(self.load_weight, "load_weight", allow_zero=True)
        if self.medium_weights is not None:
            if not isinstance(self.medium_weights, dict) or not self.medium_weights:
                raise DTypeError(f"medium_weights must be a non-empty dict medium -> weight, got {self.medium_weights!r}")
            self.medium_weights = {str(m): as_positive_float(w, f"medium_weights[{m!r}]", allow_zero=True)
                                   for m, w in self.medium_weights.items()}
        self._weights = (None, None)  # (media tuple, weight array) cached per index.media

    def route(self, request: Any, view: Any) -> int:
        _check_route_args(self, request, view)
        hits = _index_hits(self, view, request)
        score = hits.max(axis=1) if self.medium_weights is None else (hits * self._medium_weight_array(view.index)).max(axis=1)
        load = view.load()
        if self.load_weight:
            score = score - self.load_weight * load
        return _lowest_load_among(np.flatnonzero(score == score.max()), load)

    def _medium_weight_array(self, index: Any) -> np.ndarray:
        media = tuple(index.media)
        if self._weights[0] != media:
            unknown = sorted(set(self.medium_weights) - set(media))
            if unknown:
                raise BadInputError(f"medium_weights names {unknown[0]!r}, which the index does not have; "
                                    f"its media are {list(media)}")
            self._weights = (media, np.array([self.medium_weights.get(m, 0.0) for m in media], dtype=np.float64))
        return self._weights[1]


@dataclass
class WeightedRouter:
    """llm-d's scheduler: the argmax of a weighted sum of normalised scores (ties: lowest index).

    ``weights`` maps score names to non-negative weights (default ``{"prefix": 2.0, "load":
    1.0, "kv": 1.0}``, a published llm-d scheduling profile); each score is in [0, 1], higher is
    better:

    * ``prefix``: matched blocks / request blocks (0 for a request without blocks), the
      longest prefix over any medium from ``view.index.prefix_hits``; without an index, from
      the router's own LRU memory of where it sent blocks (``max_blocks`` pairs, as
      :class:`ApproxPrefixRouter`; remembered only then);
    * ``load``: llm-d's queue scorer, min-max normalised:
      ``(max(q) - q_i) / (max(q) - min(q))``, 1 for every instance when all are equal, with
      ``q`` the waiting queue (``load_metric="waiting"``, llm-d's) or waiting + running
      (``"total"``);
    * ``kv``: llm-d's KV-cache utilisation scorer, ``1 - kv_utilisation``.

    Runtime complexity: O(num_instances x media) plus one ``prefix_hits`` call (or O(blocks)
    in the memory) per request.
    """

    num_instances: int
    weights: dict = field(default_factory=lambda: {"prefix": 2.0, "load": 1.0, "kv": 1.0})
    load_metric: str = "waiting"
    max_blocks: int = 1 << 20
    name: ClassVar[str] = "weighted"
    SCORES: ClassVar[tuple] = ("prefix", "load", "kv")
    _memory: "PrefixMemory" = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.num_instances = as_count(self.num_instances, "num_instances", minimum=1, maximum=MAX_INSTANCES)
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
        self._memory = PrefixMemory(self.num_instances, self.max_blocks)

    def route(self, request: Any, view: Any) -> int:
        _check_route_args(self, request, view)
        total = np.zeros(self.num_instances, dtype=np.float64)
        w_prefix = self.weights.get("prefix", 0.0)
        blocks = None
        if w_prefix:
            n_blocks = int(request.block_ids.shape[0])
            if view.index is not None:
                matched = _index_hits(self, view, request).max(axis=1)
            else:
                blocks = request.block_ids.tolist()
                matched = self._memory.matches(blocks)
            if n_blocks:
                total += w_prefix * (matched / n_blocks)
        w_load = self.weights.get("load", 0.0)
        if w_load:
            q = view.queue_lengths if self.load_metric == "waiting" else view.load()
            lo, hi = int(q.min()), int(q.max())
            total += w_load * ((hi - q) / (hi - lo) if hi > lo else 1.0)
        w_kv = self.weights.get("kv", 0.0)
        if w_kv:
            total += w_kv * (1.0 - view.kv_utilisation)
        choice = int(np.argmax(total))
        if blocks is not None:
            self._memory.remember(blocks, choice)
        return choice


#: Router name -> class (``make_router`` builds one with ``num_instances`` and the options).
ROUTERS: dict[str, Callable[..., Any]] = {cls.name: cls for cls in (
    RoundRobinRouter, LeastLoadedRouter, SessionRouter, ApproxPrefixRouter, PrecisePrefixRouter, WeightedRouter)}


def make_router(spec: Any, num_instances: int, **params: Any) -> Any:
    """A router by name (a key of :data:`ROUTERS`; ``_`` and ``-`` alike, any case) built for
    ``num_instances`` with ``params``, or a user-written object with a ``route(request, view)``
    method, returned as is (it needs no registration; ``params`` are then refused).

    An unknown name lists the known ones; an option the router does not take names the ones it
    does; bad option values raise from the router's validation.  Runtime complexity: O(1).
    """
    num_instances = as_count(num_instances, "num_instances", minimum=1, maximum=MAX_INSTANCES)
    if isinstance(spec, str):
        key = spec.strip().lower().replace("_", "-")
        if key not in ROUTERS:
            raise BadInputError(f"unknown router {spec!r}; expected one of {sorted(ROUTERS)} or an object with "
                                "a route(request, view) method")
        cls = ROUTERS[key]
        accepted = sorted(f.name for f in fields(cls) if f.init and f.name != "num_instances")
        unknown = sorted(set(params) - set(accepted))
        if unknown:
            raise BadInputError(f"router {key!r} takes no option {unknown[0]!r}; it takes {accepted or 'no options'}")
        return cls(num_instances, **params)
    if isinstance(spec, type) or not callable(getattr(spec, "route", None)):
        raise DTypeError(f"router must be a name ({sorted(ROUTERS)}) or an object with a route(request, view) "
                         f"method, got {spec!r}")
    if params:
        raise BadInputError(f"options {sorted(params)} only apply to a router given by name; configure the "
                            f"{type(spec).__name__} object itself")
    return spec


def checked_route(router: Any, request: Any, view: Any) -> int:
    """``router.route(request, view)`` as a Python int, checked: a non-integer answer (a float,
    a bool, None) is a :class:`DTypeError`, one outside ``[0, view.num_instances)`` an
    :class:`InvalidIdError`, both naming the router and the request.  Runtime complexity: O(1)
    plus the router's own."""
    choice = router.route(request, view)
    if isinstance(choice, (bool, np.bool_)) or not isinstance(choice, (int, np.integer)):
        raise DTypeError(f"router {_router_name(router)} returned {choice!r} ({type(choice).__name__}) for request "
                         f"{getattr(request, 'index', '?')}; expected an int instance index")
    choice = int(choice)
    if not 0 <= choice < view.num_instances:
        raise InvalidIdError(f"router {_router_name(router)} returned instance {choice} for request "
                             f"{getattr(request, 'index', '?')}; expected an index in [0, {view.num_instances})")
    return choice


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


def _check_route_args(router: Any, request: Any, view: Any) -> None:
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


def _least_loaded(view: Any) -> int:
    return int(np.argmin(view.queue_lengths + view.running))


def _lowest_load_among(candidates: np.ndarray, load: np.ndarray) -> int:
    """The candidate with the smallest load; ties: the lowest index (candidates ascend)."""
    if candidates.shape[0] == 1:
        return int(candidates[0])
    return int(candidates[int(np.argmin(load[candidates]))])


def _index_hits(router: Any, view: Any, request: Any) -> np.ndarray:
    index = view.index
    if index is None:
        raise BadInputError(f"router {router.name!r} reads the cluster's block index, but view.index is None; "
                            "build the cluster with a BlockIndex (or use 'approx-prefix')")
    hits = np.asarray(index.prefix_hits(request.block_ids))
    expected = (router.num_instances, len(index.media))
    if hits.shape != expected:
        raise BadInputError(f"index.prefix_hits returned shape {hits.shape}; expected {expected} (instances x media)")
    return hits


def _router_name(router: Any) -> str:
    name = getattr(router, "name", None)
    return repr(name) if isinstance(name, str) else type(router).__name__

