"""LIRS: the numba replay, the plain-Python reference (tests/naive/lirs.py) and libCacheSim's
LIRS give the same hits request by request (Mooncake blocks, byte-sized streams, Hypothesis);
bad options.  (No LIRSPolicy for ManagedTier yet: see the module docstring of
kvmm.policies._replay_lirs and the report of issue 23.)"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvmm.errors import BadInputError, DTypeError
from kvmm.policies import replay
from kvmm.policies._replay_lirs import lirs_limits
from kvmm.traces import load_mooncake
from tests.naive.lirs import NaiveLIRS, replay_lirs_naive, replay_lirs_naive_checked


def libcachesim_hits(keys, capacity, sizes):
    lcs = pytest.importorskip("libcachesim")
    cache = lcs.LIRS(cache_size=capacity, hashpower=12)  # a small table: fast to build
    return [bool(cache.get(lcs.Request(obj_size=int(s), obj_id=int(k), clock_time=i)))
            for i, (k, s) in enumerate(zip(keys, sizes))]


@pytest.fixture(scope="module")
def block_streams():
    out = {}
    for name in ("conversation", "synthetic"):
        trace = load_mooncake(name)
        out[name] = np.concatenate([trace.blocks_of(i) for i in range(min(600, trace.num_requests))]).astype(np.int64)
    return out


@pytest.mark.parametrize("trace", ["conversation", "synthetic"])
@pytest.mark.parametrize("capacity", [64, 512, 4096])
def test_replay_equals_libcachesim_and_reference_on_mooncake_blocks(block_streams, trace, capacity):
    keys = block_streams[trace]
    ours = replay("lirs", keys, capacity).tolist()
    assert ours == libcachesim_hits(keys.tolist(), capacity, [1] * keys.size)
    assert ours == replay_lirs_naive(keys.tolist(), capacity)
    assert 0 < sum(ours) < keys.size


@pytest.mark.parametrize("capacity", [450, 2500, 10_000])
def test_byte_sized_replay_equals_libcachesim_and_reference(capacity):
    rng = np.random.default_rng(capacity)
    keys = rng.zipf(1.2, 6000) % 900
    hirs_limit = lirs_limits(capacity, 0.01)[0]
    size_of = rng.integers(1, max(2, 2 * hirs_limit), 900)  # about half too large for the HIR set
    size_of[:5] = capacity + 1  # larger than the cache: misses never inserted
    sizes = size_of[keys]
    ours = replay("lirs", keys, capacity, sizes).tolist()
    reference, clean = replay_lirs_naive_checked(keys.tolist(), capacity, sizes.tolist())
    assert ours == reference
    # libCacheSim up to its first read of a freed object (tests/naive/lirs.py), all of it if none
    assert ours[:clean] == libcachesim_hits(keys.tolist(), capacity, sizes.tolist())[:clean]
    assert clean > 2000
    assert not any(h for h, k in zip(ours, keys) if k < 5)
    assert 0 < sum(ours) < keys.size


@settings(max_examples=150, deadline=None)
@given(capacity=st.integers(0, 40),
       refs=st.lists(st.tuples(st.integers(0, 25), st.integers(0, 4)), max_size=200))
def test_replay_equals_the_reference_and_libcachesim(capacity, refs):
    keys = [k for k, _ in refs]
    first_size = dict(refs[::-1])  # one size per key (its first reference's)
    sizes = [first_size[k] for k in keys]
    ours = replay("lirs", np.array(keys, np.int64), capacity, np.array(sizes, np.int64)).tolist()
    reference, clean = replay_lirs_naive_checked(keys, capacity, sizes)
    assert ours == reference
    if capacity > 0:
        assert ours[:clean] == libcachesim_hits(keys, capacity, sizes)[:clean]


@pytest.mark.parametrize("hirs_ratio", [0.1, 0.3])
def test_other_hir_shares_equal_the_reference(block_streams, hirs_ratio):
    keys = block_streams["synthetic"][:6000]
    for capacity in (40, 300):
        assert replay("lirs", keys, capacity, hirs_ratio=hirs_ratio).tolist() == \
            replay_lirs_naive(keys.tolist(), capacity, hirs_ratio=hirs_ratio)


def test_pinned_small_example():
    # the worked example of kvmm.policies._replay_lirs: capacity 3, hirs_limit 1, lirs_limit 2
    a, b, c, d = range(4)
    keys = [a, b, c, a, d, c, b]
    # a b c miss; a is an LIR hit; d misses (c leaves Q, stays in S non-resident); c misses and
    # returns as LIR (b demoted to Q, pushing d out); b is a resident HIR in Q: a hit
    assert replay("lirs", keys, 3).tolist() == [False, False, False, True, False, False, True]
    model = NaiveLIRS(3)
    for key in keys[:6]:
        model.reference(key, 1)
    # S bottom first: a (LIR), d (a non-resident HIR, in NH), c (LIR); Q holds b
    assert list(model.s.items()) == [(a, [True, True, 1]), (d, [False, False, 1]), (c, [True, True, 1])]
    assert list(model.q) == [b] and list(model.nh) == [d] and model.residents() == {a, b, c}


def test_hir_share_default_and_limits_are_libcachesims():
    assert lirs_limits(1000, 0.01) == (10, 990)
    assert lirs_limits(50, 0.01) == (1, 49)  # at least one unit for the HIR residents


@pytest.mark.parametrize("value, error", [(0.0, BadInputError), (1.0, BadInputError), (float("nan"), BadInputError),
                                          ("0.1", DTypeError), (True, DTypeError)])
def test_bad_hir_share_names_the_problem(value, error):
    with pytest.raises(error, match="hirs_ratio"):
        replay("lirs", [1, 2], 4, hirs_ratio=value)
