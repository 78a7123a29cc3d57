"""numba kernels of the planner's analytic stage (see kvmm.plan._analytic for the model).

Loaded on first use of the planner (``import kvmm`` compiles nothing).  Every kernel has a
plain-Python reference in tests/naive/plan_reference.py.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = ["cummax_by_group", "pair_statistics", "grid_kernel"]

#: the quantile of the latency objective
Q = 0.95


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
def _quantile(x, q):  # pragma: no cover - compiled
    """numpy's default (linear) quantile of a non-empty array, by partition: O(n)."""
    n = x.shape[0]
    pos = q * (n - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, n - 1)
    part = np.partition(x, (lo, hi)) if hi != lo else np.partition(x, lo)
    return part[lo] + (part[hi] - part[lo]) * (pos - lo)


@njit(cache=True, nogil=True)
def pair_statistics(ht0, ht1, gpu_bin, inp, out, arrival, instances, prefill_rate, fast_read_bw, kvb,
                    decode_s_per_token, lam, decode_step_1, decode_batch_cost, max_batch):  # pragma: no cover - compiled
    """Per (largest type-0 bin A, largest type-1 bin B): the queue statistics of the instances.

    ``ht0[r, A]`` / ``ht1[r, B]``: prompt tokens of request ``r`` in the leading run held at
    those capacities; the run is the longer of the two (exact with one stream).  Each instance
    (request ``r`` on ``r mod instances``) is one FCFS server of work ``B = S + D`` over the
    trace's own arrivals: Lindley's recursion ``W' = max(0, W + B - gap)``.  Returns arrays
    ``(u0, u1)``: p95 of ``W + S`` (TTFT without staging waits), E[W], mean and p95 staged
    bytes, utilisation, E[B], p95 TPOT.  Runtime complexity: O(u0 x u1 x requests x log requests).
    """
    n, u0 = ht0.shape
    u1 = ht1.shape[1]
    ttft95 = np.zeros((u0, u1))
    mean_w = np.zeros((u0, u1))
    staged_mean = np.zeros((u0, u1))
    staged95 = np.zeros((u0, u1))
    rho_out = np.zeros((u0, u1))
    mean_b = np.zeros((u0, u1))
    tpot = np.zeros((u0, u1))
    t = np.empty(n)
    st = np.empty(n)
    start_at = np.empty(n)
    served = np.empty(n)
    cum_s = np.empty(n)  # prefill seconds of the instance's requests up to and including r
    tp = np.empty(n)
    free_at = np.zeros(instances)  # when each instance's server has done the work queued so far
    out_mean = out.mean() if n else 0.0
    for a in range(u0):
        aa = max(a, gpu_bin)
        for c in range(u1):
            if n == 0:
                continue
            free_at[:] = -np.inf
            sum_b = 0.0
            sum_s = 0.0
            sum_w = 0.0
            for r in range(n):
                hit = max(ht0[r, aa], ht1[r, c])
                gpu = ht0[r, gpu_bin] if gpu_bin >= 0 else 0.0
                staged = (hit - gpu) * kvb if hit > gpu else 0.0
                sr = (inp[r] - hit) / prefill_rate + staged / fast_read_bw
                br = sr + out[r] * decode_s_per_token
                k = r % instances
                start = max(arrival[r], free_at[k])
                w = start - arrival[r]
                free_at[k] = start + br
                start_at[r] = start
                served[r] = sr
                cum_s[r] = sr + (cum_s[r - instances] if r >= instances else 0.0)
                t[r] = w + sr
                st[r] = staged
                sum_s += sr
                sum_b += br
                sum_w += w
            eb = sum_b / n
            rho_out[a, c] = lam * eb
            mean_b[a, c] = eb
            mean_w[a, c] = sum_w / n
            ttft95[a, c] = _quantile(t, Q)
            staged_mean[a, c] = st.mean()
            staged95[a, c] = _quantile(st, Q)
            # TPOT: the decode batch b by Little's law at the mean step; then each request's
            # decode of out - 1 tokens takes (out - 1) decode steps plus the prefills its instance
            # starts meanwhile (a step is prefill + one decode token, kvmm.sim.engine)
            rho_p = lam * sum_s / n
            if rho_p >= 1.0:
                tpot[a, c] = np.inf
                continue
            b = 1.0
            step = 0.0
            for _ in range(50):
                step = (decode_step_1 * (1.0 + decode_batch_cost * (b - 1.0))) / (1.0 - rho_p)
                b = min(max(lam * out_mean * step, 1.0), max_batch)
            d = decode_step_1 * (1.0 + decode_batch_cost * (b - 1.0))
            m = 0
            for r in range(n):
                if out[r] < 2.0:
                    continue
                first = start_at[r] + served[r]
                span = (out[r] - 1.0) * step
                for _ in range(2):  # the window and the prefills in it, made consistent
                    pre = _prefill_started_before(start_at, cum_s, r, instances, first + span) - cum_s[r]
                    span = (out[r] - 1.0) * d + pre
                tp[m] = span / (out[r] - 1.0)
                m += 1
            tpot[a, c] = _quantile(tp[:m], Q) if m else 0.0
    return ttft95, mean_w, staged_mean, staged95, rho_out, mean_b, tpot


@njit(cache=True, nogil=True)
def _prefill_started_before(start_at, cum_s, r, instances, end):  # pragma: no cover - compiled
    """``cum_s`` of the last request of ``r``'s instance (at or after ``r``) that starts before
    ``end`` (starts rise along an instance's requests): a binary search, O(log n)."""
    n = start_at.shape[0]
    lo = 0  # positions after r on its instance: r + p * instances, p >= 0
    hi = (n - 1 - r) // instances
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if start_at[r + mid * instances] < end:
            lo = mid
        else:
            hi = mid - 1
    return cum_s[r + lo * instances]


@njit(cache=True, nogil=True)
def grid_kernel(npoints, cap_bin, tier_type, tier_usd_h, tier_spb, tier_lat, ch0, ch1, rect0, rect1, gpu_bin,
                total_refs, ttft95, mean_w, staged_mean, staged95, mean_b, tpot, lam, span_s, requests_per_instance,
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
        duration = max(span_s, requests_per_instance * mean_b[big0, big1])
        if math.isfinite(ttft[j]):
            duration += ttft[j]
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
