"""Token-level KV eviction scorers: H2O, Scissorhands, SnapKV, StreamingLLM, key norm, random.

Each scorer is a small dataclass (kvpress style: configuration fields validated in
``__post_init__``) that implements the :class:`~kvmm.protocols.TokenScorer` Protocol on top of
:class:`TokenScorerBase`.  The base keeps per-sequence state as a few numpy arrays whose last
axis runs over the sequence's live tokens in logical order, grows them when tokens arrive,
deletes entries when tokens are evicted (:meth:`TokenScorerBase.on_evict`), validates evidence,
and does the top-k (:meth:`TokenScorerBase.victims`).  A new scorer writes two methods::

    @dataclass
    class KeyNormScorer(TokenScorerBase):
        requires: ClassVar[tuple[str, ...]] = ("keys",)

        def new_tokens(self):
            return {"score": np.zeros(0)}

        def update(self, state, tokens, n_new, keys, **_):  # keys of the n_new new tokens
            if n_new:  # low-norm keys draw attention: keep them
                tokens["score"][-n_new:] = -np.linalg.norm(keys, axis=-1).mean(axis=1)

        def score(self, state, tokens):
            return tokens["score"].copy()

Evidence (keyword arguments of ``observe``), the convention every kvmm scorer follows:

* ``attention``: attention probabilities over *all* the sequence's live tokens in logical order
  (new tokens at the end): ``(heads, queries, live)``, ``(queries, live)`` or ``(live,)``;
  normalised by the base to ``(heads, queries, live)`` float64.
* ``keys``: the keys of the *new* tokens only, ``(new, kv_heads, head_dim)`` or ``(new, head_dim)``
  (normalised to ``(new, kv_heads, head_dim)``), as a decode step produces them.
* ``positions``: original positions of the *new* tokens, ``(new,)`` (``TokenTable.positions``).
* ``queries``: ``(heads, queries, head_dim)``, passed through (TriAttention-style scorers).

The number of new tokens is ``live - tracked`` from ``attention`` when given, else the length of
``keys``/``positions``; all that are given must agree.

All scores are float64, higher = keep; protected tokens (recent window, sinks) score ``+inf``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from kvmm._validate import as_array, as_count
from kvmm.compress.rope import as_vectors
from kvmm.errors import BadInputError, DTypeError, ShapeError, UnknownSequenceError

__all__ = [
    "TokenScorerBase",
    "H2OScorer",
    "ScissorhandsScorer",
    "SnapKVScorer",
    "StreamingLLMScorer",
    "KeyNormScorer",
    "RandomScorer",
    "select_victims",
]


@dataclass
class TokenScorerBase:
    """Per-sequence state, evidence validation and top-k for token scorers.

    Subclasses set ``requires`` (evidence names they need) and implement
    ``update(state, tokens, n_new, **evidence)`` (fold one observation into the state: ``tokens``
    maps names to arrays whose last axis is the live tokens, already grown by ``n_new`` zero
    entries at the end; ``state`` is a free dict holding ``seq_id``; ``positions`` is always passed, defaulting to
    the positions after the last one seen) and ``score(state, tokens) -> ndarray``.  Optionally
    ``new_tokens()`` returns the per-token arrays of a fresh sequence (default: none).
    """

    requires: ClassVar[tuple[str, ...]] = ()
    seq_state: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    # -- Protocol ---------------------------------------------------------------------------
    def observe(self, seq_id: int, **evidence: Any) -> None:
        """Fold one step's evidence for ``seq_id`` into its state.  O(evidence size)."""
        missing = [name for name in self.requires if evidence.get(name) is None]
        if missing:
            raise BadInputError(f"{type(self).__name__}.observe needs evidence {missing}; got {sorted(evidence)}")
        ev, n_attention, n_new = _normalise_evidence(evidence)
        state = self.seq_state.get(_seq_key(seq_id))
        if state is None:
            state = {"n": 0, "next": 0, "tokens": self.new_tokens(), "state": {"seq_id": seq_id}}
        old = state["n"]
        if n_attention is not None:
            if n_attention < old:
                raise BadInputError(
                    f"attention covers {n_attention} live tokens of sequence {seq_id} but the scorer tracks {old}; "
                    "call on_evict(seq_id, live_indices) when tokens are evicted")
            if n_new is not None and n_new != n_attention - old:
                raise ShapeError(f"keys/positions describe {n_new} new tokens but attention adds "
                                 f"{n_attention - old} to the {old} tracked; expected the same new tokens")
            n_new = n_attention - old
        n_new = 0 if n_new is None else n_new
        if ev.get("positions") is None:
            ev["positions"] = np.arange(state["next"], state["next"] + n_new, dtype=np.int64)
        tokens = {k: _grow(v, old + n_new) for k, v in state["tokens"].items()}
        self.update(state["state"], tokens, n_new, **ev)
        state["tokens"] = tokens
        state["n"] = old + n_new
        if n_new:
            state["next"] = int(ev["positions"][-1]) + 1
        self.seq_state[seq_id] = state

    def scores(self, seq_id: int) -> np.ndarray:
        """Scores over the sequence's live tokens in logical order (float64, higher = keep)."""
        state = self._state(seq_id)
        out = np.asarray(self.score(state["state"], state["tokens"]), dtype=np.float64)
        if out.shape != (state["n"],):
            raise ShapeError(f"{type(self).__name__}.score returned shape {out.shape}; expected ({state['n']},)")
        return out

    def forget(self, seq_id: int) -> None:
        """Drop a finished sequence's state (no error if unknown)."""
        self.seq_state.pop(_seq_key(seq_id), None)

    def on_evict(self, seq_id: int, live_indices) -> None:
        """Delete the entries of evicted tokens (indices into the live tokens before eviction)."""
        state = self._state(seq_id)
        idx = _live_token_indices(live_indices, state["n"], "live_indices")
        state["tokens"] = {k: np.delete(v, idx, axis=-1) for k, v in state["tokens"].items()}
        state["n"] -= idx.size
        self.evicted(state["state"], idx)

    # -- top-k ------------------------------------------------------------------------------
    def victims(self, seq_id: int, budget: int) -> np.ndarray:
        """Live-token indices to evict so that ``budget`` remain (lowest scores, older first on ties)."""
        return select_victims(self.scores(seq_id), budget)

    # -- subclass hooks ---------------------------------------------------------------------
    def new_tokens(self) -> dict[str, np.ndarray]:
        return {}

    def update(self, state: dict, tokens: dict, n_new: int, **evidence: Any) -> None:
        raise NotImplementedError

    def score(self, state: dict, tokens: dict) -> np.ndarray:
        raise NotImplementedError

    def evicted(self, state: dict, live_indices: np.ndarray) -> None:
        """Hook: tokens were evicted (per-token arrays are already trimmed)."""

    def _state(self, seq_id: int) -> dict:
        state = self.seq_state.get(_seq_key(seq_id))
        if state is None:
            raise UnknownSequenceError(f"{type(self).__name__} has no state for sequence {seq_id}; call observe first")
        return state


