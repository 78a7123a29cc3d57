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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kvmm._validate import MAX_INSTANCES, MAX_UNITS, as_count, as_positive_float
from kvmm.cluster.event_stream import EventStream
from kvmm.cluster.fabric import FabricSpec, fabric_preset
from kvmm.cluster.routers import ROUTERS, make_router
from kvmm.errors import BadInputError, DTypeError
from kvmm.protocols import Router
from kvmm.sim.levels import TierLevel, as_tier_levels
from kvmm.tiers.spec import TierSpec

__all__ = ["ClusterConfig", "PooledStore", "as_stores"]


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
    router: str | Router = "round-robin"
    router_params: Mapping[str, Any] | tuple[tuple[str, Any], ...] = ()
    shared_tiers: Sequence[TierLevel | TierSpec | str] = ()
    fabric: str | FabricSpec | None = "rdma400"
    index: bool | None = None
    index_max_entries: int | None = None
    index_max_holders: int | None = None
    events: EventStream | None = None
    store: PooledStore | Sequence[PooledStore | None] | None = None
    metrics_interval_s: float = 0.0

    def __post_init__(self) -> None:
        as_count(self.instances, "instances", minimum=1, maximum=MAX_INSTANCES)
        params = _router_params(self.router_params)
        object.__setattr__(self, "router_params", tuple(sorted(params.items())))
        if isinstance(self.router, str):
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
            if not isinstance(self.events, EventStream):
                raise BadInputError(f"events must be an EventStream or None, got {type(self.events).__name__}")
        object.__setattr__(self, "store", as_stores(self.store, len(self.shared_tiers), self.instances))
        object.__setattr__(self, "metrics_interval_s",
                           as_positive_float(self.metrics_interval_s, "metrics_interval_s", allow_zero=True))

    @property
    def uses_index(self) -> bool:
        """Is the global block index built (explicitly, or because the router reads it)?"""
        if self.index is not None:
            return self.index
        if isinstance(self.router, str):
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


@dataclass(frozen=True)
class PooledStore:
    """How a shared level is laid out, as Mooncake Store lays out its pool (docs/cluster.md; the
    model is described in :mod:`kvmm.sim.pooled_store`, which runs it).  ``segments``: equal segments
    on the instances' nodes (``None``: one per instance; 1: one pool no instance hosts);
    ``replicas``: most copies of a block read from several instances; ``watermark`` and
    ``evict_fraction``: a segment evicts past ``watermark`` of its capacity, down to
    ``watermark - evict_fraction``."""

    segments: int | None = 1
    replicas: int = 1
    watermark: float = 1.0
    evict_fraction: float = 0.0

    def __post_init__(self) -> None:
        if self.segments is not None:
            as_count(self.segments, "segments", minimum=1, maximum=MAX_INSTANCES)
        as_count(self.replicas, "replicas", minimum=1, maximum=MAX_INSTANCES)
        mark = as_positive_float(self.watermark, "watermark")
        frac = as_positive_float(self.evict_fraction, "evict_fraction", allow_zero=True)
        if not 0.0 < mark <= 1.0 or not frac < mark:
            raise BadInputError(f"watermark must be in (0, 1] and evict_fraction in [0, watermark), got watermark="
                                f"{self.watermark!r}, evict_fraction={self.evict_fraction!r}")
        object.__setattr__(self, "watermark", mark)
        object.__setattr__(self, "evict_fraction", frac)

    @classmethod
    def mooncake(cls, replicas: int = 1) -> PooledStore:
        """Mooncake Store's defaults: a segment per instance, eviction at 90 % down by 5 %."""
        return cls(segments=None, replicas=replicas, watermark=0.9, evict_fraction=0.05)


def as_stores(store: PooledStore | Sequence[PooledStore | None] | None, levels: int, instances: int) -> tuple:
    """``ClusterConfig.store`` as one ``PooledStore`` or ``None`` per shared level (``()``: plain
    pools everywhere, what ``None`` becomes, so ``dataclasses.replace`` works)."""
    if store is None or (isinstance(store, tuple) and not store):
        return ()
    items = (store,) * levels if isinstance(store, PooledStore) else store
    if not isinstance(items, (tuple, list)) or len(items) != levels or \
            not all(s is None or isinstance(s, PooledStore) for s in items):
        raise BadInputError(f"store must be a PooledStore (for every shared level) or a tuple with a PooledStore or "
                            f"None per shared level ({levels}), got {store!r:.120}")
    for s in items:
        if s is not None and s.segments is not None and s.segments > instances:
            raise BadInputError(f"store has {s.segments} segments but the cluster {instances} instances; expected at "
                                "most one segment per instance (segments=None: one each)")
    return tuple(items)
