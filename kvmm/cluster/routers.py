"""Routers: which instance of a cluster serves a request (:class:`kvmm.protocols.Router`).

By name through :func:`make_router` (``ROUTERS``), or any object with ``route(request, view)``:

* ``round-robin`` (:class:`RoundRobinRouter`): instances in turn.
* ``least-loaded`` (:class:`LeastLoadedRouter`): the smallest waiting + running count.
* ``session`` (:class:`SessionRouter`): sticky by conversation id.
* ``approx-prefix`` (:class:`ApproxPrefixRouter`, :mod:`kvmm.cluster.routers_sglang`): smg's
  (SGLang's) cache-aware router over the router's own bounded LRU memory of which blocks it
  sent where; sgl-router's 2025 rule as an option.
* ``precise-prefix`` (:class:`PrecisePrefixRouter`, :mod:`kvmm.cluster.routers_llmd`): the
  prefix an instance holds, from the cluster's :class:`~kvmm.cluster.BlockIndex`, balanced by
  NVIDIA Dynamo's cost by default; load-blind and linear forms as options.
* ``weighted`` (:class:`WeightedRouter`, :mod:`kvmm.cluster.routers_llmd`): llm-d's scheduler,
  a weighted sum of prefix, queue and KV-utilisation scores, by profile.
* ``kv-cost`` (:class:`KvCostRouter`, :mod:`kvmm.cluster.routers_dynamo`): NVIDIA Dynamo's
  KV router, the least prefill + decode cost in blocks.

Every router that can meet a tie takes ``tie_break`` (``"random"`` or ``"lowest"``) and a
``seed``; docs/cluster_routers.md gives each rule, the peer file and version it follows, and
what kvmm does differently.  Routers are small dataclasses validated in ``__post_init__``; their
state is a few Python containers, numpy arrays and a seeded numpy Generator.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import numpy as np

from kvmm._validate import MAX_INSTANCES, as_count
from kvmm.cluster._router_base import Ties, check_route_args, lowest_among, router_name
from kvmm.cluster.routers_dynamo import KvCostRouter
from kvmm.cluster.routers_llmd import PrecisePrefixRouter, WeightedRouter
from kvmm.cluster.routers_sglang import ApproxPrefixRouter, PrefixMemory
from kvmm.errors import BadInputError, DTypeError, InvalidIdError

__all__ = ["RoundRobinRouter", "LeastLoadedRouter", "SessionRouter", "ApproxPrefixRouter", "PrecisePrefixRouter",
           "WeightedRouter", "KvCostRouter", "PrefixMemory", "ROUTERS", "INDEX_ROUTERS", "make_router",
           "checked_route"]

#: routers (by name) that may read the global block index; the simulator builds and feeds it for
#: those whose options read it (``router.uses_index``)
INDEX_ROUTERS = ("precise-prefix", "weighted", "kv-cost")


@dataclass
class RoundRobinRouter:
    """Instances in turn: 0, 1, ..., n-1, 0, ...  (no ties).  Runtime complexity: O(1) per request."""

    num_instances: int
    name: ClassVar[str] = "round-robin"
    uses_index: ClassVar[bool] = False
    _next: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        self.num_instances = as_count(self.num_instances, "num_instances", minimum=1, maximum=MAX_INSTANCES)

    def route(self, request: Any, view: Any) -> int:
        check_route_args(self, request, view)
        choice = self._next
        self._next = (choice + 1) % self.num_instances
        return choice


@dataclass
class LeastLoadedRouter:
    """The instance with the fewest waiting + running requests; ties by ``tie_break``
    (``"lowest"``, the default: the lowest index; ``"random"``: seeded by ``seed``).
    Runtime complexity: O(num_instances) per request."""

    num_instances: int
    tie_break: str = "lowest"
    seed: int = 0
    name: ClassVar[str] = "least-loaded"
    uses_index: ClassVar[bool] = False
    _ties: Ties = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.num_instances = as_count(self.num_instances, "num_instances", minimum=1, maximum=MAX_INSTANCES)
        self._ties = Ties(self.tie_break, self.seed, self.name)
        self.seed = int(self.seed)

    def route(self, request: Any, view: Any) -> int:
        check_route_args(self, request, view)
        return _least_loaded(view, self._ties)


@dataclass
class SessionRouter:
    """Sticky by conversation: a session's first request goes to the least-loaded instance
    (``first="least-loaded"``, ties by ``tie_break``: ``"lowest"``, the default, or ``"random"``
    seeded by ``seed``) or the next in round-robin order
    (``first="round-robin"``); its later requests go to the same instance.  Requests without a
    session (``session == -1``) go to the least-loaded instance and are not remembered.

    ``max_sessions`` bounds the memory (LRU over sessions; a forgotten session is placed again
    as a first request); ``None``: unbounded.  Runtime complexity: O(1) per request (plus
    O(num_instances) to place a new session).
    """

    num_instances: int
    first: str = "least-loaded"
    max_sessions: int | None = None
    tie_break: str = "lowest"
    seed: int = 0
    name: ClassVar[str] = "session"
    uses_index: ClassVar[bool] = False
    _home: OrderedDict = field(default_factory=OrderedDict, init=False, repr=False)
    _next: int = field(default=0, init=False, repr=False)
    _ties: Ties = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.num_instances = as_count(self.num_instances, "num_instances", minimum=1, maximum=MAX_INSTANCES)
        if self.first not in ("least-loaded", "round-robin"):
            raise BadInputError(f"first must be 'least-loaded' or 'round-robin', got {self.first!r}")
        if self.max_sessions is not None:
            self.max_sessions = as_count(self.max_sessions, "max_sessions", minimum=1)
        self._ties = Ties(self.tie_break, self.seed, self.name)
        self.seed = int(self.seed)

    def route(self, request: Any, view: Any) -> int:
        check_route_args(self, request, view)
        session = int(request.session)
        if session < 0:
            return _least_loaded(view, self._ties)
        home = self._home.get(session)
        if home is not None:
            self._home.move_to_end(session)
            return home
        if self.first == "round-robin":
            home = self._next
            self._next = (home + 1) % self.num_instances
        else:
            home = _least_loaded(view, self._ties)
        self._home[session] = home
        if self.max_sessions is not None and len(self._home) > self.max_sessions:
            self._home.popitem(last=False)
        return home


#: Router name -> class (``make_router`` builds one with ``num_instances`` and the options).
ROUTERS: dict[str, Callable[..., Any]] = {cls.name: cls for cls in (
    RoundRobinRouter, LeastLoadedRouter, SessionRouter, ApproxPrefixRouter, PrecisePrefixRouter, WeightedRouter,
    KvCostRouter)}


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
        raise DTypeError(f"router {router_name(router)} returned {choice!r} ({type(choice).__name__}) for request "
                         f"{getattr(request, 'index', '?')}; expected an int instance index")
    choice = int(choice)
    if not 0 <= choice < view.num_instances:
        raise InvalidIdError(f"router {router_name(router)} returned instance {choice} for request "
                             f"{getattr(request, 'index', '?')}; expected an index in [0, {view.num_instances})")
    return choice


def _least_loaded(view: Any, ties: Ties) -> int:
    return ties.pick(lowest_among(view.load()))
