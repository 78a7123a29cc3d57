"""numba replay of LIRS as libCacheSim's ``LIRS`` implements it (see :func:`kvmm.policies.replay`
and, for the rules, ``kvmm/testing/models/lirs.py``).

Per dense id (a row of one node table): the stack S (every recently seen key, LIR or HIR,
resident or not), the queue Q (resident HIR keys) and NH (S's non-resident HIR keys), each a
doubly linked list with the most recent at its head and the bottom / oldest at its tail.  A key
can be in S and Q (a resident HIR) or in S and NH (a non-resident HIR) at once, so each list has
its own links.  Bytes:
``hirs_limit = max(1, int(hirs_ratio * capacity))`` for the resident HIR keys, ``capacity -
hirs_limit`` for the LIR keys; S's keys are forgotten (oldest non-resident first) while they
total more than ``2 * capacity``.

Worked example, capacity 3 (hirs_limit 1, lirs_limit 2), references ``a b c a d c``::

    a b: LIR (S = b a);  c: the LIR set is full, c is a resident HIR (S = c b a, Q = c)
    a: an LIR hit, to S's top (S = a c b)
    d: both sets are full: c leaves Q (non-resident in S); d a resident HIR (S = d a c b, Q = d)
    c: a miss on a non-resident HIR of S: the bottom LIR b is demoted to Q (d leaves), c is LIR

libCacheSim's rules, not the paper's, where they differ: a hit on a resident HIR key that is not
in S demotes LIR keys until its size would fit the LIR set (the paper changes no status); a new
key larger than either limit is never stored; S is bounded by bytes (``2 * capacity``), not by
the paper's count of non-resident entries.  One case is not libCacheSim's: when such a hit's own
demotions push the key itself out of Q (sizes only), libCacheSim's loop keeps reading the size of
the freed Q object (a use after free in ``hit_RD_HIRinQ``); here it uses the key's own size
(kvmm/testing/models/lirs.py counts those references; the parity tests stop at the first).

Runtime complexity: O(1) amortised per reference (pruning removes each key from S at most once
per insertion).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from kvmm.errors import BadInputError, DTypeError

#: (option, default) by libCacheSim's names (``hirs_ratio`` in LIRS.c; the Python binding has no option)
PARAMS_LIRS: tuple = (("hirs_ratio", 0.01),)

NONE = -1
# One row per key of the node table (a key's links, flags and sizes share cache lines), and one
# global array: each helper call increments and decrements the reference count of every array it
# is passed, so the kernel passes two.  Columns: links of S, Q, NH (prev towards the head, next
# towards the tail), membership and status bits, the key's size (one column: the size it was
# stored with, which S and Q both remember).
_SP, _SN, _QP, _QN, _NP, _NN, _FLAGS, _SIZE = range(8)
_COLUMNS = 8  # 32 bytes in int32: a row never straddles two cache lines
# _FLAGS bits: in S, Q, NH (bit = the list's number), LIR, resident
_IN_S, _IN_Q, _IN_NH, _IS_LIR, _RES = 1, 2, 4, 8, 16
# the global array: [2*list] head and [2*list+1] tail of S (0), Q (1), NH (2); then the counters
_LIR, _HIR, _OCC, _SBYTES = 6, 7, 8, 9


def replay_lirs(keys, dense, n_unique, sizes, capacity, hirs_ratio):
    """Hits of LIRS over ``dense`` (see :mod:`kvmm.policies.eviction._replay`)."""
    hirs_limit = lirs_limits(int(capacity), check_hirs_ratio(hirs_ratio))[0]
    # int32 rows where ids and stored sizes (<= capacity) fit: half the memory of int64, and the
    # kernel is bound by random accesses to the table
    dtype = np.int32 if max(int(n_unique), int(capacity)) < 2**31 - 1 else np.int64
    node = np.zeros((n_unique, _COLUMNS), dtype)
    return _replay_lirs(dense, node, sizes, capacity, np.int64(hirs_limit), np.int64(capacity - hirs_limit))


def lirs_limits(capacity: int, hirs_ratio: float) -> tuple[int, int]:
    """``(hirs_limit, lirs_limit)`` as libCacheSim computes them."""
    hirs_limit = max(1, int(hirs_ratio * capacity))
    return hirs_limit, capacity - hirs_limit


def check_hirs_ratio(hirs_ratio) -> float:
    """``hirs_ratio`` as a float in (0, 1) (the HIR residents' share of the capacity)."""
    if isinstance(hirs_ratio, bool) or not isinstance(hirs_ratio, (int, float, np.integer, np.floating)):
        raise DTypeError(f"hirs_ratio must be a number, got {hirs_ratio!r}")
    value = float(hirs_ratio)
    if math.isnan(value) or not 0.0 < value < 1.0:
        raise BadInputError(f"hirs_ratio must be in (0, 1) (the HIR residents' share of the capacity), got {hirs_ratio!r}")
    return value


@njit(cache=True, nogil=True)
def _replay_lirs(dense, node, sizes, capacity, hirs_limit, lirs_limit):
    hits = np.zeros(dense.size, np.bool_)
    node[:, :6] = NONE
    g = np.zeros(10, np.int64)
    g[:6] = NONE
    for i in range(dense.size):
        d = dense[i]
        size = sizes[i]
        in_s = node[d, _FLAGS] & _IN_S != 0
        if in_s:
            _to_top(0, d, node, g)
        if node[d, _FLAGS] & _IN_Q != 0:
            _to_top(1, d, node, g)
        if in_s and node[d, _FLAGS] & _IS_LIR != 0:
            hits[i] = True
            if g[0] != g[1] and node[g[1], _FLAGS] & _IS_LIR == 0:  # S's bottom is HIR: prune
                _prune(node, g)
        elif in_s and node[d, _FLAGS] & _RES != 0:  # a resident HIR in S: it becomes LIR
            hits[i] = True
            if node[d, _FLAGS] & _IN_Q != 0:
                g[_HIR] -= node[d, _SIZE]
                g[_OCC] -= node[d, _SIZE]
                _unlink(1, d, node, g)
            while g[_LIR] + node[d, _SIZE] > lirs_limit and g[1] != NONE:
                _demote(node, g, hirs_limit)
            node[d, _FLAGS] |= _IS_LIR
            g[_LIR] += node[d, _SIZE]
            g[_OCC] += node[d, _SIZE]
        elif node[d, _FLAGS] & _IN_Q != 0:  # a resident HIR only in Q: it enters S's top, still HIR
            hits[i] = True
            while g[_LIR] + node[d, _SIZE] > lirs_limit and g[1] != NONE:
                _demote(node, g, hirs_limit)
            _push(0, d, node, g)
            node[d, _FLAGS] &= ~_IS_LIR
            node[d, _FLAGS] |= _RES
            g[_SBYTES] += node[d, _SIZE]
        elif size > capacity:
            pass  # larger than the whole cache: a miss, never inserted
        elif in_s:  # a non-resident HIR of S: it comes back as LIR (with its remembered size)
            while g[_LIR] + node[d, _SIZE] > lirs_limit and g[1] != NONE:
                _demote(node, g, hirs_limit)
            if node[d, _FLAGS] & _IN_NH != 0:
                _unlink(2, d, node, g)
            while g[_OCC] + size > capacity and g[1] != NONE:
                while g[_HIR] >= hirs_limit and g[3] != NONE:
                    _evict_hir(node, g)
                _demote(node, g, hirs_limit)
            node[d, _FLAGS] |= _IS_LIR
            node[d, _FLAGS] |= _RES
            g[_LIR] += node[d, _SIZE]
            g[_OCC] += node[d, _SIZE]
        elif size <= lirs_limit and size <= hirs_limit:  # a new key (libCacheSim refuses larger ones)
            if g[_LIR] + size > lirs_limit:
                while g[_HIR] + size > hirs_limit and g[3] != NONE:
                    _evict_hir(node, g)
            _push(0, d, node, g)
            node[d, _FLAGS] |= _RES
            node[d, _SIZE] = size
            g[_SBYTES] += size
            g[_OCC] += size
            if g[_LIR] + size <= lirs_limit:
                node[d, _FLAGS] |= _IS_LIR
                g[_LIR] += size
            else:
                node[d, _FLAGS] &= ~_IS_LIR
                _push(1, d, node, g)
                node[d, _SIZE] = size
                g[_HIR] += size
        # S remembers at most 2 * capacity bytes: forget the oldest non-resident keys
        while g[_SBYTES] > 2 * capacity and g[5] != NONE:
            old = g[5]
            _unlink(2, old, node, g)
            _unlink(0, old, node, g)
            g[_SBYTES] -= node[old, _SIZE]
    return hits


@njit(cache=True, nogil=True, inline="always")
def _prune(node, g):
    """S's bottom leaves while it is HIR and not also S's top."""
    while g[0] != g[1]:
        b = g[1]
        if node[b, _FLAGS] & _IS_LIR != 0:
            break
        if node[b, _FLAGS] & _RES == 0 and node[b, _FLAGS] & _IN_NH != 0:
            _unlink(2, b, node, g)
        _unlink(0, b, node, g)
        g[_SBYTES] -= node[b, _SIZE]


@njit(cache=True, nogil=True, inline="always")
def _evict_hir(node, g):
    """Q's oldest leaves the cache; in S it becomes non-resident (and joins NH)."""
    b = g[3]
    g[_HIR] -= node[b, _SIZE]
    g[_OCC] -= node[b, _SIZE]
    _unlink(1, b, node, g)
    if node[b, _FLAGS] & _IN_S != 0:
        node[b, _FLAGS] &= ~_RES
        _push(2, b, node, g)


@njit(cache=True, nogil=True, inline="always")
def _demote(node, g, hirs_limit):
    """S's bottom (an LIR key) leaves S for Q's top, or the cache when larger than hirs_limit; prune."""
    b = g[1]
    size = node[b, _SIZE]
    _unlink(0, b, node, g)
    g[_SBYTES] -= size
    g[_LIR] -= size
    g[_OCC] -= size
    node[b, _FLAGS] &= ~_IS_LIR
    if size <= hirs_limit:
        while g[_HIR] + size > hirs_limit and g[3] != NONE:
            _evict_hir(node, g)
        _push(1, b, node, g)
        node[b, _SIZE] = size
        g[_HIR] += size
        g[_OCC] += size
    _prune(node, g)


@njit(cache=True, nogil=True, inline="always")
def _unlink(lst, d, node, g):
    p = node[d, 2 * lst]
    n = node[d, 2 * lst + 1]
    if p == NONE:
        g[2 * lst] = n
    else:
        node[p, 2 * lst + 1] = n
    if n == NONE:
        g[2 * lst + 1] = p
    else:
        node[n, 2 * lst] = p
    node[d, 2 * lst] = NONE
    node[d, 2 * lst + 1] = NONE
    node[d, _FLAGS] &= ~(1 << lst)


@njit(cache=True, nogil=True, inline="always")
def _push(lst, d, node, g):
    h = g[2 * lst]
    node[d, 2 * lst] = NONE
    node[d, 2 * lst + 1] = h
    if h == NONE:
        g[2 * lst + 1] = d
    else:
        node[h, 2 * lst] = d
    g[2 * lst] = d
    node[d, _FLAGS] |= 1 << lst


@njit(cache=True, nogil=True, inline="always")
def _to_top(lst, d, node, g):
    if g[2 * lst] == d:
        return
    p = node[d, 2 * lst]
    n = node[d, 2 * lst + 1]
    node[p, 2 * lst + 1] = n  # d is not the head, so it has a prev
    if n == NONE:
        g[2 * lst + 1] = p
    else:
        node[n, 2 * lst] = p
    h = g[2 * lst]
    node[d, 2 * lst] = NONE
    node[d, 2 * lst + 1] = h
    node[h, 2 * lst] = d
    g[2 * lst] = d
