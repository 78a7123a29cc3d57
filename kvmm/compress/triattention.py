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

:class:`~kvmm.compress.triattention_policy.TriAttentionPolicy` wraps one scorer per layer as a
``TokenScorer`` that keeps the top-``budget`` tokens and evicts the rest through ``TokenTable.evict``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

from kvmm._validate import as_count
from kvmm.compress.calibration import Calibration
from kvmm.compress.rope import as_vectors
from kvmm.errors import BadInputError, CalibrationError, ShapeError

__all__ = ["TriAttentionScorer", "default_offsets", "score_flops"]


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
