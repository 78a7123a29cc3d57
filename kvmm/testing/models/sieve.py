"""Plain-Python SIEVE replay, written from the SIEVE paper's description (Zhang et al., NSDI 2024,
Algorithm 1), which libCacheSim's ``Sieve.c`` follows: a queue (a list, oldest first), a visited
flag per entry set by a hit, and a hand that walks from the old end towards the new end, clearing
flags, wrapping around, and evicts the first unvisited entry; the hand stays where that entry was.
``get`` as libCacheSim's: evict until the entry fits, then insert it at the new end."""


def replay_sieve_naive(keys, capacity, sizes=None):
    sizes = [1] * len(keys) if sizes is None else list(sizes)
    queue = []  # [key, size, visited], oldest first
    hand = None  # an index into queue, or None: start at the oldest
    hits = []
    for key, size in zip(keys, sizes):
        entry = next((e for e in queue if e[0] == key), None)
        if entry is not None:
            hits.append(True)
            entry[2] = True
            continue
        hits.append(False)
        if size > capacity:
            continue
        while sum(e[1] for e in queue) + size > capacity:
            i = 0 if hand is None else hand
            while queue[i][2]:
                queue[i][2] = False
                i = (i + 1) % len(queue)
            del queue[i]
            # the hand rests on the next newer entry, which now sits at index i (None past the end)
            hand = i if i < len(queue) else None
        queue.append([key, size, False])
    return hits
