"""Plain-Python Belady (MIN), written from libCacheSim's documented ``Belady`` rule: on a miss that
fits, evict the resident key whose next use is farthest (never used again counts as farthest)
until the key fits, then insert it; a hit updates the key's next use.  libCacheSim keeps the
residents in libpqueue's binary max-heap, so ties (keys never used again) go in that heap's order;
:class:`LibpqueueHeap` is a transcription of libpqueue's documented operations (1-based array,
a parent never ranks below a child, ``insert`` sifts up, ``pop`` moves the last leaf to the root
and sifts down choosing the larger child, the right one only when strictly larger;
``change_priority`` sifts up when the priority grew, else down; ``remove`` refills the slot with
the last leaf and sifts it).  ``replay_belady_farthest`` is the same rule with no heap: any key of
the farthest next use (the smallest key among ties); with unit sizes it must give the same hits.
"""

NEVER = 2**63 - 1


def next_use_naive(keys):
    """For each reference, the index of the next reference to the same key, else NEVER."""
    out = [NEVER] * len(keys)
    seen_later = {}  # key -> the earliest index after the current one that references it
    for i in reversed(range(len(keys))):
        out[i] = seen_later.get(keys[i], NEVER)
        seen_later[keys[i]] = i
    return out


class LibpqueueHeap:
    def __init__(self):
        self.slots = [None]  # [key, priority]; slot 0 unused
        self.pos = {}

    def _place(self, i, entry):
        self.slots[i] = entry
        self.pos[entry[0]] = i

    def _up(self, i):
        entry = self.slots[i]
        while i > 1 and self.slots[i // 2][1] < entry[1]:
            self._place(i, self.slots[i // 2])
            i //= 2
        self._place(i, entry)

    def _down(self, i):
        entry = self.slots[i]
        while 2 * i < len(self.slots):
            child = 2 * i
            if child + 1 < len(self.slots) and self.slots[child][1] < self.slots[child + 1][1]:
                child += 1
            if not entry[1] < self.slots[child][1]:
                break
            self._place(i, self.slots[child])
            i = child
        self._place(i, entry)

    def insert(self, key, priority):
        self.slots.append([key, priority])
        self._up(len(self.slots) - 1)

    def change(self, key, priority):
        i = self.pos[key]
        old = self.slots[i][1]
        self.slots[i][1] = priority
        self._up(i) if old < priority else self._down(i)

    def remove(self, key):
        i = self.pos.pop(key)
        removed = self.slots[i]
        last = self.slots.pop()
        if i < len(self.slots):
            self._place(i, last)
            self._up(i) if removed[1] < last[1] else self._down(i)

    def pop(self):
        key = self.slots[1][0]
        self.remove(key)
        return key

    def keys(self):
        return [entry[0] for entry in self.slots[1:]]


def replay_belady_naive(keys, capacity, sizes=None):
    sizes = [1] * len(keys) if sizes is None else list(sizes)
    nxt = next_use_naive(keys)
    heap = LibpqueueHeap()
    size_of = {}
    used = 0
    hits = []
    for i, (key, size) in enumerate(zip(keys, sizes)):
        if key in size_of:
            hits.append(True)
            heap.change(key, nxt[i])
            continue
        hits.append(False)
        if size > capacity:
            continue
        while used + size > capacity:
            used -= size_of.pop(heap.pop())
        heap.insert(key, nxt[i])
        size_of[key] = size
        used += size
    return hits


def replay_belady_farthest(keys, capacity, sizes=None):
    sizes = [1] * len(keys) if sizes is None else list(sizes)
    nxt = next_use_naive(keys)
    next_of = {}  # resident key -> its next use
    size_of = {}
    used = 0
    hits = []
    for i, (key, size) in enumerate(zip(keys, sizes)):
        if key in next_of:
            hits.append(True)
            next_of[key] = nxt[i]
            continue
        hits.append(False)
        if size > capacity:
            continue
        while used + size > capacity:
            victim = min(next_of, key=lambda k: (-next_of[k], k))
            del next_of[victim]
            used -= size_of.pop(victim)
        next_of[key] = nxt[i]
        size_of[key] = size
        used += size
    return hits
