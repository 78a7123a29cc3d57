"""The policies' ``fast_hooks`` make exactly the changes of the checked ``on_access`` / ``on_insert``.

Two copies of a policy get the same random stream of events: one through the checked methods,
the other through its fast hooks (for the events they cover); victims, removals and every list
must stay equal after every step, and ``check()`` must hold.
"""

from __future__ import annotations

import random

import pytest

from kvmm.policies.eviction import ARCPolicy, FIFOPolicy, LFUPolicy, LRUPolicy


def state(policy):
    if isinstance(policy, ARCPolicy):
        return policy.lists(), policy.list_sizes(), policy.p, policy.c, policy.ghosts()
    return policy.keys()


def drive(plain, fast, seed: int, *, sized: bool, steps: int = 3000) -> dict:
    """One random stream of inserts, accesses, deletes and planned evictions through both."""
    rng = random.Random(seed)
    access, insert = fast.fast_hooks()[:2]
    universe = 60
    counts = {"insert": 0, "ghost insert": 0, "access": 0, "delete": 0, "evicted": 0}
    for _ in range(steps):
        op = rng.random()
        resident = plain.keys()
        if op < 0.45:
            key = rng.randrange(universe)
            size = rng.choice([0, 1, 2, 5, 9]) if sized else 1
            if key in resident:
                plain.on_access(key)
                access(key)
                counts["access"] += 1
                continue
            if isinstance(plain, ARCPolicy):
                counts["ghost insert"] += key in plain._b1 or key in plain._b2
            if rng.random() < 0.6 and resident:  # make room first, as a tier does for a miss
                n = rng.randint(1, 3)
                protected = set(rng.sample(resident, min(len(resident), rng.randint(0, 2))))
                out = plain.victims(n, protected, incoming=key, incoming_size=size)
                assert fast.victims(n, protected, incoming=key, incoming_size=size) == out
                for victim in out[:rng.randint(0, len(out))]:  # the caller removes some prefix
                    plain.on_remove(victim)
                    fast.on_remove(victim)
                    counts["evicted"] += 1
            plain.on_insert(key, size)
            insert(key, size)
            counts["insert"] += 1
        elif op < 0.85 and resident:
            key = rng.choice(resident)
            plain.on_access(key)
            access(key)
            counts["access"] += 1
        elif resident:
            key = rng.choice(resident)
            plain.on_remove(key)
            fast.on_remove(key)
            counts["delete"] += 1
        assert state(fast) == state(plain)
        fast.check()
    return counts


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("sized", [False, True])
@pytest.mark.parametrize("kwargs", [{}, {"capacity": 20}, {"capacity": 20, "ghost_limit": 12}])
def test_arc_fast_hooks_equal_the_checked_events(seed, sized, kwargs):
    counts = drive(ARCPolicy(**kwargs), ARCPolicy(**kwargs), seed, sized=sized)
    # The stream exercised what ARC's decisions depend on: ghost hits, evictions, deletes.
    assert counts["ghost insert"] > 20 and counts["evicted"] > 100 and counts["delete"] > 100


@pytest.mark.parametrize("make", [LRUPolicy, FIFOPolicy])
def test_lru_fifo_fast_hooks_equal_the_checked_events(make):
    counts = drive(make(), make(), 7, sized=False)
    assert counts["evicted"] > 100


def test_arc_fast_hooks_leave_adaptation_like_the_checked_insert():
    # A pinned walk, c = 2: k2 is evicted into B1; its return is a B1 ghost hit, which grows p
    # to 1 before REPLACE, so |T1| = 1 is not above p and T2's k1 goes; k2 enters T2.  The
    # same whether the keys come through on_insert / on_access or the fast hooks.
    for use_hooks in (False, True):
        arc = ARCPolicy(capacity=2)
        access, insert = arc.fast_hooks()[:2] if use_hooks else (arc.on_access, arc.on_insert)
        insert(1, 1)
        insert(2, 1)
        access(1)
        assert arc.victims(1, incoming=3) == [2]
        arc.on_remove(2)
        insert(3, 1)
        assert arc.victims(1, incoming=2) == [1]
        arc.on_remove(1)
        insert(2, 1)
        assert arc.lists() == {"T1": [3], "T2": [2], "B1": [], "B2": [1]} and arc.p == 1.0


def test_fast_hooks_only_for_exact_builtin_classes():
    class MyARC(ARCPolicy):
        pass

    # LFU has none: fast_hooks() is EvictionPolicyBase's default, None
    assert MyARC().fast_hooks() is None and LFUPolicy().fast_hooks() is None
    hooks = ARCPolicy().fast_hooks()
    # ARC has no evict_first (its victim depends on the incoming key) and no insert_many.
    assert hooks.insert_many is None and hooks.evict_first is None


def replace_reference(t1: dict, t2: dict, p: float, n: int, protected: set) -> list:
    """REPLACE n times as the ARCPolicy docstring states it (no incoming key: no ghost counts):
    the victim comes from T1 when |T1| > p or T2 is empty, else from T2; a list with no
    unprotected key left gives way to the other.  ``t1``/``t2``: key -> size, oldest first."""
    lists = {"T1": dict(t1), "T2": dict(t2)}
    out = []
    while len(out) < n:
        total = {name: sum(entries.values()) for name, entries in lists.items()}
        first = "T1" if total["T1"] > p or total["T2"] == 0 else "T2"
        for name in (first, "T2" if first == "T1" else "T1"):
            free = [k for k in lists[name] if k not in protected]
            if free:
                out.append(free[0])
                del lists[name][free[0]]
                break
        else:
            return out
    return out


@pytest.mark.parametrize("sized", [False, True])
def test_arc_victims_without_incoming_key_are_replace_repeated(sized):
    rng = random.Random(11)
    arc = ARCPolicy(capacity=24)
    checked = 0
    for step in range(4000):
        key = rng.randrange(80)
        if key in arc:
            arc.on_access(key)
        else:
            size = rng.choice([0, 1, 3, 7]) if sized else 1
            out = arc.victims(rng.randint(1, 4), incoming=key, incoming_size=size)
            for victim in out:
                arc.on_remove(victim)
            arc.on_insert(key, size)
        if step % 7 == 0 and len(arc):
            resident = arc.keys()
            protected = set(rng.sample(resident, rng.randint(0, len(resident))))
            n = rng.randint(0, len(resident) + 2)
            before = arc.lists(), arc.p
            assert arc.victims(n, protected) == replace_reference(arc._t1, arc._t2, arc.p, n, protected)
            assert (arc.lists(), arc.p) == before  # victims never changes the state
            checked += 1
    assert checked > 500 and 0 < arc.p < arc.c  # p moved: both lists were picked from
