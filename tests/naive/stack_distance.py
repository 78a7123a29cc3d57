"""Plain-Python references for the stack-distance tracker and SHARDS (slow, obviously correct).

* :func:`mattson_distances`: the textbook LRU stack (a list, most recent first).
* :func:`lru_miss_ratio`: an LRU cache of one capacity replayed with an OrderedDict.
* :func:`shards_fixed_rate` / :func:`shards_fixed_size`: SHARDS over the Mattson stack, with
  the same splitmix64 key hash as the kernels.
"""

from __future__ import annotations

from collections import OrderedDict

MASK64 = (1 << 64) - 1


def mix64(key: int) -> int:
    """splitmix64 finaliser on a 64-bit key (keys given as Python ints, two's complement)."""
    z = (key + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def mattson_distances(keys) -> list[int]:
    """Stack distance of every reference (-1 for a first reference)."""
    stack: list[int] = []
    out = []
    for k in keys:
        k = int(k)
        if k in stack:
            i = stack.index(k)
            out.append(i)
            stack.pop(i)
        else:
            out.append(-1)
        stack.insert(0, k)
    return out


def lru_miss_ratio(keys, capacity: int) -> float:
    """Miss ratio of an LRU cache of ``capacity`` entries (cold misses count); 1.0 if no refs."""
    cache: OrderedDict = OrderedDict()
    misses = 0
    n = 0
    for k in keys:
        n += 1
        k = int(k)
        if k in cache:
            cache.move_to_end(k)
            continue
        misses += 1
        if capacity == 0:
            continue
        cache[k] = True
        if len(cache) > capacity:
            cache.popitem(last=False)
    return misses / n if n else 1.0


def histogram_of(distances) -> tuple[list[int], int]:
    """(counts by distance, cold count) of a distance list."""
    cold = sum(1 for d in distances if d < 0)
    size = max([d for d in distances if d >= 0], default=-1) + 1
    counts = [0] * size
    for d in distances:
        if d >= 0:
            counts[d] += 1
    return counts, cold


def shards_fixed_rate(keys, rate: float):
    """Sampled distances (-2 = skipped) and the weighted MRC function of fixed-rate SHARDS-adj."""
    threshold = min(int(rate * 2.0**64), MASK64)
    sampled_keys = []
    out = []
    for k in keys:
        k = int(k) & MASK64
        if rate < 1.0 and mix64(k) >= threshold:
            out.append(-2)
        else:
            out.append(None)
            sampled_keys.append(k)
    dist = iter(mattson_distances(sampled_keys))
    out = [next(dist) if d is None else d for d in out]
    total = len(out)

    def mrc(capacity: int) -> float:
        sampled = [d for d in out if d != -2]
        weight = 1.0 / rate
        hits = sum(weight for d in sampled if d >= 0 and d * weight < capacity)
        adj = total - len(sampled) * weight
        if capacity > 0:
            hits += adj
        hits = min(max(hits, 0.0), total - sum(weight for d in sampled if d < 0))
        hits = max(hits, 0.0)
        return min(max(1.0 - hits / total, 0.0), 1.0) if total else 1.0

    return out, mrc


def shards_fixed_size(keys, max_keys: int):
    """Fixed-size SHARDS: (sampled distances, weighted histogram dict, weighted cold, threshold or None)."""
    stack: list[int] = []  # sampled keys, most recent first
    threshold = None
    rate = 1.0
    whist: dict[int, float] = {}
    cold = 0.0
    seen: set[int] = set()
    out = []
    for k in keys:
        k = int(k) & MASK64
        h = mix64(k)
        if threshold is not None and h >= threshold:
            out.append(-2)
            continue
        if k not in seen:
            seen.add(k)
            cold += 1.0 / rate
            out.append(-1)
        else:
            d = stack.index(k)
            stack.pop(d)
            scaled = int(d / rate)
            whist[scaled] = whist.get(scaled, 0.0) + 1.0 / rate
            out.append(d)
        stack.insert(0, k)
        if len(stack) > max_keys:
            victim = max(stack, key=mix64)
            stack.remove(victim)
            threshold = mix64(victim)
            rate = threshold / 2.0**64
    return out, whist, cold, threshold


def two_tier_classes(requests, gpu_blocks: int, host_blocks: int, admit):
    """Plain-Python GPU + host LRU replay (the model of ``kvmm.reproduce.efficientagent``).

    ``requests``: list of key lists in prefix order; ``admit(keys, in_host, gpu_hit) -> mask``.
    Returns per-request block classes (0 GPU hit, 1 host load, 2 recompute) and blocks written.
    """
    gpu: OrderedDict = OrderedDict()
    host: OrderedDict = OrderedDict()
    out = []
    written = 0

    def touch(cache, cap, k):
        if cap <= 0:
            return
        if k in cache:
            cache.move_to_end(k, last=False)
        else:
            cache[k] = True
            cache.move_to_end(k, last=False)
            while len(cache) > cap:
                cache.popitem(last=True)

    for keys in requests:
        classes, in_host, broken = [], [], False
        for k in keys:
            in_host.append(k in host)
            if broken:
                classes.append(2)
            elif k in gpu:
                classes.append(0)
            elif k in host:
                classes.append(1)
            else:
                classes.append(2)
                broken = True
        for k, c in zip(keys, classes):
            if c == 1:
                touch(host, host_blocks, k)
        for k in keys:
            touch(gpu, gpu_blocks, k)
        if host_blocks > 0:
            for k, a in zip(keys, admit(keys, in_host, [c == 0 for c in classes])):
                if a and k not in host:
                    touch(host, host_blocks, k)
                    written += 1
        out.append(classes)
    return out, written
