"""Miss-ratio curves (EfficientAgent): exact LRU stack distances (:class:`StackDistanceTracker`,
a Fenwick tree over last-access times, and :class:`DistanceHistogram`), SHARDS spatial sampling
(:class:`ShardsTracker`: fixed rate, fixed size, stratified) and the distributed MRC of a trace
too large for one process (:func:`distributed_mrc`, Dask).  docs/working_set.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvmm._lazy import lazy_exports

_LAZY = {
    "StackDistanceTracker": "kvmm.policies.mrc.stack_distance",
    "DistanceHistogram": "kvmm.policies.mrc.stack_distance",
    "ShardsTracker": "kvmm.policies.mrc.shards",
    "distributed_mrc": "kvmm.policies.mrc.distributed",
}

__all__ = sorted(_LAZY)

if TYPE_CHECKING:  # what editors and type checkers see; at run time each name loads on first use
    from kvmm.policies.mrc.distributed import distributed_mrc
    from kvmm.policies.mrc.shards import ShardsTracker
    from kvmm.policies.mrc.stack_distance import DistanceHistogram, StackDistanceTracker

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
