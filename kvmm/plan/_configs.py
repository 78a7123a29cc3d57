"""The SimConfig of one plan point: the base config with the candidate tiers at given capacities."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from kvmm.sim.cluster_config import ClusterConfig
from kvmm.sim.config import SimConfig, TierLevel
from kvmm.traces.trace import KVTrace

if TYPE_CHECKING:  # core.py imports this module; the name is for annotations only
    from kvmm.plan.core import TierCandidate

__all__ = ["point_config", "default_base"]


def default_base(trace: KVTrace | str) -> SimConfig:
    """The base config when the caller gives none: the simulator's defaults on ``trace``."""
    return SimConfig(workload=trace)


def point_config(base: SimConfig | None, candidates: Sequence[TierCandidate], capacities: Sequence[int],
                 instances: int) -> SimConfig:
    """``base`` with ``tiers`` = the private candidates and, when a candidate is shared (or the base
    is a cluster), a ``ClusterConfig`` of ``instances`` holding the shared ones.  A tier at 0 bytes
    is left out (absent).  Runtime complexity: O(tiers)."""
    if base is None:
        base = SimConfig()
    private: list[TierLevel] = []
    shared: list[TierLevel] = []
    for cand, cap in zip(candidates, capacities):
        if cap <= 0:
            continue
        level = TierLevel(cand.kind, eviction=cand.eviction, admission=cand.admission, capacity_bytes=int(cap))
        (shared if cand.shared else private).append(level)
    if shared or base.cluster is not None:
        cluster = base.cluster if base.cluster is not None else ClusterConfig(instances=instances)
        cluster = replace(cluster, instances=instances, shared_tiers=tuple(shared))
        return replace(base, tiers=tuple(private), cluster=cluster, instances=1)
    return replace(base, tiers=tuple(private), instances=instances)
