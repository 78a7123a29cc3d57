"""Plain-Python replays of LRU and FIFO, written from libCacheSim's documented ``get`` rule:
a resident key is a hit (LRU moves it to the most recent end, FIFO does not); otherwise, if the
key fits the capacity at all, evict from the old end until it fits, then insert it with its size."""

from collections import OrderedDict


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
