"""numba kernels of the planner's analytic stage (see kvmm.plan._analytic for the model).

Loaded on first use of the planner (``import kvmm`` compiles nothing).  Every kernel has a
plain-Python reference in tests/naive/plan.py.
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
def pair_statistics(ht0, ht1, gpu_bin, inp, out, held, arrival, instances, prefill_rate, fast_read_bw, fast_latency,
                    kvb, decode_step_1, decode_batch_cost, max_batch, max_prefill_tokens, pool_blocks):  # pragma: no cover - compiled
    """Per (largest type-0 bin A, largest type-1 bin B): the step replay's statistics.

    ``ht0[r, A]`` / ``ht1[r, B]``: prompt tokens of request ``r`` in the leading run held at
    those capacities; the run is the longer of the two (exact with one stream).  Each instance
    (request ``r`` on ``r mod instances``) replays the engine's steps (:func:`_replay_instance`).
    Returns arrays ``(u0, u1)``: p95 TTFT (without staging waits), mean wait before the
    admitting step, mean and p95 staged bytes, prefill utilisation, the replay's end (seconds)
    and p95 TPOT.  A pair whose runs equal those of the pair before it in either direction copies
    its statistics.  Runtime complexity: O(u0 x u1 x requests x log requests) at most.
    """
    n, u0 = ht0.shape
    u1 = ht1.shape[1]
    ttft95 = np.zeros((u0, u1))
    mean_w = np.zeros((u0, u1))
    staged_mean = np.zeros((u0, u1))
    staged95 = np.zeros((u0, u1))
    rho_out = np.zeros((u0, u1))
    end_out = np.zeros((u0, u1))
    tpot = np.zeros((u0, u1))
    pre = np.empty(n)
    st = np.empty(n)
    start = np.empty(n)
    first = np.empty(n)
    finish = np.empty(n)
    t = np.empty(n)
    tp = np.empty(n)
    heap_key = np.empty(n, dtype=np.int64)
    heap_req = np.empty(n, dtype=np.int64)
    for a in range(u0):
        aa = max(a, gpu_bin)
        up = max(a - 1, gpu_bin)
        for c in range(u1):
            if n == 0:
                continue
            # the same run at every request as a pair already replayed (capacities past the
            # trace's reuse, bins below the GPU pool): the same statistics
            src_a, src_c = -1, -1
            if a > 0 and (up == aa or _same_runs(ht0, ht1, aa, up, c, c)):
                src_a, src_c = a - 1, c
            elif c > 0 and _same_runs(ht0, ht1, aa, aa, c, c - 1):
                src_a, src_c = a, c - 1
            if src_a >= 0:
                ttft95[a, c] = ttft95[src_a, src_c]
                mean_w[a, c] = mean_w[src_a, src_c]
                staged_mean[a, c] = staged_mean[src_a, src_c]
                staged95[a, c] = staged95[src_a, src_c]
                rho_out[a, c] = rho_out[src_a, src_c]
                end_out[a, c] = end_out[src_a, src_c]
                tpot[a, c] = tpot[src_a, src_c]
                continue
            busy = 0.0
            for r in range(n):
                hit = max(ht0[r, aa], ht1[r, c])
                gpu = ht0[r, gpu_bin] if gpu_bin >= 0 else 0.0
                st[r] = (hit - gpu) * kvb if hit > gpu else 0.0
                pre[r] = inp[r] - hit
                busy += pre[r] / prefill_rate
            end = 0.0
            for k in range(min(instances, n)):
                e = _replay_instance(k, instances, arrival, pre, st, out, held, prefill_rate, fast_read_bw,
                                     fast_latency, decode_step_1, decode_batch_cost, max_batch, max_prefill_tokens,
                                     pool_blocks, start, first, finish, heap_key, heap_req)
                end = max(end, e)
            sum_w = 0.0
            m = 0
            for r in range(n):
                t[r] = first[r] - arrival[r]
                sum_w += start[r] - arrival[r]
                if out[r] >= 2.0:
                    tp[m] = (finish[r] - first[r]) / (out[r] - 1.0)
                    m += 1
            mean_w[a, c] = sum_w / n
            ttft95[a, c] = _quantile(t, Q)
            staged_mean[a, c] = st.mean()
            staged95[a, c] = _quantile(st, Q)
            end_out[a, c] = end
            rho_out[a, c] = busy / instances / end if end > 0 else 0.0
            tpot[a, c] = _quantile(tp[:m], Q) if m else 0.0
    return ttft95, mean_w, staged_mean, staged95, rho_out, end_out, tpot


@njit(cache=True, nogil=True)
def _same_runs(ht0, ht1, a0, a1, c0, c1):  # pragma: no cover - compiled
    """Is every request's run ``max(ht0[r, a], ht1[r, c])`` the same at ``(a0, c0)`` and
    ``(a1, c1)``?  O(requests), stopping at the first difference."""
    for r in range(ht0.shape[0]):
        if max(ht0[r, a0], ht1[r, c0]) != max(ht0[r, a1], ht1[r, c1]):
            return False
    return True


@njit(cache=True, nogil=True)
def _replay_instance(k, instances, arrival, pre, staged, out, held, prefill_rate, fast_read_bw, fast_latency,
                     decode_step_1, decode_batch_cost, max_batch, max_prefill_tokens, pool_blocks, start, first, finish,
                     heap_key, heap_req):  # pragma: no cover - compiled
    """One instance's steps over its requests ``k, k + instances, ...`` (kvmm.sim.engine's
    scheduler without the caches): FCFS admission while the batch has room, the step's prefill
    budget lasts (the first always fits) and the GPU pool holds the request's ``held`` blocks;
    a step takes the staged bytes' read from the fast tier + the prefill + one decode step of
    the running batch; each running request decodes one token a step, so one admitted at step
    ``s`` finishes at step ``s + out - 1``.  Decode-only stretches jump to the next arrival or
    finish.  Writes ``start`` (the admitting step's start), ``first`` and ``finish`` of its
    requests; returns the last finish.  Runtime complexity: O(m log m) for its m requests."""
    n = arrival.shape[0]
    m = (n - 1 - k) // instances + 1
    now = 0.0
    step = 0
    head = 0  # next to admit (position in the instance's queue)
    arrived = 0  # positions < arrived have arrived
    size = 0  # heap of running requests by finishing step
    used = 0.0  # GPU blocks held by running requests
    done = 0
    while done < m:
        while arrived < m and arrival[k + arrived * instances] <= now:
            arrived += 1
        room = max_batch - size
        budget = float(max_prefill_tokens)
        first_pos = head
        tokens = 0.0
        load = 0.0
        while head < arrived and room > 0:
            r = k + head * instances
            if head > first_pos and pre[r] > budget:
                break
            if used + held[r] > pool_blocks and (size > 0 or head > first_pos):
                break
            used += held[r]
            room -= 1
            budget -= pre[r]
            tokens += pre[r]
            load += staged[r]
            start[r] = now
            head += 1
        if head == first_pos and size == 0:  # idle until the next arrival
            now = max(now, arrival[k + arrived * instances])
            continue
        if head == first_pos and head == arrived:  # decode only: jump to the next finish or arrival
            step_s = decode_step_1 * (1.0 + decode_batch_cost * (size - 1))
            j = heap_key[0] - step
            if arrived < m:
                j = max(1, min(j, math.ceil((arrival[k + arrived * instances] - now) / step_s - 1e-12)))
            now += j * step_s
            step += j
        else:
            dt = tokens / prefill_rate
            if load > 0.0:
                dt += load / fast_read_bw + fast_latency
            if size > 0:
                dt += decode_step_1 * (1.0 + decode_batch_cost * (size - 1))
            now += dt
            step += 1
        while size > 0 and heap_key[0] <= step:
            r = heap_req[0]
            finish[r] = now
            used -= held[r]
            done += 1
            size = _heap_pop(heap_key, heap_req, size)
        for p in range(first_pos, head):
            r = k + p * instances
            first[r] = now
            if out[r] <= 1.0:
                finish[r] = now
                used -= held[r]
                done += 1
            else:
                size = _heap_push(heap_key, heap_req, size, step + np.int64(out[r]) - 1, r)
    return now


@njit(cache=True, nogil=True)
def _heap_push(key, val, size, k, v):  # pragma: no cover - compiled
    """Push ``(k, v)`` on the binary min-heap ``key[:size]`` (ties: any order).  O(log size)."""
    i = size
    key[i] = k
    val[i] = v
    while i > 0:
        up = (i - 1) // 2
        if key[up] <= key[i]:
            break
        key[up], key[i] = key[i], key[up]
        val[up], val[i] = val[i], val[up]
        i = up
    return size + 1


@njit(cache=True, nogil=True)
def _heap_pop(key, val, size):  # pragma: no cover - compiled
    """Drop the heap's minimum.  O(log size)."""
    size -= 1
    key[0] = key[size]
    val[0] = val[size]
    i = 0
    while True:
        lo = 2 * i + 1
        if lo >= size:
            break
        if lo + 1 < size and key[lo + 1] < key[lo]:
            lo += 1
        if key[i] <= key[lo]:
            break
        key[lo], key[i] = key[i], key[lo]
        val[lo], val[i] = val[i], val[lo]
        i = lo
    return size


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
