"""TriAttention calibration: per-head frequency statistics of pre-RoPE queries (and keys).

For every layer ``l``, query head ``h`` and RoPE pair ``f`` (``z_f`` = complex pair view, see
:mod:`kvmm.compress.rope`) a :class:`Calibration` stores

* ``q_center[l, h, f]   = E[z_f(q)]``            (complex128) - the query center,
* ``q_abs_mean[l, h, f] = E|z_f(q)|``            (float64),
* ``concentration       = |E z| / E|z|``          in [0, 1]: 1 when every query points the same way,
* optionally ``k_center[l, g, f]`` and ``k_abs_mean`` for each KV head ``g``.

Worked example (1 layer, 1 head, head_dim 2, half layout; pair 0 is ``x0 + i x1``): queries
``[1, 0]`` and ``[0, 1]`` give ``q_center = (1 + 1j) / 2``, ``q_abs_mean = 1``,
``concentration = |0.5 + 0.5j| = 0.7071``.

With key centers, the mean logit of a head as a function of the distance ``delta = m - n``
follows from the centers alone (:func:`logit_curve`)::

    E[logit](delta) = a**2 / sqrt(d) * sum_f Re[ q_center_f conj(k_center_f) exp(i omega_f delta) ]

exact when queries and keys are independent of each other.  :func:`mean_logit_by_distance`
measures the same quantity from real q and k, so the two can be correlated.

Files are ``.npz`` with a ``format_version``; loading another version or a file whose shapes do
not match what the caller expects raises :class:`~kvmm.errors.CalibrationError`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kvmm.compress.rope import RopeConfig, as_vectors
from kvmm.errors import BadInputError, CalibrationError, ShapeError

__all__ = ["Calibration", "calibrate", "logit_curve", "mean_logit_by_distance", "series_logits", "pearson", "FORMAT_VERSION"]

#: Version written to and required from calibration files.
FORMAT_VERSION = 1


@dataclass(frozen=True, eq=False)
class Calibration:
    """Per-layer, per-head frequency statistics (arrays documented in the module docstring).

    Shapes: ``q_center``/``q_abs_mean`` ``(layers, heads, head_dim // 2)``; ``k_center``/
    ``k_abs_mean`` ``(layers, kv_heads, head_dim // 2)`` or ``None``; ``n_tokens`` ``(layers,)``.
    """

    rope: RopeConfig
    q_center: np.ndarray
    q_abs_mean: np.ndarray
    n_tokens: np.ndarray
    k_center: np.ndarray | None = None
    k_abs_mean: np.ndarray | None = None

    @property
    def num_layers(self) -> int:
        return int(self.q_center.shape[0])

    @property
    def num_heads(self) -> int:
        return int(self.q_center.shape[1])

    @property
    def num_kv_heads(self) -> int:
        """KV heads: from the key statistics when present, else equal to the query heads."""
        return int(self.k_center.shape[1]) if self.k_center is not None else self.num_heads

    @property
    def head_dim(self) -> int:
        return self.rope.head_dim

    @property
    def concentration(self) -> np.ndarray:
        """``|E z| / E|z|`` per layer, head and pair (0 where the pair is always zero)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            c = np.abs(self.q_center) / self.q_abs_mean
        return np.where(self.q_abs_mean > 0, c, 0.0)

    def head_concentration(self) -> np.ndarray:
        """One concentration per layer and head: ``sum_f |E z_f| / sum_f E|z_f|``."""
        num = np.abs(self.q_center).sum(axis=-1)
        den = self.q_abs_mean.sum(axis=-1)
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)

    def check_compatible(self, *, num_layers: int | None = None, num_heads: int | None = None,
                         num_kv_heads: int | None = None, head_dim: int | None = None) -> None:
        """Raise :class:`CalibrationError` unless this calibration has the given model shape."""
        got = {"num_layers": self.num_layers, "num_heads": self.num_heads,
               "num_kv_heads": self.num_kv_heads, "head_dim": self.head_dim}
        want = {"num_layers": num_layers, "num_heads": num_heads, "num_kv_heads": num_kv_heads, "head_dim": head_dim}
        bad = [f"{k}={got[k]} (expected {v})" for k, v in want.items() if v is not None and got[k] != v]
        if bad:
            raise CalibrationError("calibration is for another model shape: " + ", ".join(bad))

    def save(self, path: str | Path) -> Path:
        """Write a versioned ``.npz`` (the suffix is added if missing)."""
        path = Path(path)
        if path.suffix != ".npz":
            path = path.with_name(path.name + ".npz")
        arrays: dict[str, Any] = {
            "format_version": np.int64(FORMAT_VERSION),
            "rope": np.array(json.dumps(self.rope.to_dict())),
            "q_center": self.q_center, "q_abs_mean": self.q_abs_mean, "n_tokens": self.n_tokens,
        }
        if self.k_center is not None:
            arrays.update(k_center=self.k_center, k_abs_mean=self.k_abs_mean)
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, **arrays)
        return path

    @classmethod
    def load(cls, path: str | Path, **expect: int) -> Calibration:
        """Read a file written by :meth:`save`; ``expect`` as in :meth:`check_compatible`.

        Raises :class:`CalibrationError` for another format version, missing or inconsistent
        arrays, or a shape that differs from ``expect``.
        """
        path = Path(path)
        try:
            with np.load(path, allow_pickle=False) as data:
                files = set(data.files)
                if "format_version" not in files:
                    raise CalibrationError(f"{path} is not a kvmm calibration file (no format_version)")
                version = int(data["format_version"])
                if version != FORMAT_VERSION:
                    raise CalibrationError(f"{path} has calibration format version {version}; "
                                           f"this kvmm reads version {FORMAT_VERSION}")
                missing = {"rope", "q_center", "q_abs_mean", "n_tokens"} - files
                if missing:
                    raise CalibrationError(f"{path} lacks arrays {sorted(missing)}")
                rope = RopeConfig.from_dict(json.loads(str(data["rope"])))
                k_center = data["k_center"] if "k_center" in files else None
                k_abs = data["k_abs_mean"] if "k_abs_mean" in files else None
                cal = cls(rope, data["q_center"], data["q_abs_mean"], data["n_tokens"], k_center, k_abs)
        except Exception as exc:  # OSError, a torn zip (BadZipFile, EOFError), bad JSON, missing keys, ...
            if isinstance(exc, CalibrationError):
                raise
            raise CalibrationError(f"cannot read calibration {path}: {type(exc).__name__}: {exc}") from exc
        cal._validate()
        if expect:
            cal.check_compatible(**expect)
        return cal

    def __post_init__(self) -> None:
        self._validate()

    def _validate(self) -> None:
        f = self.rope.n_freq
        qc, qa = np.asarray(self.q_center), np.asarray(self.q_abs_mean)
        if qc.ndim != 3 or qc.shape[2] != f or qa.shape != qc.shape:
            raise CalibrationError(f"q_center and q_abs_mean must both be (layers, heads, {f}) for head_dim "
                                   f"{self.rope.head_dim}; got {qc.shape} and {qa.shape}")
        if np.asarray(self.n_tokens).shape != (qc.shape[0],):
            raise CalibrationError(f"n_tokens must be ({qc.shape[0]},), got {np.asarray(self.n_tokens).shape}")
        if (self.k_center is None) != (self.k_abs_mean is None):
            raise CalibrationError("k_center and k_abs_mean must be given together")
        if self.k_center is not None:
            kc, ka = np.asarray(self.k_center), np.asarray(self.k_abs_mean)
            if kc.ndim != 3 or kc.shape[0] != qc.shape[0] or kc.shape[2] != f or ka.shape != kc.shape:
                raise CalibrationError(f"k_center and k_abs_mean must be (layers={qc.shape[0]}, kv_heads, {f}); "
                                       f"got {kc.shape} and {ka.shape}")
            if qc.shape[1] % kc.shape[1]:
                raise CalibrationError(f"query heads ({qc.shape[1]}) must be a multiple of KV heads ({kc.shape[1]})")
        # NaN / inf statistics would surface later as "keys contain NaN" from every scorer call
        for name in ("q_center", "q_abs_mean", "k_center", "k_abs_mean"):
            arr = getattr(self, name)
            if arr is not None and not np.all(np.isfinite(arr)):
                raise CalibrationError(f"{name} contains NaN or inf; expected finite statistics")


