"""kvmm.compress: RoPE math, TriAttention calibration and scoring (docs/triattention.md), token-level
KV eviction scorers and the eviction helper (docs/vtoken.md).

Imports are lazy, so ``import kvmm.compress`` (and ``kvmm calibrate --help``: :mod:`kvmm.cli.calibrate`)
loads neither numba nor the kernels; the first use of a name loads its module.  torch is imported only by :mod:`kvmm.compress.hf`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvmm._lazy import lazy_exports

_LAZY = {
    # RoPE math
    "RopeConfig": "kvmm.compress.rope",
    "RopeScaling": "kvmm.compress.rope",
    "convert_layout": "kvmm.compress.rope",
    # TriAttention calibration and measurements
    "Calibration": "kvmm.compress.calibration",
    "calibrate": "kvmm.compress.calibration",
    "logit_curve": "kvmm.compress.calibration",
    "mean_logit_by_distance": "kvmm.compress.calibration",
    "pearson": "kvmm.compress.calibration",
    "series_logits": "kvmm.compress.calibration",
    # TriAttention scoring
    "TriAttentionScorer": "kvmm.compress.triattention",
    "default_offsets": "kvmm.compress.triattention",
    "TriAttentionPolicy": "kvmm.compress.triattention_policy",
    # token-level eviction scorers (the TokenScorer Protocol)
    "TokenScorerBase": "kvmm.compress.scorers",
    "H2OScorer": "kvmm.compress.scorers",
    "ScissorhandsScorer": "kvmm.compress.scorers",
    "SnapKVScorer": "kvmm.compress.scorers",
    "StreamingLLMScorer": "kvmm.compress.scorers",
    "KeyNormScorer": "kvmm.compress.scorers",
    "RandomScorer": "kvmm.compress.scorers",
    "select_victims": "kvmm.compress.scorers",
    # the eviction helper
    "evict_to_budget": "kvmm.compress.eviction",
}

__all__ = list(_LAZY)

if TYPE_CHECKING:  # what editors and type checkers see; at run time each name loads on first use
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

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
