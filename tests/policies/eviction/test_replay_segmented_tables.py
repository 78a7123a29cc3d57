"""The SLRU and W-TinyLFU replays keep their node table int32 where ids and sizes fit, int64
otherwise; both widths give the plain-Python references' hits (the int32 one is also checked
against libCacheSim in test_order_slru.py / test_order_wtinylfu.py)."""

from __future__ import annotations

import numpy as np
import pytest

import kvmm.policies.eviction._kernels.slru as slru_kernels
import kvmm.policies.eviction._kernels.wtinylfu as wtinylfu_kernels
from kvmm.policies import replay
from kvmm.testing.models.slru import replay_slru_naive
from kvmm.testing.models.wtinylfu import replay_wtinylfu_naive
from tests.policies.eviction.order_parity import zipf_sized_stream


def test_sizes_past_int32_take_the_int64_table_and_keep_slrus_hits():
    capacity = 2500  # a multiple of 4: the segments' maxima scale with it exactly
    keys, sizes = zipf_sized_stream(capacity)
    scale = 2**32
    node, _ = slru_kernels.new_tables(10, [scale], 1, sizes * scale)
    assert node.dtype == np.int64 and slru_kernels.new_tables(10, [1], 1, sizes)[0].dtype == np.int32
    wide = replay("slru", keys, capacity * scale, sizes * scale).tolist()
    assert wide == replay_slru_naive(keys.tolist(), capacity * scale, (sizes * scale).tolist())
    assert wide == replay("slru", keys, capacity, sizes).tolist()
    assert 0 < sum(wide) < keys.size


@pytest.mark.parametrize("sizes, row_bytes", [(np.array([1]), 64), (np.array([2**40]), 128)])
def test_extra_columns_make_rows_of_whole_aligned_cache_lines(sizes, row_bytes):
    # W-TinyLFU's rows: 4 link fields + 10 counter slots, padded to 16 elements on a 64-byte boundary
    node, segs = slru_kernels.new_tables(7, [3], 2, sizes, extra_columns=10)
    assert node.flags.c_contiguous and node.ctypes.data % 64 == 0 and node.strides[0] == row_bytes
    assert node.shape == (7, 16) and (node[:, :3] == -1).all() and (node[:, 3:] == 0).all()
    assert segs[:2].tolist() == [[-1, -1], [-1, -1]]


@pytest.mark.parametrize("order, naive", [("slru", replay_slru_naive), ("wtinylfu", replay_wtinylfu_naive)])
@pytest.mark.parametrize("capacity", [200, 1000])  # W-TinyLFU: a window of 2 and of 10
def test_a_forced_int64_table_gives_the_references_hits(monkeypatch, order, naive, capacity):
    keys = np.random.default_rng(capacity).zipf(1.1, 5000) % 2000
    narrow = replay(order, keys, capacity).tolist()
    module = slru_kernels if order == "slru" else wtinylfu_kernels
    real = module.new_tables
    monkeypatch.setattr(module, "new_tables",
                        lambda n, maxima, n_lists, sizes, **extra: real(n, maxima, n_lists, np.array([2**40]), **extra))
    wide = replay(order, keys, capacity).tolist()
    assert wide == narrow == naive(keys.tolist(), capacity)
    assert 0 < sum(wide) < keys.size


def test_wtinylfu_counters_spill_past_uint16_halve_and_wrap_as_uint32():
    # a uint16 counter at 0xFFFF continues in the uint32 overflow array: value 0xFFFF + overflow
    spill, top = 0xFFFF, 0xFFFFFFFF
    counts = np.array([spill, spill, 5, 3], np.uint16)
    overflow = np.array([1, top - spill, 0, 0], np.uint32)
    # two keys' rows: 4 link fields (unused here), then their 2 counter slots
    node = np.array([[-1, -1, -1, 0, 1, 2], [-1, -1, -1, 0, 0, 3]], np.int32)
    assert int(wtinylfu_kernels.sketch_estimate(counts, overflow, node, 2, 0)) == 5
    # key 0's minimum (5) is not saturated, so both counters count: counter 1 wraps to 0 as uint32
    wtinylfu_kernels.sketch_add(counts, overflow, node, 2, 0, True)
    assert counts.tolist()[1:3] == [0, 6] and int(overflow[1]) == 0
    wtinylfu_kernels.sketch_add(counts, overflow, node, 2, 1, False)  # 0xFFFF + 1 -> 0xFFFF + 2, 3 -> 4
    assert (int(counts[0]) + int(overflow[0]), int(counts[3])) == (spill + 2, 4)
    wtinylfu_kernels.halve(counts, overflow)  # 65537 -> 32768 leaves the overflow array
    assert counts.tolist() == [32768, 0, 3, 2] and overflow.tolist() == [0, 0, 0, 0]


def test_wtinylfu_fused_estimate_and_add_equal_the_two_passes():
    # the window victim's estimate-then-add in one pass, and main's victim's estimate as it was
    # before that add, against the separate kernels; slots shared between the keys, repeated
    # within a key, and counters in the overflow array
    rng = np.random.default_rng(7)
    for _ in range(200):
        width, hashes = 12, 10
        node = np.zeros((2, 16), np.int32)
        node[:, 4:14] = rng.integers(0, width, (2, hashes))
        counts = rng.choice(np.array([0, 1, 5, 0xFFFE, 0xFFFF], np.uint16), width)
        overflow = np.where(counts == 0xFFFF, rng.integers(0, 1000, width), 0).astype(np.uint32)
        c2, o2 = counts.copy(), overflow.copy()
        m_before = wtinylfu_kernels.sketch_estimate(c2, o2, node, hashes, 1)
        w_before = wtinylfu_kernels.sketch_estimate(c2, o2, node, hashes, 0)
        wtinylfu_kernels.sketch_add(c2, o2, node, hashes, 0, False)
        assert wtinylfu_kernels.sketch_estimate_add(counts, overflow, node, hashes, 0) == w_before
        assert counts.tolist() == c2.tolist() and overflow.tolist() == o2.tolist()
        assert wtinylfu_kernels.sketch_estimate_before_add(counts, overflow, node, hashes, 1, 0) == m_before
