"""numba replay of SLRU, libCacheSim's ``SLRU.c`` (see :class:`kvmm.policies.SLRUPolicy` for the
rules), and the segmented-list kernels W-TinyLFU's main cache reuses.

State over dense ids, in two tables (each call to a helper adjusts the reference count of every
array it is passed, so the state is two arrays, not ten): ``node``, one row per key
(``_PREV``/``_NEXT`` links, ``_SEG`` its segment, -1: not resident, ``_SIZE``; a row per key puts
a key's fields in one cache line), and ``segs``, one column per list (``_HEAD``, ``_TAIL``,
``_BYTES`` its total, ``_MAX`` its maximum).  One link pair per key serves every list, since a key
is in one at a time.  ``head`` is the most recent end, the victim side is ``tail``.

Worked example, capacity 4 (4 segments of 1), references ``a b a c d e``: a, b fill segments 0
and 1 (lowest segment with room); the hit on a moves it to segment 1, whose tail b cools down to
segment 0 (segment 0 is then at its maximum, nothing more moves); c goes to segment 2, d to 3;
e misses with the cache full: the victim is segment 0's tail, b.

Runtime complexity: O(1) per reference plus the keys moved down by cooling (amortised O(n_seg)).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from kvmm._kernels import prefetch
from kvmm.policies.eviction.slru import segment_maxima

#: libCacheSim's SLRU options: ``n-seg`` (segments, default 4) and ``seg-size`` (the segments'
#: size ratios, e.g. ``(1, 4)``; default: ``n_seg`` equal shares, ``capacity // n_seg`` each).
PARAMS_SLRU: tuple = (("n_seg", 4), ("seg_size", None))

NONE = -1
_PREV, _NEXT, _SEG, _SIZE = 0, 1, 2, 3  # columns of ``node``
_EXTRA = 4  # the first column of a caller's own fields (``new_tables(extra_columns=)``)
_HEAD, _TAIL, _BYTES, _MAX = 0, 1, 2, 3  # rows of ``segs``
_AHEAD_ROWS = 16  # references ahead whose node row the replay prefetches
_AHEAD_NEIGHBOURS = 8  # references ahead whose list neighbours' rows it prefetches (its row is in cache)


def replay_slru(keys, dense, n_unique, sizes, capacity, n_seg=4, seg_size=None):
    """Hits of SLRU over ``dense`` (see :mod:`kvmm.policies.eviction._replay`)."""
    maxima = segment_maxima(int(capacity), n_seg, seg_size)
    node, segs = new_tables(n_unique, maxima, len(maxima), sizes)
    return _replay_slru(dense, sizes, capacity, node, segs, len(maxima))


def new_tables(n_unique: int, maxima, n_lists: int, sizes: np.ndarray,
               extra_columns: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Empty ``node`` (no key resident) and ``segs`` (``n_lists`` empty lists, the first
    ``len(maxima)`` of them SLRU segments with those maxima).  ``node`` is int32 where the ids and
    ``sizes`` fit (16 bytes a key instead of 32: the replay is bound by random accesses to it).

    ``extra_columns`` (a caller's own per-key fields, from column ``_EXTRA``, zeroed) pad the row
    to a multiple of 16 elements starting on a 64-byte boundary, so a key's row is whole cache
    lines (W-TinyLFU: 4 link fields + 10 counter slots = one 64-byte line at int32)."""
    narrow = n_unique < 2**31 - 1 and (sizes.size == 0 or int(sizes.max()) < 2**31)
    dtype = np.dtype(np.int32 if narrow else np.int64)
    if extra_columns:
        node = aligned_zeros(n_unique, -(-(_EXTRA + extra_columns) // 16) * 16, dtype)
        node[:, :_SIZE] = NONE  # sizes and the extra columns stay 0
    else:
        node = np.full((n_unique, 4), NONE, dtype)
        node[:, _SIZE] = 0
    segs = np.zeros((4, n_lists), np.int64)
    segs[_HEAD] = NONE
    segs[_TAIL] = NONE
    segs[_MAX, :len(maxima)] = maxima
    return node, segs


@njit(cache=True, nogil=True)
def _replay_slru(dense, sizes, capacity, node, segs, n_seg):
    hits = np.zeros(dense.size, np.bool_)
    max0 = segs[_MAX, 0]
    used = 0  # the segments' total, kept here (a sum per miss costs a third of the replay)
    node_words = node.reshape(node.size)  # the same memory, flat, for the prefetches
    row = node.shape[1]
    n = dense.size
    for i in range(n):
        # the stream is known ahead: the rows of the key _AHEAD_ROWS references on, and of the
        # list neighbours that a hit of the key _AHEAD_NEIGHBOURS on relinks
        if i + _AHEAD_ROWS < n:
            prefetch(node_words, dense[i + _AHEAD_ROWS] * row)
        if i + _AHEAD_NEIGHBOURS < n:
            ahead = dense[i + _AHEAD_NEIGHBOURS]
            prefetch(node_words, max(node[ahead, _PREV], 0) * row)
            prefetch(node_words, max(node[ahead, _NEXT], 0) * row)
        d = dense[i]
        if node[d, _SEG] != NONE:
            hits[i] = True
            used -= slru_hit(d, n_seg, node, segs)
            continue
        size = sizes[i]
        if size > capacity or size > max0:  # libCacheSim's SLRU_can_insert
            continue
        while used + size > capacity:
            used -= slru_evict(n_seg, node, segs)
        slru_insert(d, size, n_seg, node, segs)
        used += size
    return hits


@njit(cache=True, nogil=True, inline="always")
def link(d, s, node, segs):
    """Push ``d`` at the head of list ``s`` (counting its size in the list's total)."""
    h = segs[_HEAD, s]
    node[d, _PREV] = NONE
    node[d, _NEXT] = h
    if h != NONE:
        node[h, _PREV] = d
    else:
        segs[_TAIL, s] = d
    segs[_HEAD, s] = d
    node[d, _SEG] = s
    segs[_BYTES, s] += node[d, _SIZE]


@njit(cache=True, nogil=True, inline="always")
def unlink(d, node, segs):
    """Take ``d`` out of its list (and its size out of the list's total)."""
    s = node[d, _SEG]
    p = node[d, _PREV]
    n = node[d, _NEXT]
    if p == NONE:
        segs[_HEAD, s] = n
    else:
        node[p, _NEXT] = n
    if n == NONE:
        segs[_TAIL, s] = p
    else:
        node[n, _PREV] = p
    segs[_BYTES, s] -= node[d, _SIZE]
    node[d, _SEG] = NONE


@njit(cache=True, nogil=True, inline="always")
def slru_insert(d, size, n_seg, node, segs):
    """Insert at the head of the lowest segment with room (segment 0 when none has); the caller
    has made room in the whole cache."""
    s = 0
    for j in range(n_seg):
        if segs[_BYTES, j] + size <= segs[_MAX, j]:
            s = j
            break
    node[d, _SIZE] = size
    link(d, s, node, segs)


@njit(cache=True, nogil=True, inline="always")
def slru_victim(n_seg, segs):
    """The tail of the lowest segment holding > 0 size units (NONE if all are empty)."""
    for s in range(n_seg):
        if segs[_BYTES, s] > 0:
            return segs[_TAIL, s]
    return NONE


@njit(cache=True, nogil=True, inline="always")
def slru_evict(n_seg, node, segs):
    """Evict SLRU's victim; returns its size."""
    d = slru_victim(n_seg, segs)
    unlink(d, node, segs)
    return node[d, _SIZE]


@njit(cache=True, nogil=True, inline="always")
def slru_hit(d, n_seg, node, segs):
    """A hit: to the head of the top segment if there already, else one segment up, then cool
    the segments that are over their maximum (which may evict from segment 0); returns the size
    units evicted."""
    s = node[d, _SEG]
    top = n_seg - 1
    freed = 0
    if s == top:
        if segs[_HEAD, s] != d:
            unlink(d, node, segs)
            link(d, s, node, segs)
        return freed
    unlink(d, node, segs)
    link(d, s + 1, node, segs)
    # libCacheSim's SLRU_cool, recursion unrolled: moving segment j's tail down may overfill
    # segment j-1, which is cooled first (depth first), segment 0 by evicting.
    j = s + 1
    while True:
        if segs[_BYTES, j] > segs[_MAX, j]:
            if j == 0:
                freed += slru_evict(n_seg, node, segs)
                continue
            t = segs[_TAIL, j]
            unlink(t, node, segs)
            link(t, j - 1, node, segs)
            j -= 1  # cool the segment below until it fits, then come back up
            continue
        if j == s + 1:
            return freed
        j += 1


def aligned_zeros(n: int, width: int, dtype: np.dtype) -> np.ndarray:
    """A zeroed C-contiguous ``(n, width)`` array whose data starts on a 64-byte boundary."""
    dtype = np.dtype(dtype)
    block = np.zeros(n * width + 64 // dtype.itemsize, dtype)  # calloc: pages zeroed as first touched
    start = (-block.ctypes.data % 64) // dtype.itemsize
    return block[start:start + n * width].reshape(n, width)
