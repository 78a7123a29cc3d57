"""Bad-input fuzz of eviction policies, stack-distance trackers (exact and SHARDS), admission
policies and token scorers (see tests/fuzz_harness.py)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from kvmm.compress.scorers import (
    H2OScorer,
    KeyNormScorer,
    RandomScorer,
    ScissorhandsScorer,
    SnapKVScorer,
    StreamingLLMScorer,
)
from kvmm.policies import (
    AdmissionRequest,
    RefillFilter,
    SelectiveWriteThrough,
    ShardsTracker,
    StackDistanceTracker,
    StoreThreshold,
    WriteAll,
)
from kvmm.policies.eviction import EVICTION_POLICIES, make_eviction_policy
from tests.fuzz_harness import FUZZ_SETTINGS, Fuzz, arg, run_counted

CALLS_PER_EXAMPLE = 60
keys = st.integers(0, 12) | st.tuples(st.integers(0, 3), st.text("ab", max_size=2))


@FUZZ_SETTINGS
@given(st.data())
def fuzz_eviction_policy(data):
    name = data.draw(st.sampled_from(sorted(EVICTION_POLICIES)))
    fz = Fuzz(make_eviction_policy(name, **({"capacity": 6} if name == "arc" else {})))
    pol = fz.obj
    for _ in range(CALLS_PER_EXAMPLE):
        op = data.draw(st.sampled_from(["insert", "access", "remove", "victims", "victims_incoming"]))
        tracked = pol.keys() or [0]
        key = data.draw(arg(keys | st.sampled_from(tracked)))
        if op == "insert":
            fz.call(pol.on_insert, key, data.draw(arg(st.integers(0, 3))))
        elif op == "access":
            fz.call(pol.on_access, key, data.draw(arg(st.none() | st.integers(0, 3))))
        elif op == "remove":
            fz.call(pol.on_remove, key)
        else:
            n = data.draw(arg(st.integers(0, 4)))
            protected = data.draw(arg(st.lists(st.sampled_from(tracked), max_size=3) | st.frozensets(keys, max_size=3)))
            if op == "victims":
                fz.call(pol.victims, n, protected)
            else:
                fz.call(pol.victims, n, protected, incoming=key, incoming_size=data.draw(arg(st.integers(0, 3))))


@FUZZ_SETTINGS
@given(st.data())
def fuzz_stack_distance_trackers(data):
    kind = data.draw(st.sampled_from(["exact", "rate", "fixed"]))
    tracker = {"exact": lambda: StackDistanceTracker(initial_keys=4), "rate": lambda: ShardsTracker(0.5, initial_keys=4),
               "fixed": lambda: ShardsTracker(fixed_size=5, initial_keys=4)}[kind]()
    fz = Fuzz(tracker)
    key_lists = st.lists(st.integers(0, 40), max_size=6)
    for _ in range(CALLS_PER_EXAMPLE):
        op = data.draw(st.sampled_from(["access", "access_groups", "queries"]))
        ks = data.draw(arg(key_lists | st.lists(st.integers(0, 2**64 - 1), max_size=3).map(
            lambda v: np.array(v, dtype=np.uint64))))
        if op == "access":
            fz.call(tracker.access, ks, return_distances=data.draw(st.sampled_from([True, False, "yes"])))
        elif op == "access_groups":
            n = len(ks) if hasattr(ks, "__len__") else 1
            fz.call(tracker.access, ks, data.draw(arg(st.lists(st.integers(-2, 3), min_size=n, max_size=n))))
        else:
            query = data.draw(st.sampled_from(["mrc", "hit_ratio", "working_set", "group_histogram"]))
            value = data.draw(arg({"mrc": st.none() | st.lists(st.integers(0, 50), max_size=4),
                                   "hit_ratio": st.integers(0, 50), "working_set": st.floats(0.01, 1.0),
                                   "group_histogram": st.integers(-2, 3)}[query]))
            fz.call(getattr(tracker, query), value)


def _admission_check(policy):
    tracker = getattr(policy, "tracker", None)
    if tracker is not None:
        tracker.check()


@FUZZ_SETTINGS
@given(st.data())
def fuzz_admission_policies(data):
    make = data.draw(st.sampled_from([WriteAll, lambda: StoreThreshold(2), lambda: SelectiveWriteThrough(2),
                                      lambda: RefillFilter(4, max_refill_blocks=2, update_every=3)]))
    fz = Fuzz(make(), check=_admission_check)
    for _ in range(CALLS_PER_EXAMPLE):
        n = data.draw(st.integers(0, 5))
        ks = data.draw(arg(st.lists(st.integers(0, 20), min_size=n, max_size=n)))
        cached = data.draw(arg(st.lists(st.booleans(), min_size=n, max_size=n).map(lambda v: np.array(v, dtype=bool))))
        gpu_hit = data.draw(st.none() | arg(st.lists(st.booleans(), min_size=n, max_size=n).map(
            lambda v: np.array(v, dtype=bool))))
        request = data.draw(st.sampled_from([AdmissionRequest(ks, cached, gpu_hit)] * 4 + [5, None, "req"]))
        fz.call(fz.obj.admit, request)


SCORERS = [H2OScorer, ScissorhandsScorer, SnapKVScorer, StreamingLLMScorer, KeyNormScorer, RandomScorer]


def _scorer_check(scorer):
    for seq_id, state in scorer.seq_state.items():  # every sequence scores each of its live tokens
        assert scorer.scores(seq_id).shape == (state["n"],)


@FUZZ_SETTINGS
@given(st.data())
def fuzz_token_scorers(data):
    fz = Fuzz(data.draw(st.sampled_from(SCORERS))(), check=_scorer_check)
    scorer = fz.obj
    for _ in range(CALLS_PER_EXAMPLE):
        seqs = list(scorer.seq_state) or [0]
        seq = data.draw(arg(st.sampled_from(seqs) | st.integers(0, 3)))
        live = scorer.seq_state[seq]["n"] if type(seq) is int and seq in scorer.seq_state else 0
        op = data.draw(st.sampled_from(["observe", "observe", "on_evict", "victims", "forget"]))
        if op == "observe":
            new = data.draw(st.integers(0, 3))
            rng = np.random.default_rng(data.draw(st.integers(0, 9)))
            evidence = {"attention": rng.random((2, 1, live + new)), "keys": rng.random((new, 4)),
                        "positions": np.arange(new) + 100}
            name = data.draw(st.sampled_from(sorted(evidence)))
            evidence[name] = data.draw(arg(st.just(evidence[name])))
            fz.call(scorer.observe, seq, **evidence)
        elif op == "on_evict":
            fz.call(scorer.on_evict, seq, data.draw(arg(st.lists(st.integers(-1, live), max_size=3))))
        elif op == "victims":
            fz.call(scorer.victims, seq, data.draw(arg(st.integers(0, 5))))
        else:
            fz.call(scorer.forget, seq)


def test_fuzz_eviction_policies_bad_input():
    run_counted(fuzz_eviction_policy, CALLS_PER_EXAMPLE)


def test_fuzz_stack_distance_trackers_bad_input():
    run_counted(fuzz_stack_distance_trackers, CALLS_PER_EXAMPLE)


def test_fuzz_admission_policies_bad_input():
    run_counted(fuzz_admission_policies, CALLS_PER_EXAMPLE)


def test_fuzz_token_scorers_bad_input():
    run_counted(fuzz_token_scorers, CALLS_PER_EXAMPLE)
