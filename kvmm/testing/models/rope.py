"""Plain reference RoPE: the textbook real-valued formulas, one pair at a time."""

from __future__ import annotations

import math

import numpy as np


def inv_frequencies(head_dim: int, theta: float) -> np.ndarray:
    return np.array([theta ** (-(2.0 * f) / head_dim) for f in range(head_dim // 2)])


def rotate(x: np.ndarray, position: float, omega: np.ndarray, layout: str, scale: float = 1.0) -> np.ndarray:
    """Rotate one head vector ``x`` (d,) to ``position``: pair f turns by omega[f] * position."""
    d = x.shape[0]
    out = np.empty(d)
    for f in range(d // 2):
        a, b = (f, f + d // 2) if layout == "half" else (2 * f, 2 * f + 1)
        c, s = math.cos(omega[f] * position), math.sin(omega[f] * position)
        out[a] = scale * (x[a] * c - x[b] * s)
        out[b] = scale * (x[a] * s + x[b] * c)
    return out


def rotate_half_form(x: np.ndarray, position: float, omega: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """HF's ``x * cos + rotate_half(x) * sin`` with ``cos = cat(cos, cos)`` (half layout)."""
    d = x.shape[0]
    ang = np.concatenate([omega, omega]) * position
    rot = np.concatenate([-x[d // 2:], x[: d // 2]])
    return scale * (x * np.cos(ang) + rot * np.sin(ang))
