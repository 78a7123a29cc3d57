"""Plain-Python 2Q replay, written from the documented rule of libCacheSim's TwoQ (Johnson &
Shasha's full 2Q with byte quotas): A1in is a FIFO of first references holding up to
``floor(a_in_size_ratio * capacity)`` bytes before it gives way, A1out a FIFO of the keys that left
A1in (ghosts, up to ``floor(a_out_size_ratio * capacity)`` bytes), Am an LRU of keys seen again after
leaving A1in, with ``capacity - A1in's quota`` bytes of its own.

A reference to a key in A1in is a hit and changes nothing; in Am a hit that makes it most recent.
Otherwise a miss: its ghost (if any) is dropped; a key larger than A1in's quota is not stored.
While A1in + Am + size exceeds the capacity, A1in's oldest leaves for A1out when A1in is over its
quota, else Am's least recent leaves.  A key that was a ghost then enters Am (whose least recent
leave while Am would exceed its own quota); any other key enters A1in.  A key entering A1out
pushes out its oldest ghosts until it fits (a key larger than A1out's quota is not remembered).
"""

from collections import OrderedDict


class _Queue(OrderedDict):
    """key -> size, oldest first, with the total size kept alongside."""

    bytes = 0

    def push(self, key, size):
        self[key] = size
        self.bytes += size

    def drop(self, key=None):
        """Remove ``key`` (default: the oldest); returns its size."""
        size = self.pop(key) if key is not None else self.popitem(last=False)[1]
        self.bytes -= size
        return size


class NaiveTwoQ:
    """The three queues, one reference at a time."""

    def __init__(self, capacity, a_in_size_ratio=0.25, a_out_size_ratio=0.5):
        self.capacity = capacity
        self.in_quota = int(capacity * a_in_size_ratio)
        self.out_quota = int(capacity * a_out_size_ratio)
        self.am_quota = capacity - self.in_quota
        self.a_in, self.a_out, self.am = _Queue(), _Queue(), _Queue()

    def residents(self):
        return set(self.a_in) | set(self.am)

    def reference(self, key, size):
        """True for a hit; on a miss the key is stored as 2Q says (if it is not too large)."""
        a_in, a_out, am = self.a_in, self.a_out, self.am
        if key in a_in:
            return True
        was_ghost = key in a_out
        if was_ghost:
            a_out.drop(key)
        if key in am:
            am.move_to_end(key)
            return True
        if size > self.in_quota or size > self.capacity:
            return False
        while a_in.bytes + am.bytes + size > self.capacity:
            if a_in.bytes > self.in_quota:
                old = next(iter(a_in))
                old_size = a_in.drop()
                if old_size <= self.out_quota:
                    while a_out.bytes + old_size > self.out_quota:
                        a_out.drop()
                    a_out.push(old, old_size)
            else:
                am.drop()
        if was_ghost:
            if size <= self.am_quota:
                while am.bytes + size > self.am_quota:
                    am.drop()
                am.push(key, size)
        else:
            a_in.push(key, size)
        return False

    def delete(self, key):
        """An explicit delete: the key leaves A1in or Am and leaves no ghost."""
        (self.a_in if key in self.a_in else self.am).drop(key)


def replay_twoq_naive(keys, capacity, sizes=None, a_in_size_ratio=0.25, a_out_size_ratio=0.5):
    sizes = [1] * len(keys) if sizes is None else list(sizes)
    cache = NaiveTwoQ(capacity, a_in_size_ratio, a_out_size_ratio)
    return [cache.reference(key, size) for key, size in zip(keys, sizes)]
