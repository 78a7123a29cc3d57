"""RedisTier against real redis-server processes that the tests restart, fill and reconfigure:
self-healing after a restart without persistence, OOM as CapacityExceededError, refusing an
evicting maxmemory-policy (at open, and when it is switched on later), repairing counters,
and bad URLs as BadInputError."""

import numpy as np
import pytest

from kvmm.errors import BackendUnavailableError, BadInputError, CapacityExceededError, UnknownKeyError
from kvmm.testing.redis_server import *  # noqa: F401,F403  (fixtures)
from kvmm.testing.tiers import value
from kvmm.tiers import RedisTier


def test_restart_without_persistence_self_heals_and_lost_entries_are_misses(redis_server):
    tier = RedisTier(10_000, url=redis_server.url, prefix="heal")
    tier.put("a", value(100, 1))
    tier.put("b", value(200, 2))
    redis_server.restart()  # comes back empty: entries, counters and scripts are gone
    for call in (lambda: tier.get("a"), lambda: tier.get_many(["b"]), lambda: tier.delete("a"),
                 lambda: tier.nbytes_of("b")):
        with pytest.raises(UnknownKeyError):
            call()
    assert not tier.contains("a") and tier.keys() == [] and tier.used_bytes == 0
    tier.put("c", value(300, 3))  # recreates the pool's counters
    assert tier.recovery["pool_recreated"] == 1
    np.testing.assert_array_equal(tier.get("c"), value(300, 3))
    assert tier.used_bytes == 300 and tier.keys() == ["c"]
    with pytest.raises(CapacityExceededError, match="300 of 10000"):
        tier.put("big", value(9_800))  # the recreated capacity is enforced
    tier.check()
    other = RedisTier(url=redis_server.url, prefix="heal")  # a new client adopts it
    assert other.capacity_bytes == 10_000 and other.get_many(["c"])[0].nbytes == 300
    other.close()
    tier.close()


