"""numba replay of W-TinyLFU, libCacheSim's ``WTinyLFU`` with its default main cache, an SLRU of
segments 1:4 (see :class:`kvmm.policies.WTinyLFUPolicy` for the rules), and its frequency
sketch: libCacheSim's counting Bloom filter (``minimalIncrementCBF``) hashed with XXH64.

The window LRU and the main SLRU's two segments are lists of one node table over dense ids (a
key is in one list at a time; see :mod:`kvmm.policies._replay_slru`); the sketch hashes the
original int64 key, as libCacheSim hashes ``obj_id``: ``a``, ``b`` = the low 32 bits of XXH64 of its 8 little-endian
bytes under seeds 0x12345678 and 0x12344321, counter ``i`` of ``hashes`` at
``(a + i*b) mod 2^32 mod width``, computed once per distinct key (a table of ``hashes`` slots per
key, before the replay).  The counters are then renumbered (a one-to-one renumbering changes no
count): those that may pass 2^16 - 1 (bounded from each key's reference count) first, kept in
uint32, the others in uint16, each group in order of first use, so the sketch's hot part is small.

Runtime complexity: O(hashes) per reference plus the keys the window hands to main and the
cooling moves (amortised O(1)); O(width) per halving, once every ``32 * main`` main hits.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from kvmm.policies._replay_slru import (_BYTES, _HEAD, _MAX, _SEG, _SIZE, _TAIL, NONE, link, new_tables, slru_evict,
                                        slru_hit, slru_insert, slru_victim, unlink)
from kvmm.policies.wtinylfu import sketch_shape, split_capacity

#: libCacheSim's W-TinyLFU options (``main-cache``, only ``"SLRU"`` here; ``window-size``).
PARAMS_WTINYLFU: tuple = (("main_cache", "SLRU"), ("window_size", 0.01))

_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P4 = np.uint64(0x85EBCA77C2B2AE63)
_P5 = np.uint64(0x27D4EB2F165667C5)
_SEED0 = np.uint64(0x12345678)
_SEED1 = np.uint64(0x12344321)
_LOW32 = np.uint64(0xFFFFFFFF)


def replay_wtinylfu(keys, dense, n_unique, sizes, capacity, main_cache="SLRU", window_size=0.01):
    """Hits of W-TinyLFU over ``keys`` / ``dense`` (see :mod:`kvmm.policies._replay`)."""
    from kvmm.policies.wtinylfu import validate_options

    validate_options(main_cache, window_size)
    window_cap, main_cap, maxima = split_capacity(int(capacity), window_size)
    width, hashes = sketch_shape(main_cap)
    slots = key_slots(keys.view(np.uint64), dense, n_unique, width, hashes)
    if width > 4 * slots.size:
        # counters only ever change through the keys' slots, so a sketch far wider than the
        # slots in use (byte capacities: libCacheSim sizes it by main's bytes) is renumbered
        # onto the slots used, the same counts in a table of O(distinct keys)
        used, inverse = np.unique(slots, return_inverse=True)
        slots, width = inverse.reshape(slots.shape).astype(np.int32), used.size
    width = renumber_by_first_use(slots, width)
    # no counter can saturate (2^32 - 1) unless hashes * (adds <= 2 per reference) can reach it
    may_saturate = hashes * 2 * dense.size >= 0xFFFFFFFF
    n_hot = width if may_saturate else hot_counters_first(slots, width, np.bincount(dense, minlength=n_unique))
    node, segs = new_tables(n_unique, maxima, len(maxima) + 1, sizes)  # main's segments, then the window
    return _replay(dense, sizes, capacity, window_cap, main_cap, node, segs, len(maxima), slots, width,
                   32 * main_cap, may_saturate, n_hot)


@njit(cache=True, nogil=True)
def key_slots(keys, dense, n_unique, width, hashes):
    """Each distinct key's ``hashes`` counters, ``(a + i*b) mod 2^32 mod width`` (see module
    docstring), a row per dense id, hashed at the key's first reference."""
    out = np.empty((n_unique, hashes), np.int32)
    w = np.uint64(width)
    new = 0  # dense ids are numbered in order of first reference: the next one to appear
    for i in range(dense.size):
        if new == n_unique:
            break
        if dense[i] != new:
            continue
        a = xxh64_u64(keys[i], _SEED0) & _LOW32
        b = xxh64_u64(keys[i], _SEED1) & _LOW32
        v = a
        for j in range(hashes):
            out[new, j] = np.int32(v % w)
            v = (v + b) & _LOW32  # unsigned 32-bit arithmetic, as libCacheSim's
        new += 1
    return out


