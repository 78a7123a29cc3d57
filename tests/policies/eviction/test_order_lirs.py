"""LIRS: the numba replay, the plain-Python reference (kvmm/testing/models/lirs.py) and libCacheSim's
LIRS give the same hits request by request (Mooncake blocks, byte-sized streams, Hypothesis);
LIRSPolicy through ManagedTier equals the reference in kvmm's mode (the referenced key is never
pushed out by its own reference) and libCacheSim up to the first reference where the two differ;
bad options; a Hypothesis state machine of ManagedTier(LIRSPolicy) against the reference."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kvmm.errors import BadInputError, DTypeError, UnknownKeyError
from kvmm.policies import LIRSPolicy, make_eviction_policy, replay
from kvmm.policies.eviction._kernels.lirs import lirs_limits
from kvmm.testing.models.lirs import NaiveLIRS, replay_lirs_naive, replay_lirs_naive_checked
from kvmm.tiers import ManagedTier, SimulatedTier
from tests.policies.eviction import order_parity


def libcachesim_hits(keys, capacity, sizes):
    # a small table: fast to build
    return order_parity.libcachesim_hits("LIRS", keys, capacity, sizes, hashpower=12)


def store_if_admitted(tier, key, size):
    if tier.policy.admits(key, size):  # libCacheSim's rule for storing a miss
        tier.put_size(key, size)


def managed_tier_hits(keys, capacity, sizes, **params):
    return order_parity.managed_tier_hits(LIRSPolicy(**params), keys, capacity, sizes, miss=store_if_admitted)


def kvmm_reference(keys, capacity, sizes, hirs_ratio=0.01):
    model = NaiveLIRS(capacity, hirs_ratio, protect_referenced=True)
    return [model.reference(k, s) for k, s in zip(keys, sizes)]


@pytest.fixture(scope="module")
def block_streams():
    return order_parity.mooncake_block_streams()


@pytest.mark.parametrize("trace", ["conversation", "synthetic"])
@pytest.mark.parametrize("capacity", [64, 512, 4096])
def test_replay_equals_libcachesim_and_reference_on_mooncake_blocks(block_streams, trace, capacity):
    keys = block_streams[trace]
    ours = replay("lirs", keys, capacity).tolist()
    ones = [1] * keys.size
    assert ours == libcachesim_hits(keys.tolist(), capacity, ones)
    assert ours == replay_lirs_naive(keys.tolist(), capacity)
    assert 0 < sum(ours) < keys.size
    managed = managed_tier_hits(keys.tolist(), capacity, ones)
    assert managed == kvmm_reference(keys.tolist(), capacity, ones)
    clean = replay_lirs_naive_checked(keys.tolist(), capacity, quirks=True)[1]
    assert managed[:clean] == ours[:clean] and clean > 1000


@pytest.mark.parametrize("capacity", [450, 2500, 10_000])
def test_byte_sized_replay_equals_libcachesim_and_reference(capacity):
    hirs_limit = lirs_limits(capacity, 0.01)[0]
    # about half too large for the HIR set; keys 0-4 larger than the cache: misses never inserted
    keys, size_of = order_parity.zipf_keys_and_sizes(capacity, max_size=max(2, 2 * hirs_limit))
    sizes = size_of[keys]
    ours = replay("lirs", keys, capacity, sizes).tolist()
    reference, clean = replay_lirs_naive_checked(keys.tolist(), capacity, sizes.tolist())
    assert ours == reference
    # libCacheSim up to its first read of a freed object (kvmm/testing/models/lirs.py), all of it if none
    assert ours[:clean] == libcachesim_hits(keys.tolist(), capacity, sizes.tolist())[:clean]
    assert clean > 2000
    assert not any(h for h, k in zip(ours, keys) if k < 5)
    managed = managed_tier_hits(keys.tolist(), capacity, sizes.tolist())
    assert managed == kvmm_reference(keys.tolist(), capacity, sizes.tolist())
    clean = replay_lirs_naive_checked(keys.tolist(), capacity, sizes.tolist(), quirks=True)[1]
    assert managed[:clean] == ours[:clean] and clean > 1000
    assert 0 < sum(ours) < keys.size


@settings(max_examples=150, deadline=None)
@given(capacity=st.integers(0, 40),
       refs=st.lists(st.tuples(st.integers(0, 25), st.integers(0, 4)), max_size=200))
def test_replay_equals_the_reference_and_libcachesim(capacity, refs):
    keys, sizes = order_parity.hypothesis_stream(refs)  # one size per key: a key keeps the size it was inserted with
    ours = replay("lirs", np.array(keys, np.int64), capacity, np.array(sizes, np.int64)).tolist()
    reference, clean = replay_lirs_naive_checked(keys, capacity, sizes)
    assert ours == reference
    if capacity > 0:
        assert ours[:clean] == libcachesim_hits(keys, capacity, sizes)[:clean]
        managed = managed_tier_hits(keys, capacity, sizes)
        assert managed == kvmm_reference(keys, capacity, sizes)
        clean = replay_lirs_naive_checked(keys, capacity, sizes, quirks=True)[1]
        assert managed[:clean] == ours[:clean]


@pytest.mark.parametrize("hirs_ratio", [0.1, 0.3])
def test_other_hir_shares_equal_the_reference(block_streams, hirs_ratio):
    keys = block_streams["synthetic"][:6000]
    for capacity in (40, 300):
        assert replay("lirs", keys, capacity, hirs_ratio=hirs_ratio).tolist() == \
            replay_lirs_naive(keys.tolist(), capacity, hirs_ratio=hirs_ratio)


def test_pinned_small_example():
    # the worked example of kvmm.policies.eviction._kernels.lirs: capacity 3, hirs_limit 1, lirs_limit 2
    a, b, c, d = range(4)
    keys = [a, b, c, a, d, c, b]
    # a b c miss; a is an LIR hit; d misses (c leaves Q, stays in S non-resident); c misses and
    # returns as LIR (b demoted to Q, pushing d out); b is a resident HIR in Q: a hit
    assert replay("lirs", keys, 3).tolist() == [False, False, False, True, False, False, True]
    model = NaiveLIRS(3)
    for key in keys[:6]:
        model.reference(key, 1)
    # S bottom first: a (LIR), d (a non-resident HIR, in NH), c (LIR); Q holds b
    assert list(model.s.items()) == [(a, [True, True, 1]), (d, [False, False, 1]), (c, [True, True, 1])]
    assert list(model.q) == [b] and list(model.nh) == [d] and model.residents() == {a, b, c}


def test_hir_share_default_and_limits_are_libcachesims():
    assert lirs_limits(1000, 0.01) == (10, 990)
    assert lirs_limits(50, 0.01) == (1, 49)  # at least one unit for the HIR residents


@pytest.mark.parametrize("value, error", [(0.0, BadInputError), (1.0, BadInputError), (float("nan"), BadInputError),
                                          ("0.1", DTypeError), (True, DTypeError)])
def test_bad_hir_share_names_the_problem(value, error):
    with pytest.raises(error, match="hirs_ratio"):
        replay("lirs", [1, 2], 4, hirs_ratio=value)
    with pytest.raises(error, match="hirs_ratio"):
        LIRSPolicy(hirs_ratio=value)


def test_defaults_and_registry_name_are_libcachesims():
    policy = make_eviction_policy("lirs")
    assert isinstance(policy, LIRSPolicy) and policy.hirs_ratio == 0.01
    assert LIRSPolicy(capacity=1000).limits() == (10, 990)
    with pytest.raises(BadInputError, match="capacity"):
        LIRSPolicy(capacity=0)


def test_a_hit_can_evict_and_managed_tier_evicts_it():
    """Capacity 4, hirs_ratio 0.5 (hirs_limit 2, lirs_limit 2), references f b e d e: S is
    b(LIR) d(HIR) e(LIR) from the bottom, Q is d f.  A hit on f (a resident HIR only in Q) with
    the LIR set full demotes b into Q, which pushes Q's oldest (d) out of the cache: libCacheSim's
    rule; ManagedTier.get evicts d."""
    policy = LIRSPolicy(hirs_ratio=0.5)
    tier = ManagedTier(SimulatedTier(4), policy)
    for key in "fbed":
        tier.put_size(key, 1)
    tier.get("e")
    assert policy.stack() == [("b", "LIR"), ("d", "HIR"), ("e", "LIR")] and policy.queue() == ["d", "f"]
    assert copy.deepcopy(policy).on_access("f") == ["d"]  # the hit returns what it pushed out
    tier.get("f")
    assert tier.evictions == 1 and sorted(tier.keys()) == ["b", "e", "f"]  # the four puts fit
    assert policy.stack() == [("e", "LIR"), ("f", "HIR")] and policy.queue() == ["f", "b"]
    tier.check()
    keys = list("fbedef")
    assert replay("lirs", np.array([ord(k) for k in keys]), 4, hirs_ratio=0.5).tolist() == \
        replay_lirs_naive(keys, 4, hirs_ratio=0.5) == [False] * 4 + [True, True]


def test_on_evict_keeps_a_hir_victim_in_s_and_on_remove_forgets_it():
    # an owner evicting a batch (vLLM's evict(n)) names no incoming key: on_evict is the
    # eviction (the HIR victim stays in S, non-resident, so its return makes it LIR), on_remove
    # the delete (it comes back as a new HIR key)
    after = {}
    for evict in ("on_evict", "on_remove"):
        policy = LIRSPolicy(capacity=100)  # HIR limit 1: keys 0..98 LIR, 99 a resident HIR
        for key in range(100):
            policy.on_insert(key)
        assert policy.victims(1) == [99] and policy.queue() == [99]
        getattr(policy, evict)(99)
        assert len(policy) == 99 and policy.queue() == []
        after[evict] = policy.stack()[-1]
        policy.on_insert(99)
        policy.check()
        after[evict + " back"] = (policy.stack()[-1], policy.queue())
    assert after["on_evict"] == (99, "nonresident") and after["on_remove"] == (98, "LIR")
    assert after["on_evict back"] == ((99, "LIR"), [0])  # S's bottom LIR key 0 demoted to Q
    assert after["on_remove back"] == ((99, "HIR"), [99])
    policy = LIRSPolicy(capacity=100)
    policy.on_insert(1)
    before = policy.stack()
    with pytest.raises(UnknownKeyError, match="does not track 7 as resident"):
        policy.on_evict(7)
    assert policy.stack() == before


def test_victims_do_not_change_state_and_bad_calls_change_nothing():
    policy = LIRSPolicy(capacity=4)
    for key in range(6):
        policy.on_insert(key)
    before = (policy.stack(), policy.queue(), len(policy))
    first = policy.victims(3, incoming=9, incoming_size=1)
    assert policy.victims(3, incoming=9, incoming_size=1) == first
    assert (policy.stack(), policy.queue(), len(policy)) == before
    for call, error in [(lambda: policy.on_insert(policy.keys()[0]), BadInputError),
                        (lambda: policy.on_access(99), UnknownKeyError), (lambda: policy.on_remove(99), UnknownKeyError),
                        (lambda: policy.on_insert(7, -1), BadInputError),
                        (lambda: policy.victims(1, incoming=5, incoming_size=-2), BadInputError)]:
        with pytest.raises(error):
            call()
        assert (policy.stack(), policy.queue(), len(policy)) == before
    policy.check()


class LIRSMachine(RuleBasedStateMachine):
    """ManagedTier(SimulatedTier, LIRSPolicy) against NaiveLIRS in kvmm's mode: references (get or
    put_size, as a replay does) and explicit deletes; the hits, S, Q and the residents agree."""

    def __init__(self) -> None:
        super().__init__()
        self.capacity = 30
        self.policy = LIRSPolicy(hirs_ratio=0.2)
        self.tier = ManagedTier(SimulatedTier(self.capacity), self.policy)
        self.model = NaiveLIRS(self.capacity, 0.2, protect_referenced=True)
        self.size_of: dict = {}

    @rule(key=st.integers(0, 20), size=st.integers(1, 7))
    def reference(self, key: int, size: int) -> None:
        size = self.size_of.setdefault(key, size)  # one size per key, as in a trace
        hit = self.tier.contains(key)
        if hit:
            self.tier.get(key)
        elif self.policy.admits(key, size):
            self.tier.put_size(key, size)
        assert self.model.reference(key, size) == hit

    @precondition(lambda self: len(self.tier))
    @rule(data=st.data())
    def delete(self, data) -> None:
        key = data.draw(st.sampled_from(sorted(self.tier.keys())))
        self.tier.delete(key)
        self.model.delete(key)

    @invariant()
    def agrees_with_the_model(self) -> None:
        self.tier.check()
        model = self.model
        expected = [(k, "LIR" if e[0] else ("HIR" if e[1] else "nonresident")) for k, e in model.s.items()]
        assert self.policy.stack() == expected and self.policy.queue() == list(model.q)
        assert set(self.tier.keys()) == model.residents()


TestLIRSMachine = LIRSMachine.TestCase
TestLIRSMachine.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
