"""Reading a vLLM KV-event stream whose events form one long prefix chain (issue 19 item 3).

Group ``vllm-events-chain``, unit: events (one ``BlockStored`` batch per JSONL line, each one
block whose parent is the previous event's block: request i lists i + 1 blocks):

* kvmm: ``load_vllm_kv_events`` on 10^6 events (shared prefix chains, linear);
* baseline "JSON decode alone": ``iter_vllm_kv_events`` over the same file, the decoding every
  reader pays, so the ratio is what prefix reconstruction adds;
* baseline "quadratic reader (v0)": the reader before the fix (``bench/baselines/vllm_events_v0.py``),
  listing every request's whole prefix, on 3,000 events only (it is O(n^2): 20,000 took 143 s).
"""

from __future__ import annotations

import pytest

from bench.baselines.vllm_events_v0 import requests_v0
from bench.conftest import info, size
from kvmm.traces import iter_vllm_kv_events, load_vllm_kv_events

EVENTS = size(1_000_000, 2_000)
V0_EVENTS = size(3_000, 200)


def chain_file(path, n):
    with open(path, "w") as fh:
        fh.write('{"ts": 0.0, "events": [{"type": "BlockStored", "block_hashes": [1], "parent_block_hash": null, '
                 '"block_size": 16, "medium": "GPU"}], "data_parallel_rank": 0}\n')
        fh.writelines(f'{{"ts": {i / 1000}, "events": [{{"type": "BlockStored", "block_hashes": [{i + 1}], '
                      f'"parent_block_hash": {i}, "block_size": 16, "medium": "GPU"}}], "data_parallel_rank": 0}}\n'
                      for i in range(1, n))
    return path


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    return chain_file(tmp_path_factory.mktemp("vllm") / "chain.jsonl", EVENTS)


@pytest.mark.benchmark(group="vllm-events-chain")
def test_load_shared_chains(benchmark, chain):
    info(benchmark, "kvmm", f"load_vllm_kv_events ({EVENTS:,} events)", EVENTS, "events")
    trace = benchmark.pedantic(load_vllm_kv_events, (chain,), rounds=size(3, 1), iterations=1)
    assert trace.num_requests == EVENTS and int(trace.block_offsets[-1]) == EVENTS * (EVENTS + 1) // 2
    assert trace.blocks_of(EVENTS - 1)[-1] == EVENTS and not trace.materialised


@pytest.mark.benchmark(group="vllm-events-chain")
def test_json_decode_alone(benchmark, chain):
    info(benchmark, "baseline", f"JSON decode alone ({EVENTS:,} events)", EVENTS, "events")
    batches = benchmark.pedantic(lambda: sum(1 for _ in iter_vllm_kv_events(chain)), rounds=size(3, 1), iterations=1)
    assert batches == EVENTS


@pytest.mark.benchmark(group="vllm-events-chain")
def test_quadratic_reader_v0(benchmark, tmp_path):
    path = chain_file(tmp_path / "small.jsonl", V0_EVENTS)
    info(benchmark, "baseline", f"quadratic reader v0 ({V0_EVENTS:,} events)", V0_EVENTS, "events")
    lists = benchmark.pedantic(lambda: [r[2] for r in requests_v0(path)], rounds=1, iterations=1)
    assert len(lists) == V0_EVENTS and lists[-1] == list(range(1, V0_EVENTS + 1))
    new = load_vllm_kv_events(path)
    assert [new.blocks_of(r).tolist() for r in (0, V0_EVENTS // 2, V0_EVENTS - 1)] == [lists[0], lists[V0_EVENTS // 2],
                                                                                        lists[-1]]
