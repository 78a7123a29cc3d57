"""The 2Q, LIRS and S3-FIFO replays keep their node tables in int32 when ids and stored sizes fit, else in
int64: the int64 path (byte capacities past 2**31) gives the reference's hits too."""

from __future__ import annotations

import numpy as np
import pytest

from kvmm.policies import replay
from kvmm.policies.eviction._kernels.twoq import node_dtype, quotas
from kvmm.testing.models.lirs import replay_lirs_naive
from kvmm.testing.models.s3fifo import replay_s3fifo_naive
from kvmm.testing.models.twoq import replay_twoq_naive

CAPACITY = 10 * 2**31  # A1in's quota (a quarter) and the capacity itself exceed int32


def byte_stream(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    keys = rng.zipf(1.2, 4000) % 600
    size_of = rng.integers(2**28, 2**32, 600)  # many sizes past int32 itself
    return keys, size_of[keys]


def test_node_dtype_is_int32_only_where_ids_and_sizes_fit():
    assert node_dtype(10, 2**31 - 2) is np.int32
    assert node_dtype(10, 2**31 - 1) is np.int64
    assert node_dtype(2**31, 5) is np.int64
    assert node_dtype(600, quotas(CAPACITY, 0.25, 0.5)[0]) is np.int64  # the test below runs int64


@pytest.mark.parametrize("seed", [0, 1])
def test_twoq_int64_tables_equal_the_reference(seed):
    keys, sizes = byte_stream(seed)
    ours = replay("2q", keys, CAPACITY, sizes).tolist()
    assert ours == replay_twoq_naive(keys.tolist(), CAPACITY, sizes.tolist())
    assert 0 < sum(ours) < keys.size


@pytest.mark.parametrize("seed", [0, 1])
def test_lirs_int64_tables_equal_the_reference(seed):
    keys, sizes = byte_stream(seed)
    sizes = sizes // 64  # LIRS stores nothing above its HIR limit (1 % of the capacity)
    ours = replay("lirs", keys, CAPACITY, sizes).tolist()
    assert ours == replay_lirs_naive(keys.tolist(), CAPACITY, sizes.tolist())
    assert 0 < sum(ours) < keys.size


@pytest.mark.parametrize("seed", [0, 1])
def test_s3fifo_int64_tables_equal_the_reference(seed):
    keys, sizes = byte_stream(seed)
    capacity = 10 * CAPACITY  # its small queue (a tenth) stores sizes past int32
    ours = replay("s3fifo", keys, capacity, sizes).tolist()
    assert ours == replay_s3fifo_naive(keys.tolist(), capacity, sizes.tolist())
    assert 0 < sum(ours) < keys.size
