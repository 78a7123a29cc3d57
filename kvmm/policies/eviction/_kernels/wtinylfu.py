"""numba replay of W-TinyLFU, libCacheSim's ``WTinyLFU`` with its default main cache, an SLRU of
segments 1:4 (see :class:`kvmm.policies.WTinyLFUPolicy` for the rules), and its frequency
sketch: libCacheSim's counting Bloom filter (``minimalIncrementCBF``) hashed with XXH64.

The window LRU and the main SLRU's two segments are lists of one node table over dense ids (a
key is in one list at a time; see :mod:`kvmm.policies.eviction._kernels.slru`); the sketch hashes the
original int64 key, as libCacheSim hashes ``obj_id``: ``a``, ``b`` = the low 32 bits of XXH64 of its 8 little-endian
bytes under seeds 0x12345678 and 0x12344321, counter ``i`` of ``hashes`` at
``(a + i*b) mod 2^32 mod width``, computed once per distinct key before the replay and kept in the
key's node row after its links (columns ``_EXTRA ..``; rows of 16 int32, one 64-byte line).

Where the time goes, and what the kernel does about it (each step changes no hit or miss):

* every reference to a main key adds to ``hashes`` (10) counters scattered over a sketch of
  ~14 counters per main entry, and every miss touches three keys' counters (the new key's add,
  the window victim's estimate and add, main's victim's estimate), so the replay is bound by the
  latency of those scattered accesses.  The stream is known in advance, so the kernel prefetches:
  the row (links and counter slots, one cache line) of the key ``_AHEAD_ROWS`` references ahead,
  that key's counters ``_AHEAD_COUNTERS`` ahead, and at each miss the counters of the next window
  victims;
* counters are uint16 (half the footprint of libCacheSim's uint32); one that reaches 0xFFFF
  keeps counting in a uint32 overflow array (``counts[x] == 0xFFFF``: the value is
  ``0xFFFF + overflow[x]``), which only the hottest keys' counters ever touch;
* counters only grow between halvings, so main's victim's estimate, once read, is a lower bound
  until that victim changes or the sketch halves: a window victim whose estimate does not exceed
  it loses without reading the victim's counters again (the common case: most window victims
  were referenced once); then the window victim's estimate and its add are one pass over its
  counters.

Runtime complexity: O(hashes) per reference plus the keys the window hands to main and the
cooling moves (amortised O(1)); O(width) per halving, once every ``32 * main`` main hits.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from kvmm._kernels import prefetch
from kvmm.policies.eviction._kernels.slru import (
    _BYTES,
    _EXTRA,
    _HEAD,
    _MAX,
    _NEXT,
    _PREV,
    _SEG,
    _SIZE,
    _TAIL,
    NONE,
    link,
    new_tables,
    slru_evict,
    slru_hit,
    slru_insert,
    slru_victim,
    unlink,
)
from kvmm.policies.eviction.wtinylfu import sketch_shape, split_capacity, validate_options

#: libCacheSim's W-TinyLFU options (``main-cache``, only ``"SLRU"`` here; ``window-size``).
PARAMS_WTINYLFU: tuple = (("main_cache", "SLRU"), ("window_size", 0.01))

_AHEAD_ROWS = 16  # references ahead whose node row (links and counter slots) is prefetched
_AHEAD_COUNTERS = 8  # references ahead whose counters are prefetched (their slots are in cache by then)
_SPILL = np.uint16(0xFFFF)  # a uint16 counter at this value continues in the overflow array
_SATURATED = np.uint32(0xFFFFFFFF)  # libCacheSim's uint32 counter maximum
# Estimates are int64, as main's victim's bound: numba widens uint32 arithmetic to uint64, and a
# uint64 compared with an int64 goes through float64 (int64 estimates: Zipf replay ~10 % faster)
_SATURATED_I = np.int64(0xFFFFFFFF)
_SPILL_I = np.int64(0xFFFF)

_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P4 = np.uint64(0x85EBCA77C2B2AE63)
_P5 = np.uint64(0x27D4EB2F165667C5)
_SEED0 = np.uint64(0x12345678)
_SEED1 = np.uint64(0x12344321)
_LOW32 = np.uint64(0xFFFFFFFF)


def replay_wtinylfu(keys, dense, n_unique, sizes, capacity, main_cache="SLRU", window_size=0.01):
    """Hits of W-TinyLFU over ``keys`` / ``dense`` (see :mod:`kvmm.policies.eviction._replay`)."""
    validate_options(main_cache, window_size)
    window_cap, main_cap, maxima = split_capacity(int(capacity), window_size)
    width, hashes = sketch_shape(main_cap)
    # main's segments, then the window; each key's row holds its counter slots after its links
    node, segs = new_tables(n_unique, maxima, len(maxima) + 1, sizes, extra_columns=hashes)
    width = counter_slots(keys.view(np.uint64), dense, n_unique, width, hashes, node)
    # no counter can saturate (2^32 - 1) unless hashes * (adds <= 2 per reference) can reach it
    may_saturate = hashes * 2 * dense.size >= 0xFFFFFFFF
    counts, overflow = np.zeros(width, np.uint16), np.zeros(width, np.uint32)
    # libCacheSim halves the counters after 32 x main's capacity additions; beyond 2**62 (a capacity
    # near replay's 2**60 bound) no trace gets there, and the product would not fit int64
    return _replay(dense, sizes, capacity, window_cap, main_cap, node, segs, len(maxima), hashes, counts, overflow,
                   min(32 * main_cap, 2**62), may_saturate)


def counter_slots(words: np.ndarray, dense: np.ndarray, n_unique: int, width: int, hashes: int,
                  node: np.ndarray) -> int:
    """Write each distinct key's ``hashes`` counters into its ``node`` row (columns ``_EXTRA`` ..
    ``_EXTRA + hashes``); returns the sketch's width (fewer counters after a compaction)."""
    key_slots(words, dense, n_unique, width, hashes, node)
    if width > 4 * n_unique * hashes:
        # counters only ever change through the keys' slots, so a sketch far wider than the
        # slots in use (byte capacities: libCacheSim sizes it by main's bytes) is renumbered
        # onto the slots used, the same counts in a table of O(distinct keys)
        slots = node[:, _EXTRA:_EXTRA + hashes]
        used, inverse = np.unique(slots, return_inverse=True)
        slots[...] = inverse.reshape(slots.shape)
        width = used.size
    return width


