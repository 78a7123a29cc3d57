"""Configuration of a simulated cluster: :class:`ClusterConfig` (``SimConfig(cluster=...)``).

It lives in ``kvmm.sim`` (the cluster's control plane, ``kvmm.cluster``, never imports the
simulator); ``kvmm.cluster.ClusterConfig`` still resolves here, with a DeprecationWarning.

::

    SimConfig(workload="conversation", load=0.8,
              tiers=[TierLevel("dram", capacity_bytes=256 * GiB)],            # private, per instance
              cluster=ClusterConfig(instances=16, router="precise-prefix",
                                    shared_tiers=[TierLevel("layer3.5", capacity_bytes=20 * TiB)],
                                    fabric="rdma400"))

Plain frozen data, picklable (``kvmm.sim.sweep`` ships it to other processes); a router object
is deep-copied for every run, like every policy object in a :class:`~kvmm.sim.SimConfig`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvmm._validate import MAX_INSTANCES, MAX_UNITS, as_count, as_positive_float
from kvmm.errors import BadInputError, DTypeError

__all__ = ["ClusterConfig"]


@dataclass(frozen=True)
class ClusterConfig:
    """``instances`` serving instances, each with its own GPU pool, staging tier and the
    ``SimConfig.tiers`` as private tiers, plus ``shared_tiers`` (:class:`~kvmm.sim.TierLevel`)
    that every instance reads and writes: one ``ManagedTier`` per level whose policy sees every
    instance's accesses, reached over ``fabric``.

    ``router``: a name in :data:`kvmm.cluster.ROUTERS` or any object with ``route(request,
    view)`` (the :class:`~kvmm.protocols.Router` Protocol); ``router_params``: keyword
    arguments for a router given by name.  ``fabric``: a :class:`~kvmm.cluster.FabricSpec`, a
    name in :data:`kvmm.cluster.FABRIC_PRESETS`, or ``None`` (the shared levels are seen with
    their own specs, no link between: a cluster of one instance then equals that instance with
    the levels private).  ``index``: build the global :class:`~kvmm.cluster.BlockIndex` (fed by
    every instance's GPU pool and private tiers); ``None``: when the router reads it.
    ``index_max_entries``: the index's entry budget (``None``: unbounded).
    ``index_max_holders``: at most this many (instance, medium) holders per key in the index,
    the most recently stored (llm-d keeps 10 pods per key); ``None``: no cap.
    ``events``: an :class:`~kvmm.cluster.EventStream`: how KV events reach the index (delay,
    batching, loss, speculative indexing); ``None`` or ``EventStream()``: at once, exactly.
    ``store``: a :class:`~kvmm.sim.PooledStore` for every shared level, or a tuple with one (or
    ``None``: one plain pool) per shared level: a store split into per-instance segments with a
    high-watermark eviction and replicas, as Mooncake Store (docs/cluster.md).
    ``metrics_interval_s``: how often the router's view of each instance's load is scraped, in
    seconds (llm-d's scraper reads every engine's metrics every ~50 ms); ``0`` (the default):
    exact, as of each arrival (docs/cluster.md, "What a router sees").
    """

    instances: int = 2
    router: Any = "round-robin"
    router_params: tuple = ()
    shared_tiers: tuple = ()
    fabric: Any = "rdma400"
    index: bool | None = None
    index_max_entries: int | None = None
    index_max_holders: int | None = None
    events: Any = None
    store: Any = None
    metrics_interval_s: float = 0.0

    def __post_init__(self) -> None:
        from kvmm.sim.config import as_tier_levels

        as_count(self.instances, "instances", minimum=1, maximum=MAX_INSTANCES)
        params = _router_params(self.router_params)
        object.__setattr__(self, "router_params", tuple(sorted(params.items())))
        if isinstance(self.router, str):
            from kvmm.cluster.routers import ROUTERS, make_router

            if self.router not in ROUTERS:
                raise BadInputError(f"unknown router {self.router!r}; expected one of {sorted(ROUTERS)} or an object "
                                    "with route(request, view)")
            make_router(self.router, self.instances, **params)  # its options are checked now, not mid-run
        elif not callable(getattr(self.router, "route", None)):
            raise BadInputError(f"router {type(self.router).__name__} has no route(request, view); expected a name "
                                "or an object of the Router Protocol")
        elif params:
            raise BadInputError("router_params are for a router given by name; configure a router object yourself")
        object.__setattr__(self, "shared_tiers", as_tier_levels(self.shared_tiers, "shared_tiers"))
        if self.fabric is not None:
            from kvmm.cluster.fabric import FabricSpec, fabric_preset

            fabric = fabric_preset(self.fabric) if isinstance(self.fabric, str) else self.fabric
            if not isinstance(fabric, FabricSpec):
                raise BadInputError(f"fabric must be a FabricSpec, a preset name or None, got {type(self.fabric).__name__}")
            object.__setattr__(self, "fabric", fabric)
        if self.index is not None and not isinstance(self.index, bool):
            raise BadInputError(f"index must be a bool or None, got {self.index!r}")
        if self.index_max_entries is not None:
            as_count(self.index_max_entries, "index_max_entries", minimum=1, maximum=MAX_UNITS)
        if self.index_max_holders is not None:
            as_count(self.index_max_holders, "index_max_holders", minimum=1, maximum=MAX_UNITS)
        if self.events is not None:
            from kvmm.cluster.event_stream import EventStream

            if not isinstance(self.events, EventStream):
                raise BadInputError(f"events must be an EventStream or None, got {type(self.events).__name__}")
        from kvmm.sim.pooled_store import as_stores

        object.__setattr__(self, "store", as_stores(self.store, len(self.shared_tiers), self.instances))
        object.__setattr__(self, "metrics_interval_s",
                           as_positive_float(self.metrics_interval_s, "metrics_interval_s", allow_zero=True))

    @property
    def uses_index(self) -> bool:
        """Is the global block index built (explicitly, or because the router reads it)?"""
        if self.index is not None:
            return self.index
        if isinstance(self.router, str):
            from kvmm.cluster.routers import make_router

            router = make_router(self.router, self.instances, **dict(self.router_params))
            return bool(router.uses_index)  # some read it only with some options (weighted's profiles)
        return bool(getattr(self.router, "uses_index", False))


def _router_params(params: Any) -> dict:
    """``router_params`` as a dict: a mapping of option names, or the ``(name, value)`` pairs a
    ClusterConfig stores (so ``dataclasses.replace`` works); anything else is a DTypeError."""
    if isinstance(params, Mapping):
        out = dict(params)
    elif isinstance(params, (tuple, list)) and all(isinstance(p, tuple) and len(p) == 2 for p in params):
        out = dict(params)
    else:
        raise DTypeError(f"router_params must be a mapping of option names to values, such as "
                         f"{{'load_weight': 0.5}}, got {type(params).__name__}")
    bad = [k for k in out if not isinstance(k, str)]
    if bad:
        raise DTypeError(f"router_params' keys must be option names (text), got {bad[0]!r}")
    return out
