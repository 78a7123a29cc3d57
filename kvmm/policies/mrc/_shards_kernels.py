"""numba kernels behind fixed-size :class:`~kvmm.policies.ShardsTracker` (layouts: see
:mod:`kvmm.policies.mrc._stack_kernels`; the sample's max-heap of ids is keyed by ``id_hash``)."""

from __future__ import annotations

import numpy as np
from numba import njit

from kvmm.policies.mrc._stack_kernels import (
    CHUNK,
    DONE,
    GROW_HIST,
    GROW_IDS,
    GROW_TABLE,
    GROW_TIME,
    ST_ACTIVE,
    ST_CLOCK,
    ST_HEAP,
    ST_IDS,
    ST_LIVE,
    ST_REFS,
    ST_SAMPLED,
    TWO_POW_64,
    compact_time,
    find_slot,
    mark_clear,
    mark_set,
    marks_through,
    mix64,
)


@njit(cache=True, nogil=True)
def access_fixed_size(keys, start, max_keys, slots, id_keys, id_last, id_hash, time_owner, time_bits, block_tree,
                      heap, whist, wstate, threshold_box, state, distances, want_distances):
    """Fixed-size SHARDS over ``keys[start:]``: track at most ``max_keys`` sampled keys.

    Until the set first overflows every key is sampled (``state[ST_ACTIVE] == 0``, rate 1).
    When a new sampled key makes the set exceed ``max_keys``, the key with the largest hash is
    dropped (its mark removed) and the threshold ``threshold_box[0]`` falls to that hash, so the
    rate R = threshold / 2^64 only decreases and a dropped key is never sampled again.  Each
    sampled reference adds weight ``1/R`` (the references it stands for) at scaled distance
    ``floor(d / R)`` into ``whist`` (float64); cold misses add ``1/R`` to ``wstate[0]``.
    ``heap`` is a max-heap of the live sampled ids keyed by ``id_hash`` (``state[ST_HEAP]``).
    Returns ``(next position, status)``; checks room per chunk like :func:`access_batch` (a
    GROW_HIST stop happens before the reference is applied).
    Runtime complexity: O(log T + log max_keys) per sampled reference, O(1) per skipped one.
    """
    mask = np.uint64(slots.shape[0] // 2 - 1)
    table_size = slots.shape[0] // 2
    time_size = time_owner.shape[0]
    n = keys.shape[0]
    n_ids = state[ST_IDS]
    clock = state[ST_CLOCK]
    live = state[ST_LIVE]
    heap_len = state[ST_HEAP]
    active = state[ST_ACTIVE] != 0
    threshold = threshold_box[0]
    rate = np.float64(threshold) / TWO_POW_64 if active else 1.0
    hist_len = whist.shape[0]
    status = DONE
    i = start
    chunk_end = start
    while i < n:
        if i == chunk_end:  # room for a whole chunk of (possibly all new) sampled keys?
            chunk = min(CHUNK, n - i)
            state[ST_CLOCK] = clock
            if (n_ids + chunk) * 2 > table_size:
                status = GROW_TABLE
                break
            if n_ids + chunk > id_keys.shape[0]:
                status = GROW_IDS
                break
            if clock + chunk > time_size:
                if (live + chunk) * 2 > time_size:
                    status = GROW_TIME
                    break
                clock = compact_time(time_owner, id_last, time_bits, block_tree, state, time_owner, time_bits,
                                     block_tree)
            chunk_end = i + chunk
        key = keys[i]
        h = mix64(key)
        if active and h >= threshold:
            if want_distances:
                distances[i] = -2
            i += 1
            continue
        s = find_slot(slots, mask, key, h)
        tag = slots[2 * s + 1]
        if tag == 0:
            ident = n_ids
            n_ids += 1
            slots[2 * s] = key
            slots[2 * s + 1] = np.uint64(ident + 1)
            id_keys[ident] = key
            id_hash[ident] = h
            id_last[ident] = -1
            # first reference: cold.  (A dropped key never comes back: its hash is at or
            # above the threshold from then on.)
            d = -1
            wstate[0] += 1.0 / rate
            live += 1
            heap_len = heap_push(heap, heap_len, id_hash, ident)
        else:
            ident = np.int64(tag) - 1
            prev = id_last[ident]
            d = live - marks_through(time_bits, block_tree, prev)
            scaled = np.int64(d / rate)
            if scaled >= hist_len:
                status = GROW_HIST
                break
            mark_clear(time_bits, block_tree, prev)
            whist[scaled] += 1.0 / rate
        mark_set(time_bits, block_tree, clock)
        time_owner[clock] = ident
        id_last[ident] = clock
        clock += 1
        state[ST_SAMPLED] += 1
        if want_distances:
            distances[i] = d
        i += 1
        if live > max_keys:
            victim = heap[0]
            heap_len = heap_pop(heap, heap_len, id_hash)
            mark_clear(time_bits, block_tree, id_last[victim])
            id_last[victim] = -1
            live -= 1
            threshold = id_hash[victim]
            active = True
            rate = np.float64(threshold) / TWO_POW_64
    state[ST_IDS] = n_ids
    state[ST_CLOCK] = clock
    state[ST_LIVE] = live
    state[ST_REFS] += i - start
    state[ST_HEAP] = heap_len
    state[ST_ACTIVE] = 1 if active else 0
    threshold_box[0] = threshold
    return i, status


# --------------------------------------------------------------------------- helpers
@njit(cache=True, nogil=True, inline="always")
def heap_push(heap, heap_len, id_hash, ident):
    """Push ``ident`` on the max-heap keyed by ``id_hash``; return the new length."""
    pos = heap_len
    key = id_hash[ident]
    while pos > 0:
        parent = (pos - 1) >> 1
        if id_hash[heap[parent]] >= key:
            break
        heap[pos] = heap[parent]
        pos = parent
    heap[pos] = ident
    return heap_len + 1


@njit(cache=True, nogil=True, inline="always")
def heap_pop(heap, heap_len, id_hash):
    """Remove the root (largest hash) of the max-heap; return the new length."""
    heap_len -= 1
    last = heap[heap_len]
    key = id_hash[last]
    pos = 0
    while True:
        child = 2 * pos + 1
        if child >= heap_len:
            break
        if child + 1 < heap_len and id_hash[heap[child + 1]] > id_hash[heap[child]]:
            child += 1
        if id_hash[heap[child]] <= key:
            break
        heap[pos] = heap[child]
        pos = child
    if heap_len > 0:
        heap[pos] = last
    return heap_len