def calibrate(q: Any, k: Any = None, *, rope: RopeConfig) -> Calibration:
    """Query (and key) statistics from pre-RoPE vectors.

    ``q``: one layer as ``(tokens, heads, head_dim)``, several as ``(layers, tokens, heads,
    head_dim)`` or a list of per-layer 3-D arrays (token counts may differ per layer).  ``k``
    likewise with KV heads (heads must be a multiple of KV heads).  Runtime complexity:
    O(layers * tokens * heads * head_dim).
    """
    if not isinstance(rope, RopeConfig):
        raise BadInputError(f"rope must be a RopeConfig, got {type(rope).__name__}")
    q_layers = _as_layers(q, "q", rope)
    k_layers = _as_layers(k, "k", rope) if k is not None else None
    if k_layers is not None:
        if len(k_layers) != len(q_layers):
            raise ShapeError(f"k has {len(k_layers)} layers but q has {len(q_layers)}")
        for i, (ql, kl) in enumerate(zip(q_layers, k_layers)):
            if ql.shape[1] % kl.shape[1]:
                raise ShapeError(f"layer {i}: query heads ({ql.shape[1]}) must be a multiple of KV heads ({kl.shape[1]})")
        if len({kl.shape[1] for kl in k_layers}) != 1:
            raise ShapeError("k must have the same number of KV heads in every layer")
    if len({ql.shape[1] for ql in q_layers}) != 1:
        raise ShapeError("q must have the same number of heads in every layer")
    q_center, q_abs = zip(*(_center(rope.to_complex(ql)) for ql in q_layers))
    n_tokens = np.array([ql.shape[0] for ql in q_layers], dtype=np.int64)
    k_center = k_abs = None
    if k_layers is not None:
        k_center, k_abs = (np.stack(a) for a in zip(*(_center(rope.to_complex(kl)) for kl in k_layers)))
    return Calibration(rope, np.stack(q_center), np.stack(q_abs), n_tokens, k_center, k_abs)


