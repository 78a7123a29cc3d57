"""kvmm.testing itself: lazy imports, the plugin's option and fixtures, the strategies, and a
state machine extended by subclassing."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis.stateful import rule, run_state_machine_as_test

import kvmm.testing
from kvmm.errors import KvmmError
from kvmm.testing import strategies as kst
from tests.docs.test_docs_testing_example import ROOT, plugin_args

FEW = settings(max_examples=25, deadline=None)


def test_import_kvmm_testing_needs_neither_pytest_nor_hypothesis():
    code = ("import sys, kvmm, kvmm.testing, kvmm.testing.models; "
            "print(sorted(m for m in ('pytest', 'hypothesis', 'numba') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_every_public_name_loads_on_first_use():
    for name in kvmm.testing.__all__:
        assert getattr(kvmm.testing, name) is not None, name
    assert kvmm.testing.strategies is kst
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        kvmm.testing.Nope  # noqa: B018


@pytest.mark.parametrize("option, env, expected", [
    ([], {}, "full"), (["--kvmm-bench-scale", "smoke"], {}, "smoke"), ([], {"KVMM_BENCH_SCALE": "smoke"}, "smoke"),
    (["--kvmm-bench-scale", "full"], {"KVMM_BENCH_SCALE": "smoke"}, "full"),
])
def test_bench_scale_option_and_environment(pytester, monkeypatch, option, env, expected):
    monkeypatch.delenv("KVMM_BENCH_SCALE", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    seen = expected if option or env else None  # the option also sets the variable (bench/ reads it)
    pytester.makepyfile(f"import os\n\ndef test_scale(kvmm_bench_scale):\n    assert kvmm_bench_scale == {expected!r}\n"
                        f"    assert os.environ.get('KVMM_BENCH_SCALE') == {seen!r}\n")
    pytester.runpytest_inprocess(*plugin_args(), *option).assert_outcomes(passed=1)
    assert os.environ.get("KVMM_BENCH_SCALE") == env.get("KVMM_BENCH_SCALE")  # restored after the run


def test_bad_scale_is_a_usage_error(pytester):
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_inprocess(*plugin_args(), "--kvmm-bench-scale", "huge")
    assert result.ret != 0 and "invalid choice: 'huge'" in result.stderr.str()


def test_trace_fixtures(pytester):
    pytester.makepyfile(textwrap.dedent("""
        def test_traces(kvmm_conversation_trace, kvmm_synthetic_trace, kvmm_trace):
            assert kvmm_conversation_trace.num_requests == 12031
            assert kvmm_conversation_trace.block_ids.size == 288500
            assert kvmm_synthetic_trace.num_requests == 3993
            assert kvmm_trace("conversation") is kvmm_conversation_trace
    """))
    pytester.runpytest_inprocess(*plugin_args()).assert_outcomes(passed=1)


def test_replay_policy_counts_hits_like_the_lru_reference():
    from kvmm.policies.eviction import LRUPolicy
    from kvmm.testing.benchmarks import replay_policy
    from kvmm.testing.models.eviction import simulate_lru

    keys = [1, 2, 3, 1, 4, 2, 5, 1, 3, 3, 6, 1]
    want = sum(1 for event in simulate_lru(keys, 3) if event[0] == "hit")
    assert replay_policy(LRUPolicy(), keys, 3) == want == 3
    for bad in (0, -1, 2.5):
        with pytest.raises(KvmmError, match="capacity"):
            replay_policy(LRUPolicy(), keys, bad)


def test_trace_keys_read_any_trace_format(tmp_path):
    from dataclasses import replace

    from kvmm.testing.benchmarks import trace_keys
    from kvmm.traces import load_trace, save_trace

    path = save_trace(replace(load_trace("synthetic").head(50), block_tokens=16), tmp_path / "chats.jsonl", "bailian")
    assert trace_keys(str(path)) == trace_keys("synthetic", 50)


@FEW
@given(kst.prefix_sharing_requests())
def test_request_ids_are_prefix_chained(requests):
    prefix_of = {}
    for blocks in requests:
        assert blocks and len(set(blocks)) == len(blocks)
        for i, b in enumerate(blocks):
            assert prefix_of.setdefault(b, tuple(blocks[:i])) == tuple(blocks[:i])


@FEW
@given(kst.mooncake_traces())
def test_mooncake_traces_are_consistent(trace):
    trace.check()
    assert np.all(np.diff(trace.timestamp_ms) >= 0)
    for r in range(trace.num_requests):
        n = trace.blocks_of(r).size
        assert (n - 1) * 512 < trace.input_length[r] <= n * 512


@FEW
@given(kst.attention_rows())
def test_attention_rows_are_distributions(rows):
    assert rows.ndim == 3 and np.all(rows >= 0)
    np.testing.assert_allclose(rows.sum(axis=-1), 1.0)


@FEW
@given(kst.rope_qk())
def test_rope_qk_rotations_invert(qk):
    rope = qk["rope"]
    np.testing.assert_allclose(rope.unapply(qk["q_rot"], qk["q_positions"]), qk["q"], atol=1e-9)
    np.testing.assert_allclose(rope.unapply(qk["k_rot"], qk["k_positions"]), qk["k"], atol=1e-9)
    assert np.all(qk["q_positions"] > qk["k_positions"].max())


@FEW
@given(kst.tier_operations())
def test_tier_operations_replay_on_an_arena_like_a_dict(ops):
    from kvmm.errors import UnknownKeyError
    from kvmm.tiers import ArenaTier

    tier, model = ArenaTier(1 << 16), {}  # room for every value the strategy draws
    for op in ops:
        name, key = op[0], op[1]
        if name == "put":
            tier.put(key, op[2])
            model[key] = op[2]
        elif key not in model:
            with pytest.raises(UnknownKeyError):
                (tier.get if name == "get" else tier.delete)(key)
        elif name == "get":
            assert tier.get(key).tobytes() == model[key].tobytes()
        else:
            tier.delete(key)
            del model[key]
    assert sorted(tier.keys(), key=repr) == sorted(model, key=repr)


@FEW
@given(kst.ledger_events())
def test_ledger_events_keep_the_ledger_consistent(events):
    from kvmm.policies.staging.ledger import CommitmentLedger
    from kvmm.tiers.spec import TierSpec

    ledger = CommitmentLedger(500, TierSpec("slow", 10**9, read_bandwidth=1000.0, write_bandwidth=1000.0,
                                            latency_s=0.01))
    out = kst.apply_ledger_events(ledger, events)
    ledger.check()
    assert ledger.protected_bytes <= 500
    assert len(out["claims"]) == sum(e[0] == "claim" for e in events)


def test_a_machine_extended_by_subclassing_runs_its_new_rule():
    from kvmm.allocators import BlockAllocator
    from kvmm.testing import BlockAllocatorMachine

    calls = []

    class CountingAllocator(BlockAllocator):  # a user's wrapper of the structure
        pass

    class Extended(BlockAllocatorMachine):
        def make_allocator(self, num_blocks, block_size):
            return CountingAllocator(num_blocks, block_size, secret=bytes(range(16)))

        @rule()
        def usage_is_a_fraction(self):
            calls.append(type(self.real))
            assert 0.0 <= self.real.usage <= 1.0

    # derandomized (a loaded CI machine must not make it flaky) with enough examples that the swarm
    # rule selection (each example enables a subset of the rules) runs the new rule
    run_state_machine_as_test(Extended, settings=settings(max_examples=40, stateful_step_count=10, deadline=None,
                                                          derandomize=True, suppress_health_check=list(HealthCheck)))
    assert calls and set(calls) == {CountingAllocator}


def test_tier_context_closes_every_tier_even_when_one_fails(tmp_path):
    from kvmm.testing.tiers import LOCAL_TIER_KINDS, TierContext

    class FailsToClose:
        def close(self):
            raise OSError("disk gone")

    ctx = TierContext(tmp_path)
    mmap = ctx.build(next(k for k in LOCAL_TIER_KINDS if k.name == "mmap"), 1000)
    ctx.built.insert(0, FailsToClose())
    with pytest.raises(OSError, match="disk gone"):
        ctx.close()
    with pytest.raises(KvmmError, match="closed"):  # closed although an earlier tier failed to close
        mmap.put("a", np.zeros(1))
    ctx.close()  # nothing left to close
