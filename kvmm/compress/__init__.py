"""kvmm.compress: RoPE math, TriAttention calibration and scoring, token scorers.

Imports are cheap: numba kernels compile on first use, torch is imported only by
:mod:`kvmm.compress.hf`.
"""

from kvmm.compress.calibration import (
    Calibration,
    calibrate,
    logit_curve,
    mean_logit_by_distance,
    pearson,
    series_logits,
)
from kvmm.compress.rope import RopeConfig, RopeScaling, convert_layout
from kvmm.compress.triattention import TriAttentionPolicy, TriAttentionScorer, default_offsets

__all__ = [
    "RopeConfig",
    "RopeScaling",
    "convert_layout",
    "Calibration",
    "calibrate",
    "logit_curve",
    "mean_logit_by_distance",
    "pearson",
    "series_logits",
    "TriAttentionScorer",
    "TriAttentionPolicy",
    "default_offsets",
]
