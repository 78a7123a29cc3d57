"""TriAttentionPolicy: periodic top-B eviction, per-head selection, state after errors."""

import numpy as np
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kvmm.compress import RopeConfig, TriAttentionPolicy, TriAttentionScorer, calibrate
from kvmm.errors import BadInputError, KvmmError, ShapeError, UnknownSequenceError
from kvmm.testing.models import triattention as naive

D, HEADS, KV = 8, 4, 2
#: the single-set settings these tests pin (one kept set, no prompt protection, every `interval` steps)
LEGACY = dict(aggregation="global", protect_prompt=False, trigger="interval")


class RecordingTable:
    """Stands in for TokenTable: records evict calls, can be told to refuse."""

    def __init__(self):
        self.calls = []
        self.refuse = False

    def evict(self, seq_id, logical_positions):
        if self.refuse:
            raise KvmmError("table refused")
        self.calls.append((seq_id, np.asarray(logical_positions).copy()))


def _calibration(seed=0):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(64, HEADS, D)) + rng.normal(size=(1, HEADS, D)) * 2
    return calibrate(q, rng.normal(size=(64, KV, D)), rope=RopeConfig(D, 100.0))


def _expected_keep(cal, keys, positions, now, budget):
    ref = naive.head_scores(cal.q_center[0], cal.q_abs_mean[0], keys, positions, now, cal.rope.frequencies(),
                            2.0 ** np.arange(17), layout=cal.rope.layout)
    score = naive.kv_head_scores(ref, KV).max(axis=0)
    order = np.lexsort((-np.arange(score.size), -score))
    return np.sort(order[:budget])


def _snapshot(policy):
    return {k: (v.keys.copy(), v.positions.copy(), v.next_position, v.steps_since) for k, v in policy._seqs.items()}


def _same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k][0], b[k][0])
        np.testing.assert_array_equal(a[k][1], b[k][1])
        assert a[k][2:] == b[k][2:]


def test_evicts_down_to_budget_every_interval_through_the_table():
    cal = _calibration()
    table = RecordingTable()
    policy = TriAttentionPolicy(TriAttentionScorer(cal), **LEGACY, budget=10, interval=4, table=table)
    rng = np.random.default_rng(1)
    keys = rng.normal(size=(12, KV, D))
    policy.observe(7, keys=keys)  # prefill of 12 counts as 12 steps
    expect_keep = _expected_keep(cal, keys, np.arange(12), 12, 10)
    evicted = policy.step(7)
    assert evicted.size == 2
    np.testing.assert_array_equal(np.sort(evicted), np.setdiff1d(np.arange(12), expect_keep))
    assert len(table.calls) == 1 and table.calls[0][0] == 7
    np.testing.assert_array_equal(table.calls[0][1], evicted)
    np.testing.assert_array_equal(policy.live_positions(7), expect_keep)
    # 3 more decode steps: not due yet (interval 4) even though over budget
    for _ in range(3):
        policy.observe(7, keys=rng.normal(size=(1, KV, D)))
        assert policy.step(7).size == 0
    policy.observe(7, keys=rng.normal(size=(1, KV, D)))
    assert policy.step(7).size == 4  # 14 live -> 10
    assert policy.scores(7).shape == (10,)
    assert policy.live_positions(7)[-1] <= 15
    policy.check()


def test_under_budget_nothing_is_evicted():
    policy = TriAttentionPolicy(TriAttentionScorer(_calibration()), **LEGACY, budget=50, interval=1)
    policy.observe(0, keys=np.ones((20, KV, D)))
    assert policy.step(0).size == 0 and policy.scores(0).shape == (20,)


def test_keep_per_head_and_budget_too_large():
    cal = _calibration()
    policy = TriAttentionPolicy(TriAttentionScorer(cal), **LEGACY, budget=5)
    keys = np.random.default_rng(2).normal(size=(9, KV, D))
    policy.observe(1, keys=keys)
    per_head = policy.keep_per_head(1)
    assert per_head.shape == (KV, 5)
    ref = naive.kv_head_scores(naive.head_scores(cal.q_center[0], cal.q_abs_mean[0], keys, np.arange(9), 9,
                                                 cal.rope.frequencies(), 2.0 ** np.arange(17)), KV)
    for g in range(KV):
        np.testing.assert_array_equal(per_head[g], np.sort(np.argsort(-ref[g], kind="stable")[:5]))
    with pytest.raises(BadInputError, match="larger than the 9 live tokens"):
        policy.keep_per_head(1, budget=10)


def test_post_rope_observation_is_unrotated():
    cal = _calibration()
    keys = np.random.default_rng(3).normal(size=(6, KV, D))
    a = TriAttentionPolicy(TriAttentionScorer(cal), **LEGACY)
    b = TriAttentionPolicy(TriAttentionScorer(cal), **LEGACY)
    a.observe(0, keys=keys)
    b.observe(0, keys=cal.rope.apply(keys, np.arange(6)), post_rope=True)
    np.testing.assert_allclose(a.scores(0), b.scores(0), atol=1e-9)


def test_errors_leave_state_unchanged():
    table = RecordingTable()
    policy = TriAttentionPolicy(TriAttentionScorer(_calibration()), **LEGACY, budget=3, interval=1, table=table)
    policy.observe(0, keys=np.ones((5, KV, D)))
    before = _snapshot(policy)
    bad = np.ones((2, KV, D))
    bad[1, 0, 0] = np.nan
    with pytest.raises(BadInputError, match="NaN"):
        policy.observe(0, keys=bad)
    with pytest.raises(ShapeError):
        policy.observe(0, keys=np.ones((2, 1, D)))
    with pytest.raises(BadInputError, match="positions must increase"):
        policy.observe(0, keys=np.ones((2, KV, D)), positions=[3, 9])
    table.refuse = True
    with pytest.raises(KvmmError, match="refused"):
        policy.step(0)
    _same(before, _snapshot(policy))
    with pytest.raises(UnknownSequenceError):
        policy.scores(99)
    with pytest.raises(UnknownSequenceError):
        policy.step(99)
    for kwargs in (dict(budget=0), dict(interval=0), dict(budget=2.5), dict(table=object())):
        with pytest.raises(BadInputError):
            TriAttentionPolicy(TriAttentionScorer(_calibration()), **LEGACY, **kwargs)


