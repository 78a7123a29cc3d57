"""numba replay of LIRS as libCacheSim's ``LIRS`` implements it (see :func:`kvmm.policies.replay`
and, for the rules, ``tests/naive/lirs.py``).

Per dense id: the stack S (every recently seen key, LIR or HIR, resident or not), the queue Q
(resident HIR keys) and NH (S's non-resident HIR keys), each a doubly linked list with the most
recent at its head and the bottom / oldest at its tail.  A key can be in S and Q (a resident HIR)
or in S and NH (a non-resident HIR) at once, so each list has its own links.  Bytes:
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
(tests/naive/lirs.py counts those references; the parity tests stop at the first).

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
# counters in the state array
_LIR, _HIR, _OCC, _SBYTES = 0, 1, 2, 3


def replay_lirs(keys, dense, n_unique, sizes, capacity, hirs_ratio):
    """Hits of LIRS over ``dense`` (see :mod:`kvmm.policies._replay`)."""
    hirs_limit = lirs_limits(int(capacity), check_hirs_ratio(hirs_ratio))[0]
    return _replay_lirs(dense, n_unique, sizes, capacity, np.int64(hirs_limit), np.int64(capacity - hirs_limit))


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
def _replay_lirs(dense, n_unique, sizes, capacity, hirs_limit, lirs_limit):
    hits = np.zeros(dense.size, np.bool_)
    # links[0:2] S (prev, next), [2:4] Q, [4:6] NH; ends[2*list] head, ends[2*list+1] tail
    links = np.full((6, n_unique), NONE, np.int64)
    ends = np.full(6, NONE, np.int64)
    member = np.zeros((3, n_unique), np.bool_)  # in S, in Q, in NH
    is_lir = np.zeros(n_unique, np.bool_)
    resident = np.zeros(n_unique, np.bool_)  # S's flag (a Q key is always resident)
    s_size = np.zeros(n_unique, np.int64)
    q_size = np.zeros(n_unique, np.int64)
    st = np.zeros(4, np.int64)
    for i in range(dense.size):
        d = dense[i]
        size = sizes[i]
        in_s = member[0, d]
        if in_s:
            _to_top(0, d, links, ends)
        if member[1, d]:
            _to_top(1, d, links, ends)
        if in_s and is_lir[d]:
            hits[i] = True
            _prune(links, ends, member, is_lir, resident, s_size, st)
        elif in_s and resident[d]:  # a resident HIR in S: it becomes LIR
            hits[i] = True
            if member[1, d]:
                st[_HIR] -= q_size[d]
                st[_OCC] -= q_size[d]
                _unlink(1, d, links, ends, member)
            while st[_LIR] + s_size[d] > lirs_limit and ends[1] != NONE:
                _demote(links, ends, member, is_lir, resident, s_size, q_size, st, hirs_limit)
            is_lir[d] = True
            st[_LIR] += s_size[d]
            st[_OCC] += s_size[d]
        elif member[1, d]:  # a resident HIR only in Q: it enters S's top, still HIR
            hits[i] = True
            while st[_LIR] + q_size[d] > lirs_limit and ends[1] != NONE:
                _demote(links, ends, member, is_lir, resident, s_size, q_size, st, hirs_limit)
            _push(0, d, links, ends, member)
            is_lir[d] = False
            resident[d] = True
            s_size[d] = q_size[d]
            st[_SBYTES] += q_size[d]
        elif size > capacity:
            pass  # larger than the whole cache: a miss, never inserted
        elif in_s:  # a non-resident HIR of S: it comes back as LIR (with its remembered size)
            while st[_LIR] + s_size[d] > lirs_limit and ends[1] != NONE:
                _demote(links, ends, member, is_lir, resident, s_size, q_size, st, hirs_limit)
            if member[2, d]:
                _unlink(2, d, links, ends, member)
            while st[_OCC] + size > capacity and ends[1] != NONE:
                while st[_HIR] >= hirs_limit and ends[3] != NONE:
                    _evict_hir(links, ends, member, resident, s_size, q_size, st)
                _demote(links, ends, member, is_lir, resident, s_size, q_size, st, hirs_limit)
            is_lir[d] = True
            resident[d] = True
            st[_LIR] += s_size[d]
            st[_OCC] += s_size[d]
        elif size <= lirs_limit and size <= hirs_limit:  # a new key (libCacheSim refuses larger ones)
            if st[_LIR] + size > lirs_limit:
                while st[_HIR] + size > hirs_limit and ends[3] != NONE:
                    _evict_hir(links, ends, member, resident, s_size, q_size, st)
            _push(0, d, links, ends, member)
            resident[d] = True
            s_size[d] = size
            st[_SBYTES] += size
            st[_OCC] += size
            if st[_LIR] + size <= lirs_limit:
                is_lir[d] = True
                st[_LIR] += size
            else:
                is_lir[d] = False
                _push(1, d, links, ends, member)
                q_size[d] = size
                st[_HIR] += size
        # S remembers at most 2 * capacity bytes: forget the oldest non-resident keys
        while st[_SBYTES] > 2 * capacity and ends[5] != NONE:
            old = ends[5]
            _unlink(2, old, links, ends, member)
            _unlink(0, old, links, ends, member)
            st[_SBYTES] -= s_size[old]
    return hits


@njit(cache=True, nogil=True, inline="always")  # inlined: no per-call array refcounting
def _prune(links, ends, member, is_lir, resident, s_size, st):
    """S's bottom leaves while it is HIR and not also S's top."""
    while ends[0] != ends[1]:
        b = ends[1]
        if is_lir[b]:
            break
        if not resident[b] and member[2, b]:
            _unlink(2, b, links, ends, member)
        _unlink(0, b, links, ends, member)
        st[_SBYTES] -= s_size[b]


@njit(cache=True, nogil=True, inline="always")  # inlined: no per-call array refcounting
def _evict_hir(links, ends, member, resident, s_size, q_size, st):
    """Q's oldest leaves the cache; in S it becomes non-resident (and joins NH)."""
    b = ends[3]
    st[_HIR] -= q_size[b]
    st[_OCC] -= q_size[b]
    _unlink(1, b, links, ends, member)
    if member[0, b]:
        resident[b] = False
        _push(2, b, links, ends, member)


