"""kvmm.policies: eviction orders (LRU, FIFO, LFU, ARC, CLOCK, S3-FIFO, SIEVE, 2Q, LIRS, SLRU,
W-TinyLFU, offline Belady: :data:`EVICTION_POLICIES`, numba ``replay``; docs/eviction_orders.md),
stack-distance analysis and working sets, admission filters,
the TempoKV commitment ledger and staging policies (see DESIGN.md).

Imports are lazy, so ``import kvmm.policies`` compiles nothing; the first use of a name loads
its module.
"""

from __future__ import annotations

from kvmm._lazy import lazy_exports

_LAZY = {
    # eviction orders (the EvictionPolicy Protocol)
    "LRUPolicy": "kvmm.policies.eviction",
    "FIFOPolicy": "kvmm.policies.eviction",
    "LFUPolicy": "kvmm.policies.eviction",
    "ARCPolicy": "kvmm.policies.eviction",
    "ClockPolicy": "kvmm.policies.clock",
    "BeladyPolicy": "kvmm.policies.belady",
    "S3FIFOPolicy": "kvmm.policies.s3fifo",
    "SIEVEPolicy": "kvmm.policies.sieve",
    "TwoQPolicy": "kvmm.policies.twoq",
    "LIRSPolicy": "kvmm.policies.lirs",
    "SLRUPolicy": "kvmm.policies.slru",
    "WTinyLFUPolicy": "kvmm.policies.wtinylfu",
    "EVICTION_POLICIES": "kvmm.policies.eviction",
    "make_eviction_policy": "kvmm.policies.eviction",
    "replay": "kvmm.policies._replay",
    "REPLAY_ORDERS": "kvmm.policies._replay",
    # stack distances, miss-ratio curves, working sets (EfficientAgent)
    "StackDistanceTracker": "kvmm.policies.stack_distance",
    "DistanceHistogram": "kvmm.policies.stack_distance",
    "ShardsTracker": "kvmm.policies.shards",
    "distributed_mrc": "kvmm.policies.distributed",
    # admission (the AdmissionPolicy Protocol)
    "AdmissionRequest": "kvmm.policies.admission",
    "WriteAll": "kvmm.policies.admission",
    "admission_mask": "kvmm.policies.admission",
    "StoreThreshold": "kvmm.policies.admission",
    "SelectiveWriteThrough": "kvmm.policies.admission",
    "RefillFilter": "kvmm.policies.admission",
    # TempoKV: commitment ledger and staging (the StagingPolicy Protocol)
    "CommitmentLedger": "kvmm.policies.ledger",
    "StagingPolicy": "kvmm.policies.staging",
    "OnDemandStaging": "kvmm.policies.staging",
    "ImmediateStaging": "kvmm.policies.staging",
    "ImmediateEDFStaging": "kvmm.policies.staging",
    "TimelyStaging": "kvmm.policies.staging",
    "STAGING_POLICIES": "kvmm.policies.staging",
    "make_staging_policy": "kvmm.policies.staging",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
