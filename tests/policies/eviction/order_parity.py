"""Shared drivers of the eviction-order parity tests (``test_order_parity.py`` and
``test_order_<name>.py`` beside it): libCacheSim driven
one ``Request`` at a time, a kvmm policy through ManagedTier over a SimulatedTier (with each
order's rule for storing a miss), the Mooncake block streams and byte-sized Zipf streams."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import strategies as st

from kvmm.tiers import ManagedTier, SimulatedTier
from kvmm.traces import load_mooncake

#: the bundled Mooncake traces every parity test replays
TRACES = ("conversation", "synthetic")


def libcachesim_hits(cls_name, keys, capacity, sizes, *, hashpower=16, next_uses=None, **params):
    """libCacheSim's ``cls_name`` cache (``params`` its options), ``get`` one Request per reference;
    ``next_uses``: each reference's ``next_access_vtime`` (Belady reads the future from it)."""
    lcs = pytest.importorskip("libcachesim")
    # a small hash table (libCacheSim's default 2^24 buckets allocates 128 MiB per cache); it grows
    cache = getattr(lcs, cls_name)(cache_size=capacity, hashpower=hashpower, **params)
    hits = []
    for i, (key, size) in enumerate(zip(keys, sizes)):
        request = lcs.Request(obj_size=int(size), obj_id=int(key), clock_time=i)
        if next_uses is not None:
            request.next_access_vtime = next_uses[i]
        hits.append(bool(cache.get(request)))
    return hits


def store_if_fits(tier, key, size):
    """libCacheSim's plain ``get`` miss: insert unless larger than the whole cache."""
    if size <= tier.capacity_bytes:
        tier.put_size(key, size)


def store_if_admitted(tier, key, size):
    """A miss of an order whose ``admits(size)`` is libCacheSim's ``can_insert`` (SLRU, W-TinyLFU)."""
    if size <= tier.capacity_bytes and tier.policy.admits(size):
        tier.put_size(key, size)


def managed_tier_hits(policy, keys, capacity, sizes, miss: Callable = store_if_fits):
    """Drive ``ManagedTier(SimulatedTier(capacity), policy)`` as libCacheSim's ``get``: a hit is a
    ``get``; a miss is ``miss(tier, key, size)`` (the order's rule for storing it).  The tier
    never holds more than its capacity, and its ``check()`` passes at the end."""
    tier = ManagedTier(SimulatedTier(capacity), policy)
    hits = []
    for key, size in zip(keys, sizes):
        if tier.contains(key):
            tier.get(key)
            hits.append(True)
        else:
            hits.append(False)
            miss(tier, key, size)
        assert tier.used_bytes <= capacity
    tier.check()
    return hits


def mooncake_request_blocks(limit=600):
    """trace name -> the int64 block ids of each of its first ``limit`` requests."""
    out = {}
    for name in TRACES:
        trace = load_mooncake(name)
        out[name] = [trace.blocks_of(i).astype(np.int64) for i in range(min(limit, trace.num_requests))]
    return out


def mooncake_block_streams(limit=600):
    """trace name -> one int64 stream of the block ids of its first ``limit`` requests."""
    return {name: np.concatenate(blocks) for name, blocks in mooncake_request_blocks(limit).items()}


def zipf_keys_and_sizes(capacity, n=6000, universe=900, max_size=300, seed=None):
    """``(keys, size_of)``: Zipf(1.2) references over ``universe`` keys and one size per key in
    ``[1, max_size)``, keys 0-4 larger than the cache (never cached); seeded by the capacity."""
    rng = np.random.default_rng(capacity if seed is None else seed)
    keys = rng.zipf(1.2, n) % universe
    size_of = rng.integers(1, max_size, universe)
    size_of[:5] = capacity + 1
    return keys, size_of


def zipf_sized_stream(capacity, n=6000, universe=900, max_size=300, seed=None):
    """Byte-sized Zipf references ``(keys, sizes)`` (:func:`zipf_keys_and_sizes`)."""
    keys, size_of = zipf_keys_and_sizes(capacity, n, universe, max_size, seed)
    return keys, size_of[keys]


def hypothesis_stream(refs):
    """``(keys, sizes)`` from Hypothesis ``(key, size)`` pairs, one size per key (its first
    reference's): a key keeps the size it was inserted with."""
    keys = [k for k, _ in refs]
    first_size = dict(refs[::-1])
    return keys, [first_size[k] for k in keys]


