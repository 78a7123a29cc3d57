"""kvmm.policies.replay vs libCacheSim's C simulation of the same order at one capacity.

3e6 references (smoke: 3e4) of a Zipf(0.95) stream over 10^6 keys; capacity 10 % of the keys.
Both sides answer the same question (the miss ratio of one order at one capacity); kvmm's time
includes renumbering the keys; libCacheSim's includes reading its binary trace file.
Each order's group holds kvmm and the libCacheSim baseline; bench/conftest.py prints the ratio.
"""

from __future__ import annotations

import numpy as np
import pytest

from bench.conftest import info, libcachesim_trace, size, warm
from kvmm.policies import replay

ORDERS = {"lru": "LRU", "fifo": "FIFO",
          "slru": "SLRU", "wtinylfu": "WTinyLFU"}
N = size(3_000_000, 30_000)
UNIVERSE = size(1_000_000, 10_000)
CAPACITY = UNIVERSE // 10


def zipf_keys(n: int, universe: int, alpha: float = 0.95, seed: int = 0) -> np.ndarray:
    ranks = np.arange(1, universe + 1, dtype=np.float64)
    p = ranks ** -alpha
    return np.random.default_rng(seed).choice(universe, n, p=p / p.sum()).astype(np.int64)


@pytest.fixture(scope="module")
def keys():
    return zipf_keys(N, UNIVERSE)


@pytest.mark.parametrize("order", sorted(ORDERS))
def test_kvmm_replay(benchmark, keys, order):
    benchmark.group = f"order replay {order}"
    warm(replay, order, keys[:1000], 100)
    hits = benchmark.pedantic(replay, args=(order, keys, CAPACITY), rounds=3, iterations=1)
    info(benchmark, "kvmm", f"kvmm.policies.replay({order!r})", keys.size, "references")
    assert 0 < hits.sum() < keys.size


@pytest.mark.parametrize("order", sorted(ORDERS))
def test_libcachesim_baseline(benchmark, keys, order, tmp_path):
    lcs = pytest.importorskip("libcachesim")
    benchmark.group = f"order replay {order}"
    path = libcachesim_trace(keys, tmp_path / "trace.oracleGeneral.bin")

    def run():
        reader = lcs.TraceReader(path, lcs.TraceType.ORACLE_GENERAL_TRACE)
        return getattr(lcs, ORDERS[order])(cache_size=CAPACITY).process_trace(reader)[0]

    miss = benchmark.pedantic(run, rounds=3, iterations=1)
    info(benchmark, "baseline", f"libCacheSim {ORDERS[order]}", keys.size, "references")
    assert miss == pytest.approx(1 - replay(order, keys, CAPACITY).mean(), abs=1e-12)  # the same answer
