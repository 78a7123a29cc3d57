"""Plain-Python S3-FIFO replay, written from libCacheSim's documented S3-FIFO (the comment at the
top of ``S3FIFO.c`` and :mod:`kvmm.policies.eviction.s3fifo`'s docstring): one FIFO per queue, oldest
first, each with its total size; ``get`` as libCacheSim's ``cache_get_base`` (find, then evict
until the entry fits, then insert)."""

from collections import OrderedDict


class _Fifo:
    def __init__(self):
        self.entries = OrderedDict()  # key -> size, oldest first
        self.used = 0

    def push(self, key, size):
        self.entries[key] = size
        self.used += size

    def pop_oldest(self):
        key, size = self.entries.popitem(last=False)
        self.used -= size
        return key, size

    def discard(self, key):
        if key in self.entries:
            self.used -= self.entries.pop(key)
            return True
        return False


def replay_s3fifo_naive(keys, capacity, sizes=None, small_size_ratio=0.1, ghost_size_ratio=0.9,
                        move_to_main_threshold=2):
    sizes = [1] * len(keys) if sizes is None else list(sizes)
    small_limit = int(capacity * small_size_ratio)
    main_limit = capacity - small_limit
    ghost_limit = int(capacity * ghost_size_ratio)
    small, main, ghost = _Fifo(), _Fifo(), _Fifo()
    freq = {}
    ever_evicted = False

    def evict_once():
        if main.used > main_limit or small.used == 0:
            while main.used > 0:  # clock over main: reinsert accessed entries, one lower
                key, size = main.pop_oldest()
                if freq[key] >= 1:
                    freq[key] = min(freq[key], 3) - 1
                    main.push(key, size)
                else:
                    del freq[key]
                    return
        else:
            while small.used > 0:  # accessed entries move to main, the first other one leaves
                key, size = small.pop_oldest()
                if freq[key] >= move_to_main_threshold:
                    freq[key] = 0
                    main.push(key, size)
                else:
                    del freq[key]
                    if 0 < ghost_limit and size <= ghost_limit:  # the ghost is a FIFO cache of its own
                        while ghost.used + size > ghost_limit:
                            ghost.pop_oldest()
                        ghost.push(key, size)
                    return

    hits = []
    for key, size in zip(keys, sizes):
        if key in freq:
            hits.append(True)
            freq[key] += 1
            continue
        hits.append(False)
        was_ghost = ghost.discard(key)
        if size > small_limit or size > capacity:
            continue
        while small.used + main.used + size > capacity:
            ever_evicted = True
            evict_once()
        if not was_ghost and size >= small_limit:
            continue
        freq[key] = 0
        if was_ghost or (not ever_evicted and small.used >= small_limit):
            main.push(key, size)
        else:
            small.push(key, size)
    return hits
