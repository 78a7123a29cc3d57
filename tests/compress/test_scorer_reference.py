"""Each vectorised scorer against its plain-Python reference (kvmm/testing/models/scorers.py), with evictions."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvmm.compress import (
    H2OScorer,
    KeyNormScorer,
    RandomScorer,
    ScissorhandsScorer,
    SnapKVScorer,
    StreamingLLMScorer,
    select_victims,
)
from kvmm.testing.models import scorers as naive

PAIRS = [
    pytest.param(lambda: H2OScorer(recent_window=3), lambda: naive.NaiveH2O(3), id="h2o"),
    pytest.param(lambda: ScissorhandsScorer(history_window=4, recent_window=2, threshold=1.2),
                 lambda: naive.NaiveScissorhands(4, 2, 1.2), id="scissorhands"),
    pytest.param(lambda: SnapKVScorer(window_size=2, kernel_size=5), lambda: naive.NaiveSnapKV(2, 5), id="snapkv"),
    pytest.param(lambda: SnapKVScorer(window_size=3, kernel_size=3, pooling="avg"),
                 lambda: naive.NaiveSnapKV(3, 3, "avg"), id="snapkv-avg"),
    pytest.param(lambda: StreamingLLMScorer(sink_tokens=3), lambda: naive.NaiveStreamingLLM(3), id="streamingllm"),
    pytest.param(lambda: KeyNormScorer(), lambda: naive.NaiveKeyNorm(), id="keynorm"),
    pytest.param(lambda: RandomScorer(seed=11, recent_window=2), lambda: naive.NaiveRandom(11, 2), id="random"),
]


@pytest.mark.parametrize("make_real,make_naive", PAIRS)
@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(1, 12), heads=st.integers(1, 3), queries=st.integers(1, 4))
def test_matches_plain_python_reference(make_real, make_naive, seed, steps, heads, queries):
    real, ref = make_real(), make_naive()
    rng = np.random.default_rng(seed)
    live = {0: 0, 1: 0}
    next_pos = {0: 0, 1: 0}
    for _ in range(steps):
        seq = int(rng.integers(0, 2))
        new = int(rng.integers(0, 4)) if live[seq] else int(rng.integers(1, 4))
        n = live[seq] + new
        attn = rng.dirichlet(np.ones(n), size=(heads, queries))
        keys = rng.normal(size=(new, 2, 4))
        pos = np.arange(next_pos[seq], next_pos[seq] + new) + int(rng.integers(0, 2))  # gaps allowed
        real.observe(seq, attention=attn, keys=keys, positions=pos)
        ref.observe(seq, attention=attn, keys=keys, positions=pos)
        live[seq] = n
        if new:
            next_pos[seq] = int(pos[-1]) + 1
        np.testing.assert_allclose(real.scores(seq), ref.scores(seq), rtol=1e-12, atol=1e-12)
        if n > 2 and rng.random() < 0.4:
            budget = int(rng.integers(1, n))
            victims = select_victims(real.scores(seq), budget)
            assert victims.tolist() == naive.naive_victims(ref.scores(seq), budget)
            real.on_evict(seq, victims)
            ref.on_evict(seq, victims)
            live[seq] = budget
            np.testing.assert_allclose(real.scores(seq), ref.scores(seq), rtol=1e-12, atol=1e-12)


def test_h2o_pinned_example():
    s = H2OScorer(recent_window=1)
    s.observe(0, attention=np.array([[0.5, 0.3, 0.2]]))
    s.observe(0, attention=np.array([[0.1, 0.6, 0.2, 0.1]]))
    assert s.scores(0).tolist() == [0.6, 0.8999999999999999, 0.4, np.inf]
    assert s.victims(0, 2).tolist() == [0, 2]


def test_streamingllm_keeps_sinks_and_recent():
    s = StreamingLLMScorer(sink_tokens=2)
    s.observe(5, positions=np.arange(10))
    assert s.victims(5, 5).tolist() == [2, 3, 4, 5, 6]  # keeps 0, 1 (sinks) and 7, 8, 9


def test_scissorhands_counts_persistence():
    s = ScissorhandsScorer(history_window=2, recent_window=0)
    a = np.array([0.7, 0.1, 0.2])  # uniform share 1/3: only token 0 is important
    s.observe(0, attention=a)
    s.observe(0, attention=a)
    s.observe(0, attention=np.array([0.1, 0.5, 0.4]))  # window of 2: the first observation drops out
    assert s.scores(0).tolist() == [1.0, 1.0, 1.0]


def test_snapkv_max_pooling_spreads_votes_to_neighbours():
    s = SnapKVScorer(window_size=1, kernel_size=3)
    attn = np.zeros((1, 2, 6))
    attn[0, 0, 1] = 1.0  # outside the observation window: ignored
    attn[0, 1, 2] = 1.0
    s.observe(0, attention=attn)
    assert s.scores(0).tolist() == [0.0, 1.0, 1.0, 1.0, 0.0, np.inf]
