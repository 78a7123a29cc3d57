"""TriAttentionPolicy: TriAttention as a TokenScorer with periodic top-B eviction across layers.

Each layer is scored with its own calibration (one :class:`TriAttentionScorer` per layer, z-scored
per query head, then reduced over the query heads of a KV group by max).  Those per-layer
``(kv_heads, n)`` scores then choose the kept tokens by one documented *aggregation*:

===============  =================================================================================
``"head"``       per KV head, the layers' scores averaged; each KV head keeps its own top-B, the
                 same tokens in every layer.  What the paper's runs do (default).
``"global"``     one score per token, the max over every (layer, KV head); one kept set for the
                 whole cache.  The official code's default.
``"layer"``      each layer keeps its own top-B (max over its KV heads), shared by its heads.
``"layer_head"`` every (layer, KV head) keeps its own top-B.
===============  =================================================================================

No layer's scores decide another layer's evictions except through the chosen aggregation.

Behaviour options, each with the official decode loop's setting available:

* ``protect_prompt`` (official: on): the tokens of a sequence's first ``observe`` call (its
  prompt / prefill) are never evicted; they count against the budget, and the rest of the budget
  goes to the best decode tokens.
* ``trigger``: ``"slack"`` (official) compresses when a (layer, KV head) holds ``budget +
  interval`` tokens, back down to ``budget``; ``"interval"`` compresses every ``interval`` decode
  steps once more than ``budget`` tokens are held.

Per-head aggregations keep different tokens in different heads.  :meth:`keep_mask` gives the
``(layers, kv_heads, live)`` kept mask for caches that keep heads apart; a token table
(``table=``), which evicts a token in every head at once, is told to evict a token only when no
(layer, KV head) holds it any more.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvmm._validate import as_count
from kvmm.compress.calibration import Calibration
from kvmm.compress.rope import as_vectors
from kvmm.compress.scorers import _live_token_indices
from kvmm.compress.triattention import TriAttentionScorer
from kvmm.errors import BadInputError, ShapeError, UnknownSequenceError

__all__ = ["TriAttentionPolicy", "AGGREGATIONS", "TRIGGERS"]

AGGREGATIONS = ("head", "global", "layer", "layer_head")
# the (layer, KV head) axes one selection group of each aggregation spans (reduced over)
_GROUP_AXES = {"head": (0,), "global": (0, 1), "layer": (1,), "layer_head": ()}
TRIGGERS = ("slack", "interval")


@dataclass
class TriAttentionPolicy:
    """TriAttention as a :class:`~kvmm.protocols.TokenScorer` with periodic top-B eviction.

    ``scorer``: one :class:`TriAttentionScorer` (a one-layer cache; keys ``(t, kv_heads, d)``) or
    a sequence of them, one per layer in layer order (keys ``(t, layers, kv_heads, d)``); build
    the latter with :meth:`from_calibration`.  ``observe(seq_id, keys=..., positions=None,
    post_rope=False)`` appends the sequence's new tokens (pre-RoPE keys, or post-RoPE ones which
    are un-rotated on arrival; positions default to the next ones) and counts them as decode
    steps.  ``scores(seq_id)`` scores the live tokens at the next position.  ``step(seq_id)``
    compresses when due (see ``trigger``), evicts tokens no head keeps through
    ``table.evict(seq_id, logical_positions)`` when a ``table`` is attached, and returns those
    logical positions.  Ties keep the more recent token.

    The settings of the earlier single-set policy are ``aggregation="global",
    protect_prompt=False, trigger="interval"``.
    """

    scorer: Any
    budget: int = 1024
    interval: int = 128
    table: Any = None
    aggregation: str = "head"
    protect_prompt: bool = True
    trigger: str = "slack"
    _seqs: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        scorers = [self.scorer] if isinstance(self.scorer, TriAttentionScorer) else list(self.scorer) \
            if isinstance(self.scorer, (list, tuple)) else None
        if not scorers or not all(isinstance(s, TriAttentionScorer) for s in scorers):
            raise BadInputError(f"scorer must be a TriAttentionScorer or a non-empty list of them (one per layer), "
                                f"got {type(self.scorer).__name__}")
        heads = {s.num_heads for s in scorers}
        dims = {s.calibration.rope.head_dim for s in scorers}
        if len(heads) > 1 or len(dims) > 1:
            raise BadInputError(f"every layer's scorer must have the same heads and head_dim, got {heads} and {dims}")
        self._scorers = scorers
        self.budget = as_count(self.budget, "budget", minimum=1)
        self.interval = as_count(self.interval, "interval", minimum=1)
        if self.aggregation not in AGGREGATIONS:
            raise BadInputError(f"aggregation must be one of {AGGREGATIONS}, got {self.aggregation!r}")
        if self.trigger not in TRIGGERS:
            raise BadInputError(f"trigger must be one of {TRIGGERS}, got {self.trigger!r}")
        if not isinstance(self.protect_prompt, (bool, np.bool_)):
            raise BadInputError(f"protect_prompt must be a bool, got {self.protect_prompt!r}")
        if self.table is not None and not callable(getattr(self.table, "evict", None)):
            raise BadInputError("table must have an evict(seq_id, logical_positions) method")

    @classmethod
    def from_calibration(cls, calibration: Calibration, *, layers: Any = None, offsets: Any = None,
                         normalize: bool = True, norm_term: bool = True, **options: Any) -> TriAttentionPolicy:
        """One scorer per layer of ``calibration`` (or of ``layers``, in that order); ``options`` go to the policy."""
        if not isinstance(calibration, Calibration):
            raise BadInputError(f"calibration must be a Calibration, got {type(calibration).__name__}")
        chosen = range(calibration.num_layers) if layers is None else layers
        scorers = [TriAttentionScorer(calibration, layer=layer, offsets=offsets, normalize=normalize,
                                      norm_term=norm_term) for layer in chosen]
        return cls(scorers, **options)

    @property
    def num_layers(self) -> int:
        return len(self._scorers)

    @property
    def rope(self):
        return self._scorers[0].calibration.rope

    # ---------------------------------------------------------------- TokenScorer
    def observe(self, seq_id: int, *, keys: Any = None, positions: Any = None, post_rope: bool = False,
                attention: Any = None, **evidence: Any) -> None:
        """Append new tokens' keys (kvmm evidence convention); the first call is the prompt.

        ``keys``: ``(t, kv_heads, head_dim)`` for a one-layer policy, ``(t, layers, kv_heads,
        head_dim)`` for several layers.  ``attention`` (over all live tokens, new ones last) is not
        used for scoring, only checked: its last axis must cover the live tokens plus the new ones,
        and it must be finite.  Other evidence (``queries``, ...) is ignored.
        Runtime complexity: O(tokens * layers * kv_heads * head_dim) amortised (growable buffers).
        """
        state = self._seqs.get(seq_id)
        if attention is not None:
            _check_attention(attention, state.n if state is not None else 0,
                             0 if keys is None else as_vectors(keys).shape[0], seq_id)
        if keys is None:
            return  # nothing this scorer uses
        arr = self._as_keys(keys, state, seq_id)
        start = state.next_position if state is not None else 0
        pos = _as_positions(positions, arr.shape[0], start, seq_id)
        if post_rope and arr.shape[0]:
            t, layers, kv, d = arr.shape
            arr = self.rope.unapply(arr.reshape(t, layers * kv, d), pos).reshape(arr.shape)
        if state is None:
            state = self._seqs[seq_id] = _SequenceState(arr.shape[1:])
            state.append(arr, pos, prompt=self.protect_prompt)
        else:
            state.append(arr, pos, prompt=False)

    def scores(self, seq_id: int) -> np.ndarray:
        """One score per live token in logical order (higher = keep): the token's best aggregated
        score, ``+inf`` for protected prompt tokens (the TokenScorer contract), so that
        :func:`~kvmm.compress.evict_to_budget` never evicts them either."""
        state = self._state(seq_id)
        if state.n == 0:
            return np.zeros(0)
        grouped = self._aggregate(self.layer_scores(seq_id))
        out = grouped.reshape(-1, state.n).max(axis=0)
        out[state.prompt] = np.inf  # (prompt is all False unless protect_prompt)
        return out

    def layer_scores(self, seq_id: int) -> np.ndarray:
        """Each layer's own per-KV-head scores ``(layers, kv_heads, live)`` at the next position."""
        state = self._state(seq_id)
        return np.stack([s.kv_head_scores(state.keys[:, i], state.positions, now=state.next_position)
                         for i, s in enumerate(self._scorers)])

    def on_evict(self, seq_id: int, indices: Any) -> None:
        """Drop live-token ``indices`` (positions in the live order) from every head."""
        state = self._state(seq_id)
        idx = _live_token_indices(indices, state.n, "indices")
        keep = np.ones(state.n, dtype=bool)
        keep[idx] = False
        state.keep_only(np.flatnonzero(keep))

    def forget(self, seq_id: int) -> None:
        self._seqs.pop(seq_id, None)

    # ---------------------------------------------------------------- eviction
    def live_positions(self, seq_id: int) -> np.ndarray:
        """Logical positions of the tokens some (layer, KV head) still holds."""
        return self._state(seq_id).positions.copy()

    def keep_mask(self, seq_id: int) -> np.ndarray:
        """Which (layer, KV head) holds each live token: bool ``(layers, kv_heads, live)``."""
        return np.moveaxis(self._state(seq_id).held, 0, -1).copy()

    def due(self, seq_id: int) -> bool:
        """Whether :meth:`step` would compress now (see ``trigger``)."""
        state = self._state(seq_id)
        most = int(state.held.sum(axis=0).max()) if state.n else 0
        if self.trigger == "slack":
            return most >= self.budget + self.interval
        return state.steps_since >= self.interval and most > self.budget

    def step(self, seq_id: int) -> np.ndarray:
        """Compress the sequence if due; return the logical positions no head holds any more (int64).

        Runtime complexity: O(live * layers * heads * head_dim + live log live) when it compresses,
        O(live) otherwise.
        """
        if not self.due(seq_id):
            return np.zeros(0, dtype=np.int64)
        return self.compress(seq_id)

    def compress(self, seq_id: int, budget: int | None = None) -> np.ndarray:
        """Compress now to ``budget`` (default: the policy's) per selection group, whatever the trigger."""
        state = self._state(seq_id)
        b = self.budget if budget is None else as_count(budget, "budget", minimum=1)
        kept = self.select(seq_id, b)  # (live, layers, kv_heads)
        alive = kept.any(axis=(1, 2))  # held by some (layer, KV head)
        evicted = state.positions[~alive].copy()
        if self.table is not None and evicted.size:
            self.table.evict(seq_id, evicted)  # first: if the table refuses, our state is unchanged
        state.held = kept
        state.keep_only(np.flatnonzero(alive))
        state.steps_since = 0
        return evicted

    def select(self, seq_id: int, budget: int) -> np.ndarray:
        """The kept mask ``(live, layers, kv_heads)`` after keeping ``budget`` tokens per selection group.

        Prompt tokens (when protected) stay and count against the budget; only tokens a group
        still holds compete for it.
        """
        state = self._state(seq_id)
        budget = as_count(budget, "budget", minimum=1)
        groups = self._aggregate(self.layer_scores(seq_id))  # (groups, live)
        held = self._group_view(state.held)  # (groups, live)
        out = np.zeros_like(held)
        for g in range(groups.shape[0]):
            candidates = held[g] & ~state.prompt
            protected = held[g] & state.prompt
            room = max(budget - int(protected.sum()), 0)
            idx = np.flatnonzero(candidates)
            chosen = idx[_top_k(groups[g, idx], room)] if idx.size and room else idx[:0]
            out[g, chosen] = True
            out[g] |= protected
        return self._expand(out, state)

    def keep_per_head(self, seq_id: int, budget: int | None = None) -> np.ndarray:
        """Per-KV-head top-``budget`` live-token indices ``(kv_heads, budget)``, each row sorted.

        Scores: the layers' per-KV-head scores averaged (the ``"head"`` aggregation), ignoring
        prompt protection.  Raises :class:`BadInputError` when the budget exceeds the live tokens.
        """
        state = self._state(seq_id)
        b = self.budget if budget is None else as_count(budget, "budget", minimum=1)
        if b > state.n:
            raise BadInputError(f"budget {b} is larger than the {state.n} live tokens of sequence {seq_id}")
        per_head = self.layer_scores(seq_id).mean(axis=0)
        return np.stack([np.sort(_top_k(row, b)) for row in per_head])

    def check(self) -> None:
        """Assert every invariant of the per-sequence state (expensive; for tests)."""
        d = self.rope.head_dim
        for seq_id, st in self._seqs.items():
            # keys are (live, layers, kv_heads, head_dim); one position, prompt flag and held row per key
            assert st.keys.ndim == 4 and st.keys.shape[1] == self.num_layers and st.keys.shape[3] == d, seq_id
            assert 0 <= st.n <= st.key_buf.shape[0] == st.pos_buf.shape[0] == st.prompt_buf.shape[0], seq_id
            assert st.held.shape == (st.n,) + st.keys.shape[1:3], (seq_id, st.held.shape)
            # logical positions strictly increase (live tokens stay in logical order)
            assert np.all(np.diff(st.positions) > 0), seq_id
            # every live token lies before the next position to be decoded
            assert st.n == 0 or st.positions[-1] < st.next_position, seq_id
            # a live token is held by at least one (layer, KV head): otherwise it would be evicted
            assert st.n == 0 or st.held.reshape(st.n, -1).any(axis=1).all(), seq_id
            # held patterns follow the aggregation (same tokens in the heads of one selection group)
            groups = self._group_view(st.held)
            assert np.array_equal(self._expand(groups, st), st.held), seq_id
            # prompt tokens come first (the first observation) and are never evicted when protected
            assert np.all(np.diff(st.prompt.astype(np.int8)) <= 0), seq_id
            # the query heads split evenly over the KV heads; keys finite; step counter >= 0
            assert self._scorers[0].num_heads % st.keys.shape[2] == 0, seq_id
            assert np.all(np.isfinite(st.keys)) and st.steps_since >= 0, seq_id

    # ---------------------------------------------------------------- helpers
    def _aggregate(self, scores: np.ndarray) -> np.ndarray:
        """Layer scores ``(L, G, n)`` -> selection-group scores ``(groups, n)``: the mean over the
        layers (``"head"``) or the max over the (layer, KV head) axes a group spans."""
        reduce = np.mean if self.aggregation == "head" else np.max
        return _rows(reduce(scores, axis=_GROUP_AXES[self.aggregation]))

    def _group_view(self, held: np.ndarray) -> np.ndarray:
        """Held mask ``(n, L, G)`` -> per selection group ``(groups, n)`` (any head of the group)."""
        return _rows(np.moveaxis(held, 0, -1).any(axis=_GROUP_AXES[self.aggregation]))

    def _expand(self, groups: np.ndarray, state: _SequenceState) -> np.ndarray:
        """Per-group mask ``(groups, n)`` -> per-head mask ``(n, L, G)``."""
        layers, kv = state.keys.shape[1:3]
        n = groups.shape[1]
        axes = _GROUP_AXES[self.aggregation]
        kept_dims = [1 if axis in axes else size for axis, size in enumerate((layers, kv))]
        full = np.broadcast_to(groups.reshape(*kept_dims, n), (layers, kv, n))
        return np.ascontiguousarray(np.moveaxis(full, -1, 0))

    def _as_keys(self, keys: Any, state: _SequenceState | None, seq_id: int) -> np.ndarray:
        d = self.rope.head_dim
        arr = as_vectors(keys)
        if self.num_layers == 1 and arr.ndim in (2, 3):
            arr = arr[:, None] if arr.ndim == 3 else arr[:, None, None]  # (t, kv, d) or (t, d): one layer
        want = f"(tokens, layers={self.num_layers}, kv_heads, head_dim={d})" if self.num_layers > 1 else \
            f"(tokens, kv_heads, head_dim={d})"
        if arr.ndim != 4 or arr.shape[1] != self.num_layers or arr.shape[3] != d or arr.dtype.kind not in "fiu":
            raise ShapeError(f"keys must be {want} real, got {arr.shape} {arr.dtype}")
        kv = arr.shape[2]
        if kv == 0 or self._scorers[0].num_heads % kv:
            raise ShapeError(f"keys have {kv} KV heads; {self._scorers[0].num_heads} query heads must be a multiple")
        if state is not None and kv != state.keys.shape[2]:
            raise ShapeError(f"keys have {kv} KV heads but sequence {seq_id} has {state.keys.shape[2]}")
        arr = arr.astype(np.float64)
        if not np.all(np.isfinite(arr)):
            raise BadInputError("keys contain NaN or inf; expected finite key vectors")
        return arr

    def _state(self, seq_id: int) -> _SequenceState:
        try:
            return self._seqs[seq_id]
        except KeyError:
            raise UnknownSequenceError(f"sequence {seq_id} has not been observed; call observe(seq_id, keys=...) first") from None


