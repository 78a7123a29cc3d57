"""Plain-Python CLOCK, written from libCacheSim's documented ``Clock`` rule (``Clock.c`` header and
the kvmm docstring), not from the kernel: a list, oldest first, of ``[key, counter]``.

* hit: the counter grows by 1 unless it is already ``2**n_bit_counter - 1``;
* miss of a key that fits the cache: while it does not fit, look at the oldest key: a counter
  above 0 loses 1 and the key goes to the newest end, a counter of 0 is evicted; then insert the
  key at the newest end with the counter ``init_freq``.  A key larger than the cache is not
  inserted.

:class:`ClockModel` is the same list as an event-driven model (insert, access, delete, evict one
passing over protected keys) for the state-machine test.
"""


def replay_clock_naive(keys, capacity, sizes=None, init_freq=0, n_bit_counter=1):
    sizes = [1] * len(keys) if sizes is None else list(sizes)
    model = ClockModel(init_freq, n_bit_counter)
    size_of = {}
    used = 0
    hits = []
    for key, size in zip(keys, sizes):
        if model.has(key):
            hits.append(True)
            model.access(key)
            continue
        hits.append(False)
        if size > capacity:
            continue
        while used + size > capacity:
            used -= size_of.pop(model.evict())
        model.insert(key)
        size_of[key] = size
        used += size
    return hits


class ClockModel:
    def __init__(self, init_freq=0, n_bit_counter=1):
        self.init_freq = init_freq
        self.max_freq = 2 ** n_bit_counter - 1
        self.queue = []  # [key, counter], oldest first
        self.entry = {}  # key -> its [key, counter] in the queue (membership in O(1))

    def has(self, key):
        return key in self.entry

    def insert(self, key):
        self.entry[key] = [key, self.init_freq]
        self.queue.append(self.entry[key])

    def access(self, key):
        entry = self.entry[key]
        if entry[1] < self.max_freq:
            entry[1] += 1

    def delete(self, key):
        self.queue.remove(self.entry.pop(key))

    def evict(self, protected=()):
        """Evict one key; protected keys are passed over untouched and keep their places."""
        i = 0
        while True:
            while self.queue[i][0] in protected:
                i += 1
            entry = self.queue[i]
            if entry[1] >= 1:
                entry[1] -= 1
                self.queue.append(self.queue.pop(i))
            else:
                del self.queue[i]
                del self.entry[entry[0]]
                return entry[0]

    def keys(self):
        return [k for k, _ in self.queue]

    def counters(self):
        return {k: f for k, f in self.queue}
