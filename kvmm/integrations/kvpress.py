"""Any kvmm token scorer as a kvpress press (tested against ``kvpress==0.5.5``).

::

    from kvmm.compress import SnapKVScorer
    from kvmm.integrations.kvpress import KvmmPress

    with KvmmPress(SnapKVScorer(window_size=16), compression_ratio=0.5)(model):
        model.generate(input_ids, max_new_tokens=20)

:class:`KvmmPress` is a kvpress ``ScorerPress``: after the prefill, in every attention layer,
kvpress asks ``score(module, hidden_states, keys, values, attentions, kwargs)`` for a
``(batch, kv_heads, tokens)`` tensor (higher = keep) and keeps each head's top
``(1 - compression_ratio)`` share of the tokens.  The press turns the layer's cache into kvmm's
evidence (:class:`~kvmm.protocols.TokenScorer`) for each sequence of the batch:

* ``keys``: ``(tokens, kv_heads, head_dim)`` *pre-RoPE* (the cached keys un-rotated with the
  model's RoPE, :func:`kvmm.compress.hf.rope_from_config`), ``positions``: ``0 .. tokens-1``;
* ``attention``: ``(heads, queries, tokens)`` probabilities of the last ``attention_queries``
  queries (the layer's own attention weights when the model returns them, else recomputed from
  the layer's query projection and RoPE with a causal mask, as kvpress's SnapKV does); only for
  scorers whose ``requires`` names it, or when ``attention_queries`` is set.

``per_head=True`` (default) scores each KV head on its own evidence (its keys, the attention of
its query group), like kvpress's presses; ``False`` scores every token once and gives all heads
the same score.  A :class:`~kvmm.compress.TriAttentionScorer` (or a ``TriAttentionPolicy``'s
scorer for the layer: one, or one per layer) is used through its per-KV-head
``kv_head_scores`` on the post-RoPE keys; give one per layer (a list, or
:meth:`KvmmPress.triattention` with a per-layer :class:`~kvmm.compress.Calibration`).  Of a
``TriAttentionPolicy`` only those scorers are used: kvpress cannot apply its aggregation (other
than ``"layer_head"``), budget, prompt protection, trigger or table, and the press says so in a
``UserWarning`` (:mod:`kvmm.integrations._press_settings`).

Importing this module imports kvpress (and so torch and transformers); ``import kvmm`` never does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import count
from typing import Any

import numpy as np

try:
    import torch
    from kvpress import ScorerPress
    from kvpress.utils import get_prerope_query_states
    from transformers.models.llama.modeling_llama import repeat_kv, rotate_half
except ImportError as exc:  # pragma: no cover - exercised only without kvpress
    raise ImportError("kvmm.integrations.kvpress needs kvpress (tested with kvpress==0.5.5, which requires "
                      "transformers>=4.56,<5.3): pip install torch==2.13.0 'kvmm[kvpress]' "
                      f"(see README, 'Use with kvpress'); import failed with: {exc}") from exc

from kvmm._validate import as_count, as_fraction
from kvmm.compress import TriAttentionPolicy, TriAttentionScorer
from kvmm.compress.calibration import Calibration
from kvmm.compress.hf import rope_from_config
from kvmm.errors import BadInputError, ShapeError
from kvmm.integrations._press_settings import warn_unhonoured_policies
from kvmm.protocols import TokenScorer

__all__ = ["KvmmPress"]

_sequence_ids = count(1 << 40)  # scratch sequence ids, far from any a caller would pick


@dataclass(init=False)
class KvmmPress(ScorerPress):
    """A kvpress ``ScorerPress`` scoring tokens with a kvmm scorer.

    ``scorer``: a :class:`~kvmm.protocols.TokenScorer` (one object for every layer; each call
    scores fresh scratch sequences and forgets them), a :class:`~kvmm.compress.TriAttentionScorer`,
    or a list / dict of either, indexed by layer.  ``compression_ratio``: share of tokens pruned.
    ``per_head``: see the module docstring.  ``attention_queries``: how many of the last queries'
    attention rows to pass (default: the scorer's ``window_size`` when it has one, else all).

    Runtime complexity: per layer, O(tokens * kv_heads * head_dim) for the keys plus
    O(heads * attention_queries * tokens * head_dim) when attention is needed and recomputed,
    plus the scorer's own cost (once per KV head with ``per_head``).
    """

    scorer: Any = None
    per_head: bool = True
    attention_queries: int | None = None

    def __init__(self, scorer: Any, compression_ratio: float = 0.0, *, per_head: bool = True,
                 attention_queries: int | None = None) -> None:
        self.scorer = scorer
        self.compression_ratio = compression_ratio
        self.per_head = per_head
        self.attention_queries = attention_queries
        self.__post_init__()

    def __post_init__(self) -> None:
        self.compression_ratio = as_fraction(self.compression_ratio, "compression_ratio", include_zero=True)
        if self.compression_ratio >= 1.0:
            raise BadInputError(f"compression_ratio must be in [0, 1) (share pruned), got {self.compression_ratio}")
        layers = self._given_scorers()
        if not layers:
            raise BadInputError("scorer: got an empty collection; expected one scorer or one per layer")
        for s in layers:
            if not isinstance(s, (TokenScorer, TriAttentionScorer)):
                raise BadInputError(f"scorer must be a kvmm TokenScorer (observe, scores) or a TriAttentionScorer, "
                                    f"or a list/dict of them per layer; got {type(s).__name__}")
        warn_unhonoured_policies([s for s in layers if isinstance(s, TriAttentionPolicy)], stacklevel=4)
        if not isinstance(self.per_head, bool):
            raise BadInputError(f"per_head must be True or False, got {self.per_head!r}")
        if self.attention_queries is not None:
            self.attention_queries = as_count(self.attention_queries, "attention_queries", minimum=1)
        self._rope = None

    @classmethod
    def triattention(cls, calibration: Calibration, compression_ratio: float = 0.0, **scorer_kwargs: Any) -> KvmmPress:
        """One :class:`~kvmm.compress.TriAttentionScorer` per layer of ``calibration``."""
        if not isinstance(calibration, Calibration):
            raise BadInputError(f"calibration must be a Calibration, got {type(calibration).__name__}")
        scorers = [TriAttentionScorer(calibration, layer=i, **scorer_kwargs) for i in range(calibration.num_layers)]
        return cls(scorers, compression_ratio)

    def post_init_from_model(self, model: Any) -> None:
        self._rope = rope_from_config(model.config)
        if isinstance(self.scorer, Sequence):
            layers = model.config.num_hidden_layers
            if len(self.scorer) != layers:
                raise BadInputError(f"got {len(self.scorer)} per-layer scorers for a model of {layers} layers")
        for s in self._given_scorers():  # a dict's and a TriAttentionPolicy's scorers too
            inner = s.scorer if isinstance(s, TriAttentionPolicy) else s
            for t in (inner if isinstance(inner, Sequence) else [inner]):
                if isinstance(t, TriAttentionScorer):
                    t.calibration.check_compatible(num_layers=model.config.num_hidden_layers)

    def _given_scorers(self) -> list:
        """The scorer as given: one, or the per-layer list's / dict's entries."""
        if isinstance(self.scorer, Mapping):
            return list(self.scorer.values())
        return list(self.scorer) if isinstance(self.scorer, Sequence) else [self.scorer]

    def score(self, module: Any, hidden_states: Any, keys: Any, values: Any, attentions: Any, kwargs: dict) -> Any:
        scorer = self._layer_scorer(module.layer_idx)
        batch, kv_heads, n, head_dim = keys.shape
        k = keys.detach().to(torch.float64).permute(0, 2, 1, 3).cpu().numpy()  # (batch, n, kv_heads, d)
        if isinstance(scorer, TriAttentionScorer):
            out = np.stack([scorer.kv_head_scores(k[b], now=n, post_rope=True) for b in range(batch)])
            return torch.as_tensor(out, dtype=torch.float32, device=keys.device)
        rope = self._rope if self._rope is not None else rope_from_config(module.config)
        positions = np.arange(n, dtype=np.int64)
        # (n, batch, kv_heads, d) so the tokens lead, as RopeConfig.unapply expects
        pre_rope = rope.unapply(k.transpose(1, 0, 2, 3), positions).transpose(1, 0, 2, 3)
        attention = None
        if self.attention_queries is not None or "attention" in getattr(scorer, "requires", ()):
            attention = self._attention(scorer, module, hidden_states, keys, attentions, kwargs)
        group = module.config.num_attention_heads // kv_heads
        out = np.empty((batch, kv_heads, n), dtype=np.float64)
        for b in range(batch):
            if self.per_head:
                for h in range(kv_heads):
                    att = None if attention is None else attention[b, h * group:(h + 1) * group]
                    out[b, h] = _score_once(scorer, pre_rope[b, :, h:h + 1], positions, att)
            else:
                out[b] = _score_once(scorer, pre_rope[b], positions, None if attention is None else attention[b])
        # kvpress keeps the top-k per head; +inf (protected) stays the largest value in float32.
        return torch.as_tensor(out, dtype=torch.float32, device=keys.device)

    def _layer_scorer(self, layer: int) -> Any:
        if isinstance(self.scorer, Mapping):
            if layer not in self.scorer:
                raise BadInputError(f"no scorer for layer {layer}; the dict has layers {sorted(self.scorer)}")
            scorer = self.scorer[layer]
        elif isinstance(self.scorer, Sequence):
            scorer = self.scorer[layer]
        else:
            scorer = self.scorer
        # A TriAttentionPolicy scores with its TriAttentionScorer (one, or one per layer): used
        # directly, per KV head.
        if isinstance(scorer, TriAttentionPolicy):
            inner = scorer.scorer
            if isinstance(inner, TriAttentionScorer):
                return inner
            if layer >= len(inner):
                raise BadInputError(f"the TriAttentionPolicy has {len(inner)} layer scorers; no scorer for layer {layer}")
            return inner[layer]
        return scorer

    def _attention(self, scorer: Any, module: Any, hidden_states: Any, keys: Any, attentions: Any,
                   kwargs: dict) -> np.ndarray:
        """Attention probabilities of the last queries, ``(batch, heads, queries, tokens)`` float64."""
        n = keys.shape[2]
        queries = self.attention_queries or getattr(scorer, "window_size", None) or n
        queries = min(int(queries), hidden_states.shape[1])
        if attentions is not None:
            return attentions[..., -queries:, :].detach().to(torch.float64).cpu().numpy()
        q = get_prerope_query_states(module, hidden_states[:, -queries:])
        cos, sin = kwargs["position_embeddings"]
        cos, sin = cos[:, -queries:].unsqueeze(1), sin[:, -queries:].unsqueeze(1)
        q = q * cos + rotate_half(q) * sin
        k = repeat_kv(keys, module.config.num_attention_heads // keys.shape[1])
        logits = torch.matmul(q.to(torch.float64), k.to(torch.float64).transpose(2, 3)) / math.sqrt(module.head_dim)
        causal = torch.ones(queries, n, dtype=torch.bool, device=keys.device).triu(n - queries + 1)
        logits = logits.masked_fill(causal, float("-inf"))
        return torch.softmax(logits, dim=-1).cpu().numpy()


def _score_once(scorer: Any, keys: np.ndarray, positions: np.ndarray, attention: np.ndarray | None) -> np.ndarray:
    """Scores of one scratch sequence: observe all its tokens at once, read, forget."""
    seq_id = next(_sequence_ids)
    evidence = {"keys": keys, "positions": positions}
    if attention is not None:
        evidence["attention"] = attention
    try:
        scorer.observe(seq_id, **evidence)
        scores = np.asarray(scorer.scores(seq_id), dtype=np.float64)
    finally:
        if hasattr(scorer, "forget"):
            scorer.forget(seq_id)
    if scores.shape != (keys.shape[0],):
        raise ShapeError(f"{type(scorer).__name__}.scores returned shape {scores.shape}; expected ({keys.shape[0]},)")
    return scores
