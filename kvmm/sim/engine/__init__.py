"""The simulator's engine: one event loop (:class:`Instance`) over small parts with one job each.

* :mod:`~kvmm.sim.engine.requests`: the request table (every request's columns, shared by the
  instances of a cluster or a PD deployment);
* :mod:`~kvmm.sim.engine.scheduler`: which requests run in a step (chunked prefill, vLLM V1);
* :mod:`~kvmm.sim.engine.staging`: how lower-tier hits reach the GPU (ledger-driven staging,
  or the write-through LRU baseline), one interface;
* :mod:`~kvmm.sim.engine.clock`: the step time, from the run's latency model;
* :mod:`~kvmm.sim.engine.stats`: what an instance counts, for the results;
* :mod:`~kvmm.sim.engine.instance`: the event loop of one instance;
* :mod:`~kvmm.sim.engine.cluster` and :mod:`~kvmm.sim.engine.pd`: the drivers that interleave
  many instances (routed, or prefill/decode disaggregated).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvmm._lazy import lazy_exports

_LAZY = {
    "Instance": "kvmm.sim.engine.instance",
    "QueueGrowthWarning": "kvmm.sim.engine.instance",
    "RequestTable": "kvmm.sim.engine.requests",
    "Scheduler": "kvmm.sim.engine.scheduler",
}

__all__ = sorted(_LAZY)

if TYPE_CHECKING:  # what editors and type checkers see; at run time each name loads on first use
    from kvmm.sim.engine.instance import Instance, QueueGrowthWarning
    from kvmm.sim.engine.requests import RequestTable
    from kvmm.sim.engine.scheduler import Scheduler

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
