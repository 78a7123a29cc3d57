"""numba replay of W-TinyLFU, libCacheSim's ``WTinyLFU`` with its default main cache, an SLRU of
segments 1:4 (see :class:`kvmm.policies.WTinyLFUPolicy` for the rules), and its frequency
sketch: libCacheSim's counting Bloom filter (``minimalIncrementCBF``) hashed with XXH64.

The window LRU and the main SLRU's two segments share one ``prev``/``next_`` pair of arrays over
dense ids (a key is in one list at a time); the sketch hashes the original int64 key, as
libCacheSim hashes ``obj_id``: ``a``, ``b`` = the low 32 bits of XXH64 of its 8 little-endian
bytes under seeds 0x12345678 and 0x12344321, counter ``i`` of ``hashes`` at
``(a + i*b) mod 2^32 mod width``, computed once per distinct key.

Runtime complexity: O(hashes) per reference plus the keys the window hands to main and the
cooling moves (amortised O(1)); O(width) per halving, once every ``32 * main`` main hits.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from kvmm.policies._replay_slru import (NONE, new_keys, new_segments, push_head, slru_evict, slru_hit,
                                        slru_insert, slru_victim, unlink)
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
    return _replay(keys.view(np.uint64), dense, n_unique, sizes, capacity, window_cap, main_cap,
                   np.array(maxima, np.int64), width, hashes, 32 * main_cap)


@njit(cache=True, nogil=True)
def _replay(keys, dense, n_unique, sizes, capacity, window_cap, main_cap, maxima, width, hashes, max_hits):
    hits = np.zeros(dense.size, np.bool_)
    prev, next_, seg_of, size_of = new_keys(n_unique)
    heads, tails, seg_bytes = new_segments(maxima.size)
    win = np.full(2, NONE, np.int64)  # the window's head and tail
    in_window = np.zeros(n_unique, np.bool_)
    hash_a = np.zeros(n_unique, np.uint64)
    hash_b = np.zeros(n_unique, np.uint64)
    counters = np.zeros(width, np.uint32)
    adds = np.zeros(1, np.int64)
    window_bytes = 0
    main_hits = 0
    seen = 0
    for i in range(dense.size):
        d = dense[i]
        if d == seen:  # dense ids come in order of first reference: hash each key once
            hash_a[d] = xxh64_u64(keys[i], _SEED0) & _LOW32
            hash_b[d] = xxh64_u64(keys[i], _SEED1) & _LOW32
            seen += 1
        if in_window[d]:
            hits[i] = True
            if win[0] != d:
                unlink(d, 0, prev, next_, win[0:1], win[1:2])
                push_head(d, 0, prev, next_, win[0:1], win[1:2])
            continue
        if seg_of[d] != NONE:
            hits[i] = True
            slru_hit(d, prev, next_, seg_of, size_of, heads, tails, seg_bytes, maxima)
            sketch_add(counters, hash_a[d], hash_b[d], width, hashes, adds)
            main_hits += 1
            if main_hits >= max_hits:
                main_hits = 0
                counters >>= np.uint32(1)
            continue
        size = sizes[i]
        if size > capacity or size > window_cap or size > main_cap or size > maxima[0]:
            continue  # libCacheSim's WTinyLFU_can_insert
        while window_bytes + seg_bytes.sum() + size > capacity:
            window_bytes = evict_one(window_bytes, main_cap, win, in_window, prev, next_, seg_of, size_of, heads,
                                     tails, seg_bytes, maxima, counters, hash_a, hash_b, width, hashes, adds)
        push_head(d, 0, prev, next_, win[0:1], win[1:2])
        in_window[d] = True
        size_of[d] = size
        window_bytes += size
        sketch_add(counters, hash_a[d], hash_b[d], width, hashes, adds)
    return hits


@njit(cache=True, nogil=True)
def evict_one(window_bytes, main_cap, win, in_window, prev, next_, seg_of, size_of, heads, tails, seg_bytes,
              maxima, counters, hash_a, hash_b, width, hashes, adds):
    """libCacheSim's ``WTinyLFU_evict``: the window hands its LRU keys to main while main has
    room, then its LRU key competes with main's victim; returns the window's bytes after."""
    while window_bytes > 0:
        w = win[1]
        wsize = size_of[w]
        if seg_bytes.sum() + wsize <= main_cap:
            window_bytes -= wsize
            window_to_main(w, wsize, main_cap, win, in_window, prev, next_, seg_of, size_of, heads, tails,
                           seg_bytes, maxima)
            sketch_add(counters, hash_a[w], hash_b[w], width, hashes, adds)
            continue
        m = slru_victim(heads, tails, seg_bytes)
        if (sketch_estimate(counters, hash_a[w], hash_b[w], width, hashes)
                > sketch_estimate(counters, hash_a[m], hash_b[m], width, hashes)):
            slru_evict(prev, next_, seg_of, size_of, heads, tails, seg_bytes)
            window_bytes -= wsize
            window_to_main(w, wsize, main_cap, win, in_window, prev, next_, seg_of, size_of, heads, tails,
                           seg_bytes, maxima)
        else:
            unlink(w, 0, prev, next_, win[0:1], win[1:2])
            in_window[w] = False
            window_bytes -= wsize
        sketch_add(counters, hash_a[w], hash_b[w], width, hashes, adds)
        return window_bytes
    slru_evict(prev, next_, seg_of, size_of, heads, tails, seg_bytes)
    return window_bytes


@njit(cache=True, nogil=True)
def window_to_main(w, wsize, main_cap, win, in_window, prev, next_, seg_of, size_of, heads, tails, seg_bytes,
                   maxima):
    """Move the window's key ``w`` into main (SLRU_insert: the lowest segment with room, else
    segment 0 after main evicts until the key fits)."""
    unlink(w, 0, prev, next_, win[0:1], win[1:2])
    in_window[w] = False
    room = False
    for j in range(maxima.size):
        if seg_bytes[j] + wsize <= maxima[j]:
            room = True
            break
    if not room:
        while seg_bytes.sum() + wsize > main_cap:
            slru_evict(prev, next_, seg_of, size_of, heads, tails, seg_bytes)
    slru_insert(w, wsize, prev, next_, seg_of, size_of, heads, tails, seg_bytes, maxima)


@njit(cache=True, nogil=True)
def sketch_estimate(counters, a, b, width, hashes):
    """The minimum of the key's counters (libCacheSim's estimate)."""
    low = np.uint32(0xFFFFFFFF)
    v = a
    inv = 1.0 / width
    for i in range(hashes):
        x = _mod(v, width, inv)
        if counters[x] < low:
            low = counters[x]
        v = (v + b) & _LOW32  # (a + i*b) mod 2^32, as libCacheSim's unsigned int arithmetic
    return low


@njit(cache=True, nogil=True)
def sketch_add(counters, a, b, width, hashes, adds):
    """Increment every counter of the key (libCacheSim's add: all of them, not only the minima),
    unless its minimum is saturated (2^32 - 1), which takes that many adds (``adds[0]`` counts
    them, so the check is skipped before)."""
    adds[0] += 1
    if adds[0] >= 0xFFFFFFFF and sketch_estimate(counters, a, b, width, hashes) == np.uint32(0xFFFFFFFF):
        return
    v = a
    inv = 1.0 / width
    for i in range(hashes):
        counters[_mod(v, width, inv)] += np.uint32(1)
        v = (v + b) & _LOW32


@njit(cache=True, nogil=True)
def _mod(v, width, inv):
    """``v % width`` for ``v < 2^32`` through a double reciprocal (exact after one correction)."""
    vi = np.int64(v)
    r = vi - np.int64(vi * inv) * width
    if r < 0:
        r += width
    elif r >= width:
        r -= width
    return r


@njit(cache=True, nogil=True)
def _rotl(x, r):
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


@njit(cache=True, nogil=True)
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
