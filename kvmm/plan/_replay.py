"""The planner's step replay (numba): :func:`pair_statistics` runs :func:`replay_instance`, one
instance's scheduler steps without its caches, for every capacity pair of the grid.

:func:`replay_instance` replays kvmm.sim.engine's scheduler (kvmm/sim/engine/scheduler.py) for
the requests ``k, k + instances, ...`` of one instance, on the run's step clock: the latency
model's coefficient array (layout: :mod:`kvmm.sim.latency._kernels`) through the simulator's own
kernels, ``step_split`` for a step and ``decode_stretch`` for a decode-only stretch (closed form
as the contexts grow).  The plain-Python reference is ``replay`` in kvmm/testing/models/plan.py.

A request ``r`` needs ``pre[r]`` prompt tokens computed after ``inp[r] - pre[r]`` tokens it found
cached (its context), ``staged[r]`` bytes read from the fast tier in its admitting step, ``held[r]``
GPU blocks reserved from admission to its last token, and ``out[r]`` output tokens.

* **Chunked prefill** (``chunked``, vLLM V1): a step has ``budget`` tokens.  Each running decode
  takes one; then the partly prefilled requests, in admission order; then queued requests, in
  arrival order, while tokens are left, fewer than ``max_seqs`` sequences run and the GPU pool
  holds their blocks.  Each prefill takes ``min(tokens left to compute, tokens left in the step,
  threshold)`` (``threshold`` 0: no cap).  Its first token is at the end of the step that
  computes its last prompt token.
* **Whole prefills** (not ``chunked``): queued requests are admitted while fewer than
  ``max_seqs`` run, their whole prompts fit the step's ``budget`` of prefill tokens (the first
  always fits) and the pool holds their blocks; each computes its prompt in its admitting step.

Both: the first request admitted while nothing holds blocks always fits the pool.  A step takes
``staged bytes of the requests it admits / fast_read_bw + fast_latency`` (when any) plus the
clock's step time on the step's features (``P`` prefill tokens, ``A`` causal query-key pairs,
``Cp`` prefill context, ``D`` decodes, ``Cd`` their context, ``S`` sequences).  A request joins
the decode batch after its first token with context ``inp``, each decode step adds one to every
running context, and it leaves after ``out - 1`` decode steps (``Cd -= inp + out - 1``).  With
nothing queued or prefilling the decodes run as one stretch up to the first finish or the next
arrival, as the engine does.

numba's cache keys a compiled function by its own module's source only: after editing
``kvmm.sim.latency._kernels`` (``step_split``, ``decode_stretch``), delete this module's cache
(``kvmm/plan/__pycache__/_replay*.nbi`` / ``.nbc``) so the replay is compiled against the new clock.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from kvmm.sim.latency._kernels import decode_stretch, step_split

__all__ = ["pair_statistics", "replay_instance"]


#: the quantile of the latency objective
Q = 0.95


@njit(cache=True, nogil=True)
def pair_statistics(ht0, ht1, gpu_bin, inp, out, held, arrival, instances, coef, chunked, budget, max_seqs, threshold,
                    pool_blocks, fast_read_bw, fast_latency, kvb):  # pragma: no cover - compiled
    """Per (largest type-0 bin A, largest type-1 bin B): the step replay's statistics.

    ``ht0[r, A]`` / ``ht1[r, B]``: prompt tokens of request ``r`` in the leading run held at
    those capacities; the run is the longer of the two (exact with one stream).  Each instance
    (request ``r`` on ``r mod instances``) replays the engine's steps on the run's step clock
    (``coef``, a latency model's coefficient array) and scheduler (``chunked``, ``budget`` =
    max_num_batched_tokens, ``max_seqs``, ``threshold`` = long_prefill_token_threshold):
    :func:`replay_instance`.  Returns arrays ``(u0, u1)``: p95 TTFT (without
    staging waits), mean wait before the admitting step, mean and p95 staged bytes, prefill
    utilisation (the steps' prefill seconds per instance over the replay's end), the replay's end
    (seconds), p95 TPOT and the longest queue of one instance.  A pair whose runs equal those of
    the pair before it in either direction copies its statistics.  Runtime complexity: O(u0 x u1
    x steps) at most.
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
    queue_out = np.zeros((u0, u1))
    pre = np.empty(n)
    st = np.empty(n)
    start = np.empty(n)
    first = np.empty(n)
    finish = np.empty(n)
    t = np.empty(n)
    tp = np.empty(n)
    heap_key = np.empty(n, dtype=np.int64)
    heap_req = np.empty(n, dtype=np.int64)
    pf_req = np.empty(n, dtype=np.int64)
    pf_done = np.empty(n)
    pf_new = np.empty(n)
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
                queue_out[a, c] = queue_out[src_a, src_c]
                continue
            for r in range(n):
                hit = max(ht0[r, aa], ht1[r, c])
                gpu = ht0[r, gpu_bin] if gpu_bin >= 0 else 0.0
                st[r] = (hit - gpu) * kvb if hit > gpu else 0.0
                pre[r] = inp[r] - hit
            end = 0.0
            busy = 0.0
            queue = 0
            for k in range(min(instances, n)):
                e, b, q = replay_instance(k, instances, arrival, inp, pre, st, out, held, coef, chunked, budget,
                                          max_seqs, threshold, pool_blocks, fast_read_bw, fast_latency, start, first,
                                          finish, heap_key, heap_req, pf_req, pf_done, pf_new)
                end = max(end, e)
                busy += b
                queue = max(queue, q)
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
            queue_out[a, c] = queue
    return ttft95, mean_w, staged_mean, staged95, rho_out, end_out, tpot, queue_out


