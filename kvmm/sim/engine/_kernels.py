"""The event loop's two numba kernels (:mod:`kvmm.sim.engine` calls them once per step or tick).

Kept apart from the engine so the engine module holds the loop itself; each is compared with a
plain-Python reference in ``tests/sim/test_sim_queue_work_ahead.py``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["_first_tick_not_before", "_claims_work_ahead"]


@njit(cache=True, nogil=True)
def _first_tick_not_before(tp: float, interval: float, before: float, until: float) -> float:
    """The first of the ticks ``tp, tp + interval, ...`` (each the previous plus ``interval``,
    as the loop adds them) that is ``>= before`` or ``> until``."""
    while tp < before and tp <= until:
        tp = tp + interval
    return tp


@njit(cache=True, nogil=True)
def _claims_work_ahead(waiting, prefill_tokens, claim_id, budget, room, max_batch):
    """For the queued requests ``waiting`` (in queue order) that hold a claim: ``(claim ids,
    prefill tokens of the steps before each one's own step)``.  The queue drains in order, a step
    at a time, each step up to ``budget`` tokens and the batch room (``room`` now, ``max_batch``
    in later steps); a step takes at least one request.  Token sums are integers, converted to
    float once per claim.  Runtime complexity: O(len(waiting)).
    """
    cids = np.empty(waiting.shape[0], dtype=np.int64)
    ahead = np.empty(waiting.shape[0], dtype=np.float64)
    k = 0
    before = step_tokens = step_count = 0
    for i in range(waiting.shape[0]):
        r = waiting[i]
        p = prefill_tokens[r]
        if step_count and (step_tokens + p > budget or step_count >= room):
            before += step_tokens
            step_tokens = step_count = 0
            room = max_batch
        if claim_id[r] >= 0:
            cids[k] = claim_id[r]
            ahead[k] = before
            k += 1
        step_tokens += p
        step_count += 1
    return cids[:k], ahead[:k]
