"""kvmm admission policies in vLLM 0.33.0's CPU offloading, loaded as an out-of-tree spec
(vLLM venv only)."""

from __future__ import annotations

import numpy as np
import pytest
from vllm.v1.kv_offload.config import (
    OffloadingCacheConfig,
    OffloadingConfig,
    OffloadingGroupConfig,
    OffloadingModelConfig,
    OffloadingParallelConfig,
)
from vllm.v1.kv_offload.factory import OffloadingSpecFactory

import kvmm.integrations.vllm as kv
from kvmm.errors import BadInputError
from kvmm.policies import StoreThreshold, WriteAll
from kvmm.testing.engines.vllm_replay import offload_key, replay_vllm, run_request
from kvmm.traces import load_mooncake

N_REQUESTS = 1000
CHUNK_BYTES = 4096  # one block of a tiny model; cpu_bytes_to_use / CHUNK_BYTES chunks


def make_spec(chunks: int, **extra):
    config = OffloadingConfig(
        groups=(OffloadingGroupConfig(tokens_per_block=16, layer_names=("layer.0",), group_id=0),),
        worker_kv_bytes_per_block=CHUNK_BYTES, enable_kv_cache_events=False,
        extra_config={"cpu_bytes_to_use": chunks * CHUNK_BYTES, **extra}, engine_id="test",
        model=OffloadingModelConfig(name="tiny", dtype="float16"),
        cache=OffloadingCacheConfig(tokens_per_hash=16, blocks_per_chunk=1),
        parallel=OffloadingParallelConfig(rank=0, world_size=1, tp_size=1, pp_size=1, pcp_size=1, dcp_size=1,
                                          data_parallel_index=0, data_parallel_size=1,
                                          data_parallel_rank_local=None, is_parallelism_agnostic=True))
    return OffloadingSpecFactory.create_spec(config)


KVMM_SPEC = {"spec_name": "KvmmOffloadingSpec", "spec_module_path": kv.MODULE_PATH}


@pytest.fixture(scope="module")
def trace():
    return load_mooncake("conversation")


def test_spec_is_loaded_out_of_tree_with_a_kvmm_eviction_policy():
    spec = make_spec(64, **KVMM_SPEC, eviction_policy="KvmmARC", cache_policy_module_path=kv.MODULE_PATH,
                     kvmm_admission="StoreThreshold", kvmm_admission_args={"k": 3})
    manager = spec.get_manager()
    assert type(spec) is kv.KvmmOffloadingSpec and spec.num_chunks == 64
    assert type(manager) is kv.KvmmAdmissionManager and type(manager._policy) is kv.KvmmARC
    assert manager.admission == StoreThreshold(k=3)


def test_store_threshold_matches_vllm_store_threshold(trace):
    # kvmm's StoreThreshold(k=2) applied in prepare_store and vLLM's own store_threshold=2 both
    # write a block on its second offer: same stores, hits and evictions.
    ours = make_spec(400, **KVMM_SPEC, kvmm_admission="StoreThreshold", kvmm_admission_args={"k": 2}).get_manager()
    theirs = make_spec(400, store_threshold=2).get_manager()
    a = replay_vllm(ours, trace, N_REQUESTS)
    b = replay_vllm(theirs, trace, N_REQUESTS)
    assert a == b
    assert ours.admission_skipped > 1000 and sum(len(r[2]) for r in a) > 1000 and sum(r[0] for r in a) > 100
    # Without admission control every block is written.
    write_all = replay_vllm(make_spec(400, **KVMM_SPEC).get_manager(), trace, N_REQUESTS)
    assert sum(len(r[1]) for r in write_all) > sum(len(r[1]) for r in a)


def test_admission_decides_per_block_and_keeps_cached_blocks_reused():
    manager = make_spec(8, **KVMM_SPEC, kvmm_admission="StoreThreshold", kvmm_admission_args={"k": 2}).get_manager()
    k = [offload_key(i) for i in range(4)]
    assert run_request(manager, "first", k[:2]) == (0, [], [])       # first offer: nothing written
    assert run_request(manager, "second", k[:3]) == (0, k[:2], [])   # k0, k1 on their second offer
    assert manager.admission_skipped == 3
    assert run_request(manager, "third", k) == (2, [k[2]], [])        # hits k0, k1; k2 admitted now


class EveryOther:
    """An admission policy answering with indices (the Protocol allows an index array)."""

    def admit(self, request):
        return np.flatnonzero(~request.cached)[::2]


def test_admission_by_index_array_and_module_path():
    manager = make_spec(8, **KVMM_SPEC, kvmm_admission="tests.integrations.test_vllm_admission:EveryOther"
                        ).get_manager()
    k = [offload_key(i) for i in range(4)]
    assert run_request(manager, "r", k) == (0, [k[0], k[2]], [])


def test_bad_admission_config_is_a_clear_error():
    with pytest.raises(BadInputError, match="cannot load 'NoSuchPolicy'"):
        make_spec(8, **KVMM_SPEC, kvmm_admission="NoSuchPolicy").get_manager()
    with pytest.raises(BadInputError, match="has no admit"):
        make_spec(8, **KVMM_SPEC, kvmm_admission="kvmm.policies:LRUPolicy").get_manager()
    with pytest.raises(BadInputError, match=r"kvmm_admission_args \{'j': 2\}.*unexpected keyword"):
        make_spec(8, **KVMM_SPEC, kvmm_admission="StoreThreshold", kvmm_admission_args={"j": 2}).get_manager()
    with pytest.raises(BadInputError, match="AdmissionPolicy"):
        kv.KvmmAdmissionManager(8, admission=object())


def test_bad_admission_answer_leaves_the_cache_unchanged():
    class Wrong:
        def admit(self, request):
            return np.ones(1, dtype=np.float32)
    manager = kv.KvmmAdmissionManager(4, admission=Wrong())
    k = [offload_key(i) for i in range(2)]
    with pytest.raises(BadInputError, match="boolean mask"):
        run_request(manager, "r", k)
    assert manager._policy.get(k[0]) is None and manager._get_num_free_chunks() == 4


def test_offload_key_words_are_stable_uint64():
    words = kv.offload_key_words([offload_key(1), offload_key(2), offload_key(1)])
    assert words.dtype == np.uint64 and words[0] == words[2] != words[1]
    with pytest.raises(BadInputError, match="must be bytes"):
        kv.offload_key_words([1])
    assert isinstance(WriteAll().admit(kv.AdmissionRequest(keys=words, cached=np.zeros(3, bool))), np.ndarray)
