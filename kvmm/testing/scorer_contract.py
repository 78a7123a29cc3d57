"""The contract every :class:`~kvmm.protocols.TokenScorer` passes, alone and through a TokenTable.

::

    class TestMyScorer(TokenScorerContract):
        def make_scorer(self):
            return MyScorer(window=4)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kvmm.allocators import BlockAllocator, TokenTable
from kvmm.compress import TokenScorerBase, evict_to_budget, select_victims
from kvmm.errors import KvmmError
from kvmm.protocols import TokenScorer

__all__ = ["TokenScorerContract", "decode_evidence"]


class TokenScorerContract:
    """Contract suite for a token scorer; subclass it and define ``make_scorer()``.

    The suite feeds every scorer the same decode-style evidence (kvmm's convention, see
    :class:`~kvmm.protocols.TokenScorer`): attention over all live tokens (new ones last), keys,
    positions and queries of the new tokens, ``q_heads``/``kv_heads``/``head_dim`` sized (class
    attributes); a scorer ignores what it does not use.  It checks:

    * it is a :class:`~kvmm.protocols.TokenScorer`;
    * ``scores(seq)`` is float64 over exactly the live tokens, without NaN or ``-inf``;
    * the same evidence gives the same scores (determinism), and sequences are independent
      (observing another sequence does not change a sequence's scores);
    * ``on_evict(seq, live_indices)`` keeps the remaining scores aligned: they equal the earlier
      scores with the evicted entries deleted (wherever both are finite: protection windows may
      move);
    * ``forget(seq)`` (when present) drops the sequence: its ``scores`` then raise
      (``KvmmError`` when ``raises_kvmm_errors``);
    * a :class:`~kvmm.compress.TokenScorerBase` rejects stale or NaN attention with a
      ``KvmmError`` and keeps its state (other scorers: skipped, saying so);
    * ``select_victims`` on its scores takes the lowest ones;
    * decoding two sequences under a budget through a :class:`~kvmm.allocators.TokenTable`
      with :func:`~kvmm.compress.evict_to_budget` and repacking: every step the table keeps
      ``min(budget, tokens)`` live tokens, the scores cover exactly them and stay aligned with
      the surviving tokens (each survivor keeps the score it had before the eviction, wherever
      finite), and full repacks leave every sequence dense.
    """

    q_heads, kv_heads, head_dim, queries = 4, 2, 8, 2
    raises_kvmm_errors = False

    def make_scorer(self) -> Any:
        """A fresh scorer (override)."""
        raise NotImplementedError("subclass TokenScorerContract and define make_scorer()")

    # -- helpers ----------------------------------------------------------------------------
    def evidence(self, rng: np.random.Generator, live: int, new: int, next_position: int) -> dict:
        return decode_evidence(rng, live, new, next_position, q_heads=self.q_heads, kv_heads=self.kv_heads,
                               head_dim=self.head_dim, queries=self.queries)

    def drive(self, scorer: Any, steps: int = 6, seed: int = 0, seq: int = 0) -> int:
        """Observe ``steps`` decode steps of 1-3 new tokens; return the live count."""
        rng = np.random.default_rng(seed)
        live = 0
        for _ in range(steps):
            new = int(rng.integers(1, 4))
            scorer.observe(seq, **self.evidence(rng, live + new, new, live))
            live += new
        return live

    # -- tests ------------------------------------------------------------------------------
    def test_is_a_token_scorer(self) -> None:
        assert isinstance(self.make_scorer(), TokenScorer)

    def test_scores_cover_the_live_tokens(self) -> None:
        scorer = self.make_scorer()
        live = self.drive(scorer)
        s = scorer.scores(0)
        assert s.shape == (live,) and s.dtype == np.float64
        assert not np.isnan(s).any() and not np.isneginf(s).any()

    def test_same_evidence_same_scores(self) -> None:
        a, b = self.make_scorer(), self.make_scorer()
        self.drive(a, seed=5)
        self.drive(b, seed=5)
        np.testing.assert_array_equal(a.scores(0), b.scores(0))

    def test_sequences_are_independent(self) -> None:
        scorer, alone = self.make_scorer(), self.make_scorer()
        self.drive(scorer, seed=1, seq=0)
        self.drive(alone, seed=2, seq=1)
        self.drive(scorer, seed=2, seq=1)
        np.testing.assert_array_equal(scorer.scores(1), alone.scores(1))

    def test_on_evict_keeps_the_remaining_scores_aligned(self) -> None:
        scorer = self.make_scorer()
        live = self.drive(scorer, steps=8)
        before = scorer.scores(0)
        idx = np.array([0, live // 2, live - 3])
        scorer.on_evict(0, idx)
        _assert_aligned(scorer.scores(0), np.delete(before, idx))

    def test_forget_drops_the_sequence(self) -> None:
        scorer = self.make_scorer()
        self.drive(scorer)
        if not hasattr(scorer, "forget"):
            pytest.skip("the scorer has no forget() (optional hook)")
        scorer.forget(0)
        with pytest.raises(KvmmError if self.raises_kvmm_errors else Exception):
            scorer.scores(0)

    def test_stale_attention_is_rejected(self) -> None:
        scorer = self.make_scorer()
        if not isinstance(scorer, TokenScorerBase):
            pytest.skip("evidence checks of TokenScorerBase only")
        live = self.drive(scorer)
        before = np.array(scorer.scores(0), copy=True)
        rng = np.random.default_rng(9)
        shrank = self.evidence(rng, live - 1, 0, live)  # shrank without on_evict
        with pytest.raises(KvmmError):
            scorer.observe(0, **shrank)
        bad = self.evidence(rng, live + 1, 1, live)
        bad["attention"][0, 0, 0] = np.nan
        with pytest.raises(KvmmError):
            scorer.observe(0, **bad)
        np.testing.assert_array_equal(scorer.scores(0), before)  # rejected evidence changed nothing

    def test_victims_are_the_lowest_scores(self) -> None:
        scorer = self.make_scorer()
        live = self.drive(scorer, steps=8)
        budget = live // 2
        s = scorer.scores(0)
        victims = select_victims(s, budget)
        assert victims.size == live - budget
        kept = np.setdiff1d(np.arange(live), victims)
        assert s[victims].max() <= s[kept].min()

    def test_decode_with_budget_through_the_token_table(self) -> None:
        scorer = self.make_scorer()
        table = TokenTable(BlockAllocator(64, 4))
        rng = np.random.default_rng(4)
        seqs, budget = [0, 1], 6
        for s in seqs:
            table.add_sequence(s)
        for step in range(25):
            counts = np.array([1 if step else 5, 1 if step else 3])
            table.append(seqs, counts)
            for s, new in zip(seqs, counts):
                ev = self.evidence(rng, table.num_live(s), int(new), 0)
                ev["positions"] = table.positions(s)[-new:]
                scorer.observe(s, **ev)
            before = {s: (scorer.scores(s), table.live_mask(s).copy()) for s in seqs}
            evict_to_budget(table, scorer, seqs, budget)
            for s in seqs:
                assert table.num_live(s) == min(budget, table.num_tokens(s))
                scores_before, live_before = before[s]
                survivors = table.live_mask(s)[np.flatnonzero(live_before)]  # per token live before
                _assert_aligned(scorer.scores(s), scores_before[survivors])
            if step % 5 == 4:
                table.commit(table.plan())
                assert all(table.num_blocks(s) == -(-table.num_live(s) // 4) for s in seqs)
            table.check()


def decode_evidence(rng: np.random.Generator, live: int, new: int, next_position: int, *, q_heads: int = 4,
                    kv_heads: int = 2, head_dim: int = 8, queries: int = 2) -> dict:
    """One decode step's evidence: softmax attention ``(q_heads, queries, live)``, keys of the
    ``new`` tokens ``(new, kv_heads, head_dim)``, their positions and the queries."""
    logits = rng.normal(size=(q_heads, queries, live)) * 2
    attn = np.exp(logits - logits.max(axis=-1, keepdims=True))
    attn /= attn.sum(axis=-1, keepdims=True)
    return dict(attention=attn, keys=rng.normal(size=(new, kv_heads, head_dim)),
                positions=np.arange(next_position, next_position + new, dtype=np.int64),
                queries=rng.normal(size=(q_heads, queries, head_dim)))


def _assert_aligned(after: np.ndarray, expect: np.ndarray) -> None:
    """Scores after an eviction equal the survivors' earlier scores (where both are finite)."""
    assert after.shape == expect.shape, f"{after.shape[0]} scores for {expect.shape[0]} live tokens"
    both = np.isfinite(after) & np.isfinite(expect)  # protection windows may shift by position
    np.testing.assert_allclose(after[both], expect[both], err_msg="scores misaligned after an eviction")