@njit(cache=True, nogil=True)
def renumber_by_first_use(slots, width):
    """Renumber the counters ``slots`` uses ``0..m-1`` in order of first use (row by row, rows in
    order of first reference), in place; returns ``m``.  Each counter's count is the same under
    any one-to-one renumbering (adds, minima and halvings act counter by counter), and the keys
    referenced early and often (a Zipf stream's head) then share a few cache lines of counters
    instead of a random spread over the whole sketch."""
    new_of = np.full(width, -1, np.int32)
    m = 0
    for d in range(slots.shape[0]):
        for j in range(slots.shape[1]):
            x = slots[d, j]
            if new_of[x] < 0:
                new_of[x] = m
                m += 1
            slots[d, j] = new_of[x]
    return m


@njit(cache=True, nogil=True)
def _replay(dense, sizes, capacity, window_cap, main_cap, node, segs, n_seg, slots, width, max_hits,
            may_saturate, n_hot):
    hits = np.zeros(dense.size, np.bool_)
    window = n_seg  # the window LRU is the list after main's segments
    # the counters that may pass 2^16 - 1 (numbers below n_hot) in uint32, the others in uint16
    # (half the cache footprint; the replay is bound by the counters' random accesses)
    counters = (np.zeros(n_hot, np.uint32), np.zeros(width, np.uint16))
    max0 = segs[_MAX, 0]
    main_used = 0  # main's total, kept here rather than summed per miss
    main_hits = 0
    for i in range(dense.size):
        d = dense[i]
        s = node[d, _SEG]
        if s == window:
            hits[i] = True
            if segs[_HEAD, window] != d:
                unlink(d, node, segs)
                link(d, window, node, segs)
            continue
        if s != NONE:
            hits[i] = True
            main_used -= slru_hit(d, n_seg, node, segs)
            sketch_add(counters, slots, d, may_saturate)
            main_hits += 1
            if main_hits >= max_hits:
                main_hits = 0
                counters[0][:] >>= np.uint32(1)
                counters[1][:] >>= np.uint16(1)
            continue
        size = sizes[i]
        if size > capacity or size > window_cap or size > main_cap or size > max0:
            continue  # libCacheSim's WTinyLFU_can_insert
        while segs[_BYTES, window] + main_used + size > capacity:
            main_used = evict_one(main_used, main_cap, window, n_seg, node, segs, counters, slots, may_saturate)
        node[d, _SIZE] = size
        link(d, window, node, segs)
        sketch_add(counters, slots, d, may_saturate)
    return hits


@njit(cache=True, nogil=True, inline="always")
def evict_one(main_used, main_cap, window, n_seg, node, segs, counters, slots, may_saturate):
    """libCacheSim's ``WTinyLFU_evict``: the window hands its LRU keys to main while main has
    room, then its LRU key competes with main's victim; returns main's total after."""
    while segs[_BYTES, window] > 0:
        w = segs[_TAIL, window]
        wsize = node[w, _SIZE]
        if main_used + wsize <= main_cap:
            main_used = window_to_main(w, wsize, main_used, main_cap, n_seg, node, segs)
            sketch_add(counters, slots, w, may_saturate)
            continue
        m = slru_victim(n_seg, segs)
        if sketch_estimate(counters, slots, w) > sketch_estimate(counters, slots, m):
            main_used -= slru_evict(n_seg, node, segs)
            main_used = window_to_main(w, wsize, main_used, main_cap, n_seg, node, segs)
        else:
            unlink(w, node, segs)
        sketch_add(counters, slots, w, may_saturate)
        return main_used
    main_used -= slru_evict(n_seg, node, segs)
    return main_used