@njit(cache=True, nogil=True)
def key_slots(keys, dense, n_unique, width, hashes, node):
    """Each distinct key's ``hashes`` counters, ``(a + i*b) mod 2^32 mod width`` (see module
    docstring), into its row of ``node`` from column ``_EXTRA``, hashed at its first reference."""
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
            node[new, _EXTRA + j] = v % w
            v = (v + b) & _LOW32  # unsigned 32-bit arithmetic, as libCacheSim's
        new += 1


@njit(cache=True, nogil=True)
def _replay(dense, sizes, capacity, window_cap, main_cap, node, segs, n_seg, hashes, counts, overflow, max_hits,
            may_saturate):
    hits = np.zeros(dense.size, np.bool_)
    window = n_seg  # the window LRU is the list after main's segments
    max0 = segs[_MAX, 0]
    node_words = node.reshape(node.size)  # the same memory, flat, for the prefetches
    row = node.shape[1]
    # a row is one 64-byte line at int32, two at int64 (see new_tables): the second line's offset
    second_line = 64 // node.itemsize if row * node.itemsize > 64 else 0
    # main's victim and a lower bound of its estimate (-1: none known); see the module docstring
    bound = np.array([NONE, 0], np.int64)
    main_used = 0  # main's total, kept here rather than summed per miss
    main_hits = 0
    n = dense.size
    for i in range(n):
        if i + _AHEAD_ROWS < n:
            ahead = dense[i + _AHEAD_ROWS]
            prefetch_row(node_words, ahead, row, second_line)
        if i + _AHEAD_COUNTERS < n:
            ahead = dense[i + _AHEAD_COUNTERS]
            prefetch_counters(counts, node, hashes, ahead)
            # its list neighbours, which a hit relinks (their row is in cache by now)
            prefetch(node_words, max(node[ahead, _PREV], 0) * row)
            prefetch(node_words, max(node[ahead, _NEXT], 0) * row)
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
            # the next keys the hits cool down a segment: the top segment's tail's predecessor
            t = segs[_TAIL, n_seg - 1]
            if t != NONE:
                prefetch(node_words, max(node[t, _PREV], 0) * row)
            sketch_add(counts, overflow, node, hashes, d, may_saturate)
            main_hits += 1
            if main_hits >= max_hits:
                main_hits = 0
                halve(counts, overflow)
                bound[0] = NONE  # halving lowers counts: the bound no longer holds
            continue
        size = sizes[i]
        if size > capacity or size > window_cap or size > main_cap or size > max0:
            continue  # libCacheSim's WTinyLFU_can_insert
        while segs[_BYTES, window] + main_used + size > capacity:
            main_used = evict_one(main_used, main_cap, window, n_seg, node, segs, counts, overflow,
                                  hashes, may_saturate, bound)
        node[d, _SIZE] = size
        link(d, window, node, segs)
        sketch_add(counts, overflow, node, hashes, d, may_saturate)
        # the next misses' window victims: the tail's predecessors (unless hits reorder them)
        w = segs[_TAIL, window]
        if w != NONE:
            w = node[w, _PREV]
            if w != NONE:
                prefetch_counters(counts, node, hashes, w)
                w = node[w, _PREV]
                if w != NONE:
                    prefetch_row(node_words, w, row, second_line)
    return hits


