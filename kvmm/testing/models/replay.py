"""Plain-Python replays of LRU and FIFO, written from libCacheSim's documented ``get`` rule:
a resident key is a hit (LRU moves it to the most recent end, FIFO does not); otherwise, if the
key fits the capacity at all, evict from the old end until it fits, then insert it with its size."""

from collections import OrderedDict

from kvmm.testing.models.eviction import simulate_arc_sized


def replay_naive(order, keys, capacity, sizes=None):
    sizes = [1] * len(keys) if sizes is None else list(sizes)
    cache: OrderedDict = OrderedDict()  # key -> size, oldest first
    used = 0
    hits = []
    for key, size in zip(keys, sizes):
        if key in cache:
            hits.append(True)
            if order == "lru":
                cache.move_to_end(key)
            continue
        hits.append(False)
        if size > capacity:
            continue
        while used + size > capacity:
            _, old = cache.popitem(last=False)
            used -= old
        cache[key] = size
        used += size
    return hits


def replay_lfu_naive(keys, capacity, sizes=None):
    """LFU by its documented rule: a hit adds 1 to the key's count; a miss that fits evicts, until
    it fits, the key of the smallest count, ties to the one referenced least recently; then the
    key enters with count 1 and its size.  Evicted keys forget their counts."""
    sizes = [1] * len(keys) if sizes is None else list(sizes)
    count, last, size_of = {}, {}, {}
    used = 0
    hits = []
    for t, (key, size) in enumerate(zip(keys, sizes)):
        if key in count:
            hits.append(True)
            count[key] += 1
            last[key] = t
            continue
        hits.append(False)
        if size > capacity:
            continue
        while used + size > capacity:
            victim = min(count, key=lambda k: (count[k], last[k]))
            used -= size_of.pop(victim)
            del count[victim], last[victim]
        count[key], last[key], size_of[key] = 1, t, size
        used += size
    return hits


def replay_arc_naive(keys, capacity, sizes=None):
    """ARC's hits from the size-accounted transcription of libCacheSim's ARC
    (:func:`kvmm.testing.models.eviction.simulate_arc_sized`; every size must be >= 1)."""

    sizes = [1] * len(keys) if sizes is None else list(sizes)
    out, _ = simulate_arc_sized(list(zip(keys, sizes)), capacity)
    return [o[0] == "hit" for o in out]
