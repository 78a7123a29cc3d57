"""BlockAllocator against vLLM 0.33's ``BlockPool`` on the same operation stream, in the same run.

The peer is vLLM's real ``BlockPool`` when ``vllm`` is importable (see docs/performance.md for
the venv that provides it), else the plain-Python reference; the label printed in the ratio
table says which.  Groups:

* replay of Mooncake conversation requests, one fused ``admit`` + ``free`` per request;
* the same replay in scheduler steps of 16 requests (``admit_many`` + ``free_requests``);
* allocate + free of 64 blocks;
* allocate for 256 requests x 16 blocks, then free them (``allocate_many`` + ``free_requests``).

``test_same_hits_as_peer`` replays the stream through both and asserts identical hits per
request (and identical block ids, up to vLLM's null-block offset).
"""

from __future__ import annotations

import numpy as np
import pytest

from bench.baselines.peer_block_pool import VllmDriver, baseline
from bench.conftest import info, size, warm
from kvmm.allocators import BlockAllocator
from kvmm.traces import load_mooncake

POOL = 8192
BS = 16
STEP = 16


def stream(num):
    """The first ``num`` Mooncake conversation requests: kvmm keys per request and per step."""
    trace = load_mooncake("conversation")
    num = min(num, trace.num_requests)
    per_request = [trace.blocks_of(r) for r in range(num)]
    keys = []
    for ids in per_request:
        k = np.zeros((ids.shape[0], 2), dtype=np.uint64)
        k[:, 0] = ids.astype(np.uint64)
        keys.append(k)
    steps = []
    for s in range(0, num - num % STEP, STEP):
        chunk = keys[s:s + STEP]
        offsets = np.zeros(STEP + 1, dtype=np.int64)
        np.cumsum([k.shape[0] for k in chunk], out=offsets[1:])
        steps.append((offsets, np.concatenate(chunk)))
    return per_request, keys, steps


PER_REQUEST, KEYS, STEPS = stream(size(3000, 64))


def kvmm_requests(alloc):
    hits = 0
    for k in KEYS:
        ids, h = alloc.admit(k)
        alloc.free(ids[::-1])
        hits += h
    return hits


def kvmm_steps(alloc):
    per_step = []  # summed once at the end: a numpy reduction per step would cost ~1 us of harness
    for offsets, keys in STEPS:
        n, block_offsets, block_ids, h = alloc.admit_many(offsets, keys)
        assert n == STEP
        alloc.free_requests(block_offsets, block_ids)
        per_step.append(h)
    return int(np.concatenate(per_step).sum()) if per_step else 0


def peer_requests(driver, hashes):
    hits = 0
    for k in hashes:
        blocks, h = driver.admit(k)
        driver.free(blocks)
        hits += h
    return hits


def peer_steps(driver, hashes):
    hits = 0
    for s in range(0, len(STEPS) * STEP, STEP):
        admitted = [driver.admit(k) for k in hashes[s:s + STEP]]
        for blocks, h in admitted:
            driver.free(blocks)
            hits += h
    return hits


def fresh_kvmm():
    return BlockAllocator(POOL, BS, secret=bytes(range(16)))


def fresh_peer():
    driver = baseline(POOL, BS)
    return driver, [driver.keys(ids) for ids in PER_REQUEST]


def test_same_hits_as_peer():
    """Both replays give the same hits per request and the same blocks (vLLM ids = kvmm ids + 1)."""
    alloc = fresh_kvmm()
    driver, hashes = fresh_peer()
    offset = 1 if isinstance(driver, VllmDriver) else 0
    for k, hk in zip(KEYS, hashes):
        ids, h = alloc.admit(k)
        blocks, ph = driver.admit(hk)
        assert h == ph
        got = [b.block_id - offset for b in blocks] if offset else list(blocks)
        assert ids.tolist() == got
        alloc.free(ids[::-1])
        driver.free(blocks)
    print(f"\nallocator peer: {driver.label}; {len(KEYS)} requests, {alloc.stats['hits']} hits")


def _run(benchmark, group, impl, fn_kvmm, fn_peer, items, unit):
    benchmark.group = group
    if impl == "kvmm":
        warm(fn_kvmm, fresh_kvmm())
        info(benchmark, "kvmm", "BlockAllocator", items, unit)
        hits = benchmark.pedantic(fn_kvmm, setup=lambda: ((fresh_kvmm(),), {}), rounds=size(7, 1), iterations=1)
        expected = fn_peer(*fresh_peer())
    else:
        driver, _ = fresh_peer()
        info(benchmark, "baseline", driver.label, items, unit)
        hits = benchmark.pedantic(fn_peer, setup=lambda: (fresh_peer(), {}), rounds=size(3, 1), iterations=1)
        expected = fn_kvmm(fresh_kvmm())
    assert hits == expected > 0  # identical hits on the same stream, in the same run
    benchmark.extra_info["hits"] = hits


@pytest.mark.parametrize("impl", ["kvmm", "peer"])
def test_admit_free_per_request(benchmark, impl):
    _run(benchmark, "allocator vs peer: admit + free per request (Mooncake conversation)", impl,
         kvmm_requests, peer_requests, len(KEYS), "requests")


@pytest.mark.parametrize("impl", ["kvmm", "peer"])
def test_admit_many_steps_of_16(benchmark, impl):
    _run(benchmark, "allocator vs peer: steps of 16 requests (admit_many + free_requests)", impl,
         kvmm_steps, peer_steps, len(STEPS) * STEP, "requests")


@pytest.mark.parametrize("impl", ["kvmm", "peer"])
def test_allocate_free_64(benchmark, impl):
    benchmark.group = "allocator vs peer: allocate + free 64 blocks"
    if impl == "kvmm":
        alloc = fresh_kvmm()
        warm(lambda: alloc.free(alloc.allocate(64)[::-1]))
        info(benchmark, "kvmm", "BlockAllocator", 64, "blocks")
        benchmark(lambda: alloc.free(alloc.allocate(64)[::-1]))
        alloc.check()
    else:
        driver, _ = fresh_peer()
        info(benchmark, "baseline", driver.label, 64, "blocks")
        if isinstance(driver, VllmDriver):
            pool = driver.pool
            benchmark(lambda: pool.free_blocks(reversed(pool.get_new_blocks(64))))
        else:
            pool = driver.pool
            benchmark(lambda: pool.free(pool.allocate(64)[::-1]))


@pytest.mark.parametrize("impl", ["kvmm", "peer"])
def test_allocate_many_free_256x16(benchmark, impl):
    benchmark.group = "allocator vs peer: allocate for 256 requests x 16 blocks, then free"
    counts = np.full(256, 16, dtype=np.int64)
    if impl == "kvmm":
        alloc = fresh_kvmm()

        def one():
            offsets, ids = alloc.allocate_many(counts)
            alloc.free_requests(offsets, ids)

        warm(one)
        info(benchmark, "kvmm", "allocate_many + free_requests", 256 * 16, "blocks")
        benchmark(one)
        alloc.check()
    else:
        driver, _ = fresh_peer()
        info(benchmark, "baseline", driver.label, 256 * 16, "blocks")
        pool = driver.pool
        if isinstance(driver, VllmDriver):
            def one():
                reqs = [pool.get_new_blocks(16) for _ in range(256)]
                for blocks in reqs:
                    pool.free_blocks(reversed(blocks))
        else:
            def one():
                for ids in pool.allocate_many([16] * 256):
                    pool.free(ids[::-1])
        benchmark(one)
