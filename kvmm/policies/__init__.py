"""kvmm.policies: eviction orders, stack-distance analysis, admission filters, staging (see DESIGN.md)."""

from kvmm.policies.shards import ShardsTracker
from kvmm.policies.stack_distance import DistanceHistogram, StackDistanceTracker

__all__ = [
    "DistanceHistogram",
    "ShardsTracker",
    "StackDistanceTracker",
]
