"""numba replay of Belady's MIN (see :func:`kvmm.policies.replay` and :class:`kvmm.policies.BeladyPolicy`).

First one backward pass gives each reference's next use (:func:`next_uses`); then the stream is
replayed with libCacheSim's heap (libpqueue: a 1-based binary max-heap on the next use, strict
``<``, sifts as libpqueue's): a hit raises the key's priority to its next use (sift up), a miss
evicts until the key fits, then inserts it.  Keys and priorities sit side by side in two heap
arrays, so a sift reads no per-key table.

One departure, invisible in the hits: keys never used again (next use "never", which all tie)
are kept out of the heap, on a stack, and evicted first, newest first, instead of sifting each to
the top and back.  Which of them goes first never changes a hit, even with sizes: a key still to
be used is evicted only once every never-used-again key is gone, and keys still to be used have
distinct next uses, so the resident keys that can hit evolve the same way whatever the tie order
(the tests compare the hits with libCacheSim's and with a transcription of its heap).
:class:`~kvmm.policies.BeladyPolicy` runs the heap with libCacheSim's ties exactly, for callers
that see the victims.  Worked example, capacity 2, references ``a b c a b``::

    next uses: a@0 -> 3, b@1 -> 4, c@2 -> never, a@3 -> never, b@4 -> never
    a, b: misses, inserted.  c: miss; the top is b (next use 4 > 3): evict b, insert c (never).
    a: hit (next use now never).  b: miss; c and a are never used again: one of them goes.

Runtime complexity: O(n) for the next uses, O(log r) per reference (r residents).
"""

from __future__ import annotations

import numpy as np
from numba import njit

PARAMS_BELADY: tuple = ()

NEVER = np.int64(2**63 - 1)


def replay_belady(keys, dense, n_unique, sizes, capacity):
    """Hits of Belady over ``dense`` (see :mod:`kvmm.policies.eviction._replay`)."""
    # int32 heap keys and slots while the ids fit: half the memory the sifts walk through
    index = np.int32 if n_unique < 2**31 - 1 else np.int64
    heap_key = np.empty(n_unique + 1, index)  # slot 0 unused, as libpqueue's
    pos = np.zeros(n_unique, index)  # dense id -> heap slot
    return _replay_belady(dense, next_uses(dense, n_unique), sizes, capacity, heap_key, pos)


@njit(cache=True, nogil=True)
def next_uses(dense, n_unique):
    """For each reference, the index of the next reference to the same key, else ``2**63 - 1``
    (one backward pass).  Runtime complexity: O(n)."""
    out = np.empty(dense.size, np.int64)
    last = np.full(n_unique, NEVER, np.int64)
    for i in range(dense.size - 1, -1, -1):
        d = dense[i]
        out[i] = last[d]
        last[d] = i
    return out


@njit(cache=True, nogil=True)
def _replay_belady(dense, nxt, sizes, capacity, heap_key, pos):
    n_unique = pos.size
    hits = np.zeros(dense.size, np.bool_)
    heap_pri = np.empty(n_unique + 1, np.int64)
    dead = np.empty(n_unique, heap_key.dtype)  # resident keys never used again (a stack)
    n_dead = 0
    size_of = np.zeros(n_unique, np.int64)
    resident = np.zeros(n_unique, np.bool_)
    end = 1  # libpqueue's q->size: one past the last used slot
    used = 0
    for i in range(dense.size):
        d = dense[i]
        nxt_i = nxt[i]
        if resident[d]:
            hits[i] = True
            slot = pos[d]
            if nxt_i == NEVER:
                # its last use: out of the heap (the last leaf takes its slot and, since the old
                # priority i is below every other next use, sifts up), onto the dead stack
                end -= 1
                if slot < end:
                    _sift_up(heap_key, heap_pri, pos, slot, heap_key[end], heap_pri[end])
                dead[n_dead] = d
                n_dead += 1
            else:
                # change_priority: the old priority i is below every next use: always up
                _sift_up(heap_key, heap_pri, pos, slot, d, nxt_i)
            continue
        size = sizes[i]
        if size > capacity:  # larger than the whole cache: a miss, never inserted
            continue
        while used + size > capacity:
            if n_dead > 0:  # never used again: first to go
                n_dead -= 1
                victim = dead[n_dead]
            else:  # pop: the last leaf moves to the root and sifts down
                victim = heap_key[1]
                end -= 1
                _sift_down(heap_key, heap_pri, pos, end, heap_key[end], heap_pri[end])
            resident[victim] = False
            used -= size_of[victim]
        resident[d] = True
        size_of[d] = size
        used += size
        if nxt_i == NEVER:
            dead[n_dead] = d
            n_dead += 1
        else:
            end += 1
            _sift_up(heap_key, heap_pri, pos, end - 1, d, nxt_i)
    return hits


@njit(cache=True, nogil=True, inline="always")
def _sift_up(heap_key, heap_pri, pos, slot, key, pri):
    """Place ``key`` of priority ``pri`` at ``slot`` or above: parents of strictly lower priority
    move down (libpqueue's bubble_up)."""
    while slot > 1:
        parent = slot >> 1
        if not heap_pri[parent] < pri:
            break
        heap_key[slot] = heap_key[parent]
        heap_pri[slot] = heap_pri[parent]
        pos[heap_key[slot]] = slot
        slot = parent
    heap_key[slot] = key
    heap_pri[slot] = pri
    pos[key] = slot


@njit(cache=True, nogil=True, inline="always")
def _sift_down(heap_key, heap_pri, pos, end, key, pri):
    """Place ``key`` of priority ``pri`` at the root or below: the larger child (the right one
    only when strictly larger) moves up while it ranks strictly above (libpqueue's percolate_down)."""
    slot = 1
    while True:
        child = slot << 1
        if child >= end:
            break
        best = heap_pri[child]
        if child + 1 < end and best < heap_pri[child + 1]:
            child += 1
            best = heap_pri[child]
        if not pri < best:
            break
        heap_key[slot] = heap_key[child]
        heap_pri[slot] = best
        pos[heap_key[slot]] = slot
        slot = child
    heap_key[slot] = key
    heap_pri[slot] = pri
    pos[key] = slot
