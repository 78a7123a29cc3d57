"""kvmm.policies: eviction orders, stack-distance analysis, admission filters, staging (see DESIGN.md)."""

from kvmm.policies.admission import (
    AdmissionRequest,
    RefillFilter,
    SelectiveWriteThrough,
    StoreThreshold,
    WriteAll,
)
from kvmm.policies.shards import ShardsTracker
from kvmm.policies.stack_distance import DistanceHistogram, StackDistanceTracker

__all__ = [
    "AdmissionRequest",
    "DistanceHistogram",
    "RefillFilter",
    "SelectiveWriteThrough",
    "ShardsTracker",
    "StackDistanceTracker",
    "StoreThreshold",
    "WriteAll",
]