def managed_tier_hits_admitted(policy, keys, capacity, sizes):
    """:func:`managed_tier_hits` for an order with ``admits(size)`` (SLRU, W-TinyLFU)."""
    return managed_tier_hits(policy, keys, capacity, sizes, miss=store_if_admitted)


def evict_a_planned_prefix(policy, tracked, data, n, **incoming):
    """A state-machine step: ``victims(n, protected, **incoming)`` (``protected`` up to 3 drawn
    ``tracked`` keys) answers the same twice, lists ``min(n, unprotected)`` distinct unprotected
    keys; a drawn prefix of it is removed (``on_remove``) and returned."""
    protected = set(data.draw(st.lists(st.sampled_from(sorted(tracked)), max_size=3)))
    plan = policy.victims(n, protected, **incoming)
    assert plan == policy.victims(n, protected, **incoming)  # asking twice: same answer
    assert len(plan) == len(set(plan)) == min(n, len(set(tracked) - protected))
    assert not set(plan) & protected
    removed = plan[:data.draw(st.integers(0, len(plan)))]
    for key in removed:
        policy.on_remove(key)
    return removed


def simulate_rows(order, capsys):
    """The JSON rows of ``kvmm simulate`` (60 requests, load 0.8) over one 8 GiB DRAM tier that
    evicts with ``order`` by name."""
    import json

    from kvmm.cli import main

    assert main(["simulate", "--requests", "60", "--load", "0.8", "--tier", f"dram:8GiB:{order}:write-all",
                 "--staging", "on-demand", "--json", "--no-progress"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]


def feed_with_deletes(cache, policy, keys, rng, capacity, next_uses=None):
    """Feed ``keys`` to libCacheSim's ``cache`` (one unit-size ``get`` each; ``next_uses`` their
    ``next_access_vtime``) and to ``policy`` as a cache of ``capacity`` entries (a miss evicts the
    first victim when full); after each insert at a reference ``i % 7 == 3``, one resident key
    drawn from ``rng`` is deleted from both (libCacheSim's ``remove``, the policy's ``on_remove``)."""
    lcs = pytest.importorskip("libcachesim")
    for i, key in enumerate(keys):
        request = lcs.Request(obj_size=1, obj_id=key, clock_time=i)
        if next_uses is not None:
            request.next_access_vtime = next_uses[i]
        cache.get(request)
        if key in policy:
            policy.on_access(key)
            continue
        if len(policy) == capacity:
            policy.on_remove(policy.victims(1)[0])
        policy.on_insert(key)
        if i % 7 == 3:
            gone = sorted(policy.keys())[int(rng.integers(0, len(policy)))]
            assert cache.remove(gone)
            policy.on_remove(gone)


def batch_offer_hits(policy, requests, capacity, *, check_each=False):
    """The simulator's path: one ``access_or_put_size_many`` of unit-size blocks per request of
    ``requests`` through ``ManagedTier(SimulatedTier(capacity), policy)``; the hits in order.
    ``check()`` runs at the end (``check_each``: after every request)."""
    tier = ManagedTier(SimulatedTier(capacity), policy)
    hits = []
    for blocks in requests:
        hits.extend(tier.access_or_put_size_many(blocks, 1, np.ones(blocks.size, bool)).tolist())
        if check_each:
            tier.check()
    tier.check()
    return hits


def store_or_advance(tier, key, size):
    """Belady's miss: stored if it fits the cache; a reference the tier never sees still moves the
    policy's cursor (``advance``)."""
    if size <= tier.capacity_bytes:
        tier.put_size(key, size)
    else:
        tier.policy.advance()


def store_as_libcachesim(tier, key, size):
    """S3-FIFO's miss: stored when the policy's ``admission`` says libCacheSim would (and makes
    room first, then drops it, when libCacheSim makes room for an entry it then refuses)."""
    makes_room, stores = tier.policy.admission(key, size)
    if makes_room:
        tier.put_size(key, size)
        if not stores:
            tier.delete(key)


def store_within_a1in(tier, key, size):
    """2Q's miss: libCacheSim's TwoQ stores nothing larger than A1in's quota."""
    if size <= tier.policy.quotas()["A1in"]:
        tier.put_size(key, size)
