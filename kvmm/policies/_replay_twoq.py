"""numba replay of 2Q (see :func:`kvmm.policies.replay` and :class:`kvmm.policies.TwoQPolicy`).

Three queues over dense ids share one pair of link arrays (a key is in at most one queue):
A1in (FIFO of first references), A1out (FIFO of ghosts) and Am (LRU).  Each queue's oldest is
at its ``tail``; new and promoted keys go to its ``head``.  Byte totals per queue; the quotas are
libCacheSim's: ``int(capacity * a_in_size_ratio)`` for A1in, ``int(capacity * a_out_size_ratio)``
for A1out, ``capacity - A1in's quota`` for Am.

Worked example, capacity 4 (A1in quota 1, A1out quota 2, Am quota 3), references ``a b c a``::

    a b c: misses, A1in = c b a (4 entries, over its quota of 1)
    a:     a hit in A1in (nothing moves)
    then d: A1in + Am + 1 > 4 and A1in is over its quota: a leaves A1in for A1out; d enters A1in
    then a: a miss that finds a's ghost; it enters Am

Runtime complexity: O(1) amortised per reference (each key leaves each queue at most once per
entry).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from kvmm.policies.twoq import check_twoq_ratios

#: (option, default) by libCacheSim's names (``TwoQ(a_in_size_ratio=0.25, a_out_size_ratio=0.5)``)
PARAMS_TWOQ: tuple = (("a_in_size_ratio", 0.25), ("a_out_size_ratio", 0.5))

NONE = -1
_OUT, _AIN, _AOUT, _AM = 0, 1, 2, 3


def replay_twoq(keys, dense, n_unique, sizes, capacity, a_in_size_ratio, a_out_size_ratio):
    """Hits of 2Q over ``dense`` (see :mod:`kvmm.policies._replay`)."""
    a_in_size_ratio, a_out_size_ratio = check_twoq_ratios(a_in_size_ratio, a_out_size_ratio)
    in_quota, out_quota = quotas(int(capacity), a_in_size_ratio, a_out_size_ratio)
    return _replay_twoq(dense, n_unique, sizes, capacity, np.int64(in_quota), np.int64(out_quota))


def quotas(capacity: int, a_in_size_ratio: float, a_out_size_ratio: float) -> tuple[int, int]:
    """A1in's and A1out's byte quotas as libCacheSim computes them (a C double truncated to int64)."""
    return int(capacity * float(a_in_size_ratio)), int(capacity * float(a_out_size_ratio))


@njit(cache=True, nogil=True)
def _replay_twoq(dense, n_unique, sizes, capacity, in_quota, out_quota):
    hits = np.zeros(dense.size, np.bool_)
    prev = np.full(n_unique, NONE, np.int64)  # towards the head (newer)
    next_ = np.full(n_unique, NONE, np.int64)  # towards the tail (older)
    where = np.zeros(n_unique, np.int8)
    size_of = np.zeros(n_unique, np.int64)
    head = np.full(4, NONE, np.int64)  # per queue code
    tail = np.full(4, NONE, np.int64)
    used = np.zeros(4, np.int64)
    am_quota = capacity - in_quota
    for i in range(dense.size):
        d = dense[i]
        q = where[d]
        if q == _AIN:
            hits[i] = True
            continue
        was_ghost = False
        if q == _AOUT:  # libCacheSim drops the ghost while looking the key up, before anything else
            _unlink(d, _AOUT, prev, next_, head, tail, used, size_of, where)
            was_ghost = True
        elif q == _AM:
            hits[i] = True
            if head[_AM] != d:
                _unlink(d, _AM, prev, next_, head, tail, used, size_of, where)
                _push(d, size_of[d], _AM, prev, next_, head, tail, used, size_of, where)
            continue
        size = sizes[i]
        if size > in_quota or size > capacity:  # libCacheSim's TwoQ admits nothing larger than A1in's quota
            continue
        while used[_AIN] + used[_AM] + size > capacity:
            if used[_AIN] > in_quota:
                old = tail[_AIN]
                old_size = size_of[old]
                _unlink(old, _AIN, prev, next_, head, tail, used, size_of, where)
                if old_size <= out_quota:  # a ghost larger than A1out is not remembered
                    while used[_AOUT] + old_size > out_quota:
                        _unlink(tail[_AOUT], _AOUT, prev, next_, head, tail, used, size_of, where)
                    _push(old, old_size, _AOUT, prev, next_, head, tail, used, size_of, where)
            else:
                _unlink(tail[_AM], _AM, prev, next_, head, tail, used, size_of, where)
        if was_ghost:
            if size <= am_quota:
                while used[_AM] + size > am_quota:  # Am makes room within its own quota
                    _unlink(tail[_AM], _AM, prev, next_, head, tail, used, size_of, where)
                _push(d, size, _AM, prev, next_, head, tail, used, size_of, where)
        else:
            _push(d, size, _AIN, prev, next_, head, tail, used, size_of, where)
    return hits


@njit(cache=True, nogil=True, inline="always")  # inlined: no per-call array refcounting
def _unlink(d, q, prev, next_, head, tail, used, size_of, where):
    p = prev[d]
    n = next_[d]
    if p == NONE:
        head[q] = n
    else:
        next_[p] = n
    if n == NONE:
        tail[q] = p
    else:
        prev[n] = p
    prev[d] = NONE
    next_[d] = NONE
    used[q] -= size_of[d]
    where[d] = _OUT


@njit(cache=True, nogil=True, inline="always")  # inlined: no per-call array refcounting
def _push(d, size, q, prev, next_, head, tail, used, size_of, where):
    h = head[q]
    prev[d] = NONE
    next_[d] = h
    if h == NONE:
        tail[q] = d
    else:
        prev[h] = d
    head[q] = d
    size_of[d] = size
    used[q] += size
    where[d] = q
