"""Replay a trace's block sequences through SGLang 0.5.23's real ``RadixCache`` (sglang venv only).

One token per block (``page_size=1``): a request's key is its block ids.  Each request, in trace
order: ``match_prefix`` (its cached prefix: the hits), ``insert`` of the whole sequence, then
``evict`` down to the capacity (in tokens), as a tree that holds at most that many tokens.  The
values are the block ids themselves, so the allocator's ``free_segment`` (what ``evict`` calls)
records the evicted blocks in order.

The tree's clock (``time.monotonic`` inside ``radix_cache``) is a counter during a replay: SGLang
breaks equal priorities by heap position (the iteration order of a set of nodes), so strictly
increasing stamps keep both sides of a comparison free of ties.
"""

from __future__ import annotations

import contextlib
import itertools
import time
import types
from array import array

import kvmm.testing.engines.sglang_env  # noqa: F401 - first: the torchvision stub

# isort: split
import torch
from sglang.srt.mem_cache import radix_cache
from sglang.srt.mem_cache.radix_cache import (
    CacheInitParams,
    EvictParams,
    InsertParams,
    MatchPrefixParams,
    RadixCache,
    RadixKey,
)


def request_blocks(trace, index: int) -> list[int]:
    return list(dict.fromkeys(int(b) for b in trace.blocks_of(index)))


def new_tree(eviction_policy: str) -> RadixCache:
    evicted: list[int] = []
    allocator = types.SimpleNamespace(device="cpu", free_segment=lambda idx, start_pos=0: evicted.extend(idx.tolist()))
    tree = RadixCache(CacheInitParams(disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=allocator,
                                      page_size=1, eviction_policy=eviction_policy))
    tree.evicted = evicted
    return tree


def run_request(tree: RadixCache, blocks: list[int], capacity: int) -> tuple[int, list[int]]:
    """(hit blocks, evicted blocks in order) of one request."""
    before = len(tree.evicted)
    key = RadixKey(array("q", blocks))
    hits = tree.match_prefix(MatchPrefixParams(key=key)).device_prefix_len
    tree.insert(InsertParams(key=key, value=torch.tensor(blocks, dtype=torch.int64)))
    excess = tree.evictable_size() + tree.protected_size() - capacity
    if excess > 0:
        tree.evict(EvictParams(num_tokens=excess))
    return hits, tree.evicted[before:]


@contextlib.contextmanager
def counter_clock():
    """``time.monotonic`` inside ``radix_cache`` returns 1.0, 2.0, ... while the block runs."""
    ticks = itertools.count(1)
    clock = types.SimpleNamespace(monotonic=lambda: float(next(ticks)), perf_counter=time.perf_counter)
    saved, radix_cache.time = radix_cache.time, clock
    try:
        yield
    finally:
        radix_cache.time = saved


def replay(tree: RadixCache, trace, n_requests: int, capacity: int, *, check=None) -> list[tuple]:
    with counter_clock():
        out = []
        for i in range(n_requests):
            out.append(run_request(tree, request_blocks(trace, i), capacity))
            if check is not None:
                check(tree)
        return out
