"""TriAttentionPolicy evicting through a real TokenTable, then repacking frees whole blocks."""

import numpy as np
import pytest

from kvmm.allocators import BlockAllocator, TokenTable
from kvmm.compress import RopeConfig, TriAttentionPolicy, TriAttentionScorer, calibrate
from kvmm.errors import KvmmError


def _policy(table, budget=12, interval=8):
    rng = np.random.default_rng(0)
    cal = calibrate(rng.normal(size=(64, 4, 8)) + 1.5, rng.normal(size=(64, 2, 8)), rope=RopeConfig(8, 100.0))
    return TriAttentionPolicy(TriAttentionScorer(cal), budget=budget, interval=interval, table=table,
                              aggregation="global", protect_prompt=False, trigger="interval")


def test_policy_evicts_through_token_table_and_repack_frees_blocks():
    alloc = BlockAllocator(64, 4)
    table = TokenTable(alloc)
    policy = _policy(table)
    rng = np.random.default_rng(1)
    for seq in (3, 5):
        table.add_sequence(seq)
        table.append([seq], [40])
        policy.observe(seq, keys=rng.normal(size=(40, 2, 8)))
    for seq in (3, 5):
        evicted = policy.step(seq)
        assert evicted.size == 28
        assert table.num_live(seq) == 12 and table.num_tokens(seq) == 40
        np.testing.assert_array_equal(table.positions(seq), policy.live_positions(seq))
        assert not np.isin(evicted, table.positions(seq)).any()
    table.check()
    # decode 8 more tokens in sequence 3 and compress again
    for _ in range(8):
        table.append([3], [1])
        policy.observe(3, keys=rng.normal(size=(1, 2, 8)))
    assert policy.step(3).size == 8
    np.testing.assert_array_equal(table.positions(3), policy.live_positions(3))
    before = table.num_blocks(3)
    table.commit(table.plan())
    table.check()
    assert table.num_blocks(3) == 3 < before  # 12 live tokens in blocks of 4
    np.testing.assert_array_equal(table.positions(3), policy.live_positions(3))


def test_table_rejection_leaves_policy_unchanged():
    alloc = BlockAllocator(16, 4)
    table = TokenTable(alloc)
    policy = _policy(table, budget=4, interval=1)
    policy.observe(9, keys=np.ones((10, 2, 8)))  # sequence 9 was never added to the table
    live = policy.live_positions(9)
    with pytest.raises(KvmmError):
        policy.step(9)
    np.testing.assert_array_equal(policy.live_positions(9), live)
    policy.check()
