"""BlockAllocator microbenchmarks, each against the plain-Python reference in the same run.

Groups: allocate+free of 1, 16 and 64 blocks; lookup of 64 keys; one request's full cycle
(lookup 64 keys, touch the hits, allocate the rest, cache them, free all last-first) with the
separate calls and with the fused ``admit``; a batched scheduler step of 256 requests
(``admit_many`` + ``free_requests``).  vLLM's ``BlockPool`` is timed too when ``vllm`` is
importable (it usually is not; it is never installed for this).
"""

from __future__ import annotations

import numpy as np
import pytest

from bench.conftest import info, size, warm
from kvmm.allocators import BlockAllocator
from kvmm.testing.models.block_allocator import NaiveBlockAllocator

POOL = 8192
SECRET = bytes(range(16))


def pair():
    return BlockAllocator(POOL, 16, secret=SECRET), NaiveBlockAllocator(POOL, 16, secret=SECRET)


# ------------------------------------------------------------------ allocate + free
@pytest.mark.parametrize("n", [1, 16, 64])
@pytest.mark.parametrize("impl", ["kvmm", "naive"])
def test_allocate_free(benchmark, n, impl):
    benchmark.group = f"allocator: allocate+free {n} blocks"
    real, naive = pair()
    if impl == "kvmm":
        warm(lambda: real.free(real.allocate(n)[::-1]))
        info(benchmark, "kvmm", "BlockAllocator", n, "blocks")
        benchmark(lambda: real.free(real.allocate(n)[::-1]))
        real.check()
    else:
        info(benchmark, "baseline", "plain-Python reference", n, "blocks")
        benchmark(lambda: naive.free(naive.allocate(n)[::-1]))


# ------------------------------------------------------------------ lookup
def cached_keys(alloc, n):
    keys = np.zeros((n, 2), dtype=np.uint64)
    keys[:, 0] = np.arange(1, n + 1)
    keys[:, 1] = 77
    ids = alloc.allocate(n)
    alloc.cache_blocks(ids, keys)
    alloc.free(list(ids)[::-1])
    return keys


@pytest.mark.parametrize("impl", ["kvmm", "naive"])
def test_lookup_64(benchmark, impl):
    benchmark.group = "allocator: lookup 64 keys"
    real, naive = pair()
    if impl == "kvmm":
        keys = cached_keys(real, 64)
        warm(real.lookup, keys)
        info(benchmark, "kvmm", "BlockAllocator.lookup", 64, "keys")
        hits = benchmark(real.lookup, keys)
    else:
        keys = [tuple(map(int, k)) for k in cached_keys(naive, 64)]
        info(benchmark, "baseline", "plain-Python reference", 64, "keys")
        hits = benchmark(naive.lookup, keys)
    assert len(hits) == 64


@pytest.mark.parametrize("impl", ["kvmm", "naive"])
def test_lookup_many_256x64(benchmark, impl):
    benchmark.group = "allocator: lookup_many (256 requests x 64 keys)"
    real, naive = pair()
    reqs = 256
    if impl == "kvmm":
        keys = np.tile(cached_keys(real, 64), (reqs, 1))
        offsets = np.arange(reqs + 1, dtype=np.int64) * 64
        warm(real.lookup_many, offsets, keys)
        info(benchmark, "kvmm", "BlockAllocator.lookup_many", reqs * 64, "keys")
        hit_offsets, _ = benchmark(real.lookup_many, offsets, keys)
        assert hit_offsets[-1] == reqs * 64
    else:
        keys = [tuple(map(int, k)) for k in cached_keys(naive, 64)]
        info(benchmark, "baseline", "plain-Python reference", reqs * 64, "keys")
        hits = benchmark(naive.lookup_many, [keys] * reqs)
        assert sum(map(len, hits)) == reqs * 64


@pytest.mark.parametrize("impl", ["kvmm", "naive"])
def test_allocate_many_free_256x16(benchmark, impl):
    benchmark.group = "allocator: allocate_many + free (256 requests x 16 blocks)"
    real, naive = pair()
    counts = np.full(256, 16, dtype=np.int64)
    if impl == "kvmm":
        def one():
            offsets, ids = real.allocate_many(counts)
            real.free_requests(offsets, ids)

        warm(one)
        info(benchmark, "kvmm", "allocate_many + free_requests", int(counts.sum()), "blocks")
        benchmark(one)
        real.check()
    else:
        clist = counts.tolist()

        def one():
            naive.free([b for ids in naive.allocate_many(clist) for b in ids[::-1]])

        info(benchmark, "baseline", "plain-Python reference", int(counts.sum()), "blocks")
        benchmark(one)


# ------------------------------------------------------------------ full request cycle
def request_stream(num, shared=32, new=32):
    """``num`` requests of 64 keys: a common 32-key prefix and 32 keys never seen before."""
    prefix = np.zeros((shared, 2), dtype=np.uint64)
    prefix[:, 0] = np.arange(shared)
    prefix[:, 1] = 1
    out = []
    for r in range(num):
        fresh = np.zeros((new, 2), dtype=np.uint64)
        fresh[:, 0] = np.arange(new) + r * new
        fresh[:, 1] = 2
        out.append(np.concatenate([prefix, fresh]))
    return out