@njit(cache=True, nogil=True, inline="always")  # inlined: no per-call array refcounting
def _demote(links, ends, member, is_lir, resident, s_size, q_size, st, hirs_limit):
    """S's bottom (an LIR key) leaves S for Q's top, or the cache when larger than hirs_limit; prune."""
    b = ends[1]
    size = s_size[b]
    _unlink(0, b, links, ends, member)
    st[_SBYTES] -= size
    st[_LIR] -= size
    st[_OCC] -= size
    is_lir[b] = False
    if size <= hirs_limit:
        while st[_HIR] + size > hirs_limit and ends[3] != NONE:
            _evict_hir(links, ends, member, resident, s_size, q_size, st)
        _push(1, b, links, ends, member)
        q_size[b] = size
        st[_HIR] += size
        st[_OCC] += size
    _prune(links, ends, member, is_lir, resident, s_size, st)


@njit(cache=True, nogil=True, inline="always")  # inlined: no per-call array refcounting
def _unlink(lst, d, links, ends, member):
    p = links[2 * lst, d]
    n = links[2 * lst + 1, d]
    if p == NONE:
        ends[2 * lst] = n
    else:
        links[2 * lst + 1, p] = n
    if n == NONE:
        ends[2 * lst + 1] = p
    else:
        links[2 * lst, n] = p
    links[2 * lst, d] = NONE
    links[2 * lst + 1, d] = NONE
    member[lst, d] = False


@njit(cache=True, nogil=True, inline="always")  # inlined: no per-call array refcounting
def _push(lst, d, links, ends, member):
    h = ends[2 * lst]
    links[2 * lst, d] = NONE
    links[2 * lst + 1, d] = h
    if h == NONE:
        ends[2 * lst + 1] = d
    else:
        links[2 * lst, h] = d
    ends[2 * lst] = d
    member[lst, d] = True


@njit(cache=True, nogil=True, inline="always")  # inlined: no per-call array refcounting
def _to_top(lst, d, links, ends, member=None):
    if ends[2 * lst] == d:
        return
    p = links[2 * lst, d]
    n = links[2 * lst + 1, d]
    links[2 * lst + 1, p] = n  # d is not the head, so it has a prev
    if n == NONE:
        ends[2 * lst + 1] = p
    else:
        links[2 * lst, n] = p
    h = ends[2 * lst]
    links[2 * lst, d] = NONE
    links[2 * lst + 1, d] = h
    links[2 * lst, h] = d
    ends[2 * lst] = d