class _SequenceState:
    """One sequence's live keys in growable buffers (amortised O(1) appends).

    ``key_buf[:n]`` (float64 ``(capacity, layers, kv_heads, head_dim)``, pre-RoPE), ``pos_buf[:n]``
    (int64 logical positions, increasing), ``prompt_buf[:n]`` (protected prompt tokens) and
    ``held`` (bool ``(n, layers, kv_heads)``: which heads still keep the token) in logical order.
    """

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.key_buf = np.zeros((16,) + tuple(shape))
        self.pos_buf = np.zeros(16, dtype=np.int64)
        self.prompt_buf = np.zeros(16, dtype=bool)
        self.held = np.zeros((0,) + tuple(shape[:2]), dtype=bool)
        self.n = 0
        self.next_position = 0
        self.steps_since = 0

    @property
    def keys(self) -> np.ndarray:
        return self.key_buf[: self.n]

    @property
    def positions(self) -> np.ndarray:
        return self.pos_buf[: self.n]

    @property
    def prompt(self) -> np.ndarray:
        return self.prompt_buf[: self.n]

    def append(self, keys: np.ndarray, positions: np.ndarray, prompt: bool) -> None:
        need = self.n + keys.shape[0]
        if need > self.key_buf.shape[0]:
            capacity = max(need, 2 * self.key_buf.shape[0])
            self.key_buf = _grow(self.key_buf, capacity, self.n)
            self.pos_buf = _grow(self.pos_buf, capacity, self.n)
            self.prompt_buf = _grow(self.prompt_buf, capacity, self.n)
        self.key_buf[self.n: need] = keys
        self.pos_buf[self.n: need] = positions
        self.prompt_buf[self.n: need] = prompt
        self.held = np.concatenate([self.held, np.ones((keys.shape[0],) + self.held.shape[1:], dtype=bool)])
        self.n = need
        if positions.size:
            self.next_position = int(positions[-1]) + 1
        self.steps_since += keys.shape[0]

    def keep_only(self, keep: np.ndarray) -> None:
        """Compact to the live indices ``keep`` (sorted)."""
        kept = keep.shape[0]
        self.key_buf[:kept] = self.key_buf[keep]
        self.pos_buf[:kept] = self.pos_buf[keep]
        self.prompt_buf[:kept] = self.prompt_buf[keep]
        self.held = self.held[keep]
        self.n = kept


