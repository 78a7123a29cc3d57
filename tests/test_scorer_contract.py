"""One contract suite over every token scorer.  A new scorer gets the whole suite with one line in SCORERS.

The driver feeds every scorer the same decode-style evidence (kvmm convention, see
``kvmm.protocols.TokenScorer``): attention over all live tokens, keys and positions of the new
tokens; scorers ignore what they do not use.
"""

import numpy as np
import pytest

from kvmm.allocators import BlockAllocator, TokenTable
from kvmm.compress import (
    H2OScorer,
    KeyNormScorer,
    RandomScorer,
    ScissorhandsScorer,
    SnapKVScorer,
    StreamingLLMScorer,
    RopeConfig,
    TokenScorerBase,
    TriAttentionPolicy,
    TriAttentionScorer,
    calibrate,
    evict_to_budget,
    select_victims,
)
from kvmm.errors import KvmmError
from kvmm.protocols import TokenScorer

Q_HEADS, KV_HEADS, HEAD_DIM, QUERIES = 4, 2, 8, 2

SCORERS = [
    pytest.param(lambda: H2OScorer(recent_window=2), id="h2o"),
    pytest.param(lambda: ScissorhandsScorer(history_window=3, recent_window=2), id="scissorhands"),
    pytest.param(lambda: SnapKVScorer(window_size=1, kernel_size=3), id="snapkv"),
    pytest.param(lambda: SnapKVScorer(window_size=2, kernel_size=5, pooling="avg"), id="snapkv-avg"),
    pytest.param(lambda: StreamingLLMScorer(sink_tokens=2), id="streamingllm"),
    pytest.param(lambda: KeyNormScorer(), id="keynorm"),
    pytest.param(lambda: RandomScorer(seed=3, recent_window=1), id="random"),
    pytest.param(lambda: TriAttentionPolicy(TriAttentionScorer(calibrate(np.random.default_rng(0).normal(size=(32, Q_HEADS, HEAD_DIM)) + 1, rope=RopeConfig(HEAD_DIM)), normalize=False)), id="triattention"),  # noqa: E501
]


def evidence(rng, live, new, next_pos):
    logits = rng.normal(size=(Q_HEADS, QUERIES, live)) * 2
    attn = np.exp(logits - logits.max(axis=-1, keepdims=True))
    attn /= attn.sum(axis=-1, keepdims=True)
    return dict(attention=attn, keys=rng.normal(size=(new, KV_HEADS, HEAD_DIM)),
                positions=np.arange(next_pos, next_pos + new, dtype=np.int64),
                queries=rng.normal(size=(Q_HEADS, QUERIES, HEAD_DIM)))


def drive(scorer, steps=6, seed=0, seq=0):
    """Observe ``steps`` decode steps of 1-3 new tokens; return the live count."""
    rng = np.random.default_rng(seed)
    live = 0
    for _ in range(steps):
        new = int(rng.integers(1, 4))
        scorer.observe(seq, **evidence(rng, live + new, new, live))
        live += new
    return live


@pytest.fixture(params=SCORERS)
def make(request):
    return request.param


def test_is_a_token_scorer(make):
    assert isinstance(make(), TokenScorer)


def test_scores_cover_the_live_tokens(make):
    scorer = make()
    live = drive(scorer)
    s = scorer.scores(0)
    assert s.shape == (live,) and s.dtype == np.float64
    assert not np.isnan(s).any() and not np.isneginf(s).any()


def test_same_evidence_same_scores(make):
    a, b = make(), make()
    drive(a, seed=5)
    drive(b, seed=5)
    np.testing.assert_array_equal(a.scores(0), b.scores(0))


def test_sequences_are_independent(make):
    scorer = make()
    drive(scorer, seed=1, seq=0)
    alone = make()
    drive(alone, seed=2, seq=1)
    drive(scorer, seed=2, seq=1)
    np.testing.assert_array_equal(scorer.scores(1), alone.scores(1))


def test_on_evict_keeps_the_remaining_scores_aligned(make):
    scorer = make()
    live = drive(scorer, steps=8)
    before = scorer.scores(0)
    idx = np.array([0, live // 2, live - 3])
    scorer.on_evict(0, idx)
    after = scorer.scores(0)
    expect = np.delete(before, idx)
    assert after.shape == expect.shape
    both = np.isfinite(after) & np.isfinite(expect)  # protection windows may shift by position
    np.testing.assert_allclose(after[both], expect[both])


def test_forget_drops_the_sequence(make):
    scorer = make()
    drive(scorer)
    scorer.forget(0)
    with pytest.raises(KvmmError):
        scorer.scores(0)


def test_stale_attention_is_rejected(make):
    scorer = make()
    if not isinstance(scorer, TokenScorerBase):
        pytest.skip("evidence checks of TokenScorerBase only")
    live = drive(scorer)
    rng = np.random.default_rng(9)
    with pytest.raises(KvmmError):
        scorer.observe(0, **evidence(rng, live - 1, 0, live))  # shrank without on_evict
    with pytest.raises(KvmmError):
        bad = evidence(rng, live + 1, 1, live)
        bad["attention"][0, 0, 0] = np.nan
        scorer.observe(0, **bad)
    assert scorer.scores(0).shape == (live,)  # rejected evidence changed nothing


def test_victims_are_the_lowest_scores(make):
    scorer = make()
    live = drive(scorer, steps=8)
    budget = live // 2
    s = scorer.scores(0)
    victims = select_victims(s, budget)
    assert victims.size == live - budget
    kept = np.setdiff1d(np.arange(live), victims)
    assert s[victims].max() <= s[kept].min()


def test_decode_with_budget_through_the_token_table(make):
    scorer = make()
    table = TokenTable(BlockAllocator(64, 4))
    rng = np.random.default_rng(4)
    seqs = [0, 1]
    budget = 6
    for s in seqs:
        table.add_sequence(s)
    for step in range(25):
        counts = np.array([1 if step else 5, 1 if step else 3])
        table.append(seqs, counts)
        for s, new in zip(seqs, counts):
            live = table.num_live(s)
            pos = table.positions(s)[-new:]
            ev = evidence(rng, live, int(new), 0)
            ev["positions"] = pos
            scorer.observe(s, **ev)
        evict_to_budget(table, scorer, seqs, budget)
        for s in seqs:
            assert table.num_live(s) == min(budget, table.num_tokens(s))
            assert scorer.scores(s).shape == (table.num_live(s),)
        if step % 5 == 4:
            table.commit(table.plan())
            assert all(table.num_blocks(s) == -(-table.num_live(s) // 4) for s in seqs)
        table.check()