def select_victims(scores: np.ndarray, budget: int) -> np.ndarray:
    """Indices (sorted) of the ``len(scores) - budget`` lowest scores; ties evict earlier tokens.

    Runtime complexity: O(n log n).
    """
    budget = as_count(budget, "budget")
    scores = np.asarray(scores)
    if scores.dtype.kind not in "biuf" or scores.ndim != 1:
        raise ShapeError(f"scores must be a 1-D numeric array (one per live token), got {scores.dtype} {scores.shape}")
    scores = scores.astype(np.float64, copy=False)
    if np.isnan(scores).any():  # argsort would rank NaN above everything, silently keeping it
        raise BadInputError(f"scores contain NaN (first at index {int(np.flatnonzero(np.isnan(scores))[0])}); "
                            f"expected numbers (+inf protects a token)")
    drop = scores.shape[0] - budget
    if drop <= 0:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(scores, kind="stable")
    return np.sort(order[:drop]).astype(np.int64)


def _protect_recent(scores: np.ndarray, window: int) -> np.ndarray:
    if window > 0:
        scores[max(scores.shape[0] - window, 0):] = np.inf
    return scores


@dataclass
class H2OScorer(TokenScorerBase):
    """Heavy-Hitter Oracle: accumulated attention each token received, plus a recent window.

    Score = sum over observed queries and heads of the attention a token received; the last
    ``recent_window`` tokens are protected.  (Zhang et al., 2023.)
    """

    recent_window: int = 32
    requires: ClassVar[tuple[str, ...]] = ("attention",)

    def __post_init__(self) -> None:
        self.recent_window = as_count(self.recent_window, "recent_window")

    def new_tokens(self):
        return {"acc": np.zeros(0)}

    def update(self, state, tokens, n_new, attention=None, **_):
        tokens["acc"] += attention.sum(axis=(0, 1))

    def score(self, state, tokens):
        return _protect_recent(tokens["acc"].copy(), self.recent_window)


