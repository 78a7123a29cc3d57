"""kvmm.policies (components land here; see DESIGN.md).

TempoKV: :class:`CommitmentLedger` and the staging policies (:class:`OnDemandStaging`,
:class:`ImmediateStaging`, :class:`TimelyStaging`).  Imports are lazy so ``import kvmm.policies``
compiles nothing.
"""

from __future__ import annotations

import importlib

_LAZY = {
    "CommitmentLedger": "kvmm.policies.ledger",
    "StagingPolicy": "kvmm.policies.staging",
    "OnDemandStaging": "kvmm.policies.staging",
    "ImmediateStaging": "kvmm.policies.staging",
    "TimelyStaging": "kvmm.policies.staging",
    "STAGING_POLICIES": "kvmm.policies.staging",
    "make_staging_policy": "kvmm.policies.staging",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'kvmm.policies' has no attribute {name!r}")
