"""Plain-Python SLRU replay, written from libCacheSim's documented SLRU rules (``SLRU.c``):

* ``n_seg`` LRU segments, 0 the lowest (probation); segment ``i`` holds up to ``max[i]`` size
  units: ``capacity // n_seg`` each by default, ``int(ratio_i / sum * capacity)`` with
  ``seg-size`` ratios;
* a key larger than the capacity or than ``max[0]`` is a miss and is not cached;
* a hit in the top segment moves the key to that segment's head; a hit elsewhere moves it to
  the head of the next segment up, then while that segment is over its maximum its tail is
  moved down to the head of the segment below (which is cooled the same way, segment 0 by
  evicting: a hit can evict);
* a miss: while the cache total plus the new size exceeds the capacity, evict the tail of the
  lowest segment whose byte count is > 0; then insert at the head of the lowest segment with
  room for the key (segment 0 when none has).
"""

from collections import OrderedDict


def segment_maxima(capacity, n_seg=4, seg_ratios=None):
    if seg_ratios is None:
        return [capacity // n_seg] * n_seg
    total = sum(seg_ratios)
    return [int(r / total * capacity) for r in seg_ratios]


class NaiveSLRU:
    def __init__(self, capacity, maxima):
        self.capacity = capacity
        self.maxima = list(maxima)
        self.segs = [OrderedDict() for _ in maxima]  # key -> size, head (most recent) last
        self.bytes = [0] * len(maxima)
        self.where = {}
        self.evicted = []  # every key evicted, in order

    def used(self):
        return sum(self.bytes)

    def can_insert(self, size):
        return size <= self.capacity and size <= self.maxima[0]

    def victim(self):
        for i, seg in enumerate(self.segs):
            if self.bytes[i] > 0:
                return next(iter(seg))
        return None

    def evict(self):
        key = self.victim()
        self._pop(key)
        self.evicted.append(key)
        return key

    def _pop(self, key):
        i = self.where.pop(key)
        size = self.segs[i].pop(key)
        self.bytes[i] -= size
        return size

    def _push(self, key, size, i):
        self.segs[i][key] = size
        self.bytes[i] += size
        self.where[key] = i

    def hit(self, key):
        i = self.where[key]
        top = len(self.segs) - 1
        if i == top:
            self.segs[i].move_to_end(key)
            return
        self._push(key, self._pop(key), i + 1)
        self._cool_while_full(i + 1)

    def _cool_while_full(self, i):
        while self.bytes[i] > self.maxima[i]:
            if i == 0:
                self.evict()
                continue
            tail = next(iter(self.segs[i]))
            self._push(tail, self._pop(tail), i - 1)
            self._cool_while_full(i - 1)

    def insert(self, key, size):
        for i in range(len(self.segs)):
            if self.bytes[i] + size <= self.maxima[i]:
                break
        else:
            while self.used() + size > self.capacity:
                self.evict()
            i = 0
        self._push(key, size, i)

    def get(self, key, size):
        if key in self.where:
            self.hit(key)
            return True
        if self.can_insert(size):
            while self.used() + size > self.capacity:
                self.evict()
            self.insert(key, size)
        return False


def replay_slru_naive(keys, capacity, sizes=None, n_seg=4, seg_ratios=None):
    sizes = [1] * len(keys) if sizes is None else list(sizes)
    cache = NaiveSLRU(capacity, segment_maxima(capacity, n_seg, seg_ratios))
    return [cache.get(k, s) for k, s in zip(keys, sizes)]
