"""TriAttention: score cached keys by the RoPE trigonometric series, keep the top-B.

Scoring (per query head ``h`` of a layer, calibration centers ``qbar_f = E[z_f(q)]``, a cached
key with pre-RoPE pairs ``z_f(k)`` at position ``n``, the current decode position ``now``)::

    S_trig(delta) = sum_f |qbar_f| |z_f(k)| cos(omega_f delta + phi_f),  phi_f = arg(qbar_f conj z_f(k))
    S_norm        = sum_f (E|q_f| - |qbar_f|) |z_f(k)|
    score         = a**2 / sqrt(d) * ( agg_{o in offsets} S_trig(now - n + o) + S_norm )

``agg`` is the mean (default) or the max over future offsets ``1, 2, 4, ..., 2**16``.  For the
mean, ``S_trig`` averaged over offsets is ``Re[ qbar_f W_f exp(i omega_f (now - n)) conj z_f(k) ]``
summed over ``f`` with one complex weight ``W_f = mean_o exp(i omega_f o)`` per frequency, so
its cost does not depend on how many offsets there are.  Keys stored after RoPE already carry
``exp(i omega_f n)`` (and the attention factor ``a``): the phase is folded in and no position is
needed (``post_rope=True``).

Scores are optionally z-scored per query head over the keys being ranked (heads have very
different scales), then reduced over the query heads that share a KV head (GQA: max).

:class:`TriAttentionPolicy` wraps the scorer as a ``TokenScorer`` and, every ``interval`` decode
steps once a sequence holds more than ``budget`` tokens, keeps the top-``budget`` and evicts
the rest through ``TokenTable.evict``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numba import njit

from kvmm._validate import as_count
from kvmm.compress.calibration import Calibration
from kvmm.compress.rope import as_vectors
from kvmm.errors import BadInputError, CalibrationError, ShapeError, UnknownSequenceError

__all__ = ["TriAttentionScorer", "TriAttentionPolicy", "default_offsets", "score_flops"]


def default_offsets(max_offset: int = 65536) -> np.ndarray:
    """Geometric future offsets ``1, 2, 4, ...`` up to ``max_offset`` (17 values for 65536)."""
    if max_offset < 1:
        raise BadInputError(f"max_offset must be >= 1, got {max_offset}")
    return 2.0 ** np.arange(int(math.floor(math.log2(max_offset))) + 1)


def score_flops(n_keys: int, n_heads: int, n_freq: int) -> int:
    """Floating-point operations the folded (mean) scorer needs, counted per (key, head, pair).

    4 for ``Re[C conj(w)]`` accumulated (2 multiplies, 2 adds) and 2 for the norm term
    (multiply, add); the per-key rotation and ``|z|`` are shared by the heads of a KV group and
    not counted.  This is the count the benchmark divides by the time to report flops/s.
    """
    return 6 * int(n_keys) * int(n_heads) * int(n_freq)


@dataclass
class TriAttentionScorer:
    """Scores cached keys of one layer with a :class:`~kvmm.compress.Calibration`.

    ``aggregation``: ``"mean"`` (offsets folded into one weight per frequency) or ``"max"``
    (cost grows with the number of offsets).  ``normalize``: z-score per query head.
    ``offsets``: future offsets (default :func:`default_offsets`).

    >>> import numpy as np
    >>> from kvmm.compress import RopeConfig, calibrate
    >>> rng = np.random.default_rng(0)
    >>> cal = calibrate(rng.normal(size=(64, 2, 8)) + 1.0, rope=RopeConfig(8))
    >>> s = TriAttentionScorer(cal).score(rng.normal(size=(10, 2, 8)), np.arange(10), now=10)
    >>> s.shape
    (10,)
    """

    calibration: Calibration
    layer: int = 0
    offsets: Any = None
    aggregation: str = "mean"
    normalize: bool = True
    norm_term: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.calibration, Calibration):
            raise BadInputError(f"calibration must be a Calibration, got {type(self.calibration).__name__}")
        self.layer = as_count(self.layer, "layer")
        if self.layer >= self.calibration.num_layers:
            raise BadInputError(f"layer must be an int in [0, {self.calibration.num_layers}), got {self.layer!r}")
        if self.aggregation not in ("mean", "max"):
            raise BadInputError(f"aggregation must be 'mean' or 'max', got {self.aggregation!r}")
        offsets = default_offsets() if self.offsets is None else np.asarray(self.offsets, dtype=np.float64)
        if offsets.ndim != 1 or offsets.size == 0 or not np.all(np.isfinite(offsets)):
            raise BadInputError(f"offsets must be a non-empty 1-D array of finite numbers, got {self.offsets!r}")
        self.offsets = offsets
        rope = self.calibration.rope
        self._omega = rope.frequencies()
        self._scale = rope.attention_factor ** 2 / math.sqrt(rope.head_dim)
        self._q_center = self.calibration.q_center[self.layer]
        q_center_abs = np.abs(self._q_center)
        # The norm term: the part of E|q_f| that the center does not explain.
        extra = self.calibration.q_abs_mean[self.layer] - q_center_abs
        self._norm_weight = np.ascontiguousarray(self._scale * extra if self.norm_term else np.zeros_like(extra))
        # exp(i omega_f o) per offset (offsets, F), used by "max"; its mean over the offsets folds
        # them all into one complex weight per frequency, used by "mean".
        self._offset_phase = np.exp(1j * np.outer(self.offsets, self._omega))
        self._offset_weight = self._offset_phase.mean(axis=0)
        # exp(i omega_f r) for r = 0..255: the low half of the phase tables, fixed per scorer.
        low = np.exp(1j * np.outer(np.arange(_TABLE_LOW, dtype=np.float64), self._omega))
        self._low_table = (np.ascontiguousarray(low.real), np.ascontiguousarray(low.imag))

    @property
    def num_heads(self) -> int:
        return self.calibration.num_heads

    def head_scores(self, keys: Any, positions: Any = None, *, now: float, post_rope: bool = False) -> np.ndarray:
        """Scores of every key for every query head, float64 ``(heads, n)`` (z-scored if ``normalize``).

        ``keys``: ``(n, kv_heads, head_dim)`` pre-RoPE (``positions`` ``(n,)`` required) or
        post-RoPE (``post_rope=True``; positions ignored).  ``now``: the current decode position.
        Runtime complexity: O(n * heads * head_dim) for the mean, times ``len(offsets)`` for the max.
        """
        arr, pos, group = self._prepare(keys, positions, post_rope)
        now = _as_position(now)
        coef = self._coefficients(now)
        norm_weight = self._norm_weight
        a = self.calibration.rope.attention_factor
        if post_rope and a != 1.0:
            # Post-RoPE keys carry the attention factor once; the scale already has it squared.
            coef, norm_weight = coef / a, norm_weight / a
        interleaved = 1 if self.calibration.rope.layout == "interleaved" else 0
        out = np.empty((self.num_heads, arr.shape[0]), dtype=np.float64)
        rotate = 0 if post_rope else 1
        lo_re, lo_im, hi, hi_row = _EMPTY_TABLE.real, _EMPTY_TABLE.imag, _EMPTY_TABLE, _EMPTY_ROWS
        if rotate and pos.size and np.all(pos == np.floor(pos)) and pos.min() >= 0 and pos.max() < 2.0**22:
            # Integer positions: exp(i w p) = exp(i w 256 (p // 256)) * exp(i w (p % 256)) from two
            # small tables, a complex multiply per pair instead of a sin and a cos.  The high table
            # holds only the p // 256 values present (at most one row per key): sized by the largest
            # position it cost O(position) exps per call, ~20x the scoring itself near position 1e6.
            rotate = 2
            lo_re, lo_im = self._low_table
            rows, hi_row = np.unique((pos // _TABLE_LOW).astype(np.int64), return_inverse=True)
            hi = np.exp(1j * np.outer(rows.astype(np.float64) * _TABLE_LOW, self._omega))
            hi_row = hi_row.astype(np.int64).reshape(-1)
        _score_kernel(arr, interleaved, pos, self._omega, np.ascontiguousarray(coef.real),
                      np.ascontiguousarray(coef.imag), np.ascontiguousarray(norm_weight), group,
                      rotate, lo_re, lo_im, np.ascontiguousarray(hi.real), np.ascontiguousarray(hi.imag),
                      hi_row, out)
        if not np.isfinite(out).all():
            bad = int(np.flatnonzero(~np.isfinite(out).all(axis=0))[0])
            raise BadInputError(f"keys contain NaN or inf, or overflow float64 (first at key {bad}); "
                                f"expected finite key vectors")
        if self.normalize:
            out = _zscore(out)
        return out

    def kv_head_scores(self, keys: Any, positions: Any = None, *, now: float, post_rope: bool = False) -> np.ndarray:
        """Per KV head ``(kv_heads, n)``: max over the query heads of each KV group (GQA)."""
        keys = as_vectors(keys)
        heads = self.head_scores(keys, positions, now=now, post_rope=post_rope)
        kv_heads = keys.shape[1]
        return heads.reshape(kv_heads, self.num_heads // kv_heads, -1).max(axis=1)

    def score(self, keys: Any, positions: Any = None, *, now: float, post_rope: bool = False) -> np.ndarray:
        """One score per key ``(n,)``: max over KV heads, for caches that evict a token in every head."""
        return self.kv_head_scores(keys, positions, now=now, post_rope=post_rope).max(axis=0)

    # ------------------------------------------------------------------ helpers
    def _coefficients(self, now: float) -> np.ndarray:
        # C[h, o, f]: the query-side complex weight; trig = sum_f Re[C conj(w)], w = rotated key.
        base = self._scale * self._q_center * np.exp(1j * self._omega * now)  # (H, F)
        if self.aggregation == "mean":
            return (base * self._offset_weight)[:, None, :]
        return base[:, None, :] * self._offset_phase[None, :, :]

    def _prepare(self, keys: Any, positions: Any, post_rope: bool):
        rope = self.calibration.rope
        arr = as_vectors(keys)
        if arr.dtype.kind not in "fiu":
            raise BadInputError(f"keys must be a real numeric array, got dtype {arr.dtype}")
        if arr.ndim != 3 or arr.shape[2] != rope.head_dim:
            raise ShapeError(f"keys must be (n, kv_heads, head_dim={rope.head_dim}), got {arr.shape}")
        kv_heads = arr.shape[1]
        if kv_heads == 0 or self.num_heads % kv_heads:
            raise ShapeError(f"keys have {kv_heads} KV heads; the calibration's {self.num_heads} query heads "
                             f"must be a multiple of it")
        if self.calibration.k_center is not None and kv_heads != self.calibration.num_kv_heads:
            raise CalibrationError(f"keys have {kv_heads} KV heads but the calibration has {self.calibration.num_kv_heads}")
        if arr.dtype not in (np.float32, np.float64):
            arr = arr.astype(np.float64)
        arr = np.ascontiguousarray(arr)  # float32 / float64 keys are read in place (no copy)
        # NaN / inf keys are detected on the kernel's output (every key element reaches its scores)
        n = arr.shape[0]
        if post_rope:
            pos = np.zeros(n, dtype=np.float64)
        else:
            if positions is None:
                raise BadInputError("positions are required for pre-RoPE keys (or pass post_rope=True)")
            pos = np.asarray(positions)
            if pos.ndim != 1 or pos.shape[0] != n or pos.dtype.kind not in "iuf":
                raise ShapeError(f"positions must be a numeric array of shape ({n},), got {pos.shape} {pos.dtype}")
            pos = pos.astype(np.float64)
            if not np.all(np.isfinite(pos)):
                raise BadInputError("positions contain NaN or inf")
        return arr, pos, self.num_heads // kv_heads


# fastmath without "nnan"/"ninf": a NaN or inf in the keys must reach the output, where
# head_scores detects it (cheaper than a separate pass over every key element).
@njit(cache=True, nogil=True, fastmath={"nsz", "arcp", "contract", "afn", "reassoc"})
def _score_kernel(keys, interleaved, positions, omega, coef_re, coef_im, norm_weight, group, rotate,
                  lo_cos, lo_sin, hi_cos, hi_sin, hi_row, out):
    """out[h, i] = agg_o sum_f (C_re w_re + C_im w_im) + sum_f N |z|, w = z exp(i omega pos).

    keys: (n, kv_heads, d) float32/float64 real head vectors; pair f is (keys[.., f], keys[.., f + d/2])
    (half layout) or (keys[.., 2f], keys[.., 2f + 1]) (interleaved); coef_*: (heads, offsets, F)
    (one "offset" for the folded mean); norm_weight: (heads, F); rotate = 0 for post-RoPE keys
    (w = z), 1 to rotate by sin/cos of omega * position, 2 for integer positions with the phase
    taken from the ``lo`` (p % 256) and ``hi`` tables (row ``hi_row[i]`` of ``hi`` is for
    256 * (p // 256)).  The rotation and |z| of a key are computed once and shared by the
    ``group`` query heads of its KV head.
    Runtime complexity: O(n * heads * offsets * F).
    """
    n, kv_heads, d = keys.shape
    n_freq = d // 2
    n_off = coef_re.shape[1]
    cos_t = np.empty(n_freq)
    sin_t = np.empty(n_freq)
    z_re = np.empty(n_freq)
    z_im = np.empty(n_freq)
    w_re = np.empty(n_freq)
    w_im = np.empty(n_freq)
    mag = np.empty(n_freq)
    for i in range(n):
        if rotate == 1:
            for f in range(n_freq):
                angle = omega[f] * positions[i]
                cos_t[f] = math.cos(angle)
                sin_t[f] = math.sin(angle)
        elif rotate == 2:
            p = np.int64(positions[i])
            lo_i = p % 256
            hi_i = hi_row[i]
            for f in range(n_freq):
                cos_t[f] = hi_cos[hi_i, f] * lo_cos[lo_i, f] - hi_sin[hi_i, f] * lo_sin[lo_i, f]
                sin_t[f] = hi_sin[hi_i, f] * lo_cos[lo_i, f] + hi_cos[hi_i, f] * lo_sin[lo_i, f]
        for g in range(kv_heads):
            if group == 1 and n_off == 1 and not interleaved:
                # Fast path (MHA, folded mean, half layout): one fused pass over the pairs, the
                # branch on `rotate` hoisted out so the loop vectorises.
                row = keys[i, g]
                c_re = coef_re[g, 0]
                c_im = coef_im[g, 0]
                nw = norm_weight[g]
                trig = 0.0
                norm = 0.0
                if rotate:
                    for f in range(n_freq):
                        zr = np.float64(row[f])
                        zi = np.float64(row[f + n_freq])
                        wr = zr * cos_t[f] - zi * sin_t[f]
                        wi = zr * sin_t[f] + zi * cos_t[f]
                        trig += c_re[f] * wr + c_im[f] * wi
                        norm += nw[f] * math.sqrt(zr * zr + zi * zi)
                else:
                    for f in range(n_freq):
                        zr = np.float64(row[f])
                        zi = np.float64(row[f + n_freq])
                        trig += c_re[f] * zr + c_im[f] * zi
                        norm += nw[f] * math.sqrt(zr * zr + zi * zi)
                out[g, i] = trig + norm
                continue
            if interleaved:
                for f in range(n_freq):
                    z_re[f] = keys[i, g, 2 * f]
                    z_im[f] = keys[i, g, 2 * f + 1]
            else:
                for f in range(n_freq):
                    z_re[f] = keys[i, g, f]
                    z_im[f] = keys[i, g, f + n_freq]
            for f in range(n_freq):
                zr = z_re[f]
                zi = z_im[f]
                if rotate:
                    w_re[f] = zr * cos_t[f] - zi * sin_t[f]
                    w_im[f] = zr * sin_t[f] + zi * cos_t[f]
                else:
                    w_re[f] = zr
                    w_im[f] = zi
                mag[f] = math.sqrt(zr * zr + zi * zi)
            for h in range(g * group, (g + 1) * group):
                norm = 0.0
                for f in range(n_freq):
                    norm += norm_weight[h, f] * mag[f]
                best = -np.inf
                for o in range(n_off):
                    trig = 0.0
                    for f in range(n_freq):
                        trig += coef_re[h, o, f] * w_re[f] + coef_im[h, o, f] * w_im[f]
                    if trig > best:
                        best = trig
                out[h, i] = best + norm


_TABLE_LOW = 256
_EMPTY_TABLE = np.zeros((1, 1), dtype=np.complex128)
_EMPTY_ROWS = np.zeros(1, dtype=np.int64)


def _as_position(now: Any) -> float:
    try:
        value = float(now)  # ints, numpy scalars, 0-d arrays, torch scalars
    except (TypeError, ValueError):
        value = math.nan
    if isinstance(now, (str, bytes)) or not math.isfinite(value):
        raise BadInputError(f"now must be a finite position (a number), got {now!r}")
    return value


def _zscore(scores: np.ndarray) -> np.ndarray:
    if scores.shape[1] == 0:
        return scores  # nothing to normalise (and no warnings about empty means)
    mean = scores.mean(axis=1, keepdims=True)
    std = scores.std(axis=1, keepdims=True)
    return np.where(std > 0, (scores - mean) / np.where(std > 0, std, 1.0), 0.0)


class _SequenceState:
    """One sequence's live keys and positions in growable buffers (amortised O(1) appends).

    ``key_buf[:n]`` (float64 ``(capacity, kv_heads, head_dim)``, pre-RoPE) and ``pos_buf[:n]``
    (int64 logical positions, increasing) hold the live tokens in logical order.
    """

    def __init__(self, kv_heads: int, head_dim: int) -> None:
        self.key_buf = np.zeros((16, kv_heads, head_dim))
        self.pos_buf = np.zeros(16, dtype=np.int64)
        self.n = 0
        self.next_position = 0
        self.steps_since = 0

    @property
    def keys(self) -> np.ndarray:
        return self.key_buf[: self.n]

    @property
    def positions(self) -> np.ndarray:
        return self.pos_buf[: self.n]

    def append(self, keys: np.ndarray, positions: np.ndarray) -> None:
        need = self.n + keys.shape[0]
        if need > self.key_buf.shape[0]:
            capacity = max(need, 2 * self.key_buf.shape[0])
            key_buf = np.zeros((capacity,) + self.key_buf.shape[1:])
            pos_buf = np.zeros(capacity, dtype=np.int64)
            key_buf[: self.n] = self.keys
            pos_buf[: self.n] = self.positions
            self.key_buf, self.pos_buf = key_buf, pos_buf
        self.key_buf[self.n: need] = keys
        self.pos_buf[self.n: need] = positions
        self.n = need
        if positions.size:
            self.next_position = int(positions[-1]) + 1
        self.steps_since += keys.shape[0]

    def keep_only(self, keep: np.ndarray) -> None:
        """Compact to the live indices ``keep`` (sorted)."""
        kept = keep.shape[0]
        self.key_buf[:kept] = self.key_buf[keep]
        self.pos_buf[:kept] = self.pos_buf[keep]
        self.n = kept


@dataclass
class TriAttentionPolicy:
    """TriAttention as a :class:`~kvmm.protocols.TokenScorer` with periodic top-B eviction.

    ``observe(seq_id, keys=(t, kv_heads, d), positions=None, post_rope=False)`` appends the
    sequence's new tokens (pre-RoPE keys, or post-RoPE ones which are un-rotated on arrival;
    positions default to the next ones) and counts them as decode steps.  ``scores(seq_id)``
    scores the live tokens at the next position.  ``step(seq_id)``: when ``interval`` steps have
    passed since the last compression and more than ``budget`` tokens are live, keeps the
    top-``budget`` (ties: the more recent token wins), evicts the rest through
    ``table.evict(seq_id, logical_positions)`` when a ``table`` is attached, and returns the
    evicted logical positions.  ``keep_per_head(seq_id)`` gives per-KV-head selections.
    """

    scorer: TriAttentionScorer
    budget: int = 1024
    interval: int = 128
    table: Any = None
    _seqs: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.scorer, TriAttentionScorer):
            raise BadInputError(f"scorer must be a TriAttentionScorer, got {type(self.scorer).__name__}")
        self.budget = as_count(self.budget, "budget", minimum=1)
        self.interval = as_count(self.interval, "interval", minimum=1)
        if self.table is not None and not callable(getattr(self.table, "evict", None)):
            raise BadInputError("table must have an evict(seq_id, logical_positions) method")

    # ---------------------------------------------------------------- TokenScorer
    def observe(self, seq_id: int, *, keys: Any = None, positions: Any = None, post_rope: bool = False,
                attention: Any = None, **evidence: Any) -> None:
        """Append new tokens' keys ``(t, kv_heads, head_dim)`` (kvmm evidence convention).

        ``attention`` (over all live tokens, new ones last) is not used for scoring, only checked:
        its last axis must cover the live tokens plus the new ones, and it must be finite.  Other
        evidence (``queries``, ...) is ignored.
        Runtime complexity: O(tokens * kv_heads * head_dim) amortised (growable buffers).
        """
        state = self._seqs.get(seq_id)
        if attention is not None:
            att = as_vectors(attention)
            live = state.n if state is not None else 0
            new = 0 if keys is None else as_vectors(keys).shape[0]
            if att.dtype.kind not in "biuf" or att.ndim == 0 or att.shape[-1] != live + new:
                raise ShapeError(f"attention must end in live + new = {live + new} tokens for sequence {seq_id}, "
                                 f"got shape {att.shape}; call on_evict when tokens are evicted")
            if not np.isfinite(att).all():
                raise BadInputError("attention contains NaN or inf")
        if keys is None:
            return  # nothing this scorer uses
        rope = self.scorer.calibration.rope
        arr = as_vectors(keys)
        if arr.ndim == 2:
            arr = arr[:, None, :]  # (new, head_dim): one KV head
        if arr.ndim != 3 or arr.shape[2] != rope.head_dim or arr.dtype.kind not in "fiu":
            raise ShapeError(f"keys must be (tokens, kv_heads, head_dim={rope.head_dim}) real, got {arr.shape} {arr.dtype}")
        if self.scorer.num_heads % max(arr.shape[1], 1) or arr.shape[1] == 0:
            raise ShapeError(f"keys have {arr.shape[1]} KV heads; {self.scorer.num_heads} query heads must be a multiple")
        if state is not None and arr.shape[1] != state.keys.shape[1]:
            raise ShapeError(f"keys have {arr.shape[1]} KV heads but sequence {seq_id} has {state.keys.shape[1]}")
        arr = arr.astype(np.float64)
        if not np.all(np.isfinite(arr)):
            raise BadInputError("keys contain NaN or inf; expected finite key vectors")
        start = state.next_position if state is not None else 0
        if positions is None:
            pos = np.arange(start, start + arr.shape[0], dtype=np.int64)
        else:
            pos = np.asarray(positions)
            if pos.ndim == 0:
                pos = pos.reshape(1)
            if pos.dtype.kind not in "iu" or pos.shape != (arr.shape[0],):
                raise ShapeError(f"positions must be {arr.shape[0]} integers, got {pos.shape} {pos.dtype}")
            if pos.dtype.kind == "u" and pos.size and pos.max() > np.iinfo(np.int64).max:  # would wrap negative
                raise BadInputError(f"positions must be < 2**63, got {pos.max()}")
            pos = pos.astype(np.int64)
            if pos.size and (pos[0] < start or np.any(np.diff(pos) <= 0)):
                raise BadInputError(f"positions must increase and start at >= {start} for sequence {seq_id}, got {pos[:4]}...")
        if post_rope and arr.shape[0]:
            arr = rope.unapply(arr, pos)
        if state is None:
            state = self._seqs[seq_id] = _SequenceState(arr.shape[1], rope.head_dim)
        state.append(arr, pos)

    def scores(self, seq_id: int) -> np.ndarray:
        """Scores of the live tokens in logical order (higher = keep), at the next position."""
        state = self._state(seq_id)
        if state.keys.shape[0] == 0:
            return np.zeros(0)
        return self.scorer.score(state.keys, state.positions, now=state.next_position)

    def on_evict(self, seq_id: int, indices: Any) -> None:
        """Drop live-token ``indices`` (positions in the live order) from the sequence's state."""
        state = self._state(seq_id)
        idx = np.asarray(indices)
        if idx.size and (idx.dtype.kind not in "iu" or idx.min() < 0 or idx.max() >= state.keys.shape[0]):
            raise BadInputError(f"indices must be live-token indices in [0, {state.keys.shape[0]}), got {idx}")
        keep = np.ones(state.keys.shape[0], dtype=bool)
        keep[idx.astype(np.int64)] = False
        state.keep_only(np.flatnonzero(keep))

    def forget(self, seq_id: int) -> None:
        self._seqs.pop(seq_id, None)

    # ---------------------------------------------------------------- eviction
    def live_positions(self, seq_id: int) -> np.ndarray:
        return self._state(seq_id).positions.copy()

    def step(self, seq_id: int) -> np.ndarray:
        """Compress the sequence if due; return the evicted logical positions (int64, maybe empty).

        Runtime complexity: O(live * heads * head_dim + live log live) when it compresses, O(1) otherwise.
        """
        state = self._state(seq_id)
        if state.steps_since < self.interval or state.keys.shape[0] <= self.budget:
            return np.zeros(0, dtype=np.int64)
        keep = np.sort(_top_k(self.scores(seq_id), self.budget))
        drop = np.setdiff1d(np.arange(state.keys.shape[0]), keep)
        evicted = state.positions[drop].copy()
        if self.table is not None and evicted.size:
            self.table.evict(seq_id, evicted)  # first: if the table refuses, our state is unchanged
        state.keep_only(keep)
        state.steps_since = 0
        return evicted

    def keep_per_head(self, seq_id: int, budget: int | None = None) -> np.ndarray:
        """Per-KV-head top-``budget`` live-token indices ``(kv_heads, budget)``, each row sorted.

        For caches that keep heads apart.  Raises :class:`BadInputError` when the budget is larger
        than the number of live tokens.
        """
        state = self._state(seq_id)
        b = self.budget if budget is None else as_count(budget, "budget", minimum=1)
        n = state.keys.shape[0]
        if b > n:
            raise BadInputError(f"budget {b} is larger than the {n} live tokens of sequence {seq_id}")
        per_head = self.scorer.kv_head_scores(state.keys, state.positions, now=state.next_position)
        return np.stack([np.sort(_top_k(row, b)) for row in per_head])

    def check(self) -> None:
        """Assert every invariant of the per-sequence state (expensive; for tests)."""
        d = self.scorer.calibration.rope.head_dim
        for seq_id, st in self._seqs.items():
            # one position per stored key, keys shaped (live, kv_heads, head_dim)
            assert st.keys.ndim == 3 and st.keys.shape[2] == d, (seq_id, st.keys.shape)
            # the live prefix fits the buffers
            assert 0 <= st.n <= st.key_buf.shape[0] == st.pos_buf.shape[0], seq_id
            assert st.positions.shape == (st.keys.shape[0],), (seq_id, st.positions.shape)
            # logical positions strictly increase (live tokens stay in logical order)
            assert np.all(np.diff(st.positions) > 0), seq_id
            # every live token lies before the next position to be decoded
            assert st.positions.size == 0 or st.positions[-1] < st.next_position, seq_id
            # the query heads split evenly over the KV heads
            assert self.scorer.num_heads % st.keys.shape[1] == 0, seq_id
            # stored keys are finite, and the step counter never goes negative
            assert np.all(np.isfinite(st.keys)) and st.steps_since >= 0, seq_id

    def _state(self, seq_id: int) -> _SequenceState:
        try:
            return self._seqs[seq_id]
        except KeyError:
            raise UnknownSequenceError(f"sequence {seq_id} has not been observed; call observe(seq_id, keys=...) first") from None


def _top_k(scores: np.ndarray, k: int) -> np.ndarray:
    # Stable: among equal scores the later (more recent) token is kept.
    order = np.lexsort((-np.arange(scores.shape[0]), -scores))
    return order[:k]