@njit(cache=True, nogil=True, inline="always")
def evict_one(main_used, main_cap, window, n_seg, node, segs, counts, overflow, hashes, may_saturate,
              bound):
    """libCacheSim's ``WTinyLFU_evict``: the window hands its LRU keys to main while main has
    room, then its LRU key competes with main's victim; returns main's total after."""
    while segs[_BYTES, window] > 0:
        w = segs[_TAIL, window]
        wsize = node[w, _SIZE]
        if main_used + wsize <= main_cap:
            main_used = window_to_main(w, wsize, main_used, main_cap, n_seg, node, segs)
            sketch_add(counts, overflow, node, hashes, w, may_saturate)
            continue
        m = slru_victim(n_seg, segs)
        if bound[0] == m and not may_saturate:
            # the common case: w's estimate and its add in one pass over its counters; should
            # the bound not decide, m's estimate is read as it was before w's add
            estimate_w = sketch_estimate_add(counts, overflow, node, hashes, w)
            if estimate_w > bound[1]:
                bound[1] = sketch_estimate_before_add(counts, overflow, node, hashes, m, w)
        else:
            estimate_w = sketch_estimate(counts, overflow, node, hashes, w)
            if bound[0] != m or estimate_w > bound[1]:  # the bound does not decide: read m's counters
                bound[0] = m
                bound[1] = sketch_estimate(counts, overflow, node, hashes, m)
            sketch_add(counts, overflow, node, hashes, w, may_saturate)
        if estimate_w > bound[1]:
            main_used -= slru_evict(n_seg, node, segs)
            main_used = window_to_main(w, wsize, main_used, main_cap, n_seg, node, segs)
        else:
            unlink(w, node, segs)
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
def sketch_estimate(counts, overflow, node, hashes, d):
    """The minimum of key ``d``'s counters, the first ``hashes`` of its row (libCacheSim's estimate)."""
    low = _SATURATED_I
    for j in range(hashes):
        x = node[d, _EXTRA + j]
        c = np.int64(counts[x])
        if c == _SPILL_I:
            c += np.int64(overflow[x])
        if c < low:
            low = c
    return low


@njit(cache=True, nogil=True, inline="always")
def sketch_add(counts, overflow, node, hashes, d, may_saturate):
    """Increment every counter of key ``d`` (libCacheSim's add: all of them, repeats included,
    not only the minima), unless its minimum is saturated (2^32 - 1), which only a stream long
    enough (``may_saturate``) can reach, so the check is skipped otherwise.  A counter that is not
    a minimum wraps at 2^32, as libCacheSim's uint32 does."""
    if may_saturate and sketch_estimate(counts, overflow, node, hashes, d) == _SATURATED_I:
        return
    for j in range(hashes):
        x = node[d, _EXTRA + j]
        c = counts[x]
        if c != _SPILL:
            counts[x] = c + np.uint16(1)
        elif overflow[x] == _SATURATED - np.uint32(_SPILL):
            counts[x] = 0  # 2^32 - 1 + 1 wraps to 0
            overflow[x] = 0
        else:
            overflow[x] += np.uint32(1)


@njit(cache=True, nogil=True, inline="always")
def sketch_estimate_add(counts, overflow, node, hashes, d):
    """:func:`sketch_estimate` of key ``d``, then its :func:`sketch_add`, in one pass; only where
    no counter can saturate (``may_saturate`` False: then none wraps either)."""
    low = _SATURATED_I
    for j in range(hashes):
        x = node[d, _EXTRA + j]
        c = counts[x]
        if c != _SPILL:
            value = np.int64(c)
            counts[x] = c + np.uint16(1)
        else:
            value = _SPILL_I + np.int64(overflow[x])
            overflow[x] += np.uint32(1)
        if value < low:
            low = value
    return low


@njit(cache=True, nogil=True, inline="always")
def sketch_estimate_before_add(counts, overflow, node, hashes, m, w):
    """Key ``m``'s estimate as it was before :func:`sketch_estimate_add` of key ``w``: each of
    m's counters less the times it is one of w's (no counter wraps where that is used)."""
    low = _SATURATED_I
    for j in range(hashes):
        x = node[m, _EXTRA + j]
        # the counter read of sketch_estimate, written out: a shared helper function for the
        # read (inlined or not, returning uint64 or int64) made the whole replay 2x slower (measured)
        c = np.int64(counts[x])
        if c == _SPILL_I:
            c += np.int64(overflow[x])
        for k in range(hashes):
            if node[w, _EXTRA + k] == x:
                c -= 1
        if c < low:
            low = c
    return low


@njit(cache=True, nogil=True)
def halve(counts, overflow):
    """Every counter halved (libCacheSim's decay)."""
    for x in range(counts.size):
        c = counts[x]
        if c != _SPILL:
            counts[x] = c >> np.uint16(1)
            continue
        value = (np.uint32(_SPILL) + overflow[x]) >> np.uint32(1)
        if value < np.uint32(_SPILL):
            counts[x] = np.uint16(value)
            overflow[x] = 0
        else:
            overflow[x] = value - np.uint32(_SPILL)


@njit(cache=True, nogil=True, inline="always")
def prefetch_row(node_words, d, row, second_line):
    """Prefetch key ``d``'s row, its links and its counter slots: one cache line, or two where
    ``second_line`` (the second line's offset in the row) is not 0."""
    prefetch(node_words, d * row)
    if second_line:
        prefetch(node_words, d * row + second_line)


@njit(cache=True, nogil=True, inline="always")
def prefetch_counters(counts, node, hashes, d):
    for j in range(hashes):
        prefetch(counts, node[d, _EXTRA + j])


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
