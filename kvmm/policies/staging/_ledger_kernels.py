"""numba kernels of :class:`kvmm.policies.staging.ledger.CommitmentLedger`: trigger + grant in one pass
(``poll_kernel``), the polls a periodic poller can skip (``idle_polls_kernel``), the
validation of a batch of claim ids (``check_claims_kernel``) and the progress report (``update_kernel``).

State codes (see ``kvmm.policies.staging.ledger``): 1 CLAIMED, 2 PENDING, 3 STAGING.
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


@njit(cache=True, nogil=True)
def idle_polls_kernel(state, nbytes, source, work_ahead, delay_s, updated_at, deadline, seq, n_slots, first, interval,
                      before, until, margin_s, poll_gap, last_poll, alpha, use_slack, rate, src_latency, src_bandwidth,
                      src_ratio, queue_bytes, free_bytes, timely, fifo):
    """Polls at ``first, first + interval, ...`` (``< before``, ``<= until``) that would change
    nothing, as ``poll`` + :func:`poll_kernel` compute them: ``(first poll not skipped, poll_gap,
    last_poll, polls skipped)``.  Nothing is written.

    A poll grants when the first pending slot in grant order fits ``free_bytes``; with no
    trigger the pending set and the free bytes stay as they are, so that is decided once.  A
    poll triggers when a CLAIMED slot meets the trigger with that poll's learned gap.
    """
    head = -1
    for s in range(n_slots):
        if state[s] == 2:
            if head < 0 or (seq[s] < seq[head] if fifo else
                            (deadline[s] < deadline[head] or (deadline[s] == deadline[head] and seq[s] < seq[head]))):
                head = s
    if head >= 0 and nbytes[head] <= free_bytes:
        return first, poll_gap, last_poll, 0
    nclaimed = 0
    if timely:
        for s in range(n_slots):
            if state[s] == 1:
                nclaimed += 1
    use_at = np.empty(nclaimed)
    ready_s = np.empty(nclaimed)
    j = 0
    if timely:
        for s in range(n_slots):
            if state[s] == 1:
                src = source[s]
                use_at[j] = (updated_at[s] + delay_s[s]) + work_ahead[s] / rate
                ready_s[j] = src_ratio[src] * (src_latency[src] + (queue_bytes[src] + nbytes[s]) / src_bandwidth[src])
                j += 1
    t = first
    skipped = 0
    while t < before and t <= until:
        gap = poll_gap
        if last_poll >= 0.0 and t > last_poll:
            gap = (1.0 - alpha) * poll_gap + alpha * (t - last_poll)
        margin = margin_s + gap
        for i in range(nclaimed):
            if use_at[i] - ready_s[i] - use_slack * max(use_at[i] - t, 0.0) <= t + margin:
                return t, poll_gap, last_poll, skipped
        poll_gap = gap
        last_poll = t
        skipped += 1
        t = t + interval
    return t, poll_gap, last_poll, skipped


@njit(cache=True, nogil=True)
def check_claims_kernel(ids, state, generation, n_slots, unique, allowed_mask):
    """Validate claim ids in one pass; return ``(code, value, slots)``.

    ``slots[i] = ids[i] & (2**32 - 1)``.  Checks, in this order (the first failing one wins):
    code 1: ``ids[i]`` is not an open claim (negative, slot never used, slot FREE or of another
    generation), ``value`` = the first such id; code 2 (``unique`` only): an id appears twice,
    ``value`` = the smallest such id; code 3: a slot's state is not in ``allowed_mask`` (bit
    ``1 << state``), ``value`` = the first such slot.  Code 0: all valid.
    Runtime complexity: O(k log k) with ``unique``, O(k) otherwise.
    """
    k = ids.shape[0]
    slots = np.empty(k, dtype=np.int64)
    for i in range(k):
        cid = ids[i]
        s = cid & 0xFFFFFFFF
        if cid < 0 or s >= n_slots or state[s] == 0 or generation[s] != (cid >> 32):
            return 1, cid, slots
        slots[i] = s
    if unique and k > 1:
        ordered = np.sort(ids)
        for i in range(1, k):
            if ordered[i] == ordered[i - 1]:
                return 2, ordered[i], slots
    for i in range(k):
        if not (allowed_mask >> state[slots[i]]) & 1:
            return 3, slots[i], slots
    return 0, 0, slots


@njit(cache=True, nogil=True)
def update_kernel(slots, work_ahead_new, delay_new, now, rate, state, needed_at, updated_at, delay_s, work_ahead,
                  deadline, lease_from, shift_out, horizon_out):
    """Record fresh progress for validated, distinct ``slots``.

    Per slot: ``old_use = updated_at + delay_s + work_ahead / rate`` (before),
    ``new_use = now + delay_new + work_ahead_new / rate``; ``shift_out = old_use - new_use``,
    ``horizon_out = max(old_use - now, 0)`` (the caller sums them with numpy, as before).  A
    PENDING slot never needed gets ``deadline = new_use``; a READY slot's lease restarts at
    ``now``; then the slot's work_ahead, delay_s and updated_at take the new values.
    Returns how many shifts are > 0 (none: the caller has nothing to sum).
    Runtime complexity: O(k).
    """
    positive = 0
    for i in range(slots.shape[0]):
        s = slots[i]
        old_use = (updated_at[s] + delay_s[s]) + work_ahead[s] / rate
        new_use = (now + delay_new[i]) + work_ahead_new[i] / rate
        shift_out[i] = old_use - new_use
        horizon_out[i] = max(old_use - now, 0.0)
        if state[s] == 2 and np.isnan(needed_at[s]):  # PENDING, not needed yet
            deadline[s] = new_use
        elif state[s] == 4:  # READY
            lease_from[s] = now
        work_ahead[s] = work_ahead_new[i]
        delay_s[s] = delay_new[i]
        updated_at[s] = now
        if shift_out[i] > 0.0:
            positive += 1
    return positive
