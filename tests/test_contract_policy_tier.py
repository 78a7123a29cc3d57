"""One contract suite over every (eviction policy x tier) pair through ManagedTier.

A new policy or tier gets every test here by adding one line to tests/tier_factories.py.
"""

import numpy as np
import pytest

from kvmm.errors import CapacityExceededError, DTypeError, KvmmError, UnknownKeyError
from kvmm.tiers import ManagedTier
from tests.redis_server import *  # noqa: F401,F403  (fixtures)
from tests.tier_factories import POLICIES, TIERS, TierContext, snapshot, value

PAIRS = [(p, t) for p in POLICIES for t in TIERS]
CAPACITY = 1000  # ten 100-byte entries


@pytest.fixture(params=PAIRS, ids=[f"{p[0]}-{t.name}" for p, t in PAIRS])
def pair(request, tmp_path, redis_prefix):
    (policy_name, make_policy), kind = request.param
    url = request.getfixturevalue("redis_url") if kind.needs_redis else None
    ctx = TierContext(tmp_path, url, redis_prefix)
    yield ctx, kind, make_policy
    ctx.close()


@pytest.fixture
def managed(pair):
    ctx, kind, make_policy = pair
    tier = ManagedTier(ctx.build(kind, CAPACITY), make_policy())
    tier.holds_bytes = kind.holds_bytes
    return tier


def fill(tier, n, nbytes=100):
    for i in range(n):
        tier.put(i, value(nbytes, i))
        tier.check()


def test_roundtrip_keeps_dtype_shape_and_bytes(managed):
    samples = {
        "f16": np.arange(24, dtype=np.float16).reshape(2, 3, 4),
        ("blk", 3): np.array([[1 + 2j, 3 - 1j]], dtype=np.complex64),
        b"raw": np.array([True, False, True]),
        7: np.array(5, dtype=np.int32),  # 0-d
        8: np.zeros((0, 4), dtype=np.float32),  # empty
        9: np.arange(6, dtype=">i4").reshape(3, 2)[::2],  # non-contiguous, big-endian
    }
    for key, arr in samples.items():
        managed.put(key, arr)
        managed.check()
    for key, arr in samples.items():
        got = managed.get(key)
        assert got.shape == arr.shape and got.dtype == arr.dtype
        if managed.holds_bytes:
            np.testing.assert_array_equal(got, arr)
        else:
            assert not got.any()  # SimulatedTier: zero placeholder
    assert managed.used_bytes == sum(a.nbytes for a in samples.values())
    assert sorted(managed.keys(), key=repr) == sorted(samples, key=repr)


def test_eviction_follows_the_policy_and_respects_capacity(managed):
    fill(managed, 10)
    assert managed.used_bytes == CAPACITY
    managed.get(3)
    managed.get(0)
    for i in range(10, 25):
        expected = managed.policy.victims(1, {i}, incoming=i)
        evicted = managed.put(i, value(100, i))
        assert evicted == expected and len(evicted) == 1
        assert not managed.contains(evicted[0]) and managed.contains(i)
        assert managed.used_bytes == CAPACITY
        managed.check()
    assert managed.evictions == 15 and len(managed) == 10


def test_a_large_entry_evicts_several_in_policy_order(managed):
    fill(managed, 10)
    expected = managed.policy.victims(3, {"big"}, incoming="big")
    evicted = managed.put("big", value(250))
    assert evicted == expected
    assert managed.used_bytes == 950 and len(managed) == 8
    managed.check()


def test_put_larger_than_capacity_raises_and_evicts_nothing(managed):
    fill(managed, 6)
    before = snapshot(managed, managed.holds_bytes)
    with pytest.raises(CapacityExceededError, match="never fit"):
        managed.put("huge", value(CAPACITY + 1))
    assert snapshot(managed, managed.holds_bytes) == before
    managed.check()


def test_protected_keys_are_never_evicted(managed):
    fill(managed, 10)
    keep = set(range(9))
    evicted = managed.put("new", value(100), protected=keep)
    assert evicted == [9]
    before = snapshot(managed, managed.holds_bytes)
    with pytest.raises(CapacityExceededError, match="unprotected"):
        managed.put("other", value(200), protected=set(managed.keys()))
    assert snapshot(managed, managed.holds_bytes) == before
    managed.check()


def test_overwrite_adjusts_usage_and_counts_as_access(managed):
    fill(managed, 10)
    evicted = managed.put(4, value(150, 99))  # grows by 50 bytes: one eviction, never key 4
    assert 4 not in evicted and len(evicted) == 1
    assert managed.nbytes_of(4) == 150 and managed.used_bytes == 950
    if managed.holds_bytes:
        np.testing.assert_array_equal(managed.get(4), value(150, 99))
    managed.put(4, value(10))
    assert managed.used_bytes == 810
    managed.check()


def test_delete_frees_space_and_forgets_the_key(managed):
    fill(managed, 10)
    managed.delete(5)
    assert not managed.contains(5) and 5 not in managed.policy
    assert managed.used_bytes == 900
    assert managed.put("x", value(100)) == []
    managed.check()


def test_unknown_keys_and_bad_values_change_nothing(managed):
    fill(managed, 5)
    before = snapshot(managed, managed.holds_bytes)
    with pytest.raises(UnknownKeyError, match="no entry"):
        managed.get("missing")
    with pytest.raises(UnknownKeyError):
        managed.delete(("missing", 1))
    with pytest.raises(DTypeError, match="numeric"):
        managed.put("obj", np.array([object()]))
    with pytest.raises(DTypeError, match="keys"):
        managed.put(1.5, value(10))
    with pytest.raises(DTypeError):
        managed.put(True, value(10))
    with pytest.raises(KvmmError):
        managed.put([1, 2], value(10))
    assert snapshot(managed, managed.holds_bytes) == before
    managed.check()


def test_transfer_seconds_is_latency_plus_size_over_bandwidth(managed):
    spec = managed.backend.spec
    assert managed.transfer_seconds(0) == pytest.approx(spec.latency_s)
    assert managed.transfer_seconds(10**9) == pytest.approx(spec.latency_s + 1e9 / spec.read_bandwidth)
    assert managed.transfer_seconds(10**9, write=True) == pytest.approx(spec.latency_s + 1e9 / spec.write_bandwidth)
    with pytest.raises(KvmmError):
        managed.transfer_seconds(-1)


def test_backend_with_entries_is_adopted_by_a_new_managed_tier(pair):
    ctx, kind, make_policy = pair
    backend = ctx.build(kind, CAPACITY)
    for i in range(4):
        backend.put(i, value(100, i))
    managed = ManagedTier(backend, make_policy())
    assert len(managed) == 4
    managed.check()
    fill(managed, 0)
    for i in range(4, 12):
        managed.put(i, value(100, i))
    assert managed.used_bytes == CAPACITY and len(managed) == 10
    managed.check()


def test_get_many_returns_values_in_order_and_is_all_or_nothing(managed):
    fill(managed, 5)
    got = managed.get_many([3, 0, 3])
    assert [g.nbytes for g in got] == [100, 100, 100]
    if managed.holds_bytes:
        np.testing.assert_array_equal(got[0], value(100, 3))
        np.testing.assert_array_equal(got[1], value(100, 0))
    assert managed.get_many([]) == []
    before = snapshot(managed, managed.holds_bytes)
    reads = managed.backend.stats["gets"]
    with pytest.raises(UnknownKeyError):
        managed.get_many([1, "missing", 2])
    assert managed.backend.stats["gets"] == reads  # nothing was counted as read
    assert snapshot(managed, managed.holds_bytes) == before
    managed.check()
