"""kvmm.policies.replay vs libCacheSim's C simulation of the same order at one capacity.

3e6 references (smoke: 3e4) of a Zipf(0.95) stream over 10^6 keys, capacity 10 % of the keys;
and the bundled Mooncake conversation trace's block stream (288,500 references, 182,790 blocks),
repeated to the same length (smoke: its first 3e4 references), capacity 10 % of its blocks.
Belady's libCacheSim file also carries each reference's next use (kvmm computes it inside the timed
replay).
Both sides answer the same question (the miss ratio of one order at one capacity); kvmm's time
includes renumbering the keys; libCacheSim's includes reading its binary trace file.
Each order's group holds kvmm and the libCacheSim baseline; bench/conftest.py prints the ratio.
"""

from __future__ import annotations

import numpy as np
import pytest

from bench.conftest import info, libcachesim_trace, size, warm
from kvmm.policies import replay

ORDERS = {"lru": "LRU", "fifo": "FIFO", "arc": "ARC", "lfu": "LFU", "clock": "Clock", "belady": "Belady",
          "s3fifo": "S3FIFO", "sieve": "Sieve", "2q": "TwoQ", "lirs": "LIRS", "slru": "SLRU", "wtinylfu": "WTinyLFU"}
N = size(3_000_000, 30_000)
UNIVERSE = size(1_000_000, 10_000)
CAPACITY = UNIVERSE // 10


def zipf_keys(n: int, universe: int, alpha: float = 0.95, seed: int = 0) -> np.ndarray:
    ranks = np.arange(1, universe + 1, dtype=np.float64)
    p = ranks ** -alpha
    return np.random.default_rng(seed).choice(universe, n, p=p / p.sum()).astype(np.int64)


@pytest.fixture(scope="module", params=["zipf", "conversation"])
def stream(request):
    """``(name, keys, capacity)`` of one benchmark stream."""
    if request.param == "zipf":
        return "zipf", zipf_keys(N, UNIVERSE), CAPACITY
    from kvmm.traces import load_mooncake

    trace = load_mooncake("conversation")
    blocks = np.concatenate([trace.blocks_of(i) for i in range(trace.num_requests)]).astype(np.int64)
    keys = np.resize(blocks, N)  # the trace repeated to N references (its first N at smoke size)
    return "conversation", keys, max(np.unique(keys).size // 10, 10)


def test_every_replay_order_is_timed_beside_libcachesim():
    from kvmm.policies import REPLAY_ORDERS

    assert set(ORDERS) == set(REPLAY_ORDERS)  # a new order gets its libCacheSim baseline here


@pytest.mark.parametrize("order", sorted(ORDERS))
def test_kvmm_replay(benchmark, stream, order):
    name, keys, capacity = stream
    benchmark.group = f"order replay {order} {name}"
    warm(replay, order, keys[:1000], 100)
    hits = benchmark.pedantic(replay, args=(order, keys, capacity), rounds=3, iterations=1)
    info(benchmark, "kvmm", f"kvmm.policies.replay({order!r})", keys.size, "references")
    assert 0 < hits.sum() < keys.size


@pytest.mark.parametrize("order", sorted(ORDERS))
def test_libcachesim_baseline(benchmark, stream, order, tmp_path):
    lcs = pytest.importorskip("libcachesim")
    name, keys, capacity = stream
    benchmark.group = f"order replay {order} {name}"
    path = libcachesim_trace(keys, tmp_path / "trace.oracleGeneral.bin")
    if order == "belady":  # libCacheSim's Belady reads each reference's next use from the file
        with_next_uses(keys, path)

    def run():
        reader = lcs.TraceReader(path, lcs.TraceType.ORACLE_GENERAL_TRACE)
        return getattr(lcs, ORDERS[order])(cache_size=capacity).process_trace(reader)[0]

    miss = benchmark.pedantic(run, rounds=3, iterations=1)
    info(benchmark, "baseline", f"libCacheSim {ORDERS[order]}", keys.size, "references")
    assert miss == pytest.approx(1 - replay(order, keys, capacity).mean(), abs=1e-12)  # the same answer


def with_next_uses(keys: np.ndarray, path: str) -> None:
    """Fill the trace file's ``next_access_vtime`` (1-based index of the next reference, -1:
    none), which libCacheSim's reader turns into each Request's next use."""
    from kvmm.traces.oracle import ORACLE_GENERAL_DTYPE, next_access_vtime

    records = np.fromfile(path, dtype=ORACLE_GENERAL_DTYPE)
    records["next_access_vtime"] = next_access_vtime(keys)
    records.tofile(path)
