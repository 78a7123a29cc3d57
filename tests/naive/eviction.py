"""Plain-Python eviction references: whole-cache simulators with obvious list code.

Each ``simulate_<policy>(trace, c)`` replays a reference string through a cache of ``c``
entries and returns, per reference, ``("hit", key)`` or ``("miss", key, evicted_or_None)``.
``simulate_arc`` is a line-by-line transcription of Megiddo & Modha, "ARC: A Self-Tuning, Low
Overhead Replacement Cache", FAST 2003, Fig. 4 (cases I-IV and REPLACE).  The tests drive the
kvmm policies through :func:`drive` and require identical outputs.
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
