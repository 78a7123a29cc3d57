"""numba replay of SLRU, libCacheSim's ``SLRU.c`` (see :class:`kvmm.policies.SLRUPolicy` for the
rules), and the segmented-list kernels W-TinyLFU's main cache reuses.

State over dense ids: one doubly linked list per segment (``heads``/``tails``, ``prev``/``next_``
shared, since a key is in one segment at a time), ``seg_of`` (-1: not resident), per-key size and
per-segment byte totals.  ``head`` is the most recent end, the victim side is ``tail``.

Worked example, capacity 4 (4 segments of 1), references ``a b a c d e``: a, b fill segments 0
and 1 (lowest segment with room); the hit on a moves it to segment 1, whose tail b cools down to
segment 0 (segment 0 is then at its maximum, nothing more moves); c goes to segment 2, d to 3;
e misses with the cache full: the victim is segment 0's tail, b.

Runtime complexity: O(1) per reference plus the keys moved down by cooling (amortised O(n_seg)).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from kvmm.policies.slru import segment_maxima

#: libCacheSim's SLRU options: ``n-seg`` (segments, default 4) and ``seg-size`` (the segments'
#: size ratios, e.g. ``(1, 4)``; default: ``n_seg`` equal shares, ``capacity // n_seg`` each).
PARAMS_SLRU: tuple = (("n_seg", 4), ("seg_size", None))

NONE = -1


def replay_slru(keys, dense, n_unique, sizes, capacity, n_seg=4, seg_size=None):
    """Hits of SLRU over ``dense`` (see :mod:`kvmm.policies._replay`)."""
    maxima = np.array(segment_maxima(int(capacity), n_seg, seg_size), np.int64)
    return _replay_slru(dense, n_unique, sizes, capacity, maxima)


@njit(cache=True, nogil=True)
def _replay_slru(dense, n_unique, sizes, capacity, maxima):
    hits = np.zeros(dense.size, np.bool_)
    prev, next_, seg_of, size_of = new_keys(n_unique)
    heads, tails, seg_bytes = new_segments(maxima.size)
    used = 0  # the segments' total, kept here (a sum per miss costs a third of the replay)
    for i in range(dense.size):
        d = dense[i]
        if seg_of[d] != NONE:
            hits[i] = True
            used -= slru_hit(d, prev, next_, seg_of, size_of, heads, tails, seg_bytes, maxima)
            continue
        size = sizes[i]
        if size > capacity or size > maxima[0]:  # libCacheSim's SLRU_can_insert
            continue
        while used + size > capacity:
            used -= size_of[slru_evict(prev, next_, seg_of, size_of, heads, tails, seg_bytes)]
        slru_insert(d, size, prev, next_, seg_of, size_of, heads, tails, seg_bytes, maxima)
        used += size
    return hits


@njit(cache=True, nogil=True, inline="always")
def new_keys(n_unique):
    return (np.full(n_unique, NONE, np.int64), np.full(n_unique, NONE, np.int64),
            np.full(n_unique, NONE, np.int64), np.zeros(n_unique, np.int64))


@njit(cache=True, nogil=True, inline="always")
def new_segments(n_seg):
    return np.full(n_seg, NONE, np.int64), np.full(n_seg, NONE, np.int64), np.zeros(n_seg, np.int64)


@njit(cache=True, nogil=True, inline="always")
def push_head(d, s, prev, next_, heads, tails):
    prev[d] = NONE
    next_[d] = heads[s]
    if heads[s] != NONE:
        prev[heads[s]] = d
    else:
        tails[s] = d
    heads[s] = d


@njit(cache=True, nogil=True, inline="always")
def unlink(d, s, prev, next_, heads, tails):
    p = prev[d]
    n = next_[d]
    if p == NONE:
        heads[s] = n
    else:
        next_[p] = n
    if n == NONE:
        tails[s] = p
    else:
        prev[n] = p


@njit(cache=True, nogil=True, inline="always")
def slru_insert(d, size, prev, next_, seg_of, size_of, heads, tails, seg_bytes, maxima):
    """Insert at the head of the lowest segment with room (segment 0 when none has); the caller
    has made room in the whole cache."""
    s = 0
    for j in range(maxima.size):
        if seg_bytes[j] + size <= maxima[j]:
            s = j
            break
    push_head(d, s, prev, next_, heads, tails)
    seg_of[d] = s
    size_of[d] = size
    seg_bytes[s] += size


@njit(cache=True, nogil=True, inline="always")
def slru_victim(heads, tails, seg_bytes):
    """The tail of the lowest segment holding > 0 size units (NONE if all are empty)."""
    for s in range(seg_bytes.size):
        if seg_bytes[s] > 0:
            return tails[s]
    return NONE


@njit(cache=True, nogil=True, inline="always")
def slru_remove(d, prev, next_, seg_of, size_of, heads, tails, seg_bytes):
    s = seg_of[d]
    unlink(d, s, prev, next_, heads, tails)
    seg_bytes[s] -= size_of[d]
    seg_of[d] = NONE


@njit(cache=True, nogil=True, inline="always")
def slru_evict(prev, next_, seg_of, size_of, heads, tails, seg_bytes):
    d = slru_victim(heads, tails, seg_bytes)
    slru_remove(d, prev, next_, seg_of, size_of, heads, tails, seg_bytes)
    return d


@njit(cache=True, nogil=True, inline="always")
def slru_hit(d, prev, next_, seg_of, size_of, heads, tails, seg_bytes, maxima):
    """A hit: to the head of the top segment if there already, else one segment up, then cool
    the segments that are over their maximum (which may evict from segment 0); returns the size
    units evicted."""
    s = seg_of[d]
    top = maxima.size - 1
    freed = 0
    if s == top:
        if heads[s] != d:
            unlink(d, s, prev, next_, heads, tails)
            push_head(d, s, prev, next_, heads, tails)
        return freed
    unlink(d, s, prev, next_, heads, tails)
    seg_bytes[s] -= size_of[d]
    push_head(d, s + 1, prev, next_, heads, tails)
    seg_of[d] = s + 1
    seg_bytes[s + 1] += size_of[d]
    # libCacheSim's SLRU_cool, recursion unrolled: moving segment j's tail down may overfill
    # segment j-1, which is cooled first (depth first), segment 0 by evicting.
    j = s + 1
    while True:
        if seg_bytes[j] > maxima[j]:
            if j == 0:
                freed += size_of[slru_evict(prev, next_, seg_of, size_of, heads, tails, seg_bytes)]
                continue
            t = tails[j]
            unlink(t, j, prev, next_, heads, tails)
            seg_bytes[j] -= size_of[t]
            push_head(t, j - 1, prev, next_, heads, tails)
            seg_of[t] = j - 1
            seg_bytes[j - 1] += size_of[t]
            j -= 1  # cool the segment below until it fits, then come back up
            continue
        if j == s + 1:
            return freed
        j += 1
