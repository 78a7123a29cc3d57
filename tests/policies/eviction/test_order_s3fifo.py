"""S3-FIFO: replay("s3fifo") == libCacheSim's S3FIFO == ManagedTier(S3FIFOPolicy) == the naive
reference, request by request (entry counts and bytes, Mooncake blocks, Hypothesis streams and
options); a pinned worked example; bad options; a state machine of the policy's plan."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kvmm.errors import BadInputError, DTypeError, UnknownKeyError
from kvmm.policies import S3FIFOPolicy, make_eviction_policy, replay
from kvmm.policies.eviction.s3fifo import queue_sizes
from kvmm.testing.models.s3fifo import replay_s3fifo_naive
from kvmm.tiers import ManagedTier, SimulatedTier
from tests.policies.eviction import order_parity


def libcachesim_hits(keys, capacity, sizes, **params):
    return order_parity.libcachesim_hits("S3FIFO", keys, capacity, sizes, **params)


def managed_tier_hits(keys, capacity, sizes, **params):
    return order_parity.managed_tier_hits(S3FIFOPolicy(**params), keys, capacity, sizes, miss=order_parity.store_as_libcachesim)


@pytest.fixture(scope="module")
def block_streams():
    return order_parity.mooncake_request_blocks()


@pytest.mark.parametrize("capacity", [64, 4096])
def test_managed_tier_batch_offers_equal_the_replay(block_streams, capacity):
    # the simulator's path: one access_or_put_size_many per request (S3-FIFO's fast hooks)
    hits = order_parity.batch_offer_hits(make_eviction_policy("s3fifo"), block_streams["conversation"], capacity)
    assert hits == replay("s3fifo", np.concatenate(block_streams["conversation"]), capacity).tolist()


@settings(max_examples=120, deadline=None)
@given(capacity=st.integers(10, 60), ratio=st.sampled_from([0.1, 0.25, 0.5, 0.33]),
       ghost=st.sampled_from([0.9, 0.0, 0.5, 1.0, 0.05]), threshold=st.integers(0, 3),
       refs=st.lists(st.tuples(st.integers(0, 15), st.integers(0, 6)), max_size=150))
def test_hypothesis_streams_and_options_agree_everywhere(capacity, ratio, ghost, threshold, refs):
    small, main, _ = queue_sizes(capacity, ratio, ghost)
    assume(small > 0 and main > 0)  # libCacheSim aborts on an empty queue (tested below)
    keys, sizes = order_parity.hypothesis_stream(refs)  # one size per key: a key keeps the size it was inserted with
    params = dict(small_size_ratio=ratio, ghost_size_ratio=ghost, move_to_main_threshold=threshold)
    ours = replay("s3fifo", np.array(keys, np.int64), capacity, np.array(sizes, np.int64), **params).tolist()
    assert ours == replay_s3fifo_naive(keys, capacity, sizes, ratio, ghost, threshold)
    assert ours == libcachesim_hits(keys, capacity, sizes, **params)
    assert ours == managed_tier_hits(keys, capacity, sizes, **params)


def test_pinned_worked_example():
    # capacity 20: small 2, main 18, ghost 18 (libCacheSim's truncated products)
    policy = S3FIFOPolicy(capacity=20)
    assert policy.queue_sizes() == (2, 18, 18)
    for k in range(20):
        policy.on_insert(k)
    # before the first eviction, new keys go to main once small holds its 2
    assert policy.queues() == {"small": [0, 1], "main": list(range(2, 20)), "ghost": []}
    policy.on_access(0)
    policy.on_access(0)
    policy.on_access(5)
    # small first (main holds exactly 18): 0 (freq 2) moves to main, 1 leaves to the ghost;
    # then main holds 19 > 18: 2 leaves; then small is empty: main's 3 leaves (5 would be spared)
    assert policy.victims(3, incoming=20) == [1, 2, 3]
    assert policy.victims(3, protected={2}, incoming=20) == [1, 3, 4]
    policy.victims(3, incoming=20)
    policy.on_remove(1)
    assert policy.queues() == {"small": [], "main": list(range(2, 20)) + [0], "ghost": [1]}
    assert policy.frequency(0) == 0 and policy.frequency(5) == 1
    policy.on_insert(20)  # after an eviction, new keys go to small
    assert policy.queues()["small"] == [20]
    assert policy.victims(1, incoming=1) == [2]
    policy.on_remove(2)
    policy.on_insert(1)  # a ghost hit goes to main and leaves the ghost queue
    assert policy.queues() == {"small": [20], "main": list(range(3, 20)) + [0, 1], "ghost": []}
    policy.check()
    # the same stream as libCacheSim's get sees it
    keys = list(range(20)) + [0, 0, 5, 20, 1]
    assert replay("s3fifo", keys, 20).tolist() == [False] * 20 + [True, True, True, False, False]


def test_explicit_delete_leaves_no_ghost_and_the_plan_goes_stale():
    policy = S3FIFOPolicy(capacity=20)
    for k in range(20):
        policy.on_insert(k)
    assert policy.victims(2) == [0, 1]
    policy.on_remove(5)  # not the plan's next victim: a delete, no ghost, plan forgotten
    assert policy.queues()["ghost"] == [] and 5 not in policy
    policy.on_remove(0)  # now a delete as well
    assert policy.queues()["ghost"] == []
    policy.check()
    with pytest.raises(UnknownKeyError):
        policy.on_remove(0)


def test_overwrite_resizes_and_counts_as_access():
    tier = ManagedTier(SimulatedTier(100), S3FIFOPolicy())
    tier.put_size("a", 5)
    tier.put_size("a", 8)
    assert tier.policy.frequency("a") == 1 and tier.used_bytes == 8
    tier.check()


@pytest.mark.parametrize("kwargs, error", [
    (dict(small_size_ratio=1.5), BadInputError), (dict(small_size_ratio=-0.1), BadInputError),
    (dict(small_size_ratio="0.1"), DTypeError), (dict(ghost_size_ratio=-1.0), BadInputError),
    (dict(ghost_size_ratio=float("nan")), BadInputError), (dict(move_to_main_threshold=-1), BadInputError),
    (dict(move_to_main_threshold=2.5), DTypeError), (dict(capacity=0), BadInputError),
])
def test_bad_options_raise(kwargs, error):
    with pytest.raises(error):
        S3FIFOPolicy(**kwargs)
    if "capacity" not in kwargs:
        with pytest.raises(error):
            replay("s3fifo", [1, 2], 100, **kwargs)


@pytest.mark.parametrize("capacity, kwargs", [(9, {}), (100, dict(small_size_ratio=1.0)), (100, dict(small_size_ratio=0.0))])
def test_replay_refuses_an_empty_queue_as_libcachesim_does(capacity, kwargs):
    with pytest.raises(BadInputError, match="small queue"):
        replay("s3fifo", [1, 2], capacity, **kwargs)


def test_defaults_are_libcachesims():
    lcs = pytest.importorskip("libcachesim")
    import inspect

    lcs_defaults = {k: v.default for k, v in inspect.signature(lcs.S3FIFO.__init__).parameters.items()}
    policy = S3FIFOPolicy()
    for name in ("small_size_ratio", "ghost_size_ratio", "move_to_main_threshold"):
        assert getattr(policy, name) == lcs_defaults[name]


class S3FIFOPlanMachine(RuleBasedStateMachine):
    """S3FIFOPolicy (capacity 30) against its tracked keys and sizes: inserts, accesses,
    deletes, and evictions of a prefix of a ``victims(n, protected, incoming=...)`` plan.
    ``check()`` after every step; the whole order lists exactly the tracked keys."""

    def __init__(self):
        super().__init__()
        self.policy = S3FIFOPolicy(capacity=30)
        self.sizes: dict = {}

    @rule(key=st.integers(0, 20), size=st.integers(0, 4))
    def insert(self, key, size):
        if key in self.sizes:
            with pytest.raises(BadInputError):
                self.policy.on_insert(key, size)
        elif sum(self.sizes.values()) + size <= 30:
            self.policy.on_insert(key, size)
            self.sizes[key] = size

    @precondition(lambda self: self.sizes)
    @rule(data=st.data())
    def access(self, data):
        self.policy.on_access(data.draw(st.sampled_from(sorted(self.sizes))))

    @precondition(lambda self: self.sizes)
    @rule(data=st.data())
    def delete(self, data):
        key = data.draw(st.sampled_from(sorted(self.sizes)))
        self.policy.on_remove(key)
        del self.sizes[key]

    @precondition(lambda self: self.sizes)
    @rule(data=st.data(), n=st.integers(1, 6), incoming=st.integers(0, 25))
    def evict_prefix(self, data, n, incoming):
        for key in order_parity.evict_a_planned_prefix(self.policy, self.sizes, data, n, incoming=incoming):
            del self.sizes[key]

    @invariant()
    def consistent(self):
        self.policy.check()
        order = self.policy.victims(len(self.sizes) + 1)
        assert sorted(order) == sorted(self.sizes) and len(self.policy) == len(self.sizes)
        assert self.policy._small_used + self.policy._main_used == sum(self.sizes.values())


TestS3FIFOPlanMachine = S3FIFOPlanMachine.TestCase
TestS3FIFOPlanMachine.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)


def test_runs_in_the_simulator_by_name(capsys):
    rows = order_parity.simulate_rows("s3fifo", capsys)
    assert len(rows) == 1 and rows[0]["tier_evictions"][0] > 0  # 8 GiB of DRAM filled up and evicted


def test_deep_and_pickled_copies_keep_working():
    import copy
    import pickle

    policy = S3FIFOPolicy(capacity=20)
    for k in range(22):
        if k >= 20:
            policy.on_remove(policy.victims(1, incoming=k)[0])
        policy.on_insert(k)
    for clone in (copy.deepcopy(policy), pickle.loads(pickle.dumps(policy))):
        clone.check()
        assert clone.queues() == policy.queues()
        assert clone.victims(5, incoming=0) == policy.victims(5, incoming=0)


@settings(max_examples=80, deadline=None)
@given(capacity=st.integers(10, 40), refs=st.lists(st.tuples(st.integers(0, 12), st.integers(0, 8)), max_size=120))
def test_sizes_that_change_between_references_match_libcachesim(capacity, refs):
    # a miss uses the size of that reference; a ghost keeps the size it was evicted with
    keys, sizes = [k for k, _ in refs], [s for _, s in refs]
    ours = replay("s3fifo", np.array(keys, np.int64), capacity, np.array(sizes, np.int64)).tolist()
    assert ours == replay_s3fifo_naive(keys, capacity, sizes)
    assert ours == libcachesim_hits(keys, capacity, sizes)


def test_admission_is_libcachesims_rule():
    policy = S3FIFOPolicy(capacity=50)  # small 5
    assert policy.admission("x", 4) == (True, True)
    assert policy.admission("x", 5) == (True, False)  # room is made, then the entry is refused
    assert policy.admission("x", 6) == (False, False)
    for k in range(15):
        if len(policy) * 4 + 4 > 50:  # evict as a tier would: the first victim makes room
            policy.on_remove(policy.victims(1, incoming=k)[0])
        policy.on_insert(k, 4)
    ghost = policy.queues()["ghost"]
    assert ghost and policy.admission(ghost[0], 5) == (True, True)  # a ghost hit is stored, in main
    with pytest.raises(BadInputError):
        policy.admission("x", -1)