@dataclass
class ScissorhandsScorer(TokenScorerBase):
    """Scissorhands: persistence of importance over the last ``history_window`` observations.

    A token is *important* in an observation when the attention it received (mean over heads
    and queries) is at least ``threshold`` times the uniform share ``1 / live``; its score is how
    many of the last ``history_window`` observations found it important (newer tokens count the
    observations they were present for).  The last ``recent_window`` tokens are protected.
    (Liu et al., 2023.)
    """

    history_window: int = 8
    recent_window: int = 32
    threshold: float = 1.0
    requires: ClassVar[tuple[str, ...]] = ("attention",)

    def __post_init__(self) -> None:
        self.history_window = as_count(self.history_window, "history_window", minimum=1)
        self.recent_window = as_count(self.recent_window, "recent_window")
        if not (isinstance(self.threshold, (int, float)) and math.isfinite(self.threshold) and self.threshold >= 0):
            raise BadInputError(f"threshold must be a finite number >= 0, got {self.threshold!r}")

    def new_tokens(self):
        return {"hits": np.zeros((self.history_window, 0), dtype=np.uint8)}

    def update(self, state, tokens, n_new, attention=None, **_):
        cursor = state.get("cursor", 0)  # ring buffer row of this observation
        mean = attention.mean(axis=(0, 1))
        n = mean.shape[0]
        tokens["hits"][cursor] = mean >= self.threshold / max(n, 1)
        state["cursor"] = (cursor + 1) % self.history_window

    def score(self, state, tokens):
        return _protect_recent(tokens["hits"].sum(axis=0, dtype=np.float64), self.recent_window)


@dataclass
class SnapKVScorer(TokenScorerBase):
    """SnapKV: votes from an observation window of the last queries, smoothed by pooling.

    Score = attention from the last ``window_size`` queries, summed over them and the heads,
    then pooled over neighbouring tokens (``pooling`` "max" or "avg", odd ``kernel_size``) so
    that kept tokens come with their context; the window's own tokens (the last
    ``window_size``) are protected.  Scores are recomputed at every observation.  (Li et al., 2024.)
    """

    window_size: int = 32
    kernel_size: int = 7
    pooling: str = "max"
    requires: ClassVar[tuple[str, ...]] = ("attention",)

    def __post_init__(self) -> None:
        self.window_size = as_count(self.window_size, "window_size", minimum=1)
        self.kernel_size = as_count(self.kernel_size, "kernel_size", minimum=1)
        if self.kernel_size % 2 == 0:
            raise BadInputError(f"kernel_size must be odd (centred pooling), got {self.kernel_size}")
        if self.pooling not in ("max", "avg"):
            raise BadInputError(f"pooling must be 'max' or 'avg', got {self.pooling!r}")

    def new_tokens(self):
        return {"votes": np.zeros(0)}

    def update(self, state, tokens, n_new, attention=None, **_):
        votes = attention[:, -self.window_size:, :].sum(axis=(0, 1))
        tokens["votes"] = _pool1d(votes, self.kernel_size, self.pooling)

    def score(self, state, tokens):
        return _protect_recent(tokens["votes"].copy(), self.window_size)


