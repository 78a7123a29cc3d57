"""RedisTier on a real redis-server: sharing across processes, atomic capacity, outages, corruption."""

import multiprocessing

import numpy as np
import pytest

from kvmm.errors import (
    BackendUnavailableError,
    BadInputError,
    CapacityExceededError,
    CorruptEntryError,
    CorruptTierError,
    UnknownKeyError,
)
from kvmm.policies import LRUPolicy
from kvmm.testing.redis_server import *  # noqa: F401,F403  (fixtures)
from kvmm.testing.tiers import value
from kvmm.tiers import ManagedTier, RedisTier


def test_two_clients_share_entries_and_one_capacity(pool, redis_url, redis_prefix):
    other = RedisTier(url=redis_url, prefix=redis_prefix)  # adopts the pool's capacity
    assert other.capacity_bytes == 10_000
    pool.put(("blk", 1), np.arange(12, dtype=np.float16).reshape(3, 4))
    got = other.get(("blk", 1))
    assert got.dtype == np.float16 and got.shape == (3, 4) and got[2, 3] == 11
    other.put("x", value(9_000))
    with pytest.raises(CapacityExceededError, match="9024 of 10000"):
        pool.put("y", value(1_000))
    assert pool.used_bytes == other.used_bytes == 9_024
    other.delete("x")
    assert not pool.contains("x")
    pool.check()
    other.close()


def test_capacity_mismatch_is_rejected_and_closes_its_connection(pool, redis_url, redis_prefix):
    connections = len(pool.client.client_list())
    with pytest.raises(BadInputError, match="capacity 10000") as excinfo:
        RedisTier(5_000, url=redis_url, prefix=redis_prefix)
    # excinfo's traceback still holds the half-built tier (and its client): its connection must be
    # closed anyway, not only when the tier is garbage-collected
    assert len(pool.client.client_list()) == connections
    del excinfo


def _racer(url, prefix, worker, results):
    tier = RedisTier(url=url, prefix=prefix)
    stored = 0
    for i in range(60):
        try:
            tier.put((worker, i), value(100, i))
            stored += 1
        except CapacityExceededError:
            pass
    results.put(stored)
    tier.close()


def test_capacity_is_enforced_atomically_across_processes(redis_url, redis_prefix):
    tier = RedisTier(5_000, url=redis_url, prefix=redis_prefix)  # room for 50 of 120 entries
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    workers = [ctx.Process(target=_racer, args=(redis_url, redis_prefix, w, results)) for w in range(2)]
    for w in workers:
        w.start()
    stored = [results.get(timeout=60) for _ in workers]
    for w in workers:
        w.join(30)
    assert sum(stored) == 50  # never more than fits, and every byte of room was used
    assert tier.used_bytes == 5_000 and len(tier.keys()) == 50
    tier.check()
    tier.drop_pool()
    tier.close()


def test_server_going_away_raises_backend_unavailable_and_changes_nothing(redis_server):
    tier = RedisTier(10_000, url=redis_server.url, prefix="outage", socket_timeout=1.0)
    tier.put("a", value(100))
    stats = dict(tier.stats)
    redis_server.stop()
    for call in (lambda: tier.put("b", value(10)), lambda: tier.get("a"), lambda: tier.delete("a"),
                 lambda: tier.contains("a"), lambda: tier.used_bytes, lambda: tier.keys(),
                 lambda: tier.get_many(["a", "a"])):
        with pytest.raises(BackendUnavailableError, match="unreachable"):
            call()
    assert tier.stats == stats
    with pytest.raises(BackendUnavailableError):
        RedisTier(10, url=redis_server.url, prefix="outage", socket_timeout=1.0)


def test_corrupt_remote_value_raises_corrupt_entry(pool):
    pool.put("k", value(64))
    pool.put("j", value(64, 3))
    pool.client.hset(pool._entry(b"'k'"), "d", b"\x00" * 64)  # damaged bytes, same length
    with pytest.raises(CorruptEntryError, match="checksum"):
        pool.get("k")
    pool.client.hset(pool._entry(b"'j'"), "m", b"garbage")
    with pytest.raises(CorruptEntryError):
        pool.get("j")
    assert pool.used_bytes == 128  # nothing was changed by the failed reads


@pytest.mark.parametrize("member", [b"\xff", b"ab(", b"[1]", b"True", b"0x1"],
                         ids=["not-utf8", "bad-literal", "unhashable", "bool", "not-canonical"])
def test_a_damaged_key_set_member_is_corrupt_tier_naming_it_and_the_rest_stays_usable(pool, member):
    pool.put("k", value(64))
    pool.client.sadd(pool._k_keys, member)
    for listing in (pool.keys, lambda: len(pool), lambda: ManagedTier(pool, LRUPolicy())):
        with pytest.raises(CorruptTierError, match="not encoded keys") as err:
            listing()
        assert repr(member) in str(err.value) and pool._k_keys in str(err.value)
    assert np.array_equal(pool.get("k"), value(64)) and pool.contains("k") and pool.nbytes_of("k") == 64
    pool.put("j", value(32, 3))
    pool.delete("k")
    assert pool.used_bytes == 32 and np.array_equal(pool.get("j"), value(32, 3))
    pool.client.srem(pool._k_keys, member)  # the remedy the message names
    assert pool.keys() == ["j"] and len(pool) == 1 and ManagedTier(pool, LRUPolicy()).keys() == ["j"]


def test_unknown_keys_and_bad_values(pool):
    pool.put(1, value(10))
    with pytest.raises(UnknownKeyError):
        pool.get(2)
    with pytest.raises(UnknownKeyError):
        pool.delete(2)
    with pytest.raises(UnknownKeyError):
        pool.nbytes_of(2)
    with pytest.raises(BadInputError):
        pool.put(1, np.array([None]))
    with pytest.raises(BadInputError):
        RedisTier(10, url="redis://127.0.0.1:1/0", prefix="")
    np.testing.assert_array_equal(pool.get(1), value(10))
    assert pool.used_bytes == 10 and pool.keys() == [1]
