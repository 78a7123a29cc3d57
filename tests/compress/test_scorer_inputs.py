"""Token scorers with the inputs real callers pass; a raising call leaves the scorer's state unchanged."""

import copy

import numpy as np
import pytest

from kvmm.compress import (
    H2OScorer,
    KeyNormScorer,
    RandomScorer,
    ScissorhandsScorer,
    SnapKVScorer,
    StreamingLLMScorer,
    select_victims,
)
from kvmm.errors import BadInputError, DTypeError, KvmmError, ShapeError

MAKERS = [lambda: H2OScorer(recent_window=1), lambda: ScissorhandsScorer(history_window=2, recent_window=1),
          lambda: SnapKVScorer(window_size=1, kernel_size=3), lambda: StreamingLLMScorer(sink_tokens=1),
          lambda: KeyNormScorer(), lambda: RandomScorer(seed=1)]
IDS = ["h2o", "scissorhands", "snapkv", "streamingllm", "keynorm", "random"]


def _attention(rng, live, dtype=np.float64):
    a = rng.random((2, 1, live))
    return (a / a.sum(-1, keepdims=True)).astype(dtype)


def _prefilled(make, rng):
    s = make()
    s.observe(0, attention=_attention(rng, 4), keys=rng.normal(size=(4, 1, 8)), positions=np.arange(4))
    return s


def _state(s):
    return {seq: {k: (copy.deepcopy(v) if k != "state" else {kk: vv for kk, vv in v.items() if kk != "rng"})
                  for k, v in st.items()} for seq, st in s.seq_state.items()}


def _equal(a, b):
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    return a == b


@pytest.mark.parametrize("make", MAKERS, ids=IDS)
def test_a_boolean_mask_or_float_indices_are_not_taken_as_indices(make):
    rng = np.random.default_rng(0)
    s = _prefilled(make, rng)
    before = _state(s)
    # [False, True] used to become indices [0, 1] and evict two tokens; 0.9 used to become 0
    for bad in (np.array([False, True]), np.array([True, False, False, True]), [0.9], np.array([1.0])):
        with pytest.raises(DTypeError):
            s.on_evict(0, bad)
        assert _equal(before, _state(s))
    with pytest.raises(BadInputError):
        s.on_evict(0, np.array([2**63 + 1], dtype=np.uint64))
    s.on_evict(0, np.flatnonzero([False, True, False, False]).astype(np.uint32))
    assert s.scores(0).shape == (3,)
    s.on_evict(0, np.int64(0))
    s.on_evict(0, [])
    assert s.scores(0).shape == (2,)


@pytest.mark.parametrize("make", MAKERS, ids=IDS)
def test_evidence_dtypes_and_views_give_the_same_scores(make):
    rng = np.random.default_rng(1)
    attention, keys = _attention(rng, 5), rng.normal(size=(1, 1, 8))
    ref = _prefilled(make, np.random.default_rng(2))
    ref.observe(0, attention=attention, keys=keys, positions=[4])
    variants = [
        dict(attention=np.asfortranarray(attention), keys=keys[:, :, ::-1][:, :, ::-1], positions=np.array([4], np.uint64)),
        dict(attention=np.repeat(attention, 2, axis=-1)[..., ::2], keys=keys.tolist(), positions=np.int32(4)),
        dict(attention=attention.tolist(), keys=np.broadcast_to(keys, (1, 1, 8)), positions=[4]),  # read-only view
    ]
    for ev in variants:
        s = _prefilled(make, np.random.default_rng(2))
        s.observe(0, **ev)
        np.testing.assert_allclose(s.scores(0), ref.scores(0), rtol=1e-12)


@pytest.mark.parametrize("make", MAKERS, ids=IDS)
def test_bad_evidence_raises_and_changes_nothing(make):
    rng = np.random.default_rng(3)
    s = _prefilled(make, rng)
    before = _state(s)
    for ev in (dict(attention=[[[0.5, 0.5]], [[0.5]]], positions=[4]),            # ragged
               dict(attention=_attention(rng, 5), keys=rng.normal(size=(1, 1, 8)),
                    positions=np.array([2**63], np.uint64)),                         # would wrap negative
               dict(attention=_attention(rng, 5), keys=np.full((1, 1, 8), np.nan), positions=[4])):
        with pytest.raises(KvmmError):
            s.observe(0, **ev)
        assert _equal(before, _state(s))


def test_select_victims_rejects_nan_and_non_1d_scores():
    with pytest.raises(BadInputError, match="NaN"):
        select_victims(np.array([1.0, np.nan, 0.5]), 1)  # NaN used to sort last: silently kept
    with pytest.raises(ShapeError):
        select_victims(np.array([[1.0, 2.0]]), 1)
    with pytest.raises(ShapeError):
        select_victims(np.array(["a", "b"]), 1)
    assert select_victims([3, 1, 2, np.inf], np.int64(2)).tolist() == [1, 2]
    assert select_victims(np.array([2.0, 2.0, 2.0], np.float32), 1).tolist() == [0, 1]  # ties: earlier first
    assert select_victims(np.zeros(0), 0).tolist() == []


def test_evict_to_budget_rejects_float_sequence_ids_and_mismatched_budgets():
    from kvmm.allocators import BlockAllocator, TokenTable
    from kvmm.compress import evict_to_budget

    table = TokenTable(BlockAllocator(32, 4, secret=bytes(16)))
    scorer = KeyNormScorer()
    for seq in (0, 1):
        table.add_sequence(seq)
        table.append([seq], [6])
        scorer.observe(seq, keys=np.random.default_rng(seq).normal(size=(6, 1, 8)))
    for seqs, budget, error in (([0.7], 3, DTypeError),            # used to evict from sequence 0
                                ([0, 1], [3, 3, 3], ShapeError),   # used to raise numpy's ValueError
                                ([0, 1], [[3, 3]], ShapeError)):
        with pytest.raises(error):
            evict_to_budget(table, scorer, seqs, budget)
        assert [table.num_live(s) for s in (0, 1)] == [6, 6] and scorer.scores(0).size == 6
    counts = evict_to_budget(table, scorer, np.array([0, 1], np.uint64), np.array([3, 2], np.uint8))
    assert counts.tolist() == [3, 4] and [table.num_live(s) for s in (0, 1)] == [3, 2]
    assert evict_to_budget(table, scorer, np.int64(1), np.array(1)).tolist() == [1]
    table.check()