@dataclass
class StreamingLLMScorer(TokenScorerBase):
    """StreamingLLM: attention sinks plus the most recent tokens.

    Score = original position (newer = higher); the first ``sink_tokens`` positions ever seen are
    protected, so the top-k keeps the sinks and a recent window.  Uses only ``positions`` (or
    the count of new tokens).  (Xiao et al., 2024.)
    """

    sink_tokens: int = 4

    def __post_init__(self) -> None:
        self.sink_tokens = as_count(self.sink_tokens, "sink_tokens")

    def new_tokens(self):
        return {"pos": np.zeros(0)}

    def update(self, state, tokens, n_new, positions=None, **_):
        if n_new:
            tokens["pos"][-n_new:] = positions
            state.setdefault("first", float(positions[0]))

    def score(self, state, tokens):
        out = tokens["pos"].copy()
        out[out < state.get("first", 0.0) + self.sink_tokens] = np.inf
        return out


@dataclass
class KeyNormScorer(TokenScorerBase):
    """Key norm: tokens whose keys have a *low* L2 norm draw attention, so keep those.

    Score = minus the key norm averaged over KV heads.  (Devoto et al., 2024.)
    """

    requires: ClassVar[tuple[str, ...]] = ("keys",)

    def new_tokens(self):
        return {"score": np.zeros(0)}

    def update(self, state, tokens, n_new, keys=None, **_):
        if n_new:
            tokens["score"][-n_new:] = -np.linalg.norm(keys, axis=-1).mean(axis=1)

    def score(self, state, tokens):
        return tokens["score"].copy()


@dataclass
class RandomScorer(TokenScorerBase):
    """Random eviction: each token draws a fixed random priority when it first appears.

    Independent of evidence; reproducible per sequence (the generator of a sequence is seeded
    with ``(seed, seq_id)``); the last ``recent_window`` tokens are protected.
    """

    seed: int = 0
    recent_window: int = 0

    def __post_init__(self) -> None:
        self.seed = as_count(self.seed, "seed")
        self.recent_window = as_count(self.recent_window, "recent_window")

    def new_tokens(self):
        return {"priority": np.zeros(0)}

    def update(self, state, tokens, n_new, **_):
        if "rng" not in state:
            state["rng"] = np.random.default_rng((self.seed, state["seq_id"] % 2**63))
        if n_new:
            tokens["priority"][-n_new:] = state["rng"].random(n_new)

    def score(self, state, tokens):
        return _protect_recent(tokens["priority"].copy(), self.recent_window)


# ---------------------------------------------------------------------------------- helpers
def _seq_key(seq_id: Any) -> int:
    """``seq_id`` as the int key of ``seq_state`` (an integer that fits int64, else a KvmmError)."""
    return as_count(seq_id, "seq_id", minimum=-(2**63), maximum=2**63 - 1)


def _live_token_indices(x: Any, n: int, name: str) -> np.ndarray:
    """Indices of tokens to evict among ``n`` live ones: distinct integers in ``[0, n)`` (int64),
    else a :class:`~kvmm.errors.KvmmError` (a repeat is a caller's bug, not one eviction)."""
    idx = _as_indices(x, name)
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise BadInputError(f"{name} must lie in [0, {n}), got [{idx.min()}, {idx.max()}]")
    if np.unique(idx).size != idx.size:
        raise BadInputError(f"{name} repeats an index; expected distinct indices")
    return idx