class PolicyMachine(RuleBasedStateMachine):
    """The policy against a model: live positions, next position and steps since compression."""

    def __init__(self):
        super().__init__()
        self.cal = _calibration(5)
        self.table = RecordingTable()
        self.policy = TriAttentionPolicy(TriAttentionScorer(self.cal), **LEGACY, budget=6, interval=3, table=self.table)
        self.model = {}  # seq -> dict(keys, positions, next, steps)
        self.rng = np.random.default_rng(0)

    @rule(seq=st.integers(0, 2), tokens=st.integers(1, 5), gap=st.integers(0, 3))
    def observe(self, seq, tokens, gap):
        m = self.model.setdefault(seq, dict(keys=np.zeros((0, KV, D)), positions=np.zeros(0, np.int64), next=0, steps=0))
        keys = self.rng.normal(size=(tokens, KV, D))
        pos = np.arange(m["next"] + gap, m["next"] + gap + tokens)
        self.policy.observe(seq, keys=keys, positions=pos)
        m["keys"] = np.concatenate([m["keys"], keys])
        m["positions"] = np.concatenate([m["positions"], pos])
        m["next"] = int(pos[-1]) + 1
        m["steps"] += tokens

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def step(self, data):
        seq = data.draw(st.sampled_from(sorted(self.model)))
        m = self.model[seq]
        evicted = self.policy.step(seq)
        if m["steps"] >= 3 and m["positions"].size > 6:
            keep = _expected_keep(self.cal, m["keys"], m["positions"], m["next"], 6)
            expect = np.setdiff1d(np.arange(m["positions"].size), keep)
            np.testing.assert_array_equal(np.sort(evicted), m["positions"][expect])
            assert self.table.calls[-1][0] == seq
            m["keys"], m["positions"], m["steps"] = m["keys"][keep], m["positions"][keep], 0
        else:
            assert evicted.size == 0

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def forget(self, data):
        seq = data.draw(st.sampled_from(sorted(self.model)))
        self.policy.forget(seq)
        del self.model[seq]

    @invariant()
    def consistent(self):
        self.policy.check()
        assert sorted(self.policy._seqs) == sorted(self.model)
        for seq, m in self.model.items():
            np.testing.assert_array_equal(self.policy.live_positions(seq), m["positions"])


TestPolicyMachine = PolicyMachine.TestCase
TestPolicyMachine.settings = __import__("hypothesis").settings(max_examples=25, stateful_step_count=15, deadline=None)


def test_attention_evidence_is_checked_not_used():
    policy = TriAttentionPolicy(TriAttentionScorer(_calibration()), **LEGACY)
    rng = np.random.default_rng(6)
    keys = rng.normal(size=(5, KV, D))
    policy.observe(0, keys=keys, attention=np.full((HEADS, 1, 5), 0.2))
    plain = TriAttentionPolicy(TriAttentionScorer(_calibration()), **LEGACY)
    plain.observe(0, keys=keys)
    np.testing.assert_array_equal(policy.scores(0), plain.scores(0))
    before = _snapshot(policy)
    with pytest.raises(ShapeError, match="live \\+ new = 6"):
        policy.observe(0, keys=rng.normal(size=(1, KV, D)), attention=np.full((HEADS, 1, 5), 0.2))
    bad = np.full((HEADS, 1, 6), 1 / 6)
    bad[0, 0, 2] = np.nan
    with pytest.raises(BadInputError, match="NaN"):
        policy.observe(0, keys=rng.normal(size=(1, KV, D)), attention=bad)
    _same(before, _snapshot(policy))


@pytest.mark.parametrize("aggregation", ["global", "head"])
def test_evict_to_budget_keeps_protected_prompt_tokens_as_compress_does(aggregation):
    from kvmm.allocators import BlockAllocator, TokenTable
    from kvmm.compress import evict_to_budget

    cal = _calibration()
    rng = np.random.default_rng(5)
    prompt, decode = rng.normal(size=(24, KV, D)), rng.normal(size=(16, KV, D))
    table = TokenTable(BlockAllocator(64, 4))
    table.add_sequence(3)
    table.append([3], [40])
    policy = TriAttentionPolicy(TriAttentionScorer(cal), budget=30, aggregation=aggregation)
    twin = TriAttentionPolicy(TriAttentionScorer(cal), budget=30, aggregation=aggregation)
    for p in (policy, twin):
        p.observe(3, keys=prompt)
        p.observe(3, keys=decode)
    scores = policy.scores(3)
    assert np.isposinf(scores[:24]).all() and np.isfinite(scores[24:]).all()
    assert evict_to_budget(table, policy, [3], 30).tolist() == [10]
    live = table.positions(3)  # the live logical positions
    assert set(range(24)) <= set(live.tolist())  # every prompt token stays
    evicted_by_compress = twin.compress(3)
    assert set(range(24)).isdisjoint(evicted_by_compress.tolist())
    if aggregation == "global":  # one kept set: the same 10 decode tokens go either way
        assert sorted(set(range(40)) - set(live.tolist())) == sorted(evicted_by_compress.tolist())
    np.testing.assert_array_equal(policy.live_positions(3), np.sort(live))
    policy.check()
    table.check()
