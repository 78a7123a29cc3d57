"""Memory tiers: specs and presets, real data backends, the timing model."""

from kvmm.tiers.spec import PRESETS, TierSpec, preset

__all__ = ["PRESETS", "TierSpec", "preset"]
