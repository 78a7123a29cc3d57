"""Every kvmm token scorer through kvmm.testing.TokenScorerContract.  A new scorer: one line."""

import numpy as np
import pytest

from kvmm.compress import (
    H2OScorer,
    KeyNormScorer,
    RandomScorer,
    RopeConfig,
    ScissorhandsScorer,
    SnapKVScorer,
    StreamingLLMScorer,
    TriAttentionPolicy,
    TriAttentionScorer,
    calibrate,
)
from kvmm.testing import TokenScorerContract


class KvmmScorerContract(TokenScorerContract):
    raises_kvmm_errors = True


class TestH2O(KvmmScorerContract):
    make_scorer = staticmethod(lambda: H2OScorer(recent_window=2))


class TestScissorhands(KvmmScorerContract):
    make_scorer = staticmethod(lambda: ScissorhandsScorer(history_window=3, recent_window=2))


class TestSnapKV(KvmmScorerContract):
    make_scorer = staticmethod(lambda: SnapKVScorer(window_size=1, kernel_size=3))


class TestSnapKVAvg(KvmmScorerContract):
    make_scorer = staticmethod(lambda: SnapKVScorer(window_size=2, kernel_size=5, pooling="avg"))


class TestStreamingLLM(KvmmScorerContract):
    make_scorer = staticmethod(lambda: StreamingLLMScorer(sink_tokens=2))


class TestKeyNorm(KvmmScorerContract):
    make_scorer = staticmethod(KeyNormScorer)


class TestRandom(KvmmScorerContract):
    make_scorer = staticmethod(lambda: RandomScorer(seed=3, recent_window=1))


class TestTriAttention(KvmmScorerContract):
    def make_scorer(self):
        queries = np.random.default_rng(0).normal(size=(32, self.q_heads, self.head_dim)) + 1
        stats = calibrate(queries, rope=RopeConfig(self.head_dim))
        return TriAttentionPolicy(TriAttentionScorer(stats, normalize=False))

    # The contract's evidence check feeds stale attention, which TriAttention never reads (it
    # scores keys): not collected here (it would skip); bad keys are checked instead.
    test_stale_attention_is_rejected = None

    def test_bad_keys_are_rejected_and_change_nothing(self):
        from kvmm.errors import KvmmError
        from kvmm.testing.scorer_contract import decode_evidence

        scorer = self.make_scorer()
        live = self.drive(scorer)
        before = scorer.scores(0)
        rng = np.random.default_rng(9)
        nan_keys = decode_evidence(rng, live + 1, 1, live)
        nan_keys["keys"][0, 0, 0] = np.nan
        wrong_heads = dict(decode_evidence(rng, live + 1, 1, live), keys=np.zeros((1, 3, self.head_dim)))
        for bad in (nan_keys, wrong_heads):
            with pytest.raises(KvmmError):
                scorer.observe(0, **bad)
        np.testing.assert_array_equal(scorer.scores(0), before)