@njit(cache=True, nogil=True)
def _same_runs(ht0, ht1, a0, a1, c0, c1):  # pragma: no cover - compiled
    """Is every request's run ``max(ht0[r, a], ht1[r, c])`` the same at ``(a0, c0)`` and
    ``(a1, c1)``?  O(requests), stopping at the first difference."""
    for r in range(ht0.shape[0]):
        if max(ht0[r, a0], ht1[r, c0]) != max(ht0[r, a1], ht1[r, c1]):
            return False
    return True


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
def replay_instance(k, instances, arrival, inp, pre, staged, out, held, coef, chunked, budget, max_seqs, threshold,
                    pool_blocks, fast_read_bw, fast_latency, start, first, finish, heap_key, heap_req, pf_req,
                    pf_done, pf_new):  # pragma: no cover - compiled
    """Replay instance ``k``'s requests (see the module docstring).  Writes ``start`` (the
    admitting step's start), ``first`` and ``finish`` of its requests; ``heap_*`` and ``pf_*``
    are scratch arrays of at least its request count.  Returns ``(end, prefill_busy_s,
    max_waiting)``: its last finish, the seconds of its steps' prefill parts (staging reads
    included) and the longest queue it saw.  Runtime complexity: O(steps x (running prefills)
    + m log m) for its m requests; a decode-only stretch is O(log k)."""
    n = arrival.shape[0]
    m = (n - 1 - k) // instances + 1
    cap = float(threshold) if threshold > 0 else float(budget)
    now = 0.0
    step = 0
    head = 0  # next to admit (position in the instance's queue)
    arrived = 0  # positions < arrived have arrived
    size = 0  # heap of running decodes by finishing step
    npf = 0  # partly prefilled requests (chunked), in admission order
    used = 0.0  # GPU blocks held by admitted requests
    cd = 0.0  # the running decodes' context sum
    busy = 0.0
    max_waiting = 0
    done = 0
    while done < m:
        while arrived < m and arrival[k + arrived * instances] <= now:
            arrived += 1
        max_waiting = max(max_waiting, arrived - head)
        first_pos = head
        chunks = 0
        p_tok = 0.0
        pairs = 0.0
        p_ctx = 0.0
        load = 0.0
        if chunked:
            left = float(budget - size)
            for i in range(npf):
                if left <= 0.0:
                    break
                r = pf_req[i]
                new = min(pre[r] - pf_done[i], left, cap)
                ctx = inp[r] - pre[r] + pf_done[i]
                pf_new[i] = new
                p_tok += new
                pairs += new * ctx + new * (new + 1.0) / 2.0
                p_ctx += ctx
                chunks += 1
                left -= new
            room = max_seqs - size - npf
            while head < arrived and room > 0 and left > 0.0:
                r = k + head * instances
                if used + held[r] > pool_blocks and (size > 0 or npf > 0):
                    break
                used += held[r]
                new = min(pre[r], left, cap)
                ctx = inp[r] - pre[r]
                pf_req[npf] = r
                pf_done[npf] = 0.0
                pf_new[npf] = new
                npf += 1
                p_tok += new
                pairs += new * ctx + new * (new + 1.0) / 2.0
                p_ctx += ctx
                chunks += 1
                left -= new
                room -= 1
                load += staged[r]
                start[r] = now
                head += 1
        else:
            left = float(budget)
            room = max_seqs - size
            while head < arrived and room > 0:
                r = k + head * instances
                if head > first_pos and pre[r] > left:
                    break
                if used + held[r] > pool_blocks and (size > 0 or head > first_pos):
                    break
                used += held[r]
                ctx = inp[r] - pre[r]
                p_tok += pre[r]
                pairs += pre[r] * ctx + pre[r] * (pre[r] + 1.0) / 2.0
                p_ctx += ctx
                chunks += 1
                left -= pre[r]
                room -= 1
                load += staged[r]
                start[r] = now
                head += 1
        if chunks == 0 and size == 0:  # idle until the next arrival
            now = max(now, arrival[k + arrived * instances])
            continue
        if chunks == 0 and npf == 0 and head == arrived:  # decode only: one stretch to a finish or an arrival
            until = arrival[k + arrived * instances] - now if arrived < m else math.inf
            j, seconds = decode_stretch(coef, np.int64(size), cd, heap_key[0] - step, until)
            now += seconds
            step += j
            cd += j * size
        else:
            prefill_s, decode_s = step_split(coef, p_tok, pairs, p_ctx, float(size), cd, float(chunks + size))
            dt = load / fast_read_bw + fast_latency if load > 0.0 else 0.0
            dt += prefill_s
            busy += dt
            if size > 0:
                dt += decode_s
            now += dt
            step += 1
            cd += size
        while size > 0 and heap_key[0] <= step:
            r = heap_req[0]
            finish[r] = now
            used -= held[r]
            cd -= inp[r] + out[r] - 1.0
            done += 1
            size = _heap_pop(heap_key, heap_req, size)
        if chunked:
            kept = 0
            for i in range(npf):
                r = pf_req[i]
                if i < chunks:
                    pf_done[i] += pf_new[i]
                if i < chunks and pf_done[i] >= pre[r]:
                    size = _prefill_done(r, now, step, out, first, finish, heap_key, heap_req, size)
                    if out[r] <= 1.0:  # done at its first token
                        used -= held[r]
                        done += 1
                    else:  # joins the decodes
                        cd += inp[r]
                else:
                    pf_req[kept] = r
                    pf_done[kept] = pf_done[i]
                    kept += 1
            npf = kept
        else:
            for p in range(first_pos, head):
                r = k + p * instances
                size = _prefill_done(r, now, step, out, first, finish, heap_key, heap_req, size)
                if out[r] <= 1.0:
                    used -= held[r]
                    done += 1
                else:
                    cd += inp[r]
    return now, busy, max_waiting


@njit(cache=True, nogil=True)
def _prefill_done(r, now, step, out, first, finish, heap_key, heap_req, size):  # pragma: no cover - compiled
    """``r``'s last prompt token was computed by the step ending ``now`` (step number ``step``):
    its first token.  With one output token it is done; else it joins the decode heap, due at
    step ``step + out - 1``.  Returns the heap's size."""
    first[r] = now
    if out[r] <= 1.0:
        finish[r] = now
        return size
    return _heap_push(heap_key, heap_req, size, step + np.int64(out[r]) - 1, r)


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