def _rows(x: np.ndarray) -> np.ndarray:
    """``(..., n)`` -> ``(groups, n)``: the leading axes (none, or the unreduced layer / KV-head axes) as rows."""
    return x.reshape(int(np.prod(x.shape[:-1])), x.shape[-1])


def _grow(buf: np.ndarray, capacity: int, used: int) -> np.ndarray:
    out = np.zeros((capacity,) + buf.shape[1:], dtype=buf.dtype)
    out[:used] = buf[:used]
    return out


def _check_attention(attention: Any, live: int, new: int, seq_id: int) -> None:
    att = as_vectors(attention)
    if att.dtype.kind not in "biuf" or att.ndim == 0 or att.shape[-1] != live + new:
        raise ShapeError(f"attention must end in live + new = {live + new} tokens for sequence {seq_id}, "
                         f"got shape {att.shape}; call on_evict when tokens are evicted")
    if not np.isfinite(att).all():
        raise BadInputError("attention contains NaN or inf")


def _as_positions(positions: Any, n: int, start: int, seq_id: int) -> np.ndarray:
    if positions is None:
        return np.arange(start, start + n, dtype=np.int64)
    pos = np.asarray(positions)
    if pos.ndim == 0:
        pos = pos.reshape(1)
    if pos.dtype.kind not in "iu" or pos.shape != (n,):
        raise ShapeError(f"positions must be {n} integers, got {pos.shape} {pos.dtype}")
    if pos.dtype.kind == "u" and pos.size and pos.max() > np.iinfo(np.int64).max:  # would wrap negative
        raise BadInputError(f"positions must be < 2**63, got {pos.max()}")
    pos = pos.astype(np.int64)
    if pos.size and (pos[0] < start or np.any(np.diff(pos) <= 0)):
        raise BadInputError(f"positions must increase and start at >= {start} for sequence {seq_id}, got {pos[:4]}...")
    return pos


def _top_k(scores: np.ndarray, k: int) -> np.ndarray:
    # Stable: among equal scores the later (more recent) token is kept.
    order = np.lexsort((-np.arange(scores.shape[0]), -scores))
    return order[:k]
