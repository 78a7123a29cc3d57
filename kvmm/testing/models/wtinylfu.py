"""Plain-Python W-TinyLFU replay, written from libCacheSim's documented rules (``WTinyLFU.c``,
``minimalIncrementCBF.c``, XXH64 from the xxHash specification):

* a window LRU of ``int(capacity * window_size)`` and a main SLRU (segments 1:4) of the rest;
* a key is cached only if it fits the capacity, the window and the main SLRU's segment 0;
* frequency sketch: a counting Bloom filter sized for ``main`` entries at error 0.001
  (``ceil(ln2 * bpe)`` hashes, ``ceil(bpe * main)`` counters, bpe = -ln(0.001) / ln(2)^2); a key's
  counters are ``(a + i*b) mod 2^32 mod counters`` with ``a``, ``b`` the low 32 bits of XXH64 of
  its 8 little-endian bytes under seeds 0x12345678 and 0x12344321; an add increments all of them,
  the estimate is their minimum; every ``32 * main`` main-cache hits all counters are halved;
* hit in the window: LRU; hit in main: SLRU's hit, then the key is added to the sketch;
* miss: evict until it fits, then insert at the window's head and add the key to the sketch;
* one eviction: while the window holds > 0 bytes, take its LRU key w: if main has room for it, w
  moves to main; otherwise w and main's victim m compete: if estimate(w) > estimate(m), m is
  evicted and w moves to main (main evicting more if it must), else w is evicted; either way w
  is added to the sketch; the step ends at an eviction.  With an empty window, main evicts.
"""

import math
from collections import OrderedDict

from kvmm.testing.models.slru import NaiveSLRU, segment_maxima

M64 = (1 << 64) - 1
P1, P2, P3, P4, P5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9,
                      0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5)
SEED0, SEED1 = 0x12345678, 0x12344321


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M64


def xxh64_u64(value, seed):
    """XXH64 of the 8 little-endian bytes of ``value`` (an unsigned 64-bit integer)."""
    h = (seed + P5 + 8) & M64
    k = _rotl((value * P2) & M64, 31) * P1 & M64
    h ^= k
    h = (_rotl(h, 27) * P1 + P4) & M64
    h ^= h >> 33
    h = h * P2 & M64
    h ^= h >> 29
    h = h * P3 & M64
    h ^= h >> 32
    return h


class NaiveSketch:
    def __init__(self, entries, error=0.001):
        bpe = -math.log(error) / 0.480453013918201
        self.hashes = int(math.ceil(0.693147180559945 * bpe))
        self.width = int(min(math.ceil(bpe * entries), 2**31 - 1))
        if self.width < self.hashes:
            self.width = 2 * self.hashes
        self.counters = [0] * self.width

    def slots(self, key):
        k = key & M64
        a = xxh64_u64(k, SEED0) & 0xFFFFFFFF
        b = xxh64_u64(k, SEED1) & 0xFFFFFFFF
        return [((a + i * b) & 0xFFFFFFFF) % self.width for i in range(self.hashes)]

    def estimate(self, key):
        return min(self.counters[x] for x in self.slots(key))

    def add(self, key):
        for x in self.slots(key):
            self.counters[x] += 1

    def halve(self):
        self.counters = [c >> 1 for c in self.counters]


class NaiveWTinyLFU:
    def __init__(self, capacity, window_size=0.01):
        self.capacity = capacity
        self.window_cap = int(capacity * window_size)
        self.main_cap = capacity - self.window_cap
        self.window = OrderedDict()  # key -> size, least recent first
        self.window_bytes = 0
        self.main = NaiveSLRU(self.main_cap, segment_maxima(self.main_cap, seg_ratios=(1, 4)))
        self.sketch = NaiveSketch(self.main_cap)
        self.max_hits = 32 * self.main_cap
        self.main_hits = 0
        self.evicted = []

    def used(self):
        return self.window_bytes + self.main.used()

    def can_insert(self, size):
        return size <= self.capacity and size <= self.window_cap and self.main.can_insert(size)

    def get(self, key, size):
        if key in self.window:
            self.window.move_to_end(key)
            return True
        if key in self.main.where:
            self.main.hit(key)
            self.sketch.add(key)
            self.main_hits += 1
            if self.main_hits >= self.max_hits:
                self.main_hits = 0
                self.sketch.halve()
            return True
        if self.can_insert(size):
            while self.used() + size > self.capacity:
                self.evict()
            self.window[key] = size
            self.window_bytes += size
            self.sketch.add(key)
        return False

    def evict(self):
        while self.window_bytes > 0:
            w, wsize = next(iter(self.window.items()))
            if self.main.used() + wsize <= self.main_cap:
                self._window_to_main(w)
                self.sketch.add(w)
                continue
            m = self.main.victim()
            if self.sketch.estimate(w) > self.sketch.estimate(m):
                self.main.evict()
                self._window_to_main(w)
            else:
                del self.window[w]
                self.window_bytes -= wsize
                self.main.evicted.append(w)
            self.sketch.add(w)
            return
        self.main.evict()

    def _window_to_main(self, w):
        size = self.window.pop(w)
        self.window_bytes -= size
        self.main.insert(w, size)


def replay_wtinylfu_naive(keys, capacity, sizes=None, window_size=0.01):
    sizes = [1] * len(keys) if sizes is None else list(sizes)
    cache = NaiveWTinyLFU(capacity, window_size)
    return [cache.get(k, s) for k, s in zip(keys, sizes)]
