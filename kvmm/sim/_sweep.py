"""Parameter sweeps over :func:`kvmm.sim.simulate` on any ``concurrent.futures.Executor``.

A local process pool by default; pass ``client.get_executor()`` of a Dask distributed cluster
(``pip install "kvmm[dist]"``) to spread a sweep too big for one machine, or a
``ThreadPoolExecutor`` for small ones.  Each run is deterministic (seeded workloads, no
wall-clock input), so the results are identical whatever executes them, and they come back
in the order of ``configs``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from typing import Any

from kvmm.errors import BadInputError
from kvmm.sim.simulator import SimConfig, SimResult, simulate

__all__ = ["sweep"]


def sweep(configs: Iterable[SimConfig], executor: Executor | Any = None, *,
          max_workers: int | None = None, progress: Callable[[int], None] | None = None) -> list[SimResult]:
    """Run every config; return the results in input order.

    ``executor=None`` uses a ``ProcessPoolExecutor`` (``max_workers`` defaults to the CPU
    count, capped by the number of configs; one config runs in this process).  Any other
    executor is used as given and not shut down; a ``dask.distributed.Client`` may be passed
    directly (its ``get_executor()`` is used).  ``progress(1)`` is called per finished run.
    Runtime complexity: the sum of the runs, divided among the workers.
    """
    cfgs: Sequence[SimConfig] = list(configs)
    for i, c in enumerate(cfgs):
        if not isinstance(c, SimConfig):
            raise BadInputError(f"configs[{i}] must be a SimConfig, got {type(c).__name__}")
    if not cfgs:
        return []
    if executor is None:
        workers = max_workers or min(len(cfgs), os.cpu_count() or 1)
        if workers <= 1 or len(cfgs) == 1:
            out = []
            for c in cfgs:
                out.append(simulate(c))
                if progress is not None:
                    progress(1)
            return out
        with ProcessPoolExecutor(max_workers=workers) as pool:
            return _collect(pool, cfgs, progress)
    if not hasattr(executor, "submit") and hasattr(executor, "get_executor"):
        executor = executor.get_executor()  # a dask.distributed Client
    return _collect(executor, cfgs, progress)


def _collect(executor: Executor, cfgs: Sequence[SimConfig], progress) -> list[SimResult]:
    futures = [executor.submit(_run_one, c) for c in cfgs]
    out = []
    for f in futures:
        out.append(f.result())
        if progress is not None:
            progress(1)
    return out


def _run_one(config: SimConfig) -> SimResult:
    """Module-level (picklable) task body."""
    return simulate(config)
