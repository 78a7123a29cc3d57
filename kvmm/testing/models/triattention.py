"""Plain numpy reference of TriAttention scoring: the paper's formula, every offset explicit.

Cost grows with the number of offsets (that is the point of the folded kernel); it is the
baseline of bench/test_bench_triattention.py.
"""

from __future__ import annotations

import numpy as np


def pairs(x: np.ndarray, layout: str) -> np.ndarray:
    d = x.shape[-1]
    if layout == "half":
        return x[..., : d // 2] + 1j * x[..., d // 2:]
    return x[..., 0::2] + 1j * x[..., 1::2]


def head_scores(q_center, q_abs_mean, keys, positions, now, omega, offsets, *, layout="half",
                aggregation="mean", normalize=True, norm_term=True, attention_factor=1.0, chunk=4096):
    """Scores ``(heads, n)`` of pre-RoPE ``keys`` ``(n, kv_heads, d)`` for one layer.

    S_trig = sum_f |qbar||z| cos(omega (now - pos + o) + phi), phi = arg(qbar conj z), averaged
    (or maxed) over offsets o; S_norm = sum_f (E|q| - |qbar|) |z|; scale a^2 / sqrt(d).
    """
    heads = q_center.shape[0]
    n, kv_heads, d = keys.shape
    group = heads // kv_heads
    scale = attention_factor ** 2 / np.sqrt(d)
    z = pairs(np.asarray(keys, dtype=np.float64), layout)  # (n, G, F)
    out = np.empty((heads, n))
    for h in range(heads):
        zk = z[:, h // group, :]  # (n, F)
        amp = np.abs(q_center[h])[None, :] * np.abs(zk)
        phi = np.angle(q_center[h][None, :] * np.conj(zk))
        extra = ((q_abs_mean[h] - np.abs(q_center[h]))[None, :] * np.abs(zk)).sum(axis=1)
        for start in range(0, n, chunk):
            sl = slice(start, start + chunk)
            delta = (now - np.asarray(positions[sl], dtype=np.float64))[:, None] + np.asarray(offsets)[None, :]
            phase = delta[:, :, None] * omega[None, None, :] + phi[sl][:, None, :]
            trig = (amp[sl][:, None, :] * np.cos(phase)).sum(axis=2)  # (chunk, O)
            agg = trig.mean(axis=1) if aggregation == "mean" else trig.max(axis=1)
            out[h, sl] = scale * (agg + (extra[sl] if norm_term else 0.0))
    if normalize:
        mean = out.mean(axis=1, keepdims=True)
        std = out.std(axis=1, keepdims=True)
        out = np.where(std > 0, (out - mean) / np.where(std > 0, std, 1.0), 0.0)
    return out


def kv_head_scores(head_scores_array, kv_heads):
    heads, n = head_scores_array.shape
    return head_scores_array.reshape(kv_heads, heads // kv_heads, n).max(axis=1)
