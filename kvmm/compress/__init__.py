"""kvmm.compress: RoPE math, TriAttention calibration and scoring (docs/triattention.md), token-level
KV eviction scorers and the eviction helper (docs/vtoken.md).

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
from kvmm.compress.eviction import evict_to_budget
from kvmm.compress.rope import RopeConfig, RopeScaling, convert_layout
from kvmm.compress.scorers import (
    H2OScorer,
    KeyNormScorer,
    RandomScorer,
    ScissorhandsScorer,
    SnapKVScorer,
    StreamingLLMScorer,
    TokenScorerBase,
    select_victims,
)
from kvmm.compress.triattention import TriAttentionScorer, default_offsets
from kvmm.compress.triattention_policy import TriAttentionPolicy

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
    "TokenScorerBase",
    "H2OScorer",
    "ScissorhandsScorer",
    "SnapKVScorer",
    "StreamingLLMScorer",
    "KeyNormScorer",
    "RandomScorer",
    "select_victims",
    "evict_to_budget",
]