def logit_curve(calibration: Calibration, deltas: Any) -> np.ndarray:
    """Predicted mean logit of each head at each distance, from the centers alone.

    Returns float64 ``(layers, heads, len(deltas))``; needs key centers (else
    :class:`CalibrationError`).  Query head ``h`` uses KV head ``h // (heads / kv_heads)``.
    Runtime complexity: O(layers * heads * head_dim * len(deltas)).
    """
    if calibration.k_center is None:
        raise CalibrationError("logit_curve needs key centers: calibrate with k=...")
    d = _as_deltas(deltas)
    rope = calibration.rope
    group = calibration.num_heads // calibration.num_kv_heads
    k_center = np.repeat(calibration.k_center, group, axis=1)
    coeff = calibration.q_center * np.conj(k_center)  # (L, H, F)
    phase = np.exp(1j * np.outer(rope.frequencies(), d))  # (F, n)
    scale = rope.attention_factor ** 2 / np.sqrt(rope.head_dim)
    return scale * np.real(coeff @ phase)


def mean_logit_by_distance(q: Any, k: Any, rope: RopeConfig, deltas: Any) -> np.ndarray:
    """Measured mean logit over all query/key pairs ``delta`` apart, per head.

    ``q`` ``(tokens, heads, d)`` and ``k`` ``(tokens, kv_heads, d)`` pre-RoPE, token ``t`` at
    position ``t``; returns ``(heads, len(deltas))`` float64 (NaN where ``delta >= tokens``).
    Runtime complexity: O(tokens * heads * d * len(deltas)).
    """
    qa = _as_layers(q, "q", rope)
    ka = _as_layers(k, "k", rope)
    if len(qa) != 1 or len(ka) != 1:
        raise ShapeError("mean_logit_by_distance takes one layer: q (tokens, heads, d) and k (tokens, kv_heads, d)")
    qz, kz = rope.to_complex(qa[0]), rope.to_complex(ka[0])
    if qz.shape[0] != kz.shape[0]:
        raise ShapeError(f"q and k must cover the same tokens, got {qz.shape[0]} and {kz.shape[0]}")
    if qz.shape[1] % kz.shape[1]:
        raise ShapeError(f"query heads ({qz.shape[1]}) must be a multiple of KV heads ({kz.shape[1]})")
    kz = np.repeat(kz, qz.shape[1] // kz.shape[1], axis=1)
    d = _as_deltas(deltas)
    omega = rope.frequencies()
    scale = rope.attention_factor ** 2 / np.sqrt(rope.head_dim)
    n = qz.shape[0]
    out = np.full((qz.shape[1], d.shape[0]), np.nan)
    for j, delta in enumerate(d):
        delta = int(delta)
        if delta < 0 or delta >= n:
            continue
        pair_mean = (qz[delta:] * np.conj(kz[: n - delta])).mean(axis=0)  # (H, F)
        out[:, j] = scale * np.real(pair_mean @ np.exp(1j * omega * delta))
    return out


def series_logits(q: Any, k: Any, rope: RopeConfig, q_positions: Any = None, k_positions: Any = None) -> np.ndarray:
    """Logits ``(heads, Tq, Tk)`` from pre-RoPE q and k through the trigonometric series.

    ``logit[h, m, n] = a**2 / sqrt(d) * sum_f Re[z_f(q_m) conj(z_f(k_n)) exp(i omega_f (p_m - p_n))]``
    with positions ``p`` (default ``0..T-1``); equal to ``q_rot . k_rot / sqrt(d)`` of the model.
    Runtime complexity: O(heads * Tq * Tk * d).
    """
    qa, ka = _as_layers(q, "q", rope), _as_layers(k, "k", rope)
    if len(qa) != 1 or len(ka) != 1:
        raise ShapeError("series_logits takes one layer: q (tokens, heads, d) and k (tokens, kv_heads, d)")
    qz, kz = rope.to_complex(qa[0]), rope.to_complex(ka[0])
    if qz.shape[1] % kz.shape[1]:
        raise ShapeError(f"query heads ({qz.shape[1]}) must be a multiple of KV heads ({kz.shape[1]})")
    kz = np.repeat(kz, qz.shape[1] // kz.shape[1], axis=1)
    qp = np.arange(qz.shape[0], dtype=np.float64) if q_positions is None else np.asarray(q_positions, dtype=np.float64)
    kp = np.arange(kz.shape[0], dtype=np.float64) if k_positions is None else np.asarray(k_positions, dtype=np.float64)
    if qp.shape != (qz.shape[0],) or kp.shape != (kz.shape[0],):
        raise ShapeError("positions must have one entry per token")
    omega = rope.frequencies()
    # Split exp(i omega (p_m - p_n)) into a query phase and a key phase: one complex matmul.
    qrot = qz * np.exp(1j * np.outer(qp, omega))[:, None, :]
    krot = kz * np.exp(1j * np.outer(kp, omega))[:, None, :]
    scale = rope.attention_factor ** 2 / np.sqrt(rope.head_dim)
    return scale * np.real(np.einsum("mhf,nhf->hmn", qrot, np.conj(krot)))


def pearson(a: Any, b: Any) -> np.ndarray:
    """Pearson correlation along the last axis (NaN entries of either side are dropped)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    a, b = np.broadcast_arrays(a, b)
    flat_a, flat_b = a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])
    out = np.empty(flat_a.shape[0])
    for i, (x, y) in enumerate(zip(flat_a, flat_b)):
        ok = np.isfinite(x) & np.isfinite(y)
        x, y = x[ok] - x[ok].mean(), y[ok] - y[ok].mean()
        den = np.sqrt((x * x).sum() * (y * y).sum())
        out[i] = (x * y).sum() / den if den > 0 else np.nan
    return out.reshape(a.shape[:-1])


def _center(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return z.mean(axis=0), np.abs(z).mean(axis=0)


def _as_layers(x: Any, name: str, rope: RopeConfig) -> list[np.ndarray]:
    if isinstance(x, (list, tuple)):
        layers = [as_vectors(a) for a in x]
    else:
        arr = as_vectors(x)
        if arr.ndim == 3:
            layers = [arr]
        elif arr.ndim == 4:
            layers = list(arr)
        else:
            raise ShapeError(f"{name} must be (tokens, heads, head_dim) or (layers, tokens, heads, head_dim), got {arr.shape}")
    if not layers:
        raise ShapeError(f"{name} has no layers")
    out = []
    for i, a in enumerate(layers):
        if a.dtype.kind not in "fiu":
            raise BadInputError(f"{name} layer {i} must be a real numeric array, got dtype {a.dtype}")
        if a.ndim != 3 or a.shape[2] != rope.head_dim or a.shape[0] == 0 or a.shape[1] == 0:
            raise ShapeError(f"{name} layer {i} must be (tokens > 0, heads > 0, head_dim={rope.head_dim}), got {a.shape}")
        a = a.astype(np.float64, copy=False)
        if not np.all(np.isfinite(a)):
            raise BadInputError(f"{name} layer {i} contains NaN or inf; expected finite pre-RoPE vectors")
        out.append(a)
    return out


def _as_deltas(deltas: Any) -> np.ndarray:
    d = np.asarray(deltas)
    if d.ndim == 0:
        d = d.reshape(1)
    if d.ndim != 1 or d.dtype.kind not in "iuf":
        raise ShapeError(f"deltas must be a 1-D numeric array, got shape {d.shape} dtype {d.dtype}")
    if not np.all(np.isfinite(d)):
        raise BadInputError("deltas contain NaN or inf")
    return d.astype(np.float64)
