"""numba replay of SIEVE, exactly as libCacheSim's ``Sieve.c`` (see :func:`kvmm.policies.replay`
and :class:`kvmm.policies.SIEVEPolicy` for the rules).

One doubly linked list over dense ids, newest at ``head``, oldest at ``tail``; ``newer`` points
towards the head (libCacheSim's ``queue.prev``); a visited bit per key; the hand is a dense id or
``NONE`` (start at the tail).
Runtime complexity: O(1) amortised per reference (the hand clears each bit it passes, and a bit
is set at most once per hit).
"""

from __future__ import annotations

import numpy as np
from numba import njit

PARAMS_SIEVE: tuple = ()

NONE = -1


def replay_sieve(keys, dense, n_unique, sizes, capacity):
    """Hits of libCacheSim's SIEVE over ``dense`` (see :mod:`kvmm.policies.eviction._replay`)."""
    return _replay(dense, n_unique, sizes, capacity)


@njit(cache=True, nogil=True)
def _replay(dense, n_unique, sizes, capacity):
    hits = np.zeros(dense.size, np.bool_)
    newer = np.full(n_unique, NONE, np.int64)
    older = np.full(n_unique, NONE, np.int64)
    visited = np.zeros(n_unique, np.bool_)
    resident = np.zeros(n_unique, np.bool_)
    size_of = np.zeros(n_unique, np.int64)
    head = NONE
    tail = NONE
    hand = NONE
    used = 0
    for i in range(dense.size):
        d = dense[i]
        if resident[d]:
            hits[i] = True
            visited[d] = True
            continue
        size = sizes[i]
        if size > capacity:  # larger than the whole cache: a miss, never inserted
            continue
        while used + size > capacity:
            v = tail if hand == NONE else hand
            while visited[v]:  # clear the bits it passes, towards the head, wrapping to the tail
                visited[v] = False
                v = tail if newer[v] == NONE else newer[v]
            hand = newer[v]
            # unlink v
            o = older[v]
            n = newer[v]
            if o == NONE:
                tail = n
            else:
                newer[o] = n
            if n == NONE:
                head = o
            else:
                older[n] = o
            resident[v] = False
            used -= size_of[v]
        resident[d] = True
        visited[d] = False
        size_of[d] = size
        used += size
        newer[d] = NONE
        older[d] = head
        if head != NONE:
            newer[head] = d
        head = d
        if tail == NONE:
            tail = d
    return hits