@njit(cache=True, nogil=True, inline="always")
def window_to_main(w, wsize, main_used, main_cap, n_seg, node, segs):
    """Move the window's key ``w`` into main (SLRU_insert: the lowest segment with room, else
    segment 0 after main evicts until the key fits); returns main's total after."""
    unlink(w, node, segs)
    room = False
    for j in range(n_seg):
        if segs[_BYTES, j] + wsize <= segs[_MAX, j]:
            room = True
            break
    if not room:
        while main_used + wsize > main_cap:
            main_used -= slru_evict(n_seg, node, segs)
    slru_insert(w, wsize, n_seg, node, segs)
    return main_used + wsize


@njit(cache=True, nogil=True, inline="always")
def sketch_estimate(counters, slots, d):
    """The minimum of key ``d``'s counters (libCacheSim's estimate)."""
    hot, cold = counters
    low = np.uint32(0xFFFFFFFF)
    for j in range(slots.shape[1]):
        x = slots[d, j]
        c = hot[x] if x < hot.size else np.uint32(cold[x])
        if c < low:
            low = c
    return low


@njit(cache=True, nogil=True, inline="always")
def sketch_add(counters, slots, d, may_saturate):
    """Increment every counter of key ``d`` (libCacheSim's add: all of them, repeats included,
    not only the minima), unless its minimum is saturated (2^32 - 1), which only a stream long
    enough (``may_saturate``) can reach, so the check is skipped otherwise."""
    if may_saturate and sketch_estimate(counters, slots, d) == np.uint32(0xFFFFFFFF):
        return
    hot, cold = counters
    for j in range(slots.shape[1]):
        x = slots[d, j]
        if x < hot.size:
            hot[x] += np.uint32(1)
        else:
            cold[x] += np.uint16(1)


@njit(cache=True, nogil=True)
def hot_counters_first(slots, width, refs_of):
    """Renumber (in place) the counters that may pass 2^16 - 1 first, the others after in their
    order; returns how many may.  A counter's bound: 2 adds per reference of each key on it (a
    hit or an insert, and the key's later exit from the window), once per slot it holds there."""
    bound = np.zeros(width, np.int64)
    for d in range(slots.shape[0]):
        for j in range(slots.shape[1]):
            bound[slots[d, j]] += 2 * refs_of[d]
    new_of = np.empty(width, np.int32)
    n_hot = 0
    for x in range(width):
        if bound[x] > 0xFFFF:
            new_of[x] = n_hot
            n_hot += 1
    m = n_hot
    for x in range(width):
        if bound[x] <= 0xFFFF:
            new_of[x] = m
            m += 1
    for d in range(slots.shape[0]):
        for j in range(slots.shape[1]):
            slots[d, j] = new_of[slots[d, j]]
    return n_hot


@njit(cache=True, nogil=True, inline="always")
def _rotl(x, r):
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


@njit(cache=True, nogil=True, inline="always")
def xxh64_u64(value, seed):
    """XXH64 of the 8 little-endian bytes of ``value`` (uint64) under ``seed``."""
    h = seed + _P5 + np.uint64(8)
    k = _rotl(value * _P2, 31) * _P1
    h ^= k
    h = _rotl(h, 27) * _P1 + _P4
    h ^= h >> np.uint64(33)
    h *= _P2
    h ^= h >> np.uint64(29)
    h *= _P3
    h ^= h >> np.uint64(32)
    return h
