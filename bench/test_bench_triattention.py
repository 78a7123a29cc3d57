"""TriAttention scoring throughput: numba folded kernel vs the plain numpy reference.

Workload (issue 6): 32 K cached keys x 32 heads x 64 frequencies (head_dim 128), 17 future
offsets (1, 2, ..., 65536), averaged.  The kernel folds the offsets into one complex weight per
frequency; the reference evaluates every offset (its cost grows 17x), so it is timed on a slice
of the keys and compared per key.  ``extra_info["gflops"]`` is the kernel's rate on the count of
:func:`kvmm.compress.triattention.score_flops` (6 flops per key, head and frequency), to show
the distance to the machine's peak.
"""

import numpy as np
import pytest

from bench.conftest import size, warm
from kvmm.compress import RopeConfig, TriAttentionScorer, calibrate
from kvmm.compress.triattention import score_flops
from tests.naive import triattention as naive

HEADS, HEAD_DIM = 32, 128
N_KEYS = size(32768, 512)
N_REF = size(1024, 64)


@pytest.fixture(scope="module")
def workload():
    rng = np.random.default_rng(0)
    rope = RopeConfig(HEAD_DIM, 500000.0)
    q = rng.normal(size=(64, HEADS, HEAD_DIM)).astype(np.float32) + 1.0
    cal = calibrate(q, rope=rope)
    keys = rng.normal(size=(N_KEYS, HEADS, HEAD_DIM)).astype(np.float32)
    positions = np.arange(N_KEYS)
    return cal, keys, positions


def _record(benchmark, role, label, items, flops=None):
    benchmark.extra_info.update(role=role, label=label, items=items, unit="keys")
    stats = getattr(benchmark, "stats", None)
    if flops is not None and stats is not None and getattr(stats, "stats", None) is not None and stats.stats.mean:
        rate = flops / stats.stats.mean
        benchmark.extra_info["gflops"] = round(rate / 1e9, 3)
        print(f"\n{label}: {items / stats.stats.mean:,.0f} keys/s, {rate / 1e9:.2f} GFLOP/s "
              f"({flops / 1e9:.2f} GFLOP per call)")


@pytest.mark.benchmark(group="triattention-score")
def test_kernel_mean_17_offsets(benchmark, workload):
    cal, keys, positions = workload
    scorer = TriAttentionScorer(cal, normalize=True)
    assert scorer.offsets.size == 17
    warm(scorer.head_scores, keys[:4], positions[:4], now=N_KEYS)
    out = benchmark.pedantic(scorer.head_scores, args=(keys, positions), kwargs=dict(now=N_KEYS), rounds=3,
                             iterations=1)
    assert out.shape == (HEADS, N_KEYS)
    _record(benchmark, "kvmm", "numba folded kernel (mean, 17 offsets)", N_KEYS,
            score_flops(N_KEYS, HEADS, HEAD_DIM // 2))


@pytest.mark.benchmark(group="triattention-score")
def test_numpy_reference_17_offsets(benchmark, workload):
    cal, keys, positions = workload
    offsets = 2.0 ** np.arange(17)
    omega = cal.rope.frequencies()
    k = keys[:N_REF].astype(np.float64)
    out = benchmark.pedantic(naive.head_scores, args=(cal.q_center[0], cal.q_abs_mean[0], k, positions[:N_REF],
                                                      N_KEYS, omega, offsets), rounds=1, iterations=1)
    assert out.shape == (HEADS, N_REF)
    _record(benchmark, "baseline", f"numpy reference (every offset, {N_REF} keys)", N_REF)


@pytest.mark.benchmark(group="triattention-score-max")
def test_kernel_max_17_offsets(benchmark, workload):
    cal, keys, positions = workload
    n = size(4096, 128)
    scorer = TriAttentionScorer(cal, aggregation="max")
    warm(scorer.head_scores, keys[:4], positions[:4], now=N_KEYS)
    out = benchmark.pedantic(scorer.head_scores, args=(keys[:n], positions[:n]), kwargs=dict(now=N_KEYS),
                             rounds=1, iterations=1)
    assert out.shape == (HEADS, n)
    _record(benchmark, "kvmm", "numba kernel (max over 17 offsets: cost grows with offsets)", n)


@pytest.mark.benchmark(group="triattention-score-max")
def test_numpy_reference_max(benchmark, workload):
    cal, keys, positions = workload
    k = keys[:N_REF].astype(np.float64)
    out = benchmark.pedantic(naive.head_scores, args=(cal.q_center[0], cal.q_abs_mean[0], k, positions[:N_REF],
                                                      N_KEYS, cal.rope.frequencies(), 2.0 ** np.arange(17)),
                             kwargs=dict(aggregation="max"), rounds=1, iterations=1)
    assert out.shape == (HEADS, N_REF)
    _record(benchmark, "baseline", f"numpy reference (max, {N_REF} keys)", N_REF)
