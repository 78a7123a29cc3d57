"""numba replay of CLOCK (see :func:`kvmm.policies.replay` and :class:`kvmm.policies.ClockPolicy`).

libCacheSim's queue (tail = oldest, a key given a second chance moves to the head) is a ring
buffer here: ``front`` is the tail, new and re-queued keys are written at ``back``.  At most
``n_unique`` keys are resident, so a ring of ``n_unique + 1`` slots never overflows.  Worked
example, capacity 2, ``n_bit_counter=1``, references ``a b a c`` (dense a=0 b=1 c=2)::

    a: miss  ring a(0)          b: miss  ring a(0) b(0)
    a: hit   a's counter -> 1
    c: miss  a(1) loses 1, goes to the back: ring b(0) a(0); b(0) is evicted -> ring a(0) c(0)

Runtime complexity: O(1) per reference plus the keys the hand passes over (amortised O(1)).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from kvmm.policies.eviction.clock import clock_max_freq, clock_params

PARAMS_CLOCK: tuple = (("init_freq", 0), ("n_bit_counter", 1))


def replay_clock(keys, dense, n_unique, sizes, capacity, init_freq=0, n_bit_counter=1):
    """Hits of CLOCK over ``dense`` (see :mod:`kvmm.policies.eviction._replay`); options as libCacheSim's
    ``Clock`` (a bad one is a :class:`~kvmm.errors.BadInputError` / ``DTypeError``)."""
    init_freq, n_bit_counter = clock_params(init_freq, n_bit_counter)
    return _replay_clock(dense, n_unique, sizes, capacity, np.int64(init_freq), np.int64(clock_max_freq(n_bit_counter)))


@njit(cache=True, nogil=True)
def _replay_clock(dense, n_unique, sizes, capacity, init_freq, max_freq):
    hits = np.zeros(dense.size, np.bool_)
    freq = np.zeros(n_unique, np.int64)
    size_of = np.zeros(n_unique, np.int64)
    resident = np.zeros(n_unique, np.bool_)
    slots = n_unique + 1
    ring = np.empty(slots, np.int64)
    front = 0  # the tail of libCacheSim's queue: where the hand looks
    back = 0  # where the next key is queued (the head)
    used = 0
    for i in range(dense.size):
        d = dense[i]
        if resident[d]:
            hits[i] = True
            if freq[d] < max_freq:
                freq[d] += 1
            continue
        size = sizes[i]
        if size > capacity:  # larger than the whole cache: a miss, never inserted
            continue
        while used + size > capacity:
            victim = ring[front]
            front += 1
            if front == slots:
                front = 0
            if freq[victim] >= 1:  # second chance: lose 1, back to the head
                freq[victim] -= 1
                ring[back] = victim
                back += 1
                if back == slots:
                    back = 0
            else:
                resident[victim] = False
                used -= size_of[victim]
        resident[d] = True
        freq[d] = init_freq
        size_of[d] = size
        used += size
        ring[back] = d
        back += 1
        if back == slots:
            back = 0
    return hits
