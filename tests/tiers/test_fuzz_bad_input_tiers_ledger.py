"""Bad-input fuzz of ManagedTier over ArenaTier / SimulatedTier, the CommitmentLedger, and every
public constructor (see tests/fuzz_harness.py)."""

from __future__ import annotations

import inspect
import sys

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from kvmm.allocators import BlockAllocator, TokenTable
from kvmm.compress.scorers import H2OScorer, RandomScorer, SnapKVScorer, StreamingLLMScorer
from kvmm.policies import (
    CommitmentLedger,
    RefillFilter,
    SelectiveWriteThrough,
    ShardsTracker,
    StackDistanceTracker,
    StoreThreshold,
)
from kvmm.policies.eviction import ARCPolicy, make_eviction_policy
from kvmm.tiers import ArenaTier, ManagedTier, SimulatedTier, preset
from tests.fuzz_harness import FUZZ_SETTINGS, NASTY, Fuzz, arg, run_counted

CALLS_PER_EXAMPLE = 60
EXAMPLES = FUZZ_SETTINGS.max_examples
keys = st.integers(0, 8) | st.tuples(st.integers(0, 2), st.text("ab", max_size=2))


@FUZZ_SETTINGS
@given(st.data())
def fuzz_managed_tier(data):
    backend = data.draw(st.sampled_from([lambda: ArenaTier(400), lambda: SimulatedTier(400)]))()
    fz = Fuzz(ManagedTier(backend, make_eviction_policy(data.draw(st.sampled_from(["lru", "fifo", "lfu", "arc"])))))
    tier = fz.obj
    for _ in range(CALLS_PER_EXAMPLE):
        held = tier.keys() or [0]
        key = data.draw(arg(keys | st.sampled_from(held)))
        op = data.draw(st.sampled_from(["put", "put", "put_size", "get", "get_many", "delete"]))
        if op == "put":
            value = data.draw(arg(st.integers(0, 30).map(lambda n: np.arange(n, dtype=np.float32))))
            protected = data.draw(st.sampled_from([()] * 3 + [held[:2]] + NASTY[:20]))
            fz.call(tier.put, key, value, protected=protected)
        elif op == "put_size":
            fz.call(tier.put_size, key, data.draw(arg(st.integers(0, 500))))
        elif op == "get":
            fz.call(tier.get, key)
        elif op == "get_many":
            fz.call(tier.get_many, data.draw(arg(st.lists(st.sampled_from(held), max_size=3))))
        else:
            fz.call(tier.delete, key)


@FUZZ_SETTINGS
@given(st.data())
def fuzz_ledger(data):
    fz = Fuzz(CommitmentLedger(1000, [preset("nvme"), preset("dram")], initial_slots=2,
                               ready_lease_s=data.draw(st.sampled_from([None, 1.0]))))
    led = fz.obj
    now = [0.0]
    for _ in range(CALLS_PER_EXAMPLE):
        now[0] += data.draw(st.sampled_from([0.0, 0.01, 0.5]))
        t = data.draw(arg(st.just(now[0]), good_share=6))
        open_ids = led.open_ids().tolist() or [0]
        ids = data.draw(arg(st.lists(st.sampled_from(open_ids), min_size=1, max_size=3)))
        op = data.draw(st.sampled_from(["claim", "claim_many", "update", "observe", "request", "poll", "mark_ready",
                                        "need", "consume", "release", "expire", "skip_idle_polls"]))
        if op == "claim":
            fz.call(led.claim, data.draw(arg(st.integers(0, 3))), None, data.draw(arg(st.integers(1, 400))), now=t,
                    work_ahead=data.draw(arg(st.floats(0, 1e4))), source=data.draw(arg(st.integers(0, 1))))
        elif op == "claim_many":
            fz.call(led.claim_many, data.draw(arg(st.just([0, 1]))), data.draw(arg(st.just([10, 20]))), now=t,
                    delay_s=data.draw(st.none() | arg(st.just([0.1, 0.2]))))
        elif op == "update":
            fz.call(led.update, ids, data.draw(arg(st.floats(0, 1e4))), now=t)
        elif op == "observe":
            fz.call(led.observe_progress, data.draw(arg(st.floats(0, 1e5))), data.draw(arg(st.floats(1e-3, 10.0))))
        elif op == "request":
            fz.call(led.request, ids, now=t, deadline=data.draw(st.none() | arg(st.floats(0, 100))))
        elif op == "poll":
            fz.call(led.poll, t, timely=data.draw(st.sampled_from([True, False, 1])),
                    fifo=data.draw(st.sampled_from([True, False, "no"])))
        elif op == "expire":
            fz.call(led.expire, t)
        elif op == "skip_idle_polls":
            fz.call(led.skip_idle_polls, t, data.draw(arg(st.just(0.01))), before=data.draw(arg(st.just(now[0] + 1.0))),
                    until=data.draw(arg(st.just(float("inf")))), timely=data.draw(st.sampled_from([True, False, 1])))
        else:
            fz.call(getattr(led, op), ids, now=t)


