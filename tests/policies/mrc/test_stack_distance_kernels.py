"""Small kernels against plain Python: hashing, key -> id table, counters, the two-tier replay."""

import numpy as np
import pytest

from kvmm.policies import AdmissionRequest, RefillFilter, StoreThreshold, WriteAll
from kvmm.policies.mrc import _stack_kernels as K
from kvmm.policies.mrc.stack_distance import _fenwick_of
from kvmm.reproduce.efficientagent import GPUS, MODELS, replay_two_tier
from kvmm.testing.models.stack_distance import mix64, two_tier_classes
from kvmm.tiers.spec import preset
from kvmm.traces import agent_trace


def test_hash_matches_python_splitmix64():
    keys = np.array([0, 1, 2**63, 2**64 - 1, 12345678901234567], dtype=np.uint64)
    out = np.empty(keys.size, dtype=np.uint64)
    K.hash_keys(keys, out)
    assert out.tolist() == [mix64(int(k)) for k in keys]
    assert out[0] == 0xE220A8397B1DCDAF  # splitmix64's first output for seed 0


def test_id_table_matches_dict_through_growth():
    rng = np.random.default_rng(0)
    slots = np.zeros(4 * 4, dtype=np.uint64)
    id_keys = np.zeros(4, dtype=np.uint64)
    state = np.zeros(1, dtype=np.int64)
    model = {}
    for _ in range(30):
        keys = rng.integers(0, 2**64, size=int(rng.integers(1, 60)), dtype=np.uint64)
        keys[::3] = rng.integers(0, 50, size=keys[::3].size).astype(np.uint64)  # repeats
        need = int(state[0]) + keys.size
        if 2 * need > slots.size // 2:
            new = np.zeros(4 * (1 << (need - 1).bit_length()) * 2, dtype=np.uint64)
            K.rehash(slots, new)
            slots = new
        if need > id_keys.size:
            grown = np.zeros(1 << (need - 1).bit_length(), dtype=np.uint64)
            grown[: id_keys.size] = id_keys
            id_keys = grown
        ids = np.empty(keys.size, dtype=np.int64)
        K.get_or_insert_ids(keys, slots, id_keys, state, ids)
        expect = [model.setdefault(int(k), len(model)) for k in keys]
        assert ids.tolist() == expect
    found = np.empty(len(model), dtype=np.int64)
    K.lookup_ids(np.array(list(model), dtype=np.uint64), slots, found)
    assert found.tolist() == list(model.values())
    missing = np.empty(1, dtype=np.int64)
    K.lookup_ids(np.array([2**64 - 7], dtype=np.uint64), slots, missing)
    assert missing[0] == -1 or (2**64 - 7) in model


def test_store_threshold_counter_grows_like_a_dict():
    policy = StoreThreshold(k=3)
    rng = np.random.default_rng(1)
    counts = {}
    for _ in range(40):
        keys = rng.integers(0, 3000, size=200)
        mask = policy.admit(AdmissionRequest(keys, np.zeros(keys.size, bool)))
        expect = []
        for k in keys.tolist():
            counts[k] = counts.get(k, 0) + 1
            expect.append(counts[k] >= 3)
        assert mask.tolist() == expect


@pytest.mark.parametrize("gpu_blocks, host_blocks", [(8, 0), (8, 30), (20, 5), (3, 200)])
@pytest.mark.parametrize("make", [WriteAll, lambda: StoreThreshold(2), lambda: RefillFilter(40, max_refill_blocks=3)])
def test_two_tier_replay_matches_python_model(gpu_blocks, host_blocks, make):
    trace = agent_trace(5, tasks=8, steps=(2, 6), system_prompt_tokens=1024, task_tokens=(100, 3000), seed=4)
    model, gpu = MODELS["llama3-8b"], GPUS["h200"]
    result = replay_two_tier(trace, make(), gpu_blocks=gpu_blocks, host_blocks=host_blocks, model=model, gpu=gpu,
                             host=preset("dram"))
    twin = make()
    requests = [trace.blocks_of(r).tolist() for r in range(trace.num_requests)]

    def admit(keys, in_host, gpu_hit):
        return twin.admit(AdmissionRequest(np.array(keys), np.array(in_host, bool), np.array(gpu_hit, bool)))

    classes, written = two_tier_classes(requests, gpu_blocks, host_blocks, admit)
    flat = np.concatenate([np.array(c) for c in classes])
    tokens = np.full(flat.size, 512)
    ends = trace.block_offsets[1:] - 1
    tokens[ends] = trace.input_length - 512 * (np.diff(trace.block_offsets) - 1)
    assert result.recomputed_tokens == tokens[flat == 2].sum()
    assert result.loaded_tokens == tokens[flat == 1].sum()
    assert result.gpu_hit_tokens == tokens[flat == 0].sum()
    assert result.written_blocks == written
    assert result.recomputed_tokens + result.loaded_tokens + result.gpu_hit_tokens == trace.input_length.sum()


@pytest.mark.parametrize("in_place", [True, False])
def test_compaction_keeps_live_marks_in_time_order(in_place):
    """compact_time against plain Python: the live marks (set bits) move to 0..live-1 in time
    order, their owners' id_last follow, dead positions and dropped ids (id_last -1, mark cleared,
    as fixed-size SHARDS leaves them) vanish, and the bits and tree are rebuilt."""
    rng = np.random.default_rng(3)
    size, n_ids, clock = 4 * K.BLOCK_POSITIONS, 120, 3 * K.BLOCK_POSITIONS + 17
    time_owner = np.full(size, -1, dtype=np.int32)
    time_owner[:clock] = rng.integers(0, n_ids, size=clock)
    id_last = np.full(n_ids, -1, dtype=np.int64)
    for p in range(clock):  # the latest reference of each id is its live mark
        id_last[time_owner[p]] = p
    id_last[rng.choice(np.flatnonzero(id_last >= 0), size=10, replace=False)] = -1  # dropped
    live_positions = np.sort(id_last[id_last >= 0])
    time_bits = np.zeros(size // 64, dtype=np.uint64)
    for p in live_positions:
        time_bits[p >> 6] |= np.uint64(1) << np.uint64(p & 63)
    block_tree = np.zeros(size // K.BLOCK_POSITIONS + 1, dtype=np.int32)
    state = np.zeros(K.ST_LEN, dtype=np.int64)
    state[K.ST_CLOCK], state[K.ST_LIVE] = clock, live_positions.size
    expected_owner = [int(time_owner[p]) for p in live_positions]
    expected_last = id_last.copy()
    for j, owner in enumerate(expected_owner):
        expected_last[owner] = j
    if in_place:
        new_owner, new_bits, new_tree = time_owner, time_bits, block_tree
    else:
        new_owner = np.full(2 * size, -1, dtype=np.int32)
        new_bits = np.zeros(2 * size // 64, dtype=np.uint64)
        new_tree = np.zeros(2 * size // K.BLOCK_POSITIONS + 1, dtype=np.int32)
    new_clock = K.compact_time(time_owner, id_last, time_bits, block_tree, state, new_owner, new_bits, new_tree)
    live = live_positions.size
    assert new_clock == live == state[K.ST_CLOCK]
    assert new_owner[:live].tolist() == expected_owner
    assert np.all(new_owner[live:] == -1)
    assert id_last.tolist() == expected_last.tolist()
    marks = np.unpackbits(new_bits.view(np.uint8), bitorder="little")
    assert np.flatnonzero(marks).tolist() == list(range(live))
    per_block = marks.reshape(-1, K.BLOCK_POSITIONS).sum(axis=1)
    assert new_tree.tolist() == _fenwick_of(per_block).tolist()
