"""kvmm.policies, one subpackage per idea:

* :mod:`kvmm.policies.eviction`: eviction orders (LRU, FIFO, LFU, ARC, CLOCK, S3-FIFO, SIEVE, 2Q,
  LIRS, SLRU, W-TinyLFU, offline Belady), one module each, their numba replay kernels and the one
  table of them (``ORDERS``: :data:`EVICTION_POLICIES`, :func:`replay`); docs/eviction_orders.md;
* :mod:`kvmm.policies.staging`: TempoKV's commitment ledger and staging policies; docs/tempokv.md;
* :mod:`kvmm.policies.mrc`: stack distances, SHARDS and the distributed miss-ratio curve
  (EfficientAgent); docs/working_set.md;
* :mod:`kvmm.policies.admission`: admission filters (the :class:`~kvmm.protocols.AdmissionPolicy`
  Protocol).

Every public name is exported here, as before the split.  Imports are lazy, so ``import
kvmm.policies`` compiles nothing; the first use of a name loads its module.  The module paths of
before the split (``kvmm.policies.ledger``, ``kvmm.policies.stack_distance``, ...) import for one
release with a DeprecationWarning (:mod:`kvmm.policies._moved`).
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

from kvmm._lazy import lazy_exports
from kvmm.policies import _moved

_LAZY = {
    # eviction orders (the EvictionPolicy Protocol)
    "LRUPolicy": "kvmm.policies.eviction.lru",
    "FIFOPolicy": "kvmm.policies.eviction.fifo",
    "LFUPolicy": "kvmm.policies.eviction.lfu",
    "ARCPolicy": "kvmm.policies.eviction.arc",
    "ClockPolicy": "kvmm.policies.eviction.clock",
    "BeladyPolicy": "kvmm.policies.eviction.belady",
    "S3FIFOPolicy": "kvmm.policies.eviction.s3fifo",
    "SIEVEPolicy": "kvmm.policies.eviction.sieve",
    "TwoQPolicy": "kvmm.policies.eviction.twoq",
    "LIRSPolicy": "kvmm.policies.eviction.lirs",
    "SLRUPolicy": "kvmm.policies.eviction.slru",
    "WTinyLFUPolicy": "kvmm.policies.eviction.wtinylfu",
    "EVICTION_POLICIES": "kvmm.policies.eviction.orders",
    "make_eviction_policy": "kvmm.policies.eviction.orders",
    "replay": "kvmm.policies.eviction._replay",
    "REPLAY_ORDERS": "kvmm.policies.eviction._replay",
    # stack distances, miss-ratio curves, working sets (EfficientAgent)
    "StackDistanceTracker": "kvmm.policies.mrc.stack_distance",
    "DistanceHistogram": "kvmm.policies.mrc.stack_distance",
    "ShardsTracker": "kvmm.policies.mrc.shards",
    "distributed_mrc": "kvmm.policies.mrc.distributed",
    # admission (the AdmissionPolicy Protocol)
    "AdmissionRequest": "kvmm.policies.admission",
    "WriteAll": "kvmm.policies.admission",
    "admission_mask": "kvmm.policies.admission",
    "StoreThreshold": "kvmm.policies.admission",
    "SelectiveWriteThrough": "kvmm.policies.admission",
    "RefillFilter": "kvmm.policies.admission",
    # TempoKV: commitment ledger and staging (the StagingPolicy Protocol)
    "CommitmentLedger": "kvmm.policies.staging.ledger",
    "StagingPolicy": "kvmm.policies.staging.staging",
    "OnDemandStaging": "kvmm.policies.staging.staging",
    "ImmediateStaging": "kvmm.policies.staging.staging",
    "ImmediateEDFStaging": "kvmm.policies.staging.staging",
    "TimelyStaging": "kvmm.policies.staging.staging",
    "STAGING_POLICIES": "kvmm.policies.staging.staging",
    "make_staging_policy": "kvmm.policies.staging.staging",
}

_SUBPACKAGES = frozenset({"eviction", "staging", "mrc", "admission"})

__all__ = sorted(_LAZY)

if TYPE_CHECKING:  # what editors and type checkers see; at run time each name loads on first use
    from kvmm.policies import admission, eviction, mrc, staging
    from kvmm.policies.admission import (
        AdmissionRequest,
        RefillFilter,
        SelectiveWriteThrough,
        StoreThreshold,
        WriteAll,
        admission_mask,
    )
    from kvmm.policies.eviction._replay import REPLAY_ORDERS, replay
    from kvmm.policies.eviction.arc import ARCPolicy
    from kvmm.policies.eviction.belady import BeladyPolicy
    from kvmm.policies.eviction.clock import ClockPolicy
    from kvmm.policies.eviction.fifo import FIFOPolicy
    from kvmm.policies.eviction.lfu import LFUPolicy
    from kvmm.policies.eviction.lirs import LIRSPolicy
    from kvmm.policies.eviction.lru import LRUPolicy
    from kvmm.policies.eviction.orders import EVICTION_POLICIES, make_eviction_policy
    from kvmm.policies.eviction.s3fifo import S3FIFOPolicy
    from kvmm.policies.eviction.sieve import SIEVEPolicy
    from kvmm.policies.eviction.slru import SLRUPolicy
    from kvmm.policies.eviction.twoq import TwoQPolicy
    from kvmm.policies.eviction.wtinylfu import WTinyLFUPolicy
    from kvmm.policies.mrc.distributed import distributed_mrc
    from kvmm.policies.mrc.shards import ShardsTracker
    from kvmm.policies.mrc.stack_distance import DistanceHistogram, StackDistanceTracker
    from kvmm.policies.staging.ledger import CommitmentLedger
    from kvmm.policies.staging.staging import (
        STAGING_POLICIES,
        ImmediateEDFStaging,
        ImmediateStaging,
        OnDemandStaging,
        StagingPolicy,
        TimelyStaging,
        make_staging_policy,
    )


_exported, __dir__ = lazy_exports(__name__, _LAZY, globals(), _SUBPACKAGES)
_moved.install()


def __getattr__(name: str) -> object:
    """An exported name (loaded on first use), a subpackage, or an old submodule path (warns)."""
    try:
        return _exported(name)
    except AttributeError:
        module: ModuleType | None = _moved.old_submodule(name)
        if module is None:
            raise
        return module