def test_out_of_memory_server_raises_capacity_exceeded_and_changes_nothing(redis_server_factory):
    server = redis_server_factory("--maxmemory", "2mb", "--maxmemory-policy", "noeviction")
    tier = RedisTier(1 << 30, url=server.url, prefix="oom")  # the pool is larger than the server
    stored = 0
    with pytest.raises(CapacityExceededError, match="out of memory"):
        for stored in range(1000):
            tier.put(stored, value(64 << 10, stored))
    assert 0 < stored < 1000
    keys, used, stats = sorted(tier.keys()), tier.used_bytes, dict(tier.stats)
    with pytest.raises(CapacityExceededError, match="maxmemory"):
        tier.put("one-more", value(64 << 10))
    assert (sorted(tier.keys()), tier.used_bytes, tier.stats) == (keys, used, stats)
    assert keys == list(range(stored)) and used == stored * (64 << 10)
    tier.check()
    for k in range(stored // 2):  # freeing space makes room again
        tier.delete(k)
    tier.put("one-more", value(64 << 10))
    tier.close()


@pytest.mark.parametrize("exc_name, text", [
    ("OutOfMemoryError", "command not allowed when used memory > 'maxmemory'."),  # redis-py strips "OOM"
    ("ResponseError", "OOM command not allowed when used memory > 'maxmemory'. script: 1a2b"),
    ("ResponseError", "Error running script: command not allowed when used memory > 'maxmemory'"),
])
def test_every_wording_of_an_oom_reply_is_capacity_exceeded(pool, exc_name, text):
    exc_class = getattr(pool._redis.exceptions, exc_name)

    def fail():
        raise exc_class(text)

    with pytest.raises(CapacityExceededError, match="out of memory"):
        pool._call(fail)


@pytest.mark.parametrize("policy", ["allkeys-lru", "allkeys-lfu", "allkeys-random"])
def test_an_evicting_server_is_refused_at_open(redis_server, policy):
    admin = redis_server.client()
    admin.config_set("maxmemory-policy", policy)
    with pytest.raises(BackendUnavailableError, match=f"maxmemory-policy is '{policy}'.*noeviction"):
        RedisTier(10_000, url=redis_server.url, prefix="evict")
    assert admin.keys("*") == []  # nothing was created
    admin.config_set("maxmemory-policy", "volatile-lru")  # evicts only keys with a TTL: accepted
    RedisTier(10_000, url=redis_server.url, prefix="evict").close()
    admin.close()


def test_real_eviction_after_the_policy_is_switched_is_caught(redis_server):
    tier = RedisTier(1 << 30, url=redis_server.url, prefix="late")
    admin = redis_server.client()
    admin.config_set("maxmemory-policy", "allkeys-lru")
    admin.config_set("maxmemory", int(admin.info("memory")["used_memory"]) + (1 << 20))
    written, refused = {}, 0
    for i in range(60):  # ~4 MiB into ~1 MiB of room: the server evicts the oldest keys
        try:
            tier.put(i, value(64 << 10, i))
            written[i] = value(64 << 10, i)
        except BackendUnavailableError as exc:  # a put found the counters evicted
            assert "maxmemory-policy is 'allkeys-lru'" in str(exc)
            refused += 1
    assert admin.info("stats")["evicted_keys"] > 0
    for i, expected in written.items():
        try:
            np.testing.assert_array_equal(tier.get(i), expected)  # never a wrong value
        except BackendUnavailableError as exc:  # a get found a listed entry evicted
            assert "maxmemory-policy is 'allkeys-lru'" in str(exc)
            refused += 1
        except UnknownKeyError:  # evicted together with its listing: a miss
            pass
    assert refused > 0
    admin.close()
    tier.close()


def test_entries_or_counters_deleted_by_hand_are_repaired(redis_server):
    tier = RedisTier(10_000, url=redis_server.url, prefix="hand")
    admin = redis_server.client()
    for k in range(4):
        tier.put(k, value(100, k))
    admin.delete(tier._entry(b"1"))  # an entry vanishes behind the tier's back
    with pytest.raises(UnknownKeyError):
        tier.get(1)
    assert tier.recovery["repairs"] == 1 and tier.recovery["lost_entries"] == 1
    assert sorted(tier.keys()) == [0, 2, 3] and tier.used_bytes == 300
    tier.check()
    admin.delete("hand:used", "hand:cap")  # the counters vanish while entries remain
    tier.put(9, value(50))
    assert tier.recovery["repairs"] == 2 and tier.used_bytes == 350
    tier.check()
    admin.delete("hand:used")
    tier.delete(0)
    assert tier.recovery["repairs"] == 3 and tier.used_bytes == 250
    tier.check()
    admin.close()
    tier.close()


@pytest.mark.parametrize("url", ["foo://host", "redis://host:abc/0", "redis://127.0.0.1:99999/0",
                                 "redis://127.0.0.1:6379/notadb", "", None, 5, b"redis://x"])
def test_bad_urls_raise_bad_input(url):
    with pytest.raises(BadInputError, match="expected e.g. 'redis://127.0.0.1:6379/0'"):
        RedisTier(10, url=url, prefix="p")


def test_a_client_that_is_not_a_redis_client_is_bad_input():
    with pytest.raises(BadInputError, match="redis.Redis"):
        RedisTier(10, client="redis://127.0.0.1", prefix="p")


@pytest.mark.parametrize("keys", [5, 2.5, None])
def test_get_many_of_a_non_list_is_a_clear_error_and_changes_nothing(pool, keys):
    from kvmm.errors import KvmmError

    pool.put("a", value(1))
    before = (pool.used_bytes, pool.contains("a"))
    with pytest.raises(KvmmError):
        pool.get_many(keys)
    assert (pool.used_bytes, pool.contains("a")) == before
    assert np.array_equal(pool.get_many(["a"])[0], value(1))
