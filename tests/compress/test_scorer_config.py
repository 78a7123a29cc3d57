"""Scorer configuration is validated in __post_init__; the eviction helper's edge cases."""

import numpy as np
import pytest

from kvmm.allocators import BlockAllocator, TokenTable
from kvmm.compress import (
    H2OScorer,
    RandomScorer,
    ScissorhandsScorer,
    SnapKVScorer,
    StreamingLLMScorer,
    evict_to_budget,
    select_victims,
)
from kvmm.errors import BadInputError, DTypeError, KvmmError, ShapeError


@pytest.mark.parametrize("make,error", [
    (lambda: H2OScorer(recent_window=-1), BadInputError),
    (lambda: H2OScorer(recent_window=1.5), DTypeError),
    (lambda: ScissorhandsScorer(history_window=0), BadInputError),
    (lambda: ScissorhandsScorer(threshold=float("nan")), BadInputError),
    (lambda: SnapKVScorer(kernel_size=4), BadInputError),
    (lambda: SnapKVScorer(pooling="median"), BadInputError),
    (lambda: SnapKVScorer(window_size=0), BadInputError),
    (lambda: StreamingLLMScorer(sink_tokens=-2), BadInputError),
    (lambda: RandomScorer(seed=True), DTypeError),
])
def test_bad_config(make, error):
    with pytest.raises(error):
        make()


def test_bad_evidence():
    s = H2OScorer()
    with pytest.raises(BadInputError, match="needs evidence"):
        s.observe(0, keys=np.zeros((1, 4)))
    with pytest.raises(ShapeError):
        s.observe(0, attention=np.zeros((1, 1, 1, 3)))
    with pytest.raises(ShapeError, match="new tokens"):
        s.observe(0, attention=np.full(3, 1 / 3), keys=np.zeros((2, 4)))
    with pytest.raises(KvmmError):
        s.scores(0)  # nothing was accepted


def test_select_victims_edge_cases():
    assert select_victims(np.array([3.0, 1.0]), 5).size == 0
    assert select_victims(np.array([1.0, 1.0, 1.0]), 1).tolist() == [0, 1]  # ties: older go first
    with pytest.raises(BadInputError, match="budget must be >= 0"):
        select_victims(np.zeros(3), -1)
    for not_a_count in (1.0, True, "2"):  # a float or bool budget is a caller bug, not a count
        with pytest.raises(DTypeError, match="budget must be an integer"):
            select_victims(np.zeros(3), not_a_count)
    assert select_victims(np.array([2.0, 1.0, 3.0]), np.int32(2)).tolist() == [1]  # numpy ints are counts


def test_evict_to_budget_protects_shared_prefix_tokens():
    alloc = BlockAllocator(16, 2)
    table = TokenTable(alloc)
    table.add_sequence(0)
    table.append([0], [4])
    table.add_sequence(1, shared_blocks=table.block_table(0))
    table.append([1], [4])
    scorer = H2OScorer(recent_window=0)
    attn = np.array([0.0, 0.0, 0.0, 0.0, 0.4, 0.3, 0.2, 0.1])  # prefix tokens score lowest
    scorer.observe(1, attention=attn)
    counts = evict_to_budget(table, scorer, [1], 5)
    assert counts.tolist() == [3]
    assert table.live_mask(1).tolist() == [1, 1, 1, 1, 1, 0, 0, 0]  # shared prefix kept
    assert scorer.scores(1).shape == (5,)
    scorer.observe(1, attention=np.full(5, 0.2))
    evict_to_budget(table, scorer, [1], 2, protect_shared=False)
    assert table.num_live(1) == 2
    table.check()


def test_evict_to_budget_rejects_misaligned_scores():
    table = TokenTable(BlockAllocator(8, 2))
    table.add_sequence(0)
    table.append([0], [3])
    scorer = H2OScorer()
    scorer.observe(0, attention=np.full(2, 0.5))
    before = table.snapshot()
    with pytest.raises(ShapeError, match="observe"):
        evict_to_budget(table, scorer, [0], 1)
    for k, v in before.items():
        assert np.array_equal(v, table.snapshot()[k])
