"""kvmm.policies (components land here; see DESIGN.md)."""

from kvmm.policies.eviction import (EVICTION_POLICIES, ARCPolicy, FIFOPolicy, LFUPolicy, LRUPolicy,
                                    make_eviction_policy)

__all__ = ["ARCPolicy", "EVICTION_POLICIES", "FIFOPolicy", "LFUPolicy", "LRUPolicy", "make_eviction_policy"]
