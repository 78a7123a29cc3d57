"""numba kernels of the planner's analytic stage (see kvmm.plan._analytic for the model).

Loaded on first use of the planner (``import kvmm`` compiles nothing).  Every kernel has a
plain-Python reference in kvmm/testing/models/plan.py.  The step replay's kernels are in
:mod:`kvmm.plan._replay`.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = ["cummax_by_group", "grid_kernel"]


@njit(cache=True, nogil=True)
def cummax_by_group(b, group):  # pragma: no cover - compiled
    """Running maximum of ``b`` within runs of equal ``group`` (int64 arrays, groups contiguous).
    Runtime complexity: O(n)."""
    out = np.empty_like(b)
    cur = np.int64(-1)
    prev = np.int64(-1)
    for i in range(b.shape[0]):
        if group[i] != prev:
            cur = b[i]
            prev = group[i]
        elif b[i] > cur:
            cur = b[i]
        out[i] = cur
    return out


@njit(cache=True, nogil=True)
def grid_kernel(npoints, cap_bin, tier_type, tier_usd_h, tier_spb, tier_lat, ch0, ch1, rect0, rect1, gpu_bin,
                total_refs, ttft95, mean_w, staged_mean, staged95, end_s, tpot, lam, span_s,
                base_usd_h, tokens):  # pragma: no cover - compiled
    """Every combination of the tiers' capacity points (mixed radix, the last tier fastest).

    Returns ``hit (G, T)`` (share of references served per tier), ``ttft (G)``, ``tpot (G)``,
    ``usd_h (G)``, ``usd_m (G)`` (USD per million tokens at the estimated duration) and the
    combination's point index per tier ``(G, T)``.  Runtime complexity: O(G x T).
    """
    t_count = npoints.shape[0]
    g = 1
    for i in range(t_count):
        g *= npoints[i]
    hit = np.zeros((g, t_count))
    ttft = np.empty(g)
    tpot_out = np.empty(g)
    usd_h = np.empty(g)
    usd_m = np.empty(g)
    index = np.zeros((g, t_count), dtype=np.int64)
    k = np.zeros(t_count, dtype=np.int64)
    base0 = max(gpu_bin, 0)
    gpu_share = ch0[gpu_bin] / total_refs if gpu_bin >= 0 and total_refs > 0 else 0.0
    for j in range(g):
        # the largest capacity bin of each type: the run the hierarchy holds
        big0 = base0
        big1 = 0
        cost = base_usd_h
        for i in range(t_count):
            index[j, i] = k[i]
            a = cap_bin[i, k[i]]
            cost += tier_usd_h[i, k[i]]
            if tier_type[i] == 0:
                big0 = max(big0, a)
            else:
                big1 = max(big1, a)
        prev0 = base0
        prev1 = 0
        served_total = gpu_share
        run_blocks = 0.0
        run_seconds = 0.0
        lat = 0.0
        for i in range(t_count):
            a = cap_bin[i, k[i]]
            if tier_type[i] == 0:
                lo = prev0
                if a > lo:
                    share = (ch0[a] - ch0[lo]) / total_refs
                    run = rect0[a + 1, big0 + 1] - rect0[lo + 1, big0 + 1]
                    prev0 = a
                else:
                    share = 0.0
                    run = 0.0
            else:
                lo = prev1
                if a > lo:
                    share = (ch1[a] - ch1[lo]) / total_refs
                    run = rect1[a + 1, big1 + 1] - rect1[lo + 1, big1 + 1]
                    prev1 = a
                else:
                    share = 0.0
                    run = 0.0
            share = min(share, max(1.0 - served_total, 0.0))  # several streams: never more than all
            served_total += share
            hit[j, i] = share
            if run > 0.0:
                run_blocks += run
                run_seconds += run * tier_spb[i]
                lat = max(lat, tier_lat[i])
        w = ttft95[big0, big1]
        if not math.isfinite(w):
            ttft[j] = np.inf
            tpot_out[j] = np.inf
        else:
            exposed = 0.0
            if run_blocks > 0.0 and staged95[big0, big1] > 0.0:
                spb = run_seconds / run_blocks
                rho_channel = lam * staged_mean[big0, big1] * spb
                if rho_channel >= 1.0:
                    exposed = np.inf
                else:
                    stage95 = (lat + staged95[big0, big1] * spb) / (1.0 - rho_channel)
                    exposed = max(0.0, stage95 - mean_w[big0, big1])
            ttft[j] = w + exposed
            tpot_out[j] = tpot[big0, big1]
        usd_h[j] = cost
        duration = max(span_s, end_s[big0, big1])  # the simulator's duration: its last finish
        usd_m[j] = cost * duration / 3600.0 / tokens * 1e6 if tokens > 0 else np.nan
        # next combination
        i = t_count - 1
        while i >= 0:
            k[i] += 1
            if k[i] < npoints[i]:
                break
            k[i] = 0
            i -= 1
    return hit, ttft, tpot_out, usd_h, usd_m, index
