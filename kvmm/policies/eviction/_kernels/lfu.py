"""numba replay of LFU (see :func:`kvmm.policies.replay`): :class:`~kvmm.policies.LFUPolicy`
driven by a :class:`~kvmm.tiers.ManagedTier`, which is also libCacheSim's ``LFU`` (``LFU.c``).

A key's count starts at 1 when it is inserted and grows by 1 per hit; an evicted key forgets it.
The victim is a key of the smallest count; among those, the one whose count reached that value
earliest.  kvmm's LFUPolicy states the tie-break as "least recently used first" and libCacheSim's
LFU as "FIFO within a frequency" (each frequency is a queue; a key is appended to the queue of
its new count on each hit and on insert).  They are the same rule: a key enters its current
count's queue at its last reference (its insert or its latest hit), so the queue's order is the
order of last references.  (libCacheSim's ``LFUCpp`` breaks ties differently; ``LFU`` is the one
``libcachesim.LFU`` binds.)

Kept as one FIFO queue per count (``bucket_head``/``bucket_tail`` over the keys' ``prev``/
``next_`` links) and a doubly linked list of the non-empty counts in increasing order, so the
smallest count is its head: every step is O(1) (libCacheSim scans upwards for the next non-empty
count instead; same answers).  Worked example, capacity 2, references ``a a b c b``::

    a: miss  {1: a}          a: hit  {2: a}          b: miss  {1: b, 2: a}
    c: miss  evicts b (count 1 < 2)   {1: c, 2: a}
    b: miss  evicts c                 {1: b, 2: a}

Runtime complexity: O(1) per reference (plus one O(n) pass for the largest count).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from kvmm.errors import BadInputError

PARAMS_LFU: tuple = ()

NONE = -1


def replay_lfu(keys, dense, n_unique, sizes, capacity):
    """Hits of LFU over ``dense`` (see :mod:`kvmm.policies.eviction._replay`)."""
    if n_unique >= 2**31:  # the kernel's int32 links
        raise BadInputError(f"replay('lfu') takes fewer than 2**31 distinct keys, got {n_unique}")
    return _replay_lfu(dense, n_unique, sizes, capacity)


@njit(cache=True, nogil=True)
def _replay_lfu(dense, n_unique, sizes, capacity):
    # The queue operations are written out inline, not as helper functions: a jitted call that
    # takes arrays pays reference counting per array per call (5x slower when they were).
    hits = np.zeros(dense.size, np.bool_)
    refs = np.zeros(n_unique, np.int64)
    for i in range(dense.size):
        refs[dense[i]] += 1
    top = 1  # no count exceeds a key's number of references
    for d in range(n_unique):
        top = max(top, refs[d])
    count = refs  # reused: 0 = not resident, else the key's count
    count[:] = 0
    # per-key links in int32: more keys stay in cache
    prev = np.full(n_unique, NONE, np.int32)  # within a count's queue, towards its head (older)
    next_ = np.full(n_unique, NONE, np.int32)
    size_of = np.zeros(n_unique, np.int64)
    bucket_head = np.full(top + 2, NONE, np.int64)  # oldest key of each count: the next victim
    bucket_tail = np.full(top + 2, NONE, np.int64)
    up = np.full(top + 2, NONE, np.int64)  # the next larger non-empty count
    down = np.full(top + 2, NONE, np.int64)  # the next smaller non-empty count
    smallest = NONE  # the smallest non-empty count
    used = 0
    for i in range(dense.size):
        x = dense[i]
        f = count[x]
        if f > 0:  # a hit: from count f's queue to the tail of count f + 1's
            hits[i] = True
            g = f + 1
            if bucket_head[g] == NONE:  # count g becomes non-empty, right after f
                up[g] = up[f]
                down[g] = f
                if up[f] != NONE:
                    down[up[f]] = g
                up[f] = g
            before = prev[x]
            after = next_[x]
            if before == NONE:
                bucket_head[f] = after
            else:
                next_[before] = after
            if after == NONE:
                bucket_tail[f] = before
            else:
                prev[after] = before
            last = bucket_tail[g]
            prev[x] = last
            next_[x] = NONE
            if last == NONE:
                bucket_head[g] = x
            else:
                next_[last] = x
            bucket_tail[g] = x
            count[x] = g
            if bucket_head[f] == NONE:  # count f is empty now: unlink it (g follows it)
                lower = down[f]
                down[g] = lower
                if lower == NONE:
                    smallest = g
                else:
                    up[lower] = g
            continue
        s = sizes[i]
        if s > capacity:  # larger than the whole cache: a miss, never inserted
            continue
        while used + s > capacity:  # evict the oldest key of the smallest count
            victim = bucket_head[smallest]
            after = next_[victim]
            bucket_head[smallest] = after
            if after == NONE:  # the count is empty now: the next larger one is the smallest
                bucket_tail[smallest] = NONE
                smallest = up[smallest]
                if smallest != NONE:
                    down[smallest] = NONE
            else:
                prev[after] = NONE
            count[victim] = 0
            used -= size_of[victim]
        if bucket_head[1] == NONE:  # count 1 becomes non-empty: the smallest there can be
            up[1] = smallest
            down[1] = NONE
            if smallest != NONE:
                down[smallest] = 1
            smallest = 1
        last = bucket_tail[1]
        prev[x] = last
        next_[x] = NONE
        if last == NONE:
            bucket_head[1] = x
        else:
            next_[last] = x
        bucket_tail[1] = x
        count[x] = 1
        size_of[x] = s
        used += s
    return hits
