"""numba replay of 2Q (see :func:`kvmm.policies.replay` and :class:`kvmm.policies.TwoQPolicy`).

Three queues over dense ids share one node table (a row per key: links, size, queue; a key is
in at most one queue):
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

from kvmm.policies.eviction.twoq import check_twoq_ratios

#: (option, default) by libCacheSim's names (``TwoQ(a_in_size_ratio=0.25, a_out_size_ratio=0.5)``)
PARAMS_TWOQ: tuple = (("a_in_size_ratio", 0.25), ("a_out_size_ratio", 0.5))

NONE = -1
_OUT, _AIN, _AOUT, _AM = 0, 1, 2, 3


def replay_twoq(keys, dense, n_unique, sizes, capacity, a_in_size_ratio, a_out_size_ratio):
    """Hits of 2Q over ``dense`` (see :mod:`kvmm.policies.eviction._replay`)."""
    a_in_size_ratio, a_out_size_ratio = check_twoq_ratios(a_in_size_ratio, a_out_size_ratio)
    in_quota, out_quota = quotas(int(capacity), a_in_size_ratio, a_out_size_ratio)
    node = np.empty((n_unique, 4), node_dtype(n_unique, in_quota))
    return _replay_twoq(dense, node, sizes, capacity, np.int64(in_quota), np.int64(out_quota))


def node_dtype(n_unique: int, largest_stored: int) -> type:
    """int32 for a node table whose ids and stored sizes fit in it (half the memory of int64: the
    kernel is bound by random accesses to the table, and a smaller one stays in cache), else int64."""
    return np.int32 if max(int(n_unique), int(largest_stored)) < 2**31 - 1 else np.int64


def quotas(capacity: int, a_in_size_ratio: float, a_out_size_ratio: float) -> tuple[int, int]:
    """A1in's and A1out's byte quotas as libCacheSim computes them (a C double truncated to int64)."""
    return int(capacity * float(a_in_size_ratio)), int(capacity * float(a_out_size_ratio))


# per-key columns of the node table: one row per key, so a key's links, size and queue share a
# cache line (the kernel is bound by random memory accesses); int32 where ids and sizes fit
_PREV, _NEXT, _SIZE, _WHERE = 0, 1, 2, 3
_HEAD, _TAIL, _USED = 0, 1, 2


@njit(cache=True, nogil=True)
def _replay_twoq(dense, node, sizes, capacity, in_quota, out_quota):
    hits = np.zeros(dense.size, np.bool_)
    node[:, _PREV] = NONE  # towards the head (newer)
    node[:, _NEXT] = NONE  # towards the tail (older)
    node[:, _SIZE] = 0
    node[:, _WHERE] = _OUT
    # per queue code: qs[_HEAD, q], qs[_TAIL, q], qs[_USED, q] (one array: each helper call
    # increments and decrements the reference count of every array it is passed)
    qs = np.zeros((3, 4), np.int64)
    qs[_HEAD, :] = NONE
    qs[_TAIL, :] = NONE
    am_quota = capacity - in_quota
    for i in range(dense.size):
        d = dense[i]
        q = node[d, _WHERE]
        if q == _AIN:
            hits[i] = True
            continue
        was_ghost = False
        if q == _AOUT:  # libCacheSim drops the ghost while looking the key up, before anything else
            _unlink(d, _AOUT, node, qs)
            was_ghost = True
        elif q == _AM:
            hits[i] = True
            if qs[_HEAD, _AM] != d:
                _unlink(d, _AM, node, qs)
                _push(d, node[d, _SIZE], _AM, node, qs)
            continue
        size = sizes[i]
        if size > in_quota or size > capacity:  # libCacheSim's TwoQ admits nothing larger than A1in's quota
            continue
        while qs[_USED, _AIN] + qs[_USED, _AM] + size > capacity:
            if qs[_USED, _AIN] > in_quota:
                old = qs[_TAIL, _AIN]
                old_size = node[old, _SIZE]
                _unlink(old, _AIN, node, qs)
                if old_size <= out_quota:  # a ghost larger than A1out is not remembered
                    while qs[_USED, _AOUT] + old_size > out_quota:
                        _unlink(qs[_TAIL, _AOUT], _AOUT, node, qs)
                    _push(old, old_size, _AOUT, node, qs)
            else:
                _unlink(qs[_TAIL, _AM], _AM, node, qs)
        if was_ghost:
            if size <= am_quota:
                while qs[_USED, _AM] + size > am_quota:  # Am makes room within its own quota
                    _unlink(qs[_TAIL, _AM], _AM, node, qs)
                _push(d, size, _AM, node, qs)
        else:
            _push(d, size, _AIN, node, qs)
    return hits


@njit(cache=True, nogil=True, inline="always")  # inlined: no per-call array refcounting
def _unlink(d, q, node, qs):
    p = node[d, _PREV]
    n = node[d, _NEXT]
    if p == NONE:
        qs[_HEAD, q] = n
    else:
        node[p, _NEXT] = n
    if n == NONE:
        qs[_TAIL, q] = p
    else:
        node[n, _PREV] = p
    node[d, _PREV] = NONE
    node[d, _NEXT] = NONE
    qs[_USED, q] -= node[d, _SIZE]
    node[d, _WHERE] = _OUT


@njit(cache=True, nogil=True, inline="always")
def _push(d, size, q, node, qs):
    h = qs[_HEAD, q]
    node[d, _PREV] = NONE
    node[d, _NEXT] = h
    if h == NONE:
        qs[_TAIL, q] = d
    else:
        node[h, _PREV] = d
    qs[_HEAD, q] = d
    node[d, _SIZE] = size
    qs[_USED, q] += size
    node[d, _WHERE] = q