def cycle_separate(alloc, keys):
    hits = alloc.lookup(keys)
    alloc.touch(hits)
    new = alloc.allocate(len(keys) - len(hits))
    alloc.cache_blocks(new, keys[len(hits):])
    alloc.free(np.concatenate([hits, new])[::-1])


def cycle_fused(alloc, keys):
    ids, _ = alloc.admit(keys)
    alloc.free(ids[::-1])


def cycle_naive(alloc, keys):
    hits = alloc.lookup(keys)
    alloc.touch(hits)
    new = alloc.allocate(len(keys) - len(hits))
    alloc.cache_blocks(new, keys[len(hits):])
    alloc.free((hits + new)[::-1])


@pytest.mark.parametrize("impl", ["kvmm-admit", "kvmm-separate", "naive"])
def test_request_cycle(benchmark, impl):
    benchmark.group = "allocator: request cycle (lookup 64, touch, allocate, cache, free)"
    stream = request_stream(size(2000, 50))
    real, naive = pair()
    state = {"i": 0}
    if impl == "naive":
        stream = [[tuple(map(int, k)) for k in keys] for keys in stream]
        alloc, fn = naive, cycle_naive
        info(benchmark, "baseline", "plain-Python reference", 1, "cycles")
    else:
        alloc, fn = real, (cycle_fused if impl == "kvmm-admit" else cycle_separate)
        label = "admit + free (fused)" if impl == "kvmm-admit" else "lookup/touch/allocate/cache/free"
        info(benchmark, "kvmm", label, 1, "cycles")
    warm(fn, alloc, stream[-1])  # compiles the kernels; caches the shared prefix for both

    def one():
        fn(alloc, stream[state["i"] % len(stream)])
        state["i"] += 1

    benchmark(one)
    if impl != "naive":
        real.check()
    assert alloc.stats["hits"] > 0


# ------------------------------------------------------------------ batched scheduler step
STEP = 256


def step_workload(num_steps, per_request=16, shared=8):
    """Per step: 256 requests of 16 keys, 8 shared with every request (hits) and 8 fresh."""
    steps = []
    for s in range(num_steps):
        keys = np.zeros((STEP * per_request, 2), dtype=np.uint64)
        for r in range(STEP):
            row = keys[r * per_request:(r + 1) * per_request]
            row[:shared, 0] = np.arange(shared)
            row[shared:, 0] = np.arange(per_request - shared) + (s * STEP + r) * per_request
            row[shared:, 1] = 3
        steps.append(keys)
    offsets = np.arange(STEP + 1, dtype=np.int64) * per_request
    return offsets, steps


@pytest.mark.parametrize("impl", ["kvmm", "naive"])
def test_scheduler_step(benchmark, impl):
    benchmark.group = "allocator: batched scheduler step (256 requests x 16 keys)"
    offsets, steps = step_workload(size(20, 2))
    real, naive = pair()
    state = {"i": 0}
    if impl == "kvmm":
        def one():
            keys = steps[state["i"] % len(steps)]
            state["i"] += 1
            n, block_offsets, block_ids, _ = real.admit_many(offsets, keys)
            real.free_requests(block_offsets, block_ids)
            assert n == STEP

        warm(one)
        info(benchmark, "kvmm", "admit_many + free_requests", STEP, "requests")
        benchmark(one)
        real.check()
    else:
        reqs = [[[tuple(map(int, k)) for k in keys[offsets[r]:offsets[r + 1]]] for r in range(STEP)] for keys in steps]

        def one():
            admitted = naive.admit_many(reqs[state["i"] % len(reqs)])
            state["i"] += 1
            naive.free([b for ids, _ in admitted for b in ids[::-1]])

        info(benchmark, "baseline", "plain-Python reference", STEP, "requests")
        benchmark(one)


# ------------------------------------------------------------------ peer: vLLM BlockPool
def test_vllm_block_pool_allocate_free_64(benchmark):
    benchmark.group = "allocator: allocate+free 64 blocks"
    try:
        from vllm.v1.core.block_pool import BlockPool
    except Exception as exc:  # noqa: BLE001 - any import failure means "not available"
        pytest.skip(f"vllm not importable ({type(exc).__name__}); peer baseline not timed")
    pool = None
    for kwargs in (dict(num_gpu_blocks=POOL, enable_caching=True),
                   dict(num_gpu_blocks=POOL, enable_caching=True, hash_block_size=16),
                   dict(num_gpu_blocks=POOL, enable_caching=True, num_single_type_managers=1)):
        try:
            pool = BlockPool(**kwargs)
            break
        except TypeError:
            continue
    if pool is None:
        pytest.skip("could not construct this vllm version's BlockPool")
    get = getattr(pool, "get_new_blocks", None)
    if get is None:
        pytest.skip("this vllm version has no BlockPool.get_new_blocks")
    info(benchmark, "baseline", "vLLM BlockPool", 64, "blocks")
    benchmark(lambda: pool.free_blocks(reversed(get(64))))
