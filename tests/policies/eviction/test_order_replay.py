"""kvmm.policies.replay: the numba LRU/FIFO replays equal, request by request, a plain-Python
reference, kvmm's policies through ManagedTier and libCacheSim's own LRU/FIFO; bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvmm.errors import BadInputError, DTypeError, ShapeError
from kvmm.policies import FIFOPolicy, LRUPolicy, replay
from kvmm.policies.eviction._replay import _dense_ids_direct, _dense_ids_hashed, dense_ids
from kvmm.testing.models.replay import replay_naive
from tests.policies.eviction.order_parity import (
    hypothesis_stream,
    libcachesim_hits,
)

ORDERS = {"lru": (LRUPolicy, "LRU"), "fifo": (FIFOPolicy, "FIFO")}


@settings(max_examples=150, deadline=None)
@given(order=st.sampled_from(sorted(ORDERS)), capacity=st.integers(0, 12),
       refs=st.lists(st.tuples(st.integers(0, 15), st.integers(0, 5)), max_size=120))
def test_replay_equals_the_naive_reference_and_libcachesim(order, capacity, refs):
    keys, sizes = hypothesis_stream(refs)  # one size per key: a key keeps the size it was inserted with
    ours = replay(order, np.array(keys, np.int64), capacity, np.array(sizes, np.int64)).tolist()
    assert ours == replay_naive(order, keys, capacity, sizes)
    if capacity > 0:
        assert ours == libcachesim_hits(ORDERS[order][1], keys, capacity, sizes)


def test_pinned_small_example():
    keys = [0, 1, 0, 2, 1, 0]  # a b a c b a, capacity 2
    # LRU: c evicts b (a was reused), b evicts a, so the last a misses too
    assert replay("lru", keys, 2).tolist() == [False, False, True, False, False, False]
    # FIFO: c evicts a (the oldest insert), b hits, a evicts b
    assert replay("fifo", keys, 2).tolist() == [False, False, True, False, True, False]


def test_uint64_keys_are_reinterpreted_and_empty_input():
    big = np.array([2**63 + 5, 7, 2**63 + 5], np.uint64)
    assert replay("lru", big, 4).tolist() == [False, False, True]
    assert replay("fifo", np.zeros(0, np.int64), 4).tolist() == []


@pytest.mark.parametrize("call, error, words", [
    (lambda: replay("mru", [1], 2), BadInputError, "unknown replay order 'mru'"),
    (lambda: replay("lru", [[1]], 2), ShapeError, "keys must be 1-D"),
    (lambda: replay("lru", [1.5], 2), DTypeError, "keys must be integers"),
    (lambda: replay("lru", [1, 2], 2, sizes=[1]), ShapeError, "one size per key"),
    (lambda: replay("lru", [1], 2, sizes=[-1]), BadInputError, "sizes must be >= 0"),
    (lambda: replay("lru", [1], -2), BadInputError, "capacity"),
    (lambda: replay("lru", [1], 2, window=3), BadInputError, "takes no option 'window'"),
])
def test_bad_input_names_the_problem(call, error, words):
    with pytest.raises(error, match=words):
        call()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-2**63, 2**63 - 1) | st.integers(0, 40), max_size=300))
def test_dense_ids_number_keys_in_order_of_first_reference(keys):
    dense, m = dense_ids(np.array(keys, np.int64))
    first_seen = {}
    for k in keys:
        first_seen.setdefault(k, len(first_seen))
    assert dense.tolist() == [first_seen[k] for k in keys] and m == len(first_seen)


@pytest.mark.parametrize("path", ["dispatch", "hashed", "direct"])
def test_dense_ids_across_chunks_and_table_growth(path):
    keys = np.random.default_rng(1).integers(0, 300_000, 700_000)  # > 2 chunks, many rehashes
    if path == "hashed":
        dense, m = _dense_ids_hashed(keys)
    elif path == "direct":
        dense, m = _dense_ids_direct(keys, int(keys.max()))
    else:
        dense, m = dense_ids(keys)
    uniq, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    rank = np.empty(uniq.size, np.int64)
    rank[np.argsort(first)] = np.arange(uniq.size)
    assert m == uniq.size and np.array_equal(dense, rank[inverse])


def test_dense_ids_takes_the_direct_table_only_for_compact_non_negative_keys(monkeypatch):
    import kvmm.policies.eviction._replay as R

    calls = []
    monkeypatch.setattr(R, "_dense_ids_direct", lambda keys, top: calls.append(("direct", top)) or (keys, 0))
    monkeypatch.setattr(R, "_dense_ids_hashed", lambda keys: calls.append(("hashed",)) or (keys, 0))
    R.dense_ids(np.array([5, 0, 70_000], np.int64))  # max < 65536 + 4 * 3
    R.dense_ids(np.array([5, -1], np.int64))  # a negative key
    R.dense_ids(np.array([2**40], np.int64))  # sparse
    R.dense_ids(np.array([], np.int64))
    assert calls == [("hashed",), ("hashed",), ("hashed",), ("hashed",)]
    R.dense_ids(np.array([5, 0, 65_000], np.int64))
    R.dense_ids(np.arange(100_000, dtype=np.int64)[::-1].copy())
    assert calls[4:] == [("direct", 65_000), ("direct", 99_999)]