def _as_indices(x: Any, name: str) -> np.ndarray:
    """Integer indices as int64 (raveled); floats and booleans (a mask is not a list of indices) raise."""
    idx = as_array(x, name)
    if idx.size == 0:
        return np.zeros(0, dtype=np.int64)
    if idx.dtype.kind not in "iu":
        hint = " (for a boolean mask pass np.flatnonzero(mask))" if idx.dtype.kind == "b" else ""
        raise DTypeError(f"{name} must be integer indices, got dtype {idx.dtype}{hint}")
    if idx.dtype.kind == "u" and idx.max() > np.iinfo(np.int64).max:
        raise BadInputError(f"{name} has index {idx.max()}; expected live-token indices")
    return idx.astype(np.int64).ravel()


def _grow(arr: np.ndarray, n: int) -> np.ndarray:
    """``arr`` with its last axis zero-padded to ``n``."""
    extra = n - arr.shape[-1]
    if extra == 0:
        return arr
    pad = [(0, 0)] * (arr.ndim - 1) + [(0, extra)]
    return np.pad(arr, pad)


def _normalise_evidence(evidence: dict) -> tuple[dict, int | None, int | None]:
    """Validate evidence; return canonical arrays, live tokens per ``attention``, new tokens per keys/positions."""
    out: dict[str, Any] = {}
    n_attention = None
    n_new = None

    def new_count(name, m):
        nonlocal n_new
        if n_new is not None and m != n_new:
            raise ShapeError(f"evidence {name} describes {m} new tokens but other evidence {n_new}; expected the same")
        n_new = m

    for name, value in evidence.items():
        if value is None:
            continue
        arr = as_vectors(value)  # also bfloat16 / GPU torch tensors; ragged lists raise ShapeError
        if name in ("attention", "keys", "queries", "positions") and arr.dtype.kind not in "biuf":
            raise DTypeError(f"evidence {name} must be numeric, got dtype {arr.dtype}")
        if name == "attention":
            if arr.ndim not in (1, 2, 3):
                raise ShapeError(f"attention must be (live,), (queries, live) or (heads, queries, live), got {arr.shape}")
            arr = arr.astype(np.float64).reshape((1,) * (3 - arr.ndim) + arr.shape)
            n_attention = arr.shape[-1]
        elif name == "keys":
            if arr.ndim not in (2, 3):
                raise ShapeError(f"keys must be (new, head_dim) or (new, kv_heads, head_dim), got {arr.shape}")
            arr = arr.astype(np.float64)
            arr = arr[:, None, :] if arr.ndim == 2 else arr
            new_count(name, arr.shape[0])
        elif name == "queries":
            if arr.ndim != 3:
                raise ShapeError(f"queries must be (heads, queries, head_dim), got {arr.shape}")
            arr = arr.astype(np.float64)
        elif name == "positions":
            arr = arr.reshape(1) if arr.ndim == 0 else arr
            if arr.dtype.kind not in "iu" or arr.ndim != 1:
                raise ShapeError(f"positions must be a 1-D integer array over the new tokens, got {arr.dtype} {arr.shape}")
            if arr.dtype.kind == "u" and arr.size and arr.max() > np.iinfo(np.int64).max:  # would wrap negative
                raise BadInputError(f"positions must be < 2**63, got {arr.max()}")
            arr = arr.astype(np.int64)
            new_count(name, arr.shape[0])
        if isinstance(arr, np.ndarray) and arr.dtype.kind == "f" and not np.isfinite(arr).all():
            raise BadInputError(f"evidence {name} contains NaN or infinity; expected finite values")
        out[name] = arr
    return out, n_attention, n_new


def _pool1d(x: np.ndarray, kernel: int, mode: str) -> np.ndarray:
    """Centred 1-D pooling with edge windows truncated (like ``max_pool1d(padding=k//2)``)."""
    if kernel == 1 or x.size == 0:
        return x.copy()
    half = kernel // 2
    padded = np.pad(x, half, constant_values=-np.inf if mode == "max" else 0.0)
    windows = np.lib.stride_tricks.sliding_window_view(padded, kernel)
    if mode == "max":
        return windows.max(axis=1)
    present = np.lib.stride_tricks.sliding_window_view(np.pad(np.ones_like(x), half), kernel).sum(axis=1)
    return windows.sum(axis=1) / present  # edge windows average the tokens present
