"""kvmm.compress: token-level KV eviction scorers and the eviction helper (docs/vtoken.md)."""

from kvmm.compress.eviction import evict_to_budget
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

__all__ = [
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
