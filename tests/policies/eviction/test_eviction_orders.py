"""Exact eviction orders: pinned traces, and every policy against its plain-Python reference."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvmm.policies.eviction import ARCPolicy, FIFOPolicy, LFUPolicy, LRUPolicy
from kvmm.testing.models.eviction import drive, simulate_arc, simulate_fifo, simulate_lfu, simulate_lru

TRACE = [1, 2, 3, 4, 1, 2, 5, 1, 2, 3, 4, 5]
H = "hit"


def evictions(out):
    """Per reference: the evicted key, None (miss, nothing evicted) or 'hit'."""
    return [H if o[0] == "hit" else o[2] for o in out]


# Worked by hand for c = 3 (see the ARC walk-through in test_arc_pinned_trace_lists).
PINNED = {
    "lru": [None, None, None, 1, 2, 3, 4, H, H, 5, 1, 2],
    "fifo": [None, None, None, 1, 2, 3, 4, H, H, 1, 2, H],
    "lfu": [None, None, None, 1, 2, 3, 4, H, H, 5, 3, 4],
    "arc": [None, None, None, 1, 2, 3, 4, H, H, 5, 3, 1],
}
FACTORIES = {"lru": LRUPolicy, "fifo": FIFOPolicy, "lfu": LFUPolicy, "arc": lambda: ARCPolicy(capacity=3)}
REFERENCES = {"lru": simulate_lru, "fifo": simulate_fifo, "lfu": simulate_lfu,
              "arc": lambda trace, c: simulate_arc(trace, c)[0]}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_pinned_trace(name):
    assert evictions(drive(FACTORIES[name](), TRACE, 3)) == PINNED[name]
    assert evictions(REFERENCES[name](TRACE, 3)) == PINNED[name]


def test_arc_pinned_trace_lists():
    # 1 2 3 fill T1; 4 1 2 5 each evict T1's LRU without a ghost (|T1| = c, case IV-A);
    # hits on 1 and 2 move them to T2; 3 and 4 evict from T1 (|T1| = 1 > p = 0) into B1;
    # 5 is a B1 ghost: p grows to 1, so |T1| = 1 is no longer > p and T2's LRU (1) goes to B2.
    policy = ARCPolicy(capacity=3)
    drive(policy, TRACE, 3)
    assert policy.lists() == {"T1": [4], "T2": [2, 5], "B1": [3], "B2": [1]}
    assert policy.p == 1.0
    _, ref = simulate_arc(TRACE, 3)
    assert ref == {"T1": [4], "T2": [2, 5], "B1": [3], "B2": [1], "p": 1.0}


def test_arc_case_iv_b_forgets_b2_s_oldest_ghost_when_the_directory_is_full():
    # Megiddo & Modha, Fig. 4, c = 1.  0 enters T1; its hit moves it to T2.  2 misses with
    # |L1| = 0 < c and |L1| + |L2| = 1 < 2c: REPLACE sends T2's LRU (0) to B2; 2 enters T1, and
    # its hit moves it to T2.  1 misses with |L1| = 0 < c and |L1| + |L2| = |T2| + |B2| = 2 = 2c:
    # case IV-B first deletes B2's LRU (0), then REPLACE sends 2 to B2; 1 enters T1.  Without
    # the directory bound B2 would end as [0, 2].
    trace = [0, 0, 2, 2, 1]
    expected = {"T1": [1], "T2": [], "B1": [], "B2": [2]}
    policy = ARCPolicy(capacity=1)
    assert evictions(drive(policy, trace, 1)) == [None, H, 0, H, 2]
    assert policy.lists() == expected and policy.p == 0.0
    assert simulate_arc(trace, 1)[1] == {**expected, "p": 0.0}
    policy.check()
    # The same at c = 2: pairs of one miss and one hit, so every entry reaches T2 and T1 stays
    # empty at each miss (|L1| = 0 < c, REPLACE takes T2's LRU).  After 1 1 2 2 3 3 4 4 the lists
    # are T2 [3, 4], B2 [1, 2]: |L1| + |L2| = 4 = 2c, so 5 first deletes B2's LRU (1), then
    # REPLACE sends 3 to B2.
    trace = [1, 1, 2, 2, 3, 3, 4, 4, 5]
    expected = {"T1": [5], "T2": [4], "B1": [], "B2": [2, 3]}
    policy = ARCPolicy(capacity=2)
    assert evictions(drive(policy, trace, 2)) == [None, H, None, H, 1, H, 2, H, 3]
    assert policy.lists() == expected and policy.p == 0.0
    assert simulate_arc(trace, 2)[1] == {**expected, "p": 0.0}
    policy.check()


def test_arc_b2_ghost_hit_shrinks_p():
    # Scan-resistant behaviour: a frequently used pair survives a one-off scan.
    trace = [1, 2, 1, 2, 3, 4, 5, 6, 1, 2]
    out = drive(ARCPolicy(capacity=3), trace, 3)
    assert [o[0] for o in out[-2:]] == ["hit", "hit"]
    lru = drive(LRUPolicy(), trace, 3)
    assert [o[0] for o in lru[-2:]] == ["miss", "miss"]
    # A B2 ghost hit lowers p back.
    policy = ARCPolicy(capacity=2)
    drive(policy, [1, 1, 2, 2, 3, 3, 4, 1], 2)
    assert policy.check() is None


@pytest.mark.parametrize("name", sorted(PINNED))
@given(trace=st.lists(st.integers(0, 7), max_size=80), c=st.integers(1, 5))
def test_policy_matches_reference_on_random_traces(name, trace, c):
    policy = FACTORIES[name]() if name != "arc" else ARCPolicy(capacity=c)
    assert drive(policy, trace, c) == REFERENCES[name](trace, c)
    policy.check()


@given(trace=st.lists(st.integers(0, 9), max_size=120), c=st.integers(1, 6))
def test_arc_state_matches_paper_transcription(trace, c):
    policy = ARCPolicy(capacity=c)
    out = drive(policy, trace, c)
    ref_out, ref_state = simulate_arc(trace, c)
    assert out == ref_out
    assert policy.lists() == {k: ref_state[k] for k in ("T1", "T2", "B1", "B2")}
    assert policy.p == pytest.approx(ref_state["p"])
    policy.check()


@pytest.mark.parametrize("name", sorted(PINNED))
@pytest.mark.parametrize("tier_name", ["arena", "simulated"])
def test_managed_tier_reproduces_the_pinned_orders(name, tier_name):
    import numpy as np

    from kvmm.tiers import ArenaTier, ManagedTier, SimulatedTier

    # One-byte entries in a three-byte tier: ARC accounts sizes (bytes under a ManagedTier), so
    # unit-size entries give the paper's entry-counting ARC.
    backend = ArenaTier(3) if tier_name == "arena" else SimulatedTier(3)
    tier = ManagedTier(backend, FACTORIES[name]())
    got = []
    for x in TRACE:
        if tier.contains(x):
            tier.get(x)
            got.append(H)
        else:
            evicted = tier.put(x, np.zeros(1, dtype=np.uint8))
            got.append(evicted[0] if evicted else None)
        tier.check()
    assert got == PINNED[name]
