"""Plain-Python references for the stack-distance tracker and SHARDS (slow, obviously correct).

* :func:`mattson_distances`: the textbook LRU stack (a list, most recent first).
* :func:`lru_miss_ratio`: an LRU cache of one capacity replayed with an OrderedDict.
* :func:`shards_fixed_rate` / :func:`shards_fixed_size` / :func:`shards_stratified`: SHARDS
  over the Mattson stack, with the same splitmix64 key hash as the kernels.
"""

from __future__ import annotations

import math
from collections import Counter, OrderedDict

MASK64 = (1 << 64) - 1


def mix64(key: int) -> int:
    """splitmix64 finaliser on a 64-bit key (keys given as Python ints, two's complement)."""
    z = (key + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def key_with_hash(h: int) -> int:
    """The 64-bit key whose :func:`mix64` is ``h`` (the finaliser is a bijection: each xor-shift
    and each odd multiplication is undone in reverse order).  Tests use it to put keys exactly at
    a sampling threshold."""
    def unshift(y: int, s: int) -> int:
        x = y
        for _ in range(64 // s + 1):
            x = y ^ (x >> s)
        return x

    z = unshift(h & MASK64, 31)
    z = unshift((z * pow(0x94D049BB133111EB, -1, 1 << 64)) & MASK64, 27)
    z = unshift((z * pow(0xBF58476D1CE4E5B9, -1, 1 << 64)) & MASK64, 30)
    return (z - 0x9E3779B97F4A7C15) & MASK64


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


def hll_registers(keys, bits: int) -> list[int]:
    """HyperLogLog registers as documented in ``kvmm.policies.mrc._stack_kernels.count_strata``:
    register ``h mod 2**bits`` keeps the largest (trailing zeros of ``h >> bits``) + 1."""
    registers = [0] * (1 << bits)
    for k in keys:
        h = mix64(int(k) & MASK64)
        rest = h >> bits
        rank = (rest & -rest).bit_length() if rest else 65 - bits
        registers[h & ((1 << bits) - 1)] = max(registers[h & ((1 << bits) - 1)], rank)
    return registers


def hll_improved_estimate(registers) -> float:
    """Ertl (2017), the improved raw estimator, in its sum form:
    alpha m^2 / (m sigma(C_0/m) + sum_{k=1..q} C_k 2^-k + m tau(1 - C_{q+1}/m) 2^-q),
    alpha = 1 / (2 ln 2), C_k = registers holding k, q = 64 - bits; 0 with every register 0,
    infinite with every register at q + 1 (the denominator is then 0)."""
    m = len(registers)
    q = 64 - (m.bit_length() - 1)
    held = Counter(registers)
    c = [held.get(k, 0) for k in range(q + 2)]
    if c[0] == m:
        return 0.0
    if c[q + 1] == m:
        return math.inf
    x = c[0] / m
    sigma = x + sum(x ** (2 ** k) * 2 ** (k - 1) for k in range(1, 40))
    y = 1 - c[q + 1] / m
    tau = 0.0 if y in (0.0, 1.0) else (1 - y - sum((1 - y ** (2.0 ** -k)) ** 2 * 2.0 ** -k for k in range(1, 80))) / 3
    denominator = m * sigma + sum(c[k] * 2.0 ** -k for k in range(1, q + 1)) + m * tau * 2.0 ** -q
    return m * m / (2 * math.log(2)) / denominator


def distinct_estimate(keys, stratify_rate: float, sketch_bits: int = 16) -> float:
    """Stratified SHARDS's distinct-key estimate D (see :func:`shards_stratified`)."""
    counted = {int(k) & MASK64 for k in keys if mix64(int(k) & MASK64) < stratify_rate * 2.0**64}
    from_counted = len(counted) / stratify_rate
    if stratify_rate >= 1.0:
        return from_counted
    sketch = hll_improved_estimate(hll_registers(keys, sketch_bits))
    if not counted:
        return sketch
    if math.isinf(sketch):  # a saturated sketch bounds nothing
        return from_counted
    var_counted = from_counted * (1 - stratify_rate) / stratify_rate
    var_sketch = (1.04 * max(sketch, 1.0)) ** 2 / 2**sketch_bits
    return (from_counted / var_counted + sketch / var_sketch) / (1 / var_counted + 1 / var_sketch)


def shards_stratified(keys, rate: float, stratify_rate: float, min_stratum_keys: int, sketch_bits: int = 16):
    """The MRC function of stratified fixed-rate SHARDS, from ``kvmm.policies.mrc.shards``' docstring.

    Keys hashing below ``stratify_rate * 2**64`` are counted; those below ``rate * 2**64`` are
    also sampled (Mattson distances among them).  Frequency band = floor(log2(references));
    strata: bands from the hottest down, closed once they hold ``min_stratum_keys`` sampled keys,
    a short coldest remainder joining the stratum above.  Stratum weight = (counted keys in it /
    stratify_rate) / (sampled keys in it), all weights then scaled so they add up to D, the
    inverse-variance weighted mean of counted keys / stratify_rate (variance D (1 - r) / r) and
    the HyperLogLog estimate (variance (1.04 D)^2 / registers); D = counted keys / r at r = 1,
    the HyperLogLog estimate alone while no key is counted, counted keys / r alone when the
    sketch is saturated (infinite).
    A sampled distance d stands for d * D / n (n = sampled keys); SHARDS-adj adds the
    references not accounted for to the distance-0 hits.  With no sampled key, D cold misses.
    Returns ``mrc(capacity)``.
    """
    counted: dict[int, int] = {}
    sampled_keys = []
    for k in keys:
        k = int(k) & MASK64
        h = mix64(k)
        if h < stratify_rate * 2.0**64:
            counted[k] = counted.get(k, 0) + 1
        if rate >= 1.0 or h < int(rate * 2.0**64):
            sampled_keys.append(k)
    total = len(keys)
    freq: dict[int, int] = {}
    for k in sampled_keys:
        freq[k] = freq.get(k, 0) + 1
    band = {k: n.bit_length() - 1 for k, n in freq.items()}
    counted_bands = [n.bit_length() - 1 for n in counted.values()]
    top = max(counted_bands + list(band.values()) + [0])
    strata: list[list[int]] = []
    current: list[int] = []
    held = 0
    for b in range(top, -1, -1):
        current.append(b)
        held += sum(1 for k in freq if band[k] == b)
        if held >= min_stratum_keys:
            strata.append(current)
            current, held = [], 0
    if current:
        if strata:
            strata[-1].extend(current)
        else:
            strata.append(current)
    weight_of_band = {}
    for stratum in strata:
        n_counted = sum(1 for b in counted_bands if b in stratum)
        n_sampled = sum(1 for k in freq if band[k] in stratum)
        for b in stratum:
            weight_of_band[b] = (n_counted / stratify_rate) / max(n_sampled, 1)
    from_counted = len(counted) / stratify_rate
    distinct = distinct_estimate(keys, stratify_rate, sketch_bits)
    weight = {k: weight_of_band[band[k]] * distinct / from_counted for k in freq}
    scale = distinct / len(freq) if freq else 1.0
    distances = mattson_distances(sampled_keys)
    cold = sum(weight.values()) if freq else distinct
    warm = [(d, weight[k]) for d, k in zip(distances, sampled_keys) if d >= 0]
    adj = total - (cold + sum(w for _, w in warm))

    def mrc(capacity: int) -> float:
        if not total:
            return 1.0
        hits = sum(w for d, w in warm if d * scale < capacity) + (adj if capacity > 0 else 0.0)
        hits = min(max(hits, 0.0), total - cold)
        return min(max(1.0 - hits / total, 0.0), 1.0)

    return mrc


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
