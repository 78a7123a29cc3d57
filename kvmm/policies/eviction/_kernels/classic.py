"""numba replays of LRU and FIFO (see :func:`kvmm.policies.replay`).

One doubly linked list over dense ids, most recent (LRU) or newest (FIFO) at ``head``; the
victim is ``tail``.  Worked example, capacity 2, references ``a b a c`` (dense a=0 b=1 c=2)::

    a: miss  list a          b: miss  list b a
    a: hit   LRU: list a b   (FIFO: b a)
    c: miss  LRU evicts b -> list c a   (FIFO evicts a -> list c b)

A key keeps the size it was inserted with (libCacheSim's ``get`` does not resize on a hit).
Runtime complexity: O(1) per reference.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from kvmm._kernels import prefetch

PARAMS_LRU: tuple = ()
PARAMS_FIFO: tuple = ()

NONE = -1
_RENUMBER_AHEAD = 32  # references ahead whose direct-address entry renumber_direct prefetches


def replay_lru(keys, dense, n_unique, sizes, capacity):
    """Hits of LRU over ``dense`` (see :mod:`kvmm.policies.eviction._replay`)."""
    return _replay_list(dense, n_unique, sizes, capacity, True)


def replay_fifo(keys, dense, n_unique, sizes, capacity):
    """Hits of FIFO over ``dense`` (see :mod:`kvmm.policies.eviction._replay`)."""
    return _replay_list(dense, n_unique, sizes, capacity, False)


@njit(cache=True, nogil=True)
def _replay_list(dense, n_unique, sizes, capacity, move_on_hit):
    hits = np.zeros(dense.size, np.bool_)
    prev = np.full(n_unique, NONE, np.int64)  # towards the head (newer)
    next_ = np.full(n_unique, NONE, np.int64)  # towards the tail (older)
    size_of = np.zeros(n_unique, np.int64)
    resident = np.zeros(n_unique, np.bool_)
    head = NONE
    tail = NONE
    used = 0
    for i in range(dense.size):
        d = dense[i]
        if resident[d]:
            hits[i] = True
            if move_on_hit and head != d:
                # unlink d (it has a prev, since it is not the head), then push it at the head;
                # written out, not kvmm._kernels' list primitives: 1.2-3x slower here (_kernels/__init__.py)
                p = prev[d]
                n = next_[d]
                next_[p] = n
                if n == NONE:
                    tail = p
                else:
                    prev[n] = p
                prev[d] = NONE
                next_[d] = head
                prev[head] = d
                head = d
            continue
        size = sizes[i]
        if size > capacity:  # larger than the whole cache: a miss, never inserted
            continue
        while used + size > capacity:
            victim = tail
            tail = prev[victim]
            if tail == NONE:
                head = NONE
            else:
                next_[tail] = NONE
            resident[victim] = False
            used -= size_of[victim]
        resident[d] = True
        size_of[d] = size
        used += size
        prev[d] = NONE
        next_[d] = head
        if head != NONE:
            prev[head] = d
        head = d
        if tail == NONE:
            tail = d
    return hits


@njit(cache=True, nogil=True)
def renumber_direct(keys, first_id, out):
    """Dense ids in order of first reference through a direct-address table: ``first_id[key]``
    is the key's id or -1 (all -1 on entry, ``len > max(keys)``); writes ``out``, returns the
    number of distinct keys.  Runtime complexity: O(n).

    The table is larger than the caches for a large key space and the keys are known ahead, so
    the entry ``_RENUMBER_AHEAD`` references ahead is prefetched (a third off a Zipf stream)."""
    n_unique = 0
    n = keys.size
    for i in range(n):
        if i + _RENUMBER_AHEAD < n:
            prefetch(first_id, keys[i + _RENUMBER_AHEAD])
        key = keys[i]
        dense = first_id[key]
        if dense < 0:
            dense = n_unique
            first_id[key] = dense
            n_unique += 1
        out[i] = dense
    return n_unique
