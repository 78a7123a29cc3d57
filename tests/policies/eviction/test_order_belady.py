"""Belady: kvmm.policies.replay('belady'), BeladyPolicy.from_trace through ManagedTier and the
plain-Python references give libCacheSim's Belady hits and misses request by request (entry counts
and bytes; Mooncake block streams and Hypothesis streams; libCacheSim driven one Request at a time
with next_access_vtime set, and through its oracleGeneral trace reader); the stream-following
rules (cursor, advance, past the trace); the simulator's refusal; a state machine."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kvmm.errors import BadInputError, DTypeError, ShapeError, UnknownKeyError
from kvmm.policies import EVICTION_POLICIES, BeladyPolicy, make_eviction_policy, replay
from kvmm.policies.eviction.belady import NEVER
from kvmm.testing.models.belady import LibpqueueHeap, next_use_naive, replay_belady_farthest, replay_belady_naive
from kvmm.traces.oracle import ORACLE_GENERAL_DTYPE, next_access_vtime
from tests.policies.eviction import order_parity

lcs = pytest.importorskip("libcachesim")


def libcachesim_hits(keys, capacity, sizes):
    """libCacheSim's Belady, one Request at a time; next_access_vtime is the index of the key's
    next reference (INT64_MAX: none), as its oracleGeneral reader supplies it."""
    # a small table: fast to build; it grows
    return order_parity.libcachesim_hits("Belady", keys, capacity, sizes, hashpower=12,
                                         next_uses=next_use_naive(list(keys)))


def managed_tier_hits(keys, capacity, sizes):
    policy = BeladyPolicy.from_trace(np.asarray(keys, np.int64))
    hits = order_parity.managed_tier_hits(policy, keys, capacity, sizes, miss=order_parity.store_or_advance)
    assert policy.position == len(keys)
    return hits


def test_libcachesim_trace_reader_supplies_the_same_next_uses(tmp_path):
    # libCacheSim's own path: an oracleGeneral file whose next_access_vtime (1-based, -1: none)
    # its reader turns into the Requests' next uses; byte-sized, so tie-breaks count
    rng = np.random.default_rng(7)
    keys = rng.zipf(1.3, 8000) % 1500
    size_of = rng.integers(1, 50, 1500)
    records = np.zeros(keys.size, ORACLE_GENERAL_DTYPE)
    records["obj_id"] = keys
    records["size"] = size_of[keys]
    records["next_access_vtime"] = next_access_vtime(keys)
    path = tmp_path / "t.oracleGeneral.bin"
    records.tofile(path)
    for capacity in (300, 3000):
        reader = lcs.TraceReader(str(path), lcs.TraceType.ORACLE_GENERAL_TRACE)
        miss_ratio = lcs.Belady(cache_size=capacity).process_trace(reader)[0]
        hits = replay("belady", keys, capacity, size_of[keys])
        assert miss_ratio == pytest.approx(1 - hits.mean(), abs=1e-12)


@settings(max_examples=150, deadline=None)
@given(capacity=st.integers(0, 12), refs=st.lists(st.tuples(st.integers(0, 15), st.integers(0, 5)), max_size=120))
def test_replay_equals_the_naive_references_and_libcachesim(capacity, refs):
    keys, sizes = order_parity.hypothesis_stream(refs)  # one size per key: a key keeps the size it was inserted with
    ours = replay("belady", np.array(keys, np.int64), capacity, np.array(sizes, np.int64)).tolist()
    assert ours == replay_belady_naive(keys, capacity, sizes)
    if capacity > 0:
        assert ours == libcachesim_hits(keys, capacity, sizes)
    # with unit sizes any tie-break among keys never used again gives the same hits
    assert replay("belady", np.array(keys, np.int64), capacity).tolist() == replay_belady_farthest(keys, capacity)


def test_hits_do_not_depend_on_the_tie_break_but_evictions_follow_libcachesims_heap():
    # Keys never used again tie; which of them goes first never changes a hit (a live key is
    # evicted only once every dead one is gone), even with sizes ...
    rng = np.random.default_rng(3)
    for _ in range(50):
        keys = rng.integers(0, 30, 100).tolist()
        size_of = rng.integers(1, 8, 30)
        sizes = [int(size_of[k]) for k in keys]
        assert replay("belady", keys, 15, sizes).tolist() == replay_belady_farthest(keys, 15, sizes)
    # ... so the victims themselves are compared with libCacheSim's: after a prefix of a trace,
    # with explicit deletes, the policy's victim order is libCacheSim's to_evict/evict sequence
    for seed in range(12):
        rng = np.random.default_rng(seed)
        trace = rng.integers(0, 25, 120).tolist()
        nxt = next_use_naive(trace)
        cache = lcs.Belady(cache_size=10, hashpower=8)
        policy = BeladyPolicy.from_trace(trace)
        stop = int(rng.integers(20, 120))
        order_parity.feed_with_deletes(cache, policy, trace[:stop], rng, 10, next_uses=nxt)
        request = lcs.Request(obj_size=1, obj_id=10**6, clock_time=stop)
        theirs = []
        while cache.get_n_obj():
            theirs.append(cache.to_evict(request).obj_id)
            cache.evict(request)
        assert policy.victims(len(policy)) == theirs and len(theirs) == len(policy) > 0


def test_six_keys_never_used_again_leave_in_libpqueues_pop_order():
    policy = BeladyPolicy()  # no future: every next use is never, so all tie
    for k in range(6):
        policy.on_insert(k)
    # pop takes the root, then the last leaf becomes the root (no child ranks strictly above it)
    assert policy.victims(6) == [0, 5, 4, 3, 2, 1]


def test_pinned_small_example():
    # a b c a b, capacity 2: c evicts b (next use 4 is farther than a's 3), then c (never) goes
    assert replay("belady", [0, 1, 2, 0, 1], 2).tolist() == [False, False, False, True, False]
    policy = BeladyPolicy.from_trace([0, 1, 2, 0, 1])
    policy.on_insert(0)
    policy.on_insert(1)
    assert policy.next_use(0) == 3 and policy.next_use(1) == 4 and policy.victims(2) == [1, 0]
    policy.on_remove(1)
    policy.on_insert(2)
    assert policy.next_use(2) == NEVER and policy.victims(1) == [2]
    policy.on_access(0)
    assert policy.next_use(0) == NEVER and policy.position == 4
    policy.check()


def test_events_must_follow_the_trace_and_a_bad_event_changes_nothing():
    policy = BeladyPolicy.from_trace(["a", "b", "a", "c"])
    policy.on_insert("a")
    state = (policy.keys(), policy.position, policy.next_use("a"))
    with pytest.raises(BadInputError, match="reference 1 of the trace is to 'b'"):
        policy.on_insert("z")
    with pytest.raises(BadInputError, match="reference 1 of the trace is to 'b'"):
        policy.on_access("a")
    with pytest.raises(BadInputError, match="only 3 references"):
        policy.advance(4)
    assert (policy.keys(), policy.position, policy.next_use("a")) == state
    policy.advance()  # b: the cache skipped it (too large, say)
    with pytest.raises(BadInputError, match="resident"):
        policy.advance()  # reference 2 is to a, which is resident: a hit, not a skip
    policy.on_access("a")
    policy.on_insert("c")
    # past the trace: any key, next use never
    policy.on_insert(("t", 1))
    policy.on_access("a")
    assert policy.next_use(("t", 1)) == policy.next_use("a") == NEVER and policy.position == 4
    policy.check()


def test_trace_forms_and_bad_traces():
    big = np.array([2**63 + 5, 7, 2**63 + 5], np.uint64)
    policy = BeladyPolicy.from_trace(big)
    policy.on_insert(2**63 + 5)
    assert policy.next_use(2**63 + 5) == 2
    narrow = BeladyPolicy.from_trace(np.array([3, 4, 3], np.int32))
    narrow.on_insert(3)
    assert narrow.next_use(3) == 2  # an int32 trace is read as the keys it holds
    assert BeladyPolicy(trace=[5, 6, 5]).position == 0
    assert len(BeladyPolicy()) == 0 and isinstance(make_eviction_policy("belady", trace=[1, 2]), BeladyPolicy)
    with pytest.raises(ShapeError):
        BeladyPolicy.from_trace(np.zeros((2, 2), np.int64))
    with pytest.raises(DTypeError):
        BeladyPolicy.from_trace([1, [2]])
    with pytest.raises(BadInputError):
        BeladyPolicy.from_trace(5)
    with pytest.raises(BadInputError, match="takes no option 'capacity'"):
        make_eviction_policy("belady", capacity=3)
    with pytest.raises(BadInputError, match="takes no option"):
        replay("belady", [1, 2], 2, window=3)
    with pytest.raises(UnknownKeyError):
        BeladyPolicy().on_remove(1)


def test_the_simulator_and_engine_adapters_refuse_belady():
    from kvmm.cli.simulate import parse_tier
    from kvmm.integrations._policy_factory import policy_factory
    from kvmm.sim.config import TierLevel

    with pytest.raises(BadInputError, match="future reference stream"):
        parse_tier("dram:64GiB:belady:write-all")
    with pytest.raises(BadInputError, match="future reference stream"):
        TierLevel("dram", eviction="Belady")
    with pytest.raises(BadInputError, match="future reference stream"):
        TierLevel("dram", eviction=BeladyPolicy.from_trace([1, 2, 1]))
    with pytest.raises(BadInputError, match="future reference stream"):
        policy_factory(BeladyPolicy)
    assert EVICTION_POLICIES["belady"] is BeladyPolicy and BeladyPolicy.offline


class BeladyMachine(RuleBasedStateMachine):
    """BeladyPolicy following a drawn trace against :class:`kvmm.testing.models.belady.LibpqueueHeap` with
    the naive next uses: each step is the trace's next reference (a hit, an insert after evicting
    a prefix of ``victims`` to stay within 4 keys, or a skip), plus explicit deletes."""

    @initialize(trace=st.lists(st.integers(0, 7), max_size=40))
    def start(self, trace):
        self.trace = trace
        self.nxt = next_use_naive(trace)
        self.policy = BeladyPolicy.from_trace(trace)
        self.model = LibpqueueHeap()
        self.i = 0

    def _next_use(self):
        return self.nxt[self.i] if self.i < len(self.trace) else NEVER

    @precondition(lambda self: self.i < len(self.trace))
    @rule(data=st.data())
    def next_reference(self, data):
        key = self.trace[self.i]
        if key in self.model.pos:
            self.policy.on_access(key)
            self.model.change(key, self._next_use())
        elif data.draw(st.booleans(), label="skip"):
            self.policy.advance()
        else:
            self._insert(key, data)
        self.i += 1

    @precondition(lambda self: self.i >= len(self.trace))
    @rule(data=st.data())
    def insert_past_the_trace(self, data):
        # the trace is consumed: any key may come, its next use is never
        self._insert(data.draw(st.sampled_from([k for k in range(8, 16) if k not in self.model.pos])), data)

    def _insert(self, key, data):
        if len(self.model.pos) >= 4:  # make room: evict the first victim (maybe skipping one key)
            protected = set(data.draw(st.lists(st.sampled_from(sorted(self.model.pos)), max_size=1)))
            [victim] = self.policy.victims(1, protected)
            assert victim not in protected
            if not protected:
                assert victim == self.model.pop()
            else:
                self.model.remove(victim)
            self.policy.on_remove(victim)
        self.policy.on_insert(key, 2)
        self.model.insert(key, self._next_use())

    @precondition(lambda self: self.model.pos)
    @rule(data=st.data())
    def delete(self, data):
        key = data.draw(st.sampled_from(sorted(self.model.pos)))
        self.policy.on_remove(key)
        self.model.remove(key)

    @invariant()
    def same_heap(self):
        if not hasattr(self, "policy"):
            return
        self.policy.check()
        assert self.policy.keys() == self.model.keys() and self.policy.position == self.i
        assert [self.policy.next_use(k) for k in self.policy.keys()] == [e[1] for e in self.model.slots[1:]]
        assert len(self.policy) == len(self.model.pos)


TestBeladyMachine = BeladyMachine.TestCase
TestBeladyMachine.settings = settings(max_examples=60, stateful_step_count=50, deadline=None)
