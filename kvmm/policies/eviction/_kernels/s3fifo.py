"""numba replay of S3-FIFO, exactly as libCacheSim's ``S3FIFO.c`` (see :func:`kvmm.policies.replay`
and :class:`kvmm.policies.S3FIFOPolicy` for the rules, including where libCacheSim differs from the
paper).

State over dense ids: a node row per key, its queue (0 absent, 1 small, 2 main), frequency and
size; the small and main queues are ring buffers of ids (both only ever pop their oldest and push at the
new end, and a key is in at most one of them, so ``n_unique + 1`` slots each suffice); the ghost
queue is a doubly linked list (a ghost hit removes a key from its middle).
Runtime complexity: O(1) amortised per reference (a main-queue eviction reinserts each entry at
most three times before it reaches frequency 0).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from kvmm.policies.eviction.s3fifo import check_replay_options

PARAMS_S3FIFO: tuple = (("small_size_ratio", 0.1), ("ghost_size_ratio", 0.9), ("move_to_main_threshold", 2))

NONE = -1
ABSENT = 0
SMALL = 1
MAIN = 2


def replay_s3fifo(keys, dense, n_unique, sizes, capacity, small_size_ratio, ghost_size_ratio, move_to_main_threshold):
    """Hits of libCacheSim's S3-FIFO over ``dense`` (see :mod:`kvmm.policies.eviction._replay`).  Bad
    options, or a capacity whose small or main queue is empty (libCacheSim aborts on it), are a
    :class:`~kvmm.errors.BadInputError`."""
    small_cap, main_cap, ghost_cap, threshold = check_replay_options(
        int(capacity), small_size_ratio, ghost_size_ratio, move_to_main_threshold)
    # one row per key (queue, frequency, size), int32 where the stored sizes (<= capacity) and the
    # frequencies (<= references) fit: a hit reads one small row (the kernel is bound by random
    # accesses)
    fits = max(int(capacity), int(dense.size)) < 2**31 - 1
    node = np.zeros((n_unique, 3), np.int32 if fits else np.int64)
    return _replay(dense, node, sizes, np.int64(capacity), np.int64(small_cap), np.int64(main_cap),
                   np.int64(ghost_cap), np.int64(threshold))


_WHERE, _FREQ, _SIZE = 0, 1, 2  # node columns


@njit(cache=True, nogil=True)
def _replay(dense, node, sizes, capacity, small_cap, main_cap, ghost_cap, threshold):
    # node[:, _SIZE]: a resident's or a ghost's size (a key is never both)
    n_unique = node.shape[0]
    hits = np.zeros(dense.size, np.bool_)
    slots = n_unique + 1
    small = np.empty(slots, np.int64)  # ring buffers: [first, first + count) mod slots, oldest first
    main = np.empty(slots, np.int64)
    s_first = 0
    s_count = 0
    m_first = 0
    m_count = 0
    in_ghost = np.zeros(n_unique, np.bool_)
    g_newer = np.full(n_unique, NONE, np.int64)
    g_older = np.full(n_unique, NONE, np.int64)
    g_newest = NONE
    g_oldest = NONE
    small_used = 0
    main_used = 0
    ghost_used = 0
    has_evicted = False
    for i in range(dense.size):
        d = dense[i]
        if node[d, _WHERE] != ABSENT:
            hits[i] = True
            node[d, _FREQ] += 1
            continue
        size = sizes[i]
        # find: a miss removes the key from the ghost queue (it is a ghost hit)
        hit_on_ghost = False
        if in_ghost[d]:
            in_ghost[d] = False
            ghost_used -= node[d, _SIZE]
            o = g_older[d]
            n = g_newer[d]
            if o == NONE:
                g_oldest = n
            else:
                g_newer[o] = n
            if n == NONE:
                g_newest = o
            else:
                g_older[n] = o
            hit_on_ghost = True
        # can_insert: no larger than the small queue (nor the cache)
        if size > small_cap or size > capacity:
            continue
        while small_used + main_used + size > capacity:
            has_evicted = True
            if main_used > main_cap or small_used == 0:
                # evict_main: reinsert accessed entries (2-bit clock), evict the first with freq 0
                while main_used > 0:
                    v = main[m_first]
                    m_first += 1
                    if m_first == slots:
                        m_first = 0
                    m_count -= 1
                    f = node[v, _FREQ]
                    if f >= 1:
                        main[(m_first + m_count) % slots] = v
                        m_count += 1
                        node[v, _FREQ] = min(f, 3) - 1
                    else:
                        main_used -= node[v, _SIZE]
                        node[v, _WHERE] = ABSENT
                        break
            else:
                # evict_small: move accessed entries to main, evict the first other one to the ghost
                while small_used > 0:
                    v = small[s_first]
                    s_first += 1
                    if s_first == slots:
                        s_first = 0
                    s_count -= 1
                    small_used -= node[v, _SIZE]
                    if node[v, _FREQ] >= threshold:
                        main[(m_first + m_count) % slots] = v
                        m_count += 1
                        main_used += node[v, _SIZE]
                        node[v, _WHERE] = MAIN
                        node[v, _FREQ] = 0
                    else:
                        node[v, _WHERE] = ABSENT
                        vs = node[v, _SIZE]
                        if ghost_cap > 0 and vs <= ghost_cap:  # the ghost FIFO's own get
                            while ghost_used + vs > ghost_cap:
                                g = g_oldest
                                g_oldest = g_newer[g]
                                if g_oldest == NONE:
                                    g_newest = NONE
                                else:
                                    g_older[g_oldest] = NONE
                                in_ghost[g] = False
                                ghost_used -= node[g, _SIZE]
                            in_ghost[v] = True
                            ghost_used += vs
                            g_older[v] = g_newest
                            g_newer[v] = NONE
                            if g_newest == NONE:
                                g_oldest = v
                            else:
                                g_newer[g_newest] = v
                            g_newest = v
                        break
        # insert
        if hit_on_ghost:
            to_main = True
        elif size >= small_cap:
            continue  # libCacheSim refuses an entry as large as the small queue (after the evictions)
        else:
            to_main = not has_evicted and small_used >= small_cap
        node[d, _SIZE] = size
        node[d, _FREQ] = 0
        if to_main:
            main[(m_first + m_count) % slots] = d
            m_count += 1
            main_used += size
            node[d, _WHERE] = MAIN
        else:
            small[(s_first + s_count) % slots] = d
            s_count += 1
            small_used += size
            node[d, _WHERE] = SMALL
    return hits
