"""numba kernel of :class:`kvmm.policies.ledger.CommitmentLedger`: trigger + grant in one pass.

State codes (see ``kvmm.policies.ledger``): 1 CLAIMED, 2 PENDING, 3 STAGING.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def poll_kernel(state, nbytes, source, work_ahead, delay_s, updated_at, deadline, seq, committed_at, predicted_stage_s,
                model_stage_s, n_slots, now, margin, use_slack, rate, src_latency, src_bandwidth, src_ratio, queue_bytes,
                free_bytes, timely, fifo, out):
    """Trigger due claims, then grant pending ones within ``free_bytes``; return the count.

    Trigger (timely only): CLAIMED slot with
    ``use_at - ready_s - use_slack * max(use_at - now, 0) <= now + margin`` becomes
    PENDING with deadline ``use_at``, where ``use_at = updated_at + delay_s + work_ahead / rate`` and
    ``ready_s = ratio * (latency + (queue_bytes + nbytes) / bandwidth)`` (queue at poll start).
    Grant: pending slots in (deadline, seq) order, or seq order if ``fifo``; stop at the first
    that does not fit.
    Granted slots become STAGING with ``committed_at = now``, their bandwidth-model staging time
    ``model_stage_s = latency + (queue_bytes + nbytes) / bandwidth`` and the corrected prediction
    ``predicted_stage_s = ratio * model_stage_s`` (the queue grows with each grant); their slots
    are written to ``out``.
    Runtime complexity: O(n_slots + p log p) for p pending slots.
    """
    npend = 0
    for s in range(n_slots):
        st = state[s]
        if st == 1 and timely:  # CLAIMED
            src = source[s]
            use_at = (updated_at[s] + delay_s[s]) + work_ahead[s] / rate
            ready_s = src_ratio[src] * (src_latency[src] + (queue_bytes[src] + nbytes[s]) / src_bandwidth[src])
            if use_at - ready_s - use_slack * max(use_at - now, 0.0) <= now + margin:
                state[s] = 2
                deadline[s] = use_at
                st = 2
        if st == 2:
            npend += 1
    if npend == 0:
        return 0
    cand = np.empty(npend, dtype=np.int64)
    j = 0
    for s in range(n_slots):
        if state[s] == 2:
            cand[j] = s
            j += 1
    # order by (deadline, seq): sort by seq, then a stable sort by deadline; fifo: seq only
    by_seq = cand[np.argsort(seq[cand])]
    order = by_seq if fifo else by_seq[np.argsort(deadline[by_seq], kind="mergesort")]
    ng = 0
    for j in range(npend):
        s = order[j]
        if nbytes[s] > free_bytes:
            break  # strict order: a request that does not fit blocks later ones (no starvation)
        free_bytes -= nbytes[s]
        src = source[s]
        model_stage_s[s] = src_latency[src] + (queue_bytes[src] + nbytes[s]) / src_bandwidth[src]
        predicted_stage_s[s] = src_ratio[src] * model_stage_s[s]
        queue_bytes[src] += nbytes[s]
        committed_at[s] = now
        state[s] = 3
        out[ng] = s
        ng += 1
    return ng
