"""Every exact eviction order, one table: ``kvmm.policies.replay(order)`` equals, request by
request, libCacheSim's own cache (driven one Request at a time), the order's policy through
ManagedTier (with the order's rule for storing a miss) and, where the table names one, the
plain-Python reference of kvmm.testing.models; on the Mooncake block streams (entry counts) and
on byte-sized Zipf streams whose too-large keys are never cached.

What only one order has (Hypothesis streams with its options, pinned examples, bad options, state
machines, LIRS's parts where libCacheSim frees an object it reads again) stays in its own
``test_order_<name>.py``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from kvmm.policies import (
    EVICTION_POLICIES,
    ARCPolicy,
    BeladyPolicy,
    ClockPolicy,
    FIFOPolicy,
    LFUPolicy,
    LRUPolicy,
    S3FIFOPolicy,
    SIEVEPolicy,
    SLRUPolicy,
    TwoQPolicy,
    WTinyLFUPolicy,
    replay,
)
from kvmm.policies.eviction.s3fifo import queue_sizes
from kvmm.testing.models.belady import next_use_naive, replay_belady_naive
from kvmm.testing.models.clock import replay_clock_naive
from kvmm.testing.models.replay import replay_arc_naive, replay_lfu_naive
from kvmm.testing.models.s3fifo import replay_s3fifo_naive
from kvmm.testing.models.sieve import replay_sieve_naive
from kvmm.testing.models.slru import replay_slru_naive
from kvmm.testing.models.twoq import replay_twoq_naive
from kvmm.testing.models.wtinylfu import replay_wtinylfu_naive
from tests.policies.eviction import order_parity

INF = float("inf")


def zipf(capacity, **kw):
    """The default byte-sized stream: Zipf keys, keys 0-4 larger than the cache."""
    return order_parity.zipf_keys_and_sizes(capacity, **kw)


def s3fifo_stream(capacity):
    keys, size_of = zipf(capacity)
    small = queue_sizes(capacity, 0.1, 0.9)[0]
    size_of[5:8] = small  # exactly the small queue: libCacheSim makes room, then refuses it
    size_of[8:11] = small + 1  # larger than the small queue: refused before evicting
    return keys, size_of


def twoq_stream(capacity):
    keys, size_of = zipf(capacity)
    size_of[5:10] = capacity // 4 + 1  # larger than A1in's quota: libCacheSim's TwoQ never stores them
    return keys, size_of


@dataclass(frozen=True)
class Order:
    """One exact order: how each side is built and which streams it is checked on."""

    policy: Callable[..., Any]  # options -> the policy (``keys`` too where ``from_trace``)
    lcs: str  # libCacheSim's class
    hashpower: int = 12  # libCacheSim's hash table (it grows): small is fast to build
    miss: Callable = order_parity.store_if_fits  # the order's rule for storing a miss in ManagedTier
    naive: Callable | None = None  # (keys, capacity, sizes or None, **options) -> hits
    naive_blocks_up_to: float = INF  # the largest capacity the reference runs at on the block streams
    blocks: tuple = ((64, {}), (512, {}), (4096, {}))  # (capacity, options) on the Mooncake block streams
    sizes: tuple = ((450, {}), (2500, {}), (10_000, {}))  # (capacity, options) on byte-sized streams
    stream: Callable = zipf  # capacity -> (keys, size of each key)
    never: Callable = lambda k, size, capacity: size > capacity  # noqa: E731 - a reference never cached
    naive_on_sizes: bool = True
    from_trace: bool = False  # Belady: the policy and libCacheSim read the future

    def libcachesim(self, keys, capacity, sizes, **options):
        next_uses = next_use_naive(list(keys)) if self.from_trace else None
        return order_parity.libcachesim_hits(self.lcs, keys, capacity, sizes, hashpower=self.hashpower,
                                             next_uses=next_uses, **options)

    def managed(self, keys, capacity, sizes, **options):
        policy = self.policy(np.asarray(keys, np.int64)) if self.from_trace else self.policy(**options)
        hits = order_parity.managed_tier_hits(policy, keys, capacity, sizes, miss=self.miss)
        if self.from_trace:
            assert policy.position == len(keys)
        return hits


ORDERS: dict[str, Order] = {
    "lru": Order(LRUPolicy, "LRU", hashpower=16),  # no plain-Python reference: libCacheSim and ManagedTier only
    "fifo": Order(FIFOPolicy, "FIFO", hashpower=16),
    "arc": Order(ARCPolicy, "ARC", naive=replay_arc_naive, naive_blocks_up_to=0),
    "lfu": Order(LFUPolicy, "LFU", naive=replay_lfu_naive, naive_blocks_up_to=0),
    "belady": Order(BeladyPolicy.from_trace, "Belady", miss=order_parity.store_or_advance, from_trace=True,
                    naive=replay_belady_naive,
                    stream=lambda c: zipf(c, n=5000)),
    "clock": Order(ClockPolicy, "Clock", naive=replay_clock_naive,
                   blocks=((64, {}), (512, {}), (4096, {}), (512, {"n_bit_counter": 2}),
                           (1024, {"init_freq": 1, "n_bit_counter": 3})),
                   sizes=tuple((c, o) for o in ({}, {"n_bit_counter": 2, "init_freq": 1}) for c in (450, 2500, 10_000)),
                   stream=lambda c: zipf(c, n=5000)),
    "s3fifo": Order(S3FIFOPolicy, "S3FIFO", hashpower=16, miss=order_parity.store_as_libcachesim,
                    naive=replay_s3fifo_naive, stream=s3fifo_stream,
                    never=lambda k, size, capacity: k < 11),  # keys 5-10: refused by the small queue
    "sieve": Order(SIEVEPolicy, "Sieve", hashpower=16, naive=replay_sieve_naive,
                   naive_blocks_up_to=512,  # the reference scans its list per reference
                   never=lambda k, size, capacity: k < 5),
    "2q": Order(TwoQPolicy, "TwoQ", miss=order_parity.store_within_a1in,
                naive=replay_twoq_naive, stream=twoq_stream,
                never=lambda k, size, capacity: k < 10),
    "slru": Order(SLRUPolicy, "SLRU", hashpower=16, miss=order_parity.store_if_admitted,
                  naive=replay_slru_naive, naive_on_sizes=False,
                  blocks=((130, {}), (510, {}), (4096, {})),  # 130 and 510: segments sum below the capacity
                  never=lambda k, size, capacity: size > capacity // 4),  # larger than a segment
    "wtinylfu": Order(WTinyLFUPolicy, "WTinyLFU", hashpower=16, miss=order_parity.store_if_admitted,
                      naive=replay_wtinylfu_naive, naive_on_sizes=False,
                      blocks=((130, {}), (510, {}), (4096, {})),
                      # sizes up to 1 % of the capacity: libCacheSim caches nothing larger than the window
                      sizes=((4500, {}), (25_000, {}), (100_000, {})),
                      stream=lambda c: zipf(c, max_size=c // 100),
                      never=lambda k, size, capacity: size > int(capacity * 0.01)),
}

BLOCK_CASES = [pytest.param(name, capacity, options, id=f"{name}-{capacity}" + "".join(f"-{k}={v}" for k, v in options.items()))
               for name, order in ORDERS.items() for capacity, options in order.blocks]
SIZE_CASES = [pytest.param(name, capacity, options, id=f"{name}-{capacity}" + "".join(f"-{k}={v}" for k, v in options.items()))
              for name, order in ORDERS.items() for capacity, options in order.sizes]


@pytest.fixture(scope="module")
def block_streams():
    return order_parity.mooncake_block_streams()


@pytest.mark.parametrize("trace", order_parity.TRACES)
@pytest.mark.parametrize("name, capacity, options", BLOCK_CASES)
def test_replay_equals_libcachesim_managed_tier_and_naive_on_mooncake_blocks(block_streams, name, capacity, options,
                                                                             trace):
    pytest.importorskip("libcachesim")
    order = ORDERS[name]
    keys = block_streams[trace]
    ones = [1] * keys.size
    ours = replay(name, keys, capacity, **options).tolist()
    assert ours == order.libcachesim(keys.tolist(), capacity, ones, **options)
    assert ours == order.managed(keys.tolist(), capacity, ones, **options)
    if order.naive is not None and capacity <= order.naive_blocks_up_to:
        assert ours == order.naive(keys.tolist(), capacity, None, **options)
    assert 0 < sum(ours) < keys.size  # both hits and misses happen
    if name == "belady":  # the offline optimum: at least as many hits as LRU at the same capacity
        assert sum(ours) >= int(replay("lru", keys, capacity).sum())


@pytest.mark.parametrize("name, capacity, options", SIZE_CASES)
def test_byte_sized_replay_equals_libcachesim_managed_tier_and_naive(name, capacity, options):
    pytest.importorskip("libcachesim")
    order = ORDERS[name]
    keys, size_of = order.stream(capacity)
    sizes = size_of[keys]
    ours = replay(name, keys, capacity, sizes, **options).tolist()
    assert ours == order.libcachesim(keys.tolist(), capacity, sizes.tolist(), **options)
    assert ours == order.managed(keys.tolist(), capacity, sizes.tolist(), **options)
    if order.naive is not None and order.naive_on_sizes:
        assert ours == order.naive(keys.tolist(), capacity, sizes.tolist(), **options)
    assert not any(h for h, k in zip(ours, keys) if order.never(k, size_of[k], capacity))  # never cached
    assert 0 < sum(ours) < keys.size


def test_every_registered_order_but_lirs_is_in_the_table():
    # LIRS's parity (libCacheSim up to its first read of a freed object) is in test_order_lirs.py
    assert set(EVICTION_POLICIES) - {"lirs"} == set(ORDERS)