CONSTRUCTORS = [
    lambda a, b: BlockAllocator(a, b),
    lambda a, b: BlockAllocator(16, 4, secret=a, salt=b),
    lambda a, b: TokenTable(BlockAllocator(16, 4), initial_sequences=a, initial_tokens=b),
    lambda a, b: StackDistanceTracker(initial_keys=a),
    lambda a, b: ShardsTracker(a, initial_keys=b),
    lambda a, b: ShardsTracker(fixed_size=a, initial_keys=b),
    lambda a, b: ARCPolicy(capacity=a, ghost_limit=b),
    lambda a, b: make_eviction_policy(a, capacity=b),
    lambda a, b: ArenaTier(a, spare_bytes=b),
    lambda a, b: SimulatedTier(a, name=b),
    lambda a, b: ManagedTier(a, b),
    lambda a, b: CommitmentLedger(a, preset("nvme"), margin_s=b),
    lambda a, b: CommitmentLedger(100, a, initial_rate=b),
    lambda a, b: CommitmentLedger(100, preset("nvme"), ready_lease_s=a, initial_slots=b),
    lambda a, b: StoreThreshold(a),
    lambda a, b: SelectiveWriteThrough(a),
    lambda a, b: RefillFilter(a, max_refill_blocks=b),
    lambda a, b: RefillFilter(4, fraction=a, update_every=b),
    lambda a, b: H2OScorer(recent_window=a),
    lambda a, b: SnapKVScorer(a),
    lambda a, b: StreamingLLMScorer(sink_tokens=a),
    lambda a, b: RandomScorer(seed=a),
]


@FUZZ_SETTINGS
@given(st.data())
def fuzz_constructors(data):
    fz = Fuzz(None, check=lambda _: None, state=lambda _: None)
    for _ in range(CALLS_PER_EXAMPLE):
        make = data.draw(st.sampled_from(CONSTRUCTORS))
        a = data.draw(arg(st.integers(1, 64) | st.sampled_from(["lru", "arc", bytes(16)]), good_share=1, bad_share=2))
        b = data.draw(arg(st.integers(0, 64), good_share=1, bad_share=2))
        ok, obj = fz.call(make, a, b)
        if ok and hasattr(obj, "check"):
            obj.check()


def test_fuzz_managed_tiers_bad_input():
    run_counted(fuzz_managed_tier, CALLS_PER_EXAMPLE)


def test_fuzz_ledger_bad_input():
    run_counted(fuzz_ledger, CALLS_PER_EXAMPLE)


def test_fuzz_constructors_bad_input():
    run_counted(fuzz_constructors, CALLS_PER_EXAMPLE)


def test_fuzz_suite_makes_at_least_20000_calls():
    """The whole bad-input suite (all test_fuzz_bad_input_* modules) makes >= 20,000 calls."""
    import tests.allocators.test_fuzz_bad_input_allocators as allocators
    import tests.policies.test_fuzz_bad_input_policies as policies

    per_test = EXAMPLES * CALLS_PER_EXAMPLE
    tests = [allocators.fuzz_block_allocator, allocators.fuzz_token_table, policies.fuzz_eviction_policy,
             policies.fuzz_stack_distance_trackers, policies.fuzz_admission_policies, policies.fuzz_token_scorers,
             fuzz_managed_tier, fuzz_ledger, fuzz_constructors]
    assert allocators.CALLS_PER_EXAMPLE == policies.CALLS_PER_EXAMPLE == CALLS_PER_EXAMPLE
    # the list is every fuzz function of the three modules, and each is run (run_counted asserts
    # it made at least per_test calls), so none can drop out of the count unnoticed
    modules = [allocators, policies, sys.modules[__name__]]
    found = {f for m in modules for name, f in vars(m).items() if name.startswith("fuzz_") and callable(f)}
    assert found == set(tests) and len(tests) == 9
    for fuzz in tests:
        assert f"run_counted({fuzz.__name__}," in inspect.getsource(sys.modules[fuzz.__module__]), fuzz.__name__
    assert len(tests) * per_test >= 20_000
