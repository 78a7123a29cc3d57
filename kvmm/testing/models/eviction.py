"""Plain-Python eviction references: whole-cache simulators with obvious list code.

Each ``simulate_<policy>(trace, c)`` replays a reference string through a cache of ``c``
entries and returns, per reference, ``("hit", key)`` or ``("miss", key, evicted_or_None)``.
``simulate_arc`` is a line-by-line transcription of Megiddo & Modha, "ARC: A Self-Tuning, Low
Overhead Replacement Cache", FAST 2003, Fig. 4 (cases I-IV and REPLACE).  The tests drive the
kvmm policies through :func:`drive` and require identical outputs.  ``simulate_arc_sized`` is
ARC over entries of different sizes, accounted in size units, transcribed from libCacheSim
(the tests drive ``ManagedTier`` + ``ARCPolicy`` through the same requests).
"""

from __future__ import annotations


def drive(policy, trace, c):
    """Replay ``trace`` through ``policy`` with a cache of ``c`` entries (the ManagedTier calling
    convention: victims before on_insert, with the incoming key)."""
    resident = set()
    out = []
    for x in trace:
        if x in resident:
            policy.on_access(x)
            out.append(("hit", x))
            continue
        evicted = None
        if len(resident) == c:
            [evicted] = policy.victims(1, incoming=x)
            policy.on_remove(evicted)
            resident.remove(evicted)
        policy.on_insert(x)
        resident.add(x)
        out.append(("miss", x, evicted))
    return out


def simulate_lru(trace, c):
    cache = []  # least recent first
    out = []
    for x in trace:
        if x in cache:
            cache.remove(x)
            cache.append(x)
            out.append(("hit", x))
            continue
        evicted = cache.pop(0) if len(cache) == c else None
        cache.append(x)
        out.append(("miss", x, evicted))
    return out


def simulate_fifo(trace, c):
    cache = []  # oldest insert first
    out = []
    for x in trace:
        if x in cache:
            out.append(("hit", x))
            continue
        evicted = cache.pop(0) if len(cache) == c else None
        cache.append(x)
        out.append(("miss", x, evicted))
    return out


def simulate_lfu(trace, c):
    """Least frequent first; ties go to the least recently used.  Counts reset on eviction."""
    freq = {}
    last = {}
    out = []
    for t, x in enumerate(trace):
        if x in freq:
            freq[x] += 1
            last[x] = t
            out.append(("hit", x))
            continue
        evicted = None
        if len(freq) == c:
            evicted = min(freq, key=lambda k: (freq[k], last[k]))
            del freq[evicted], last[evicted]
        freq[x] = 1
        last[x] = t
        out.append(("miss", x, evicted))
    return out


def simulate_arc(trace, c):
    t1, t2, b1, b2 = [], [], [], []  # least recent first
    p = 0.0
    out = []

    def replace(x, p):
        # REPLACE(x, p); if the chosen list is empty, take the other (the paper never hits this
        # case with a pure cache, but p can reach c while T2 is empty).
        if t1 and ((x in b2 and len(t1) == p) or len(t1) > p) or not t2:
            victim = t1.pop(0)
            b1.append(victim)
        else:
            victim = t2.pop(0)
            b2.append(victim)
        return victim

    for x in trace:
        if x in t1 or x in t2:  # Case I
            (t1 if x in t1 else t2).remove(x)
            t2.append(x)
            out.append(("hit", x))
            continue
        if x in b1:  # Case II
            p = min(p + max(len(b2) / len(b1), 1.0), float(c))
            victim = replace(x, p)
            b1.remove(x)
            t2.append(x)
            out.append(("miss", x, victim))
            continue
        if x in b2:  # Case III
            p = max(p - max(len(b1) / len(b2), 1.0), 0.0)
            victim = replace(x, p)
            b2.remove(x)
            t2.append(x)
            out.append(("miss", x, victim))
            continue
        victim = None  # Case IV
        if len(t1) + len(b1) == c:
            if len(t1) < c:
                b1.pop(0)
                victim = replace(x, p)
            else:
                victim = t1.pop(0)
        elif len(t1) + len(t2) + len(b1) + len(b2) >= c:
            if len(t1) + len(t2) + len(b1) + len(b2) == 2 * c:
                b2.pop(0)
            if len(t1) + len(t2) == c:
                victim = replace(x, p)
        t1.append(x)
        out.append(("miss", x, victim))
    return out, {"T1": t1, "T2": t2, "B1": b1, "B2": b2, "p": p}


def simulate_arc_sized(requests, c):
    """ARC over entries of different sizes, accounted in size units, transcribed from
    libCacheSim's ``ARC.c`` (``ARC_find``, ``_ARC_replace``, ``_ARC_evict_miss_on_all_queues``).

    ``requests`` is a sequence of ``(key, size)``; ``c`` the capacity in size units.  Returns per
    request ``("hit", key)``, ``("miss", key, [evicted...])`` or ``("skip", key)`` for an entry
    larger than ``c`` (a miss that is not stored), and the final lists and ``p``.
    """
    t1, t2, b1, b2 = {}, {}, {}, {}  # key -> size, least recent first (dicts keep order)
    p = 0.0
    out = []

    def total(lst):
        return sum(lst.values())

    def pop_lru(lst):
        key = next(iter(lst))
        return key, lst.pop(key)

    def replace(in_b2):
        # REPLACE: T1's LRU when T1 holds more than p (or exactly p and x was a B2 ghost), or
        # when T2 holds nothing; else T2's LRU.  The victim becomes a ghost.
        if (total(t1) > 0 and (total(t1) > p or (total(t1) == p and in_b2))) or total(t2) == 0:
            key, size = pop_lru(t1)
            b1[key] = size
        else:
            key, size = pop_lru(t2)
            b2[key] = size
        return key

    for x, size in requests:
        if x in t1:  # Case I
            t2[x] = t1.pop(x)
            out.append(("hit", x))
            continue
        if x in t2:
            t2[x] = t2.pop(x)
            out.append(("hit", x))
            continue
        in_b1, in_b2 = x in b1, x in b2
        if in_b1:  # Case II: adapt p with the ghost byte totals, then forget the ghost
            p = min(p + max(total(b2) / total(b1), 1.0), float(c))
            del b1[x]
        elif in_b2:  # Case III
            p = max(p - max(total(b1) / total(b2), 1.0), 0.0)
            del b2[x]
        if size > c:
            out.append(("skip", x))
            continue
        evicted = []
        while total(t1) + total(t2) + size > c:
            if in_b1 or in_b2:
                evicted.append(replace(in_b2))
            elif total(t1) + total(b1) + size > c:  # Case IV-A
                if total(b1) > 0:
                    pop_lru(b1)
                    evicted.append(replace(in_b2))
                else:
                    evicted.append(pop_lru(t1)[0])  # T1 alone exceeds c: no ghost
            else:  # Case IV-B
                if total(t1) + total(t2) + total(b1) + total(b2) >= 2 * c and total(b2) > 0:
                    pop_lru(b2)
                evicted.append(replace(in_b2))
        (t2 if in_b1 or in_b2 else t1)[x] = size
        out.append(("miss", x, evicted))
    return out, {"T1": list(t1), "T2": list(t2), "B1": list(b1), "B2": list(b2), "p": p}
