"""Write-back demotion (TierLevel.fill="write-back", inclusive / exclusive), exact on toy runs.

The toy GPU pool holds 4 blocks; requests arrive far apart (each finishes before the next), so
the order of evictions is the allocator's free-queue order: a finished request's blocks are
freed last-first and join the tail; new blocks come from the head (documented in
docs/allocator.md)."""

from __future__ import annotations

import numpy as np
import pytest

from kvmm.errors import BadInputError
from kvmm.sim import SimConfig, TierLevel, simulate
from kvmm.tiers.spec import TierSpec
from tests.sim.sim_helpers import TOY_FAST, TOY_MODEL, trace

BLOCK = 512 * TOY_MODEL.kv_bytes_per_token
LOWER = TierSpec("toy-lower", 100 * BLOCK, read_bandwidth=1e9, write_bandwidth=1e9, latency_s=0.0)


def run(rows, levels, gpu_blocks=4):
    # every request is 2 full blocks + 1 output token: 2 blocks (the last token's KV is never written)
    engines = []
    t = trace([(i * 100_000, len(b) * 512, 1, b) for i, b in enumerate(rows)])
    cfg = SimConfig(workload=t, model=TOY_MODEL, load=None, fast_tier=TOY_FAST, gpu_kv_bytes=gpu_blocks * BLOCK,
                    tiers=levels, stage_efficiency=1.0, policy="on-demand")
    return simulate(cfg, engine_hook=engines.append), engines[0]


def held(engine, level):
    return sorted(int(k) for k in engine.hier.tiers[level].keys())


def test_gpu_evictions_are_demoted_and_nothing_is_written_at_prefill():
    # A=[0,1] and B=[2,3] fill the pool and are freed into the prefix cache (A's blocks nearer
    # the head: freed first); C=[4,5] takes A's blocks, which go down; D=[6,7] takes B's
    res, eng = run([[0, 1], [2, 3], [4, 5], [6, 7]], (TierLevel(LOWER, fill="write-back"),))
    assert held(eng, 0) == [0, 1, 2, 3]
    assert res.demoted_blocks == (4,)
    assert res.tier_block_hits == (0,)


def test_write_through_writes_every_prefilled_block():
    res, eng = run([[0, 1], [2, 3], [4, 5], [6, 7]], (TierLevel(LOWER),))
    assert held(eng, 0) == list(range(8)) and res.demoted_blocks == (0,)


def test_a_demoted_block_is_a_lower_tier_hit_later():
    res, eng = run([[0, 1], [2, 3], [4, 5], [0, 1, 9]], (TierLevel(LOWER, fill="write-back"),))
    assert res.tier_block_hits == (2,)  # blocks 0 and 1 came back from the lower level
    assert res.slow_hit_token_share > 0
    assert 0 in held(eng, 0)  # inclusive: they stay below too


def test_exclusive_level_gives_up_a_block_read_into_the_gpu():
    rows = [[0, 1], [2, 3], [4, 5], [0, 1, 9]]
    res, eng = run(rows, (TierLevel(LOWER, fill="write-back", inclusive=False),))
    assert res.tier_block_hits == (2,)
    assert 0 not in held(eng, 0) and 1 not in held(eng, 0)
    # the GPU then evicted 2, 3 for request 4 (3 blocks): they are below; 0, 1 are on the GPU
    assert {2, 3} <= set(held(eng, 0))


def test_victims_of_a_write_back_level_go_on_down():
    small = TierSpec("toy-small", 2 * BLOCK, read_bandwidth=1e9, write_bandwidth=1e9, latency_s=0.0)
    res, eng = run([[0, 1], [2, 3], [4, 5], [6, 7]],
                   (TierLevel(small, fill="write-back"), TierLevel(LOWER, fill="write-back")))
    assert held(eng, 0) == [2, 3]  # the small level keeps the last two demoted
    assert held(eng, 1) == [0, 1]  # its LRU victims went on down
    assert res.demoted_blocks == (4, 2)


def test_victims_below_a_write_through_level_leave_the_hierarchy():
    small = TierSpec("toy-small", 2 * BLOCK, read_bandwidth=1e9, write_bandwidth=1e9, latency_s=0.0)
    res, eng = run([[0, 1], [2, 3], [4, 5], [6, 7]], (TierLevel(small), TierLevel(LOWER)))
    assert held(eng, 0) == [6, 7] and held(eng, 1) == list(range(8)) and res.demoted_blocks == (0, 0)


def test_fill_is_validated():
    with pytest.raises(BadInputError, match="unknown fill 'later'"):
        TierLevel(LOWER, fill="later")
    with pytest.raises(BadInputError, match="exclusive level .* needs fill='write-back'"):
        TierLevel(LOWER, inclusive=False)
    with pytest.raises(BadInputError, match="inclusive must be a bool"):
        TierLevel(LOWER, fill="write-back", inclusive="no")


def test_gpu_key_mirror_counts_copies():
    from kvmm.sim.demotion import GpuKeyMirror

    m = GpuKeyMirror(6, np.array([10, 11, 12], dtype=np.int64))

    def admitted(ids, trace_ids, hits=0):
        stored, evicted = m.admitted(np.array(ids, dtype=np.int32), hits, np.array(trace_ids, dtype=np.int64))
        return stored.tolist(), evicted.tolist()

    assert admitted([0, 1, 2], [10, 11]) == ([10, 11], [])
    # block 3 holds 11 again (a second copy); then blocks 1 and 3 are handed out: 11 leaves with its last copy
    assert admitted([3], [11]) == ([], [])
    assert admitted([1], [12]) == ([12], [])
    assert admitted([3], []) == ([], [11])
    assert m.holder.tolist() == [0, 2, -1, -1, -1, -1]  # dense ids: positions in the key space
    # a block evicted and keyed again by one admission never left the GPU; prefix hits are not re-keyed
    assert admitted([0, 4], [10, 10], hits=0) == ([], [])
    assert admitted([5, 0], [12, 11], hits=1) == ([11], [])  # block 4 still holds 10


def test_gpu_key_mirror_reports_a_key_once_when_both_its_copies_go():
    from kvmm.sim.demotion import GpuKeyMirror

    m = GpuKeyMirror(4, np.array([5, 6], dtype=np.int64))
    m.admitted(np.array([0], dtype=np.int32), 0, np.array([5], dtype=np.int64))
    m.admitted(np.array([1], dtype=np.int32), 0, np.array([5], dtype=np.int64))  # a second copy of 5
    stored, evicted = m.admitted(np.array([0, 1], dtype=np.int32), 0, np.array([6], dtype=np.int64))
    assert stored.tolist() == [6] and evicted.tolist() == [5]
    assert m.copies.tolist() == [0, 1]
