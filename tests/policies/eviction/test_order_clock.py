"""CLOCK: kvmm.policies.replay('clock'), ClockPolicy through ManagedTier and the plain-Python
reference give libCacheSim's Clock hits and misses request by request (entry counts and bytes,
Mooncake block streams and Hypothesis streams, several counter widths); the policy's eviction
plan, explicit deletes and bad options; a state machine against the list model."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kvmm.errors import BadInputError, DTypeError, KvmmError, UnknownKeyError
from kvmm.policies import EVICTION_POLICIES, ClockPolicy, make_eviction_policy, replay
from kvmm.testing.models.clock import ClockModel, replay_clock_naive
from tests.policies.eviction import order_parity

lcs = pytest.importorskip("libcachesim")


def libcachesim_hits(keys, capacity, sizes, **options):
    # a small table: fast to build; it grows
    return order_parity.libcachesim_hits("Clock", keys, capacity, sizes, hashpower=12, **options)


def managed_tier_hits(keys, capacity, sizes, **options):
    return order_parity.managed_tier_hits(ClockPolicy(**options), keys, capacity, sizes)


@pytest.fixture(scope="module")
def block_streams():
    return order_parity.mooncake_block_streams()


def test_batched_offers_through_managed_tier_equal_libcachesim(block_streams):
    # access_or_put_size_many drives ClockPolicy's fast hooks (no batch eviction: see fast_hooks)
    capacity = 300
    ours = order_parity.batch_offer_hits(ClockPolicy(), order_parity.mooncake_request_blocks()["conversation"], capacity,
                                         check_each=True)
    keys = block_streams["conversation"]
    assert ours == replay("clock", keys, capacity).tolist()
    assert ClockPolicy().fast_hooks()[2:] == (None, None)


@settings(max_examples=150, deadline=None)
@given(capacity=st.integers(0, 12), init_freq=st.integers(0, 4), n_bit_counter=st.integers(1, 3),
       refs=st.lists(st.tuples(st.integers(0, 15), st.integers(0, 5)), max_size=120))
def test_replay_equals_the_naive_reference_and_libcachesim(capacity, init_freq, n_bit_counter, refs):
    keys, sizes = order_parity.hypothesis_stream(refs)  # one size per key: a key keeps the size it was inserted with
    options = dict(init_freq=init_freq, n_bit_counter=n_bit_counter)
    ours = replay("clock", np.array(keys, np.int64), capacity, np.array(sizes, np.int64), **options).tolist()
    assert ours == replay_clock_naive(keys, capacity, sizes, **options)
    if capacity > 0:
        assert ours == libcachesim_hits(keys, capacity, sizes, **options)


def test_pinned_small_examples():
    keys = [0, 1, 0, 2, 1, 0]  # a b a c b a, capacity 2
    # c: a's bit is set, a goes back (bit cleared), b is evicted; b: evicts a (bit 0 now); a evicts c
    assert replay("clock", keys, 2).tolist() == [False, False, True, False, False, False]
    # init_freq=1: every key starts with its bit set (the hit on a cannot raise it past 1).  c: the
    # hand clears a's and b's bits, then evicts a; b hits (bit set again); a: clears b, c, evicts b
    assert replay("clock", keys, 2, init_freq=1).tolist() == [False, False, True, False, True, False]
    # 2-bit counters: a hit twice survives two passes of the hand
    keys = [0, 0, 0, 1, 2, 3, 0]
    assert replay("clock", keys, 2).tolist() == [False, True, True, False, False, False, False]
    assert replay("clock", keys, 2, n_bit_counter=2).tolist() == [False, True, True, False, False, False, True]


def test_policy_plan_applies_second_chances_and_deletes_change_nothing_else():
    policy = ClockPolicy()
    for k in "abcd":
        policy.on_insert(k)
    policy.on_access("a")
    policy.on_access("c")
    assert policy.victims(3) == ["b", "d", "a"] and policy.keys() == list("abcd")  # victims does not mutate
    assert policy.victims(2, protected={"b"}) == ["d", "a"]
    policy.on_remove("d")  # the plan's first victim: a and c lose their bits and go to the head; b stays put
    assert policy.keys() == ["b", "a", "c"] and policy.frequency("a") == policy.frequency("c") == 0
    policy.check()
    policy.on_access("b")
    policy.on_remove("a")  # not planned (the access made the plan stale): an explicit delete
    assert policy.keys() == ["b", "c"] and policy.frequency("b") == 1
    assert policy.victims(1, incoming="zz", incoming_size=10**9) == ["c"]  # the incoming entry is ignored


@pytest.mark.parametrize("options", [{}, {"n_bit_counter": 2}, {"init_freq": 2, "n_bit_counter": 1}])
def test_victim_order_is_libcachesims_eviction_sequence(options):
    # after a prefix of a trace (with explicit deletes), the policy's victims are the keys
    # libCacheSim's successive evictions remove, in order
    for seed in range(10):
        rng = np.random.default_rng(seed)
        trace = rng.zipf(1.3, 150) % 25
        cache = lcs.Clock(cache_size=10, hashpower=8, **options)
        policy = ClockPolicy(**options)
        order_parity.feed_with_deletes(cache, policy, trace.tolist()[: int(rng.integers(20, 150))], rng, 10)
        expected = policy.victims(len(policy))
        theirs = []
        present = set(policy.keys())
        request = lcs.Request(obj_size=1, obj_id=10**6, clock_time=10**6)
        while present:
            cache.evict(request)
            left = {k for k in present if cache.find(lcs.Request(obj_size=1, obj_id=k, clock_time=0), False)}
            [gone] = present - left
            theirs.append(gone)
            present = left
        assert expected == theirs


def test_counters_saturate_at_max_freq_but_init_freq_may_exceed_it():
    policy = ClockPolicy(init_freq=5, n_bit_counter=2)
    assert policy.max_freq == 3
    policy.on_insert("x")
    policy.on_access("x")
    assert policy.frequency("x") == 5  # libCacheSim: hits only raise a counter below max_freq
    policy.on_insert("y")
    for _ in range(6):
        policy.on_access("y")
    assert policy.frequency("y") == 5  # y also started at init_freq and never grew past it
    policy.check()


@pytest.mark.parametrize("options, error", [
    ({"n_bit_counter": 0}, BadInputError), ({"n_bit_counter": 31}, BadInputError), ({"init_freq": -1}, BadInputError),
    ({"init_freq": 1.5}, DTypeError), ({"n_bit_counter": True}, DTypeError), ({"init_freq": 2**31}, BadInputError)])
def test_bad_options_are_refused_by_the_policy_and_the_replay(options, error):
    with pytest.raises(error, match=next(iter(options))):
        ClockPolicy(**options)
    with pytest.raises(error, match=next(iter(options))):
        replay("clock", [1, 2], 2, **options)
    with pytest.raises(BadInputError, match="takes no option 'bits'"):
        make_eviction_policy("clock", bits=2)


def test_bad_calls_raise_and_leave_the_policy_as_it_was():
    policy = ClockPolicy()
    for k in range(4):
        policy.on_insert(k)
    policy.on_access(1)
    before = (policy.keys(), [policy.frequency(k) for k in range(4)], policy.victims(4))
    for call, error in ((lambda: policy.on_access(9), UnknownKeyError), (lambda: policy.on_remove(9), UnknownKeyError),
                        (lambda: policy.on_insert(2), BadInputError), (lambda: policy.on_insert(7, -1), BadInputError),
                        (lambda: policy.on_access(2, 1.5), DTypeError), (lambda: policy.victims(1, 5), DTypeError)):
        with pytest.raises(error):
            call()
        assert (policy.keys(), [policy.frequency(k) for k in range(4)], policy.victims(4)) == before
    policy.check()


def test_registered_and_built_by_name():
    assert EVICTION_POLICIES["clock"] is ClockPolicy
    policy = make_eviction_policy("CLOCK", n_bit_counter=3)
    assert isinstance(policy, ClockPolicy) and policy.max_freq == 7
    with pytest.raises(KvmmError):
        make_eviction_policy("clock", init_freq="1")


class ClockMachine(RuleBasedStateMachine):
    """ClockPolicy against :class:`kvmm.testing.models.clock.ClockModel`: inserts, accesses, deletes,
    and evictions of a prefix of ``victims`` (protected keys passed over)."""

    def __init__(self):
        super().__init__()
        self.policy = ClockPolicy(init_freq=1, n_bit_counter=2)
        self.model = ClockModel(init_freq=1, n_bit_counter=2)
        self.plan = None  # (protected, victims not yet removed) of the last victims() call

    def _stale(self):
        self.plan = None

    @rule(key=st.integers(0, 9))
    def insert(self, key):
        if self.model.has(key):
            with pytest.raises(BadInputError):
                self.policy.on_insert(key)
        else:
            self.policy.on_insert(key, 3)
            self.model.insert(key)
            self._stale()

    @precondition(lambda self: self.model.queue)
    @rule(data=st.data())
    def access(self, data):
        key = data.draw(st.sampled_from(self.model.keys()))
        self.policy.on_access(key)
        self.model.access(key)
        self._stale()

    @precondition(lambda self: self.model.queue)
    @rule(data=st.data())
    def delete(self, data):
        key = data.draw(st.sampled_from(self.model.keys()))
        self.policy.on_remove(key)
        if self.plan is not None and self.plan[1] and self.plan[1][0] == key:
            # documented: removing the plan's next victim is that eviction step
            assert self.model.evict(self.plan[0]) == key
            self.plan = (self.plan[0], self.plan[1][1:])
        else:
            self.model.delete(key)
            self._stale()

    @precondition(lambda self: self.model.queue)
    @rule(data=st.data(), n=st.integers(1, 4))
    def evict_prefix_of_victims(self, data, n):
        protected = set(data.draw(st.lists(st.sampled_from(self.model.keys()), max_size=2)))
        victims = self.policy.victims(n, protected)
        assert victims == self.policy.victims(n, protected)  # asking twice: the same answer
        take = data.draw(st.integers(0, len(victims)))
        for victim in victims[:take]:
            assert self.model.evict(protected) == victim
            self.policy.on_remove(victim)
        self.plan = (protected, victims[take:])

    @invariant()
    def same_queue_and_counters(self):
        self.policy.check()
        assert self.policy.keys() == self.model.keys()
        assert {k: self.policy.frequency(k) for k in self.policy.keys()} == self.model.counters()
        assert len(self.policy) == len(self.model.queue)


TestClockMachine = ClockMachine.TestCase
TestClockMachine.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
