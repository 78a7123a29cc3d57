"""Rotary position embedding (RoPE) math in numpy: frequencies, rotation, complex views, layouts.

RoPE splits a head vector of ``head_dim = d`` reals into ``d / 2`` pairs and rotates pair ``f``
of a vector at position ``m`` by the angle ``omega_f * m``.  Written with complex numbers
``z_f = x_a + i x_b``, the rotation is ``z_f -> z_f * exp(i omega_f m)``, and the dot product of
a rotated query (position ``m``) and a rotated key (position ``n``) is

    q_rot . k_rot = a**2 * sum_f Re[ z_f(q) conj(z_f(k)) exp(i omega_f (m - n)) ]

(``a`` is the attention factor of YaRN, 1 otherwise): a trigonometric series in ``m - n``,
which is what TriAttention builds on.

Two layouts decide which reals form pair ``f`` (``d = 8`` shown, pairs ``f = 0..3``)::

    half        (HF Llama / Qwen ``rotate_half``):   z_f = x[f]    + i x[f + d/2]
                 x = [re0 re1 re2 re3 | im0 im1 im2 im3]
    interleaved (Meta reference, llama2.c, GGUF):   z_f = x[2f]   + i x[2f + 1]
                 x = [re0 im0 re1 im1 re2 im2 re3 im3]

Frequencies are ``omega_f = theta ** (-2 f / d)``, then optionally rescaled:
``linear`` (all divided by ``factor``), ``llama3`` (low frequencies divided by ``factor``, high
ones kept, a smooth blend in between) or ``yarn`` (a ramp between interpolation and
extrapolation, plus an attention factor multiplying cos and sin).  The formulas follow
transformers' ``modeling_rope_utils`` (``_compute_llama3_parameters``,
``_compute_yarn_parameters``) and are tested against it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvmm._validate import as_count, as_positive_float
from kvmm.errors import BadInputError, ShapeError

__all__ = ["RopeConfig", "RopeScaling", "LAYOUTS", "SCALING_KINDS", "convert_layout", "pair_indices"]

#: Supported pairings of the reals of a head vector.
LAYOUTS = ("half", "interleaved")
#: Supported frequency scalings.
SCALING_KINDS = ("none", "linear", "llama3", "yarn")


@dataclass(frozen=True)
class RopeScaling:
    """How the base frequencies are rescaled for long context.

    ``kind``: ``"none"``, ``"linear"`` (needs ``factor``), ``"llama3"`` (``factor``,
    ``low_freq_factor``, ``high_freq_factor``, ``original_max_position_embeddings``) or ``"yarn"``
    (``factor``, ``original_max_position_embeddings``, optional ``beta_fast`` (32),
    ``beta_slow`` (1), ``attention_factor`` (default ``0.1 ln(factor) + 1``, or the
    ``mscale`` / ``mscale_all_dim`` ratio when both are given) and ``truncate`` (True)).
    """

    kind: str = "none"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attention_factor: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None
    truncate: bool = True

    def __post_init__(self) -> None:
        if self.kind not in SCALING_KINDS:
            raise BadInputError(f"RoPE scaling kind is unknown: got {self.kind!r}, expected one of {SCALING_KINDS}")
        for name in ("factor", "low_freq_factor", "high_freq_factor", "beta_fast", "beta_slow"):
            as_positive_float(getattr(self, name), f"RoPE scaling {name}")
        if self.kind == "llama3" and not self.high_freq_factor > self.low_freq_factor:
            raise BadInputError(
                f"llama3 scaling needs high_freq_factor > low_freq_factor, got {self.high_freq_factor} <= {self.low_freq_factor}")
        as_positive_float(self.original_max_position_embeddings, "original_max_position_embeddings")
        if self.attention_factor is not None:
            as_positive_float(self.attention_factor, "attention_factor")

    @classmethod
    def from_hf(cls, params: Mapping[str, Any] | None, max_position_embeddings: int | None = None) -> RopeScaling:
        """Build from a transformers ``rope_scaling`` / ``rope_parameters`` dict (either spelling).

        ``rope_type`` (or the older ``type``) ``default`` -> none; ``linear``, ``llama3``, ``yarn``
        map to the same kinds.  Other types (dynamic, longrope, ...) raise :class:`BadInputError`.
        """
        if not params:
            return cls()
        kind = params.get("rope_type", params.get("type", "default"))
        kind = {"default": "none", None: "none"}.get(kind, kind)
        if kind not in SCALING_KINDS:
            raise BadInputError(f"RoPE type {kind!r} is not supported; expected one of default, linear, llama3, yarn")
        if kind == "none":
            return cls()
        factor = params.get("factor")
        original = params.get("original_max_position_embeddings") or max_position_embeddings or 8192
        if factor is None and kind == "yarn" and max_position_embeddings:
            factor = max_position_embeddings / original  # as transformers does (DeepSeek-V3 style configs)
        kwargs: dict[str, Any] = dict(kind=kind, factor=float(factor if factor is not None else 1.0),
                                      original_max_position_embeddings=int(original))
        if kind == "llama3":
            missing = [k for k in ("factor", "low_freq_factor", "high_freq_factor") if params.get(k) is None]
            if missing:
                raise BadInputError(f"llama3 RoPE scaling needs {missing}; got {dict(params)}")
            kwargs.update(low_freq_factor=float(params["low_freq_factor"]), high_freq_factor=float(params["high_freq_factor"]))
        if kind == "yarn":
            kwargs.update(beta_fast=float(params.get("beta_fast") or 32.0), beta_slow=float(params.get("beta_slow") or 1.0),
                          truncate=bool(params.get("truncate", True)))
            for name in ("attention_factor", "mscale", "mscale_all_dim"):
                if params.get(name) is not None:
                    kwargs[name] = float(params[name])
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class RopeConfig:
    """RoPE of one attention head: size, base, layout and frequency scaling.

    >>> rope = RopeConfig(head_dim=8, theta=10000.0)
    >>> rope.frequencies().round(4).tolist()
    [1.0, 0.1, 0.01, 0.001]
    """

    head_dim: int
    theta: float = 10000.0
    layout: str = "half"
    scaling: RopeScaling = field(default_factory=RopeScaling)

    def __post_init__(self) -> None:
        head_dim = as_count(self.head_dim, "head_dim", minimum=1)
        if head_dim % 2:
            raise BadInputError(f"head_dim must be a positive even number (RoPE rotates pairs), got {head_dim}")
        object.__setattr__(self, "head_dim", head_dim)
        object.__setattr__(self, "theta", as_positive_float(self.theta, "theta"))
        if self.layout not in LAYOUTS:
            raise BadInputError(f"RoPE layout is unknown: got {self.layout!r}, expected one of {LAYOUTS}")
        if self.scaling is None:
            object.__setattr__(self, "scaling", RopeScaling())
        elif isinstance(self.scaling, Mapping):
            object.__setattr__(self, "scaling", RopeScaling(**self.scaling))
        elif not isinstance(self.scaling, RopeScaling):
            raise BadInputError(f"scaling must be a RopeScaling, a dict or None, got {type(self.scaling).__name__}")

    # ------------------------------------------------------------------ frequencies
    @property
    def n_freq(self) -> int:
        """Number of rotated pairs, ``head_dim // 2``."""
        return self.head_dim // 2

    def base_frequencies(self) -> np.ndarray:
        """``theta ** (-2 f / d)`` for ``f = 0 .. d/2 - 1`` (float64), before scaling."""
        d = self.head_dim
        return 1.0 / (self.theta ** (np.arange(0, d, 2, dtype=np.float64) / d))

    def frequencies(self) -> np.ndarray:
        """Angular frequencies ``omega_f`` (radians per position) after scaling, float64 ``(d/2,)``.

        Runtime complexity: O(d).
        """
        inv_freq = self.base_frequencies()
        s = self.scaling
        if s.kind == "none":
            return inv_freq
        if s.kind == "linear":
            return inv_freq / s.factor
        if s.kind == "llama3":
            return _llama3_frequencies(inv_freq, s)
        return _yarn_frequencies(inv_freq, self.head_dim, self.theta, s)

    @property
    def attention_factor(self) -> float:
        """The factor multiplying cos and sin (YaRN's mscale); 1 for the other scalings.

        A query-key dot product of rotated vectors carries it squared.
        """
        s = self.scaling
        if s.kind != "yarn":
            return 1.0
        if s.attention_factor is not None:
            return float(s.attention_factor)
        if s.mscale and s.mscale_all_dim:
            return float(_yarn_mscale(s.factor, s.mscale) / _yarn_mscale(s.factor, s.mscale_all_dim))
        return float(_yarn_mscale(s.factor))

    # ------------------------------------------------------------------ vectors
    def to_complex(self, x: Any) -> np.ndarray:
        """Complex pair view ``z_f`` of real head vectors ``(..., d)`` -> complex128 ``(..., d/2)``."""
        arr = self._check_vectors(x, "x")
        re_idx, im_idx = pair_indices(self.head_dim, self.layout)
        return arr[..., re_idx] + 1j * arr[..., im_idx]

    def from_complex(self, z: Any) -> np.ndarray:
        """Inverse of :meth:`to_complex`: complex ``(..., d/2)`` -> float64 ``(..., d)``."""
        z = np.asarray(z)
        if z.shape[-1:] != (self.n_freq,):
            raise ShapeError(f"z must end in {self.n_freq} complex pairs, got shape {z.shape}")
        out = np.empty(z.shape[:-1] + (self.head_dim,), dtype=np.float64)
        re_idx, im_idx = pair_indices(self.head_dim, self.layout)
        out[..., re_idx] = z.real
        out[..., im_idx] = z.imag
        return out

    def apply(self, x: Any, positions: Any, *, attention_scaling: bool = True) -> np.ndarray:
        """Rotate head vectors ``x`` of shape ``(tokens, ..., d)`` to their ``positions`` ``(tokens,)``.

        Returns float64 ``x_rot`` with pair ``f`` of token ``t`` turned by ``omega_f * positions[t]``
        and (with ``attention_scaling``) multiplied by :attr:`attention_factor`, exactly what
        transformers' ``apply_rotary_pos_emb`` does with the model's cos and sin.
        Runtime complexity: O(tokens * ... * d).
        """
        arr = self._check_vectors(x, "x")
        pos = _check_positions(positions, arr.shape[0])
        phase = self._phases(pos, arr.ndim)
        scale = self.attention_factor if attention_scaling else 1.0
        return self.from_complex(self.to_complex(arr) * phase * scale)

    def unapply(self, x: Any, positions: Any, *, attention_scaling: bool = True) -> np.ndarray:
        """Undo :meth:`apply`: recover pre-RoPE vectors from rotated ones at ``positions``."""
        arr = self._check_vectors(x, "x")
        pos = _check_positions(positions, arr.shape[0])
        phase = self._phases(pos, arr.ndim)
        scale = self.attention_factor if attention_scaling else 1.0
        return self.from_complex(self.to_complex(arr) * np.conj(phase) / scale)

    def cos_sin(self, positions: Any) -> tuple[np.ndarray, np.ndarray]:
        """transformers-style ``(cos, sin)`` tables ``(tokens, d)`` for this layout (attention factor included)."""
        pos = _check_positions(positions, None)
        angles = pos.astype(np.float64)[:, None] * self.frequencies()[None, :]
        a = self.attention_factor
        cos = np.empty((pos.shape[0], self.head_dim))
        sin = np.empty_like(cos)
        re_idx, im_idx = pair_indices(self.head_dim, self.layout)
        cos[:, re_idx] = cos[:, im_idx] = np.cos(angles) * a
        sin[:, re_idx] = sin[:, im_idx] = np.sin(angles) * a
        return cos, sin

    def with_layout(self, layout: str) -> RopeConfig:
        """The same RoPE with another layout (frequencies unchanged)."""
        return RopeConfig(self.head_dim, self.theta, layout, self.scaling)

    def to_dict(self) -> dict[str, Any]:
        return {"head_dim": self.head_dim, "theta": self.theta, "layout": self.layout, "scaling": self.scaling.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RopeConfig:
        return cls(int(data["head_dim"]), float(data["theta"]), str(data["layout"]), RopeScaling(**dict(data["scaling"])))

    # ------------------------------------------------------------------ helpers
    def _phases(self, positions: np.ndarray, ndim: int) -> np.ndarray:
        angles = positions.astype(np.float64)[:, None] * self.frequencies()[None, :]
        phase = np.exp(1j * angles)
        return phase.reshape((positions.shape[0],) + (1,) * (ndim - 2) + (self.n_freq,))

    def _check_vectors(self, x: Any, name: str) -> np.ndarray:
        arr = as_vectors(x)
        if arr.dtype.kind not in "fiu":
            raise BadInputError(f"{name} must be a real numeric array, got dtype {arr.dtype}")
        if arr.ndim < 1 or arr.shape[-1] != self.head_dim:
            raise ShapeError(f"{name} must end in head_dim={self.head_dim}, got shape {arr.shape}")
        arr = arr.astype(np.float64, copy=False)
        if not np.all(np.isfinite(arr)):
            raise BadInputError(f"{name} contains NaN or inf; expected finite head vectors")
        return arr


def as_vectors(x: Any) -> np.ndarray:
    """``np.asarray(x)``, also for torch tensors numpy cannot read (bfloat16, on a GPU).

    Captured q/k of bf16 models arrive as bfloat16 tensors; they are widened to float32 (exact).
    """
    try:
        return np.asarray(x)
    except (TypeError, RuntimeError):
        if hasattr(x, "detach") and hasattr(x, "float"):  # a torch tensor: bfloat16 or on a device
            return x.detach().float().cpu().numpy()
        raise BadInputError(f"cannot read {type(x).__name__} as a numeric array") from None
    except ValueError:  # ragged nested lists
        raise ShapeError(f"expected a rectangular numeric array, got ragged {type(x).__name__}") from None


def pair_indices(head_dim: int, layout: str) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the real and imaginary parts of each pair: ``x[re[f]] + i x[im[f]]``.

    ``head_dim=4``: half -> ``([0, 1], [2, 3])``; interleaved -> ``([0, 2], [1, 3])``.
    """
    if layout not in LAYOUTS:
        raise BadInputError(f"RoPE layout is unknown: got {layout!r}, expected one of {LAYOUTS}")
    if head_dim <= 0 or head_dim % 2:
        raise BadInputError(f"head_dim must be a positive even number, got {head_dim}")
    half = head_dim // 2
    if layout == "half":
        return np.arange(half), np.arange(half, head_dim)
    return np.arange(0, head_dim, 2), np.arange(1, head_dim, 2)


def convert_layout(x: Any, source: str, target: str) -> np.ndarray:
    """Permute the last axis of head vectors from layout ``source`` to ``target``.

    Pair ``f`` keeps its meaning (and frequency): with the same :class:`RopeConfig` frequencies,
    ``RopeConfig(layout=target).to_complex(convert_layout(x, source, target))`` equals
    ``RopeConfig(layout=source).to_complex(x)``.  Also converts q_proj / k_proj weight rows per head.
    Runtime complexity: O(x.size).
    """
    arr = np.asarray(x)
    if arr.ndim < 1 or arr.shape[-1] % 2 or arr.shape[-1] == 0:
        raise ShapeError(f"x must end in an even head_dim, got shape {arr.shape}")
    d = arr.shape[-1]
    src_re, src_im = pair_indices(d, source)
    dst_re, dst_im = pair_indices(d, target)
    perm = np.empty(d, dtype=np.int64)
    perm[dst_re] = src_re
    perm[dst_im] = src_im
    return arr[..., perm]


def _check_positions(positions: Any, n: int | None) -> np.ndarray:
    pos = np.asarray(positions)
    if pos.ndim == 0:
        pos = pos.reshape(1)
    if pos.dtype.kind not in "iuf" or pos.ndim != 1:
        raise ShapeError(f"positions must be a 1-D numeric array, got dtype {pos.dtype} shape {pos.shape}")
    if n is not None and pos.shape[0] != n:
        raise ShapeError(f"positions must have one entry per token ({n}), got {pos.shape[0]}")
    if not np.all(np.isfinite(pos)):
        raise BadInputError("positions contain NaN or inf")
    return pos


def _llama3_frequencies(inv_freq: np.ndarray, s: RopeScaling) -> np.ndarray:
    # Llama 3.1: wavelengths longer than original_context / low_freq_factor are divided by factor,
    # shorter than original_context / high_freq_factor are kept, the band between is blended.
    old_context = float(s.original_max_position_embeddings)
    low_freq_wavelen = old_context / s.low_freq_factor
    high_freq_wavelen = old_context / s.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = np.where(wavelen > low_freq_wavelen, inv_freq / s.factor, inv_freq)
    smooth = (old_context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
    smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled
    medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    return np.where(medium, smoothed, scaled)


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


def _yarn_frequencies(inv_freq: np.ndarray, dim: int, base: float, s: RopeScaling) -> np.ndarray:
    # YaRN: pairs that turn many times over the original context keep their frequency
    # (extrapolation), slow ones are interpolated (divided by factor), a linear ramp in between.
    def correction_dim(num_rotations: float) -> float:
        return (dim * math.log(s.original_max_position_embeddings / (num_rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(s.beta_fast), correction_dim(s.beta_slow)
    if s.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # as transformers: avoid a zero-width ramp
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    extrapolation_weight = 1.0 - ramp
    return (inv_freq / s.factor) * (1 - extrapolation_weight) + inv_freq * extrapolation_weight
