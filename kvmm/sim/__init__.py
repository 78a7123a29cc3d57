"""kvmm.sim: an event-driven serving simulator for KV staging policies (TempoKV).

``simulate(SimConfig(...)) -> SimResult``; ``sweep(configs, executor=None)`` runs many on any
``concurrent.futures.Executor`` (a process pool by default, a Dask cluster's executor when the
``dist`` extra is installed).  Imports are lazy so ``import kvmm.sim`` compiles nothing.
"""

from __future__ import annotations

import importlib

_LAZY = {
    "SimConfig": "kvmm.sim.simulator",
    "SimResult": "kvmm.sim.simulator",
    "simulate": "kvmm.sim.simulator",
    "GiB": "kvmm.sim.simulator",
    "sweep": "kvmm.sim.sweep",
    "ModelSpec": "kvmm.sim.models",
    "MODELS": "kvmm.sim.models",
    "Workload": "kvmm.sim.workload",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'kvmm.sim' has no attribute {name!r}")
