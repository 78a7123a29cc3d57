"""The SLRU and W-TinyLFU replays keep their node table int32 where ids and sizes fit, int64
otherwise; both widths give the plain-Python references' hits (the int32 one is also checked
against libCacheSim in test_order_slru.py / test_order_wtinylfu.py)."""

from __future__ import annotations

import numpy as np
import pytest

import kvmm.policies._replay_slru as slru_kernels
import kvmm.policies._replay_wtinylfu as wtinylfu_kernels
from kvmm.policies import replay
from tests.naive.slru import replay_slru_naive
from tests.naive.wtinylfu import replay_wtinylfu_naive
from tests.order_parity import zipf_sized_stream


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


@pytest.mark.parametrize("order, naive", [("slru", replay_slru_naive), ("wtinylfu", replay_wtinylfu_naive)])
@pytest.mark.parametrize("capacity", [200, 1000])  # W-TinyLFU: a window of 2 and of 10
def test_a_forced_int64_table_gives_the_references_hits(monkeypatch, order, naive, capacity):
    keys = np.random.default_rng(capacity).zipf(1.1, 5000) % 2000
    narrow = replay(order, keys, capacity).tolist()
    module = slru_kernels if order == "slru" else wtinylfu_kernels
    real = module.new_tables
    monkeypatch.setattr(module, "new_tables",
                        lambda n, maxima, n_lists, sizes: real(n, maxima, n_lists, np.array([2**40])))
    wide = replay(order, keys, capacity).tolist()
    assert wide == narrow == naive(keys.tolist(), capacity)
    assert 0 < sum(wide) < keys.size


def test_wtinylfu_counters_past_uint16_stay_uint32_and_keep_libcachesims_hits(monkeypatch):
    # a key on every other reference: its counters' bound (2 adds per reference) passes 2^16 - 1,
    # so they are kept in uint32, the rest in uint16; its main hits also halve the sketch
    from tests.order_parity import libcachesim_hits

    rng = np.random.default_rng(3)
    keys = rng.zipf(1.1, 80_000) % 3000 + 10
    keys[::2] = 7
    width, hashes = wtinylfu_kernels.sketch_shape(990)
    slots = wtinylfu_kernels.key_slots(keys.view(np.uint64), *_dense(keys), width, hashes)
    n_hot = wtinylfu_kernels.hot_counters_first(slots, width, np.bincount(_dense(keys)[0]))
    assert 0 < n_hot < width
    ours = replay("wtinylfu", keys, 1000).tolist()
    assert ours == libcachesim_hits("WTinyLFU", keys.tolist(), 1000, [1] * keys.size)
    monkeypatch.setattr(wtinylfu_kernels, "hot_counters_first", lambda slots, width, refs_of: width)  # all uint32
    assert replay("wtinylfu", keys, 1000).tolist() == ours
    assert sum(ours) > 32 * 990  # more main hits than one halving period


def _dense(keys):
    from kvmm.policies._replay import dense_ids

    return dense_ids(keys.astype(np.int64))
