"""A shared remote KV pool on a Redis server: :class:`RedisTier` (needs ``pip install 'kvmm[redis]'``).

Several processes (or machines) that open a ``RedisTier`` with the same server and ``prefix``
share one pool: the same entries and one capacity account.  Layout in Redis::

    {prefix}:cap        capacity in bytes (set once by the first opener; later openers must agree)
    {prefix}:used       value bytes in use (changed only inside the Lua scripts below)
    {prefix}:keys       SET of encoded keys (UTF-8 repr, see kvmm.tiers._base)
    {prefix}:e:{key}    HASH  m = b"<f2|2,8,128" (dtype.str | shape), d = value bytes (C order),
                              n = len(d), c = zlib.crc32(m + d)

``put`` and ``delete`` run as Lua scripts, so the capacity check, the write and the counter
update are one atomic step on the server: two processes racing for the last free bytes
cannot both succeed, and ``{prefix}:used`` always equals the sum of the entries' ``n``.

Recovery: a server restarted without persistence comes back empty.  The next ``put``
recreates the pool's counters (``{prefix}:cap`` from this tier's capacity, ``used`` 0) and the
lost entries read as misses (:class:`~kvmm.errors.UnknownKeyError`); :attr:`RedisTier.recovery`
counts it (``pool_recreated``).  Counters that disagree with the entries (a listed entry gone,
counters gone while entries remain: someone deleted keys, or the server evicted them) are
rebuilt from the entries by one script (``repairs``, ``lost_entries``).

The server must not evict: under an ``allkeys-*`` ``maxmemory-policy`` it would drop entries
and counters at will, so opening the tier raises :class:`~kvmm.errors.BackendUnavailableError`
naming the setting (``CONFIG SET maxmemory-policy noeviction``); a policy switched to an
evicting one later is caught the next time a repair is needed.  ``volatile-*`` policies are
accepted (they evict only keys with a TTL, and the tier sets none).  A server out of memory
(``maxmemory`` reached under ``noeviction``) refuses the write: the tier raises
:class:`~kvmm.errors.CapacityExceededError` and nothing changes.

Failure semantics: a server that cannot be reached (refused, reset, timed out) raises
:class:`~kvmm.errors.BackendUnavailableError`; nothing local changes (the object keeps no
cache, and its ``stats`` count only completed calls).  A value whose bytes do not match its
checksum, length or dtype/shape raises :class:`~kvmm.errors.CorruptEntryError`; a damaged
member of the key set makes ``keys()`` (and ``len()``) raise :class:`~kvmm.errors.CorruptTierError`
naming it, while every other entry stays usable.
"""

from __future__ import annotations

import zlib
from collections.abc import Hashable
from typing import Any
from urllib.parse import urlparse

import numpy as np

from kvmm._validate import as_positive_float
from kvmm.errors import (
    BackendUnavailableError,
    BadInputError,
    CapacityExceededError,
    CorruptEntryError,
    CorruptTierError,
    UnknownKeyError,
)
from kvmm.tiers._base import TierBase, as_value_array, encode_key, normalize_key, normalize_keys, stored_key
from kvmm.tiers.spec import TierSpec

__all__ = ["RedisTier"]

# KEYS: entry, used, cap, keys-set.  ARGV: meta, data, nbytes, encoded key, crc, capacity.
# Returns {1, used_after, recreated} on success, {0, used_now, cap, recreated} when the entry
# does not fit, {-1} when the counters disagree with the entries (a repair is needed).
# ``recreated`` is 1 when the pool's counters were gone (an empty server) and were recreated.
_PUT_LUA = """
local cap = tonumber(redis.call('GET', KEYS[3]))
local has_used = redis.call('EXISTS', KEYS[2]) == 1
local listed = redis.call('SCARD', KEYS[4])
local recreated = 0
if not cap then
  if has_used or listed > 0 then return {-1} end
  cap = tonumber(ARGV[6])
  redis.call('SET', KEYS[3], ARGV[6])
  recreated = 1
elseif listed > 0 and not has_used then
  return {-1}
end
local used = tonumber(redis.call('GET', KEYS[2]) or '0')
local old = tonumber(redis.call('HGET', KEYS[1], 'n') or '0')
local n = tonumber(ARGV[3])
local after = used - old + n
if after > cap then return {0, used, cap, recreated} end
redis.call('HSET', KEYS[1], 'm', ARGV[1], 'd', ARGV[2], 'n', ARGV[3], 'c', ARGV[5])
redis.call('SET', KEYS[2], after)
redis.call('SADD', KEYS[4], ARGV[4])
return {1, after, recreated}
"""

# KEYS: entry, used, keys-set.  ARGV: encoded key.  Returns the freed bytes, -1 if absent,
# -2 when the counter is gone although the entry exists (a repair is needed).
_DELETE_LUA = """
local old = redis.call('HGET', KEYS[1], 'n')
if not old then return -1 end
if redis.call('EXISTS', KEYS[2]) == 0 then return -2 end
redis.call('DEL', KEYS[1])
redis.call('DECRBY', KEYS[2], old)
redis.call('SREM', KEYS[3], ARGV[1])
return tonumber(old)
"""

# KEYS: used, cap, keys-set.  ARGV: entry-key prefix, capacity.  Drops listed keys whose entry
# is gone, sets ``used`` to the sum of the remaining entries, recreates ``cap`` if it is gone.
# Returns the number of listed entries that were gone.
_REPAIR_LUA = """
local used, lost = 0, 0
for _, raw in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  local n = redis.call('HGET', ARGV[1] .. raw, 'n')
  if n then used = used + tonumber(n) else redis.call('SREM', KEYS[3], raw); lost = lost + 1 end
end
redis.call('SET', KEYS[1], used)
if not redis.call('GET', KEYS[2]) then redis.call('SET', KEYS[2], ARGV[2]) end
return lost
"""

_EVICTING_POLICY_PREFIX = "allkeys-"


class RedisTier(TierBase):
    """A :class:`~kvmm.protocols.TierBackend` whose entries live on a Redis server.

    ``url`` (e.g. ``"redis://127.0.0.1:6379/0"``) or a ready ``client`` (a ``redis.Redis``)
    names the server; ``prefix`` names the pool.  ``capacity_bytes=None`` adopts the pool's
    capacity if it exists, else the spec's.  The default spec is the ``layer3.5`` preset (a
    shared KV appliance); the timing model is the spec's, not a measurement of this server.

    Runtime complexity: ``put``/``get`` one round trip plus O(entry bytes);
    ``keys``/``check`` O(entries).
    """

    def __init__(self, capacity_bytes: int | None = None, *, url: str = "redis://127.0.0.1:6379/0",
                 client: Any = None, prefix: str = "kvmm", spec: TierSpec | str = "layer3.5",
                 name: str | None = None, socket_timeout: float = 5.0) -> None:
        super().__init__(spec, capacity_bytes, name)
        if not isinstance(prefix, str) or not prefix:
            raise BadInputError(f"prefix must be a non-empty string, got {prefix!r}")
        timeout = as_positive_float(socket_timeout, "socket_timeout")
        try:  # the optional redis extra
            import redis
        except ImportError:  # pragma: no cover - depends on the environment
            raise BackendUnavailableError("RedisTier needs the redis package: pip install 'kvmm[redis]'") from None
        self._redis = redis
        self.prefix = prefix
        if client is not None and not isinstance(client, redis.Redis):
            raise BadInputError(f"client must be a redis.Redis, got {type(client).__name__}")
        self.client = client if client is not None else _client_from_url(redis, url, timeout)
        #: what this tier had to recover from (see the module docstring)
        self.recovery = {"pool_recreated": 0, "repairs": 0, "lost_entries": 0}
        self._k_cap = f"{prefix}:cap"
        self._k_used = f"{prefix}:used"
        self._k_keys = f"{prefix}:keys"
        self._put_script = self.client.register_script(_PUT_LUA)
        self._delete_script = self.client.register_script(_DELETE_LUA)
        self._repair_script = self.client.register_script(_REPAIR_LUA)
        try:
            self._open_pool(capacity_bytes)
        except BaseException:
            if client is None:  # the connection this call opened must not outlive the failed open
                self.client.close()
            raise

    def _open_pool(self, capacity_bytes: int | None) -> None:
        """Refuse an evicting server, then create the pool's capacity or check it against this tier's."""
        self._refuse_evicting_server()
        wanted = self.spec.capacity_bytes
        stored = self._call(lambda: (self.client.set(self._k_cap, wanted, nx=True), self.client.get(self._k_cap))[1])
        stored = int(stored)
        if capacity_bytes is None:
            self.spec = self.spec.with_capacity(stored)
        elif stored != wanted:
            raise BadInputError(f"pool {self.prefix!r} on the server has capacity {stored} bytes; this tier asked "
                                f"for {wanted} (open it with capacity_bytes=None or {stored})")

    @property
    def used_bytes(self) -> int:
        """Value bytes in the whole shared pool (all processes), read from the server."""
        return int(self._call(lambda: self.client.get(self._k_used)) or 0)

    def put(self, key: Hashable, data: Any) -> None:
        k = normalize_key(key)
        arr = as_value_array(data)
        raw_key = encode_key(k)
        meta = f"{arr.dtype.str}|{','.join(str(d) for d in arr.shape)}".encode("ascii")
        payload = arr.tobytes()
        crc = zlib.crc32(payload, zlib.crc32(meta))

        def run():
            return self._put_script(keys=[self._entry(raw_key), self._k_used, self._k_cap, self._k_keys],
                                    args=[meta, payload, len(payload), raw_key, crc, self.capacity_bytes])

        result = self._call(run)
        if int(result[0]) == -1:  # the counters disagree with the entries: rebuild them, retry
            self._repair()
            result = self._call(run)
        if int(result[0]) == -1:
            raise BackendUnavailableError(f"tier {self.name!r}: the counters of pool {self.prefix!r} keep "
                                          f"disagreeing with its entries (another client is changing them)")
        if int(result[-1]) == 1:
            self.recovery["pool_recreated"] += 1
        if int(result[0]) != 1:
            raise CapacityExceededError(
                f"tier {self.name!r}: storing {len(payload)} bytes under {k!r} does not fit; pool {self.prefix!r} "
                f"has {int(result[1])} of {int(result[2])} bytes in use")
        self._count_put(len(payload))

    def get(self, key: Hashable) -> np.ndarray:
        k = normalize_key(key)
        raw_key = encode_key(k)
        fields = self._call(lambda: self.client.hmget(self._entry(raw_key), "m", "d", "n", "c"))
        if fields[1] is None:
            self._repair_if_listed([raw_key])
        out = self._decode(k, fields)
        self._count_get(out.nbytes)
        return out

    def get_many(self, keys: Any) -> list[np.ndarray]:
        """The values of ``keys`` in one round trip (a pipeline); all-or-nothing on errors.

        Runtime complexity: one round trip plus O(total bytes).
        """
        ks = normalize_keys(keys)  # a clear KvmmError for a non-list (get_many(5)), as every tier

        def fetch():
            pipe = self.client.pipeline(transaction=False)
            for k in ks:
                pipe.hmget(self._entry(encode_key(k)), "m", "d", "n", "c")
            return pipe.execute()

        rows = self._call(fetch) if ks else []
        missing = [encode_key(k) for k, fields in zip(ks, rows) if fields[1] is None]
        if missing:
            self._repair_if_listed(missing)
        out = [self._decode(k, fields) for k, fields in zip(ks, rows)]
        for arr in out:
            self._count_get(arr.nbytes)
        return out

    def _decode(self, k: Hashable, fields: list) -> np.ndarray:
        meta, payload, n, crc = fields
        if payload is None:
            raise UnknownKeyError(f"tier {self.name!r} (pool {self.prefix!r}) holds no entry {k!r}")
        try:
            dtype_text, shape_text = meta.decode("ascii").rsplit("|", 1)
            dtype = np.dtype(dtype_text)
            shape = tuple(int(d) for d in shape_text.split(",")) if shape_text else ()
            ok = (int(n) == len(payload) == int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
                  and int(crc) == zlib.crc32(payload, zlib.crc32(meta)))
        except (ValueError, TypeError, UnicodeDecodeError, AttributeError):
            ok = False
        if not ok:
            raise CorruptEntryError(f"tier {self.name!r}: entry {k!r} in pool {self.prefix!r} fails its "
                                    f"length/dtype/checksum check")
        return np.frombuffer(payload, dtype=dtype).reshape(shape).copy()

    def delete(self, key: Hashable) -> None:
        k = normalize_key(key)
        raw_key = encode_key(k)
        def run():
            return int(self._delete_script(keys=[self._entry(raw_key), self._k_used, self._k_keys], args=[raw_key]))

        freed = self._call(run)
        if freed == -2:  # the counter is gone although the entry exists: rebuild, retry
            self._repair()
            freed = self._call(run)
        if freed < 0:
            raise UnknownKeyError(f"tier {self.name!r} (pool {self.prefix!r}) holds no entry {k!r}")
        self._count_delete()

    def contains(self, key: Hashable) -> bool:
        raw_key = encode_key(normalize_key(key))
        return bool(self._call(lambda: self.client.exists(self._entry(raw_key))))

    def keys(self) -> list[Hashable]:
        """Every key of the shared pool (all processes).

        A member of ``{prefix}:keys`` that is not the encoding of a key (damaged, or written by
        something else) raises :class:`~kvmm.errors.CorruptTierError` naming it; the entries
        under the other keys stay readable and writable.  Runtime complexity: O(entries).
        """
        raws = self._call(lambda: self.client.smembers(self._k_keys))
        keys = [stored_key(raw) for raw in raws]
        damaged = sorted(raw for raw, k in zip(raws, keys) if k is None or encode_key(k) != raw)
        if damaged:
            shown = ", ".join(repr(raw) for raw in damaged[:5]) + (f" and {len(damaged) - 5} more" if len(damaged) > 5 else "")
            raise CorruptTierError(
                f"tier {self.name!r}: the key set {self._k_keys!r} of pool {self.prefix!r} holds "
                f"{len(damaged)} member(s) that are not encoded keys: {shown}; the other entries are unaffected "
                f"(remove the damaged member with SREM {self._k_keys} <member>, or drop_pool())")
        return keys

    def nbytes_of(self, key: Hashable) -> int:
        k = normalize_key(key)
        n = self._call(lambda: self.client.hget(self._entry(encode_key(k)), "n"))
        if n is None:
            raise UnknownKeyError(f"tier {self.name!r} (pool {self.prefix!r}) holds no entry {k!r}")
        return int(n)

    def drop_pool(self) -> None:
        """Delete every entry and the pool's counters from the server."""
        def drop():
            names = [self._entry(raw) for raw in self.client.smembers(self._k_keys)]
            self.client.delete(self._k_cap, self._k_used, self._k_keys, *names)
        self._call(drop)

    def close(self) -> None:
        self.client.close()

    def check(self) -> None:
        """Assert every invariant of the pool on the server (used by tests; O(entries))."""
        raw_keys = self._call(lambda: self.client.smembers(self._k_keys))
        sizes = []
        for raw in raw_keys:
            entry = self._call(lambda: self.client.hmget(self._entry(raw), "n", "d"))  # noqa: B023 (called at once, inside the loop)
            # Every listed key has an entry whose recorded size is its byte length.
            assert entry[1] is not None and int(entry[0]) == len(entry[1]), raw
            sizes.append(int(entry[0]))
        # The shared counter is the sum of the entries' sizes, within capacity.
        assert self.used_bytes == sum(sizes)
        assert 0 <= self.used_bytes <= self.capacity_bytes

    def _refuse_evicting_server(self) -> None:
        """Raise if the server may evict this pool's keys (``maxmemory-policy allkeys-*``)."""
        try:
            policy = self._call(lambda: self.client.info("memory")).get("maxmemory_policy", "noeviction")
        except BackendUnavailableError as exc:
            if "refused a command" in str(exc):  # INFO disabled on this server: cannot tell
                return
            raise
        if str(policy).startswith(_EVICTING_POLICY_PREFIX):
            raise BackendUnavailableError(
                f"tier {self.name!r}: the Redis server's maxmemory-policy is {policy!r}, which evicts any key "
                f"when memory runs out, including this pool's entries and its capacity counters; set "
                f"maxmemory-policy to noeviction (CONFIG SET maxmemory-policy noeviction, or in redis.conf) "
                f"or to a volatile-* policy")

    def _repair_if_listed(self, raw_keys: list[bytes]) -> None:
        """Some entries read as missing: if the pool still lists one, it vanished behind the
        tier's back (eviction, a hand delete): repair the counters.  The read stays a miss."""
        def listed():
            pipe = self.client.pipeline(transaction=False)
            for raw in raw_keys:
                pipe.sismember(self._k_keys, raw)
            return pipe.execute()

        if any(self._call(listed)):
            self._repair()

    def _repair(self) -> None:
        """Rebuild ``used`` (and ``cap``) from the entries, dropping listed keys that are gone;
        refuse if the server now evicts (its policy was changed after this tier opened)."""
        self._refuse_evicting_server()
        lost = int(self._call(lambda: self._repair_script(
            keys=[self._k_used, self._k_cap, self._k_keys], args=[self._entry(b""), self.capacity_bytes])))
        self.recovery["repairs"] += 1
        self.recovery["lost_entries"] += lost

    def _entry(self, raw_key: bytes) -> bytes:
        return f"{self.prefix}:e:".encode() + raw_key

    def _call(self, fn):
        """Run a Redis call, mapping connection failures to BackendUnavailableError."""
        exc_mod = self._redis.exceptions
        try:
            return fn()
        except (exc_mod.ConnectionError, exc_mod.TimeoutError, ConnectionError, TimeoutError) as exc:
            raise BackendUnavailableError(
                f"tier {self.name!r}: the Redis server for pool {self.prefix!r} is unreachable ({exc})") from None
        except exc_mod.ResponseError as exc:
            # redis-py raises OutOfMemoryError for "-OOM ..." and strips the prefix from the text
            # (a script error may still carry it): match the class and both wordings.
            oom_class = getattr(exc_mod, "OutOfMemoryError", ())
            if isinstance(exc, oom_class) or "OOM" in str(exc) or "maxmemory" in str(exc):
                raise CapacityExceededError(
                    f"tier {self.name!r}: the Redis server is out of memory (maxmemory reached; {exc}); "
                    f"free space in the pool or raise the server's maxmemory") from None
            raise BackendUnavailableError(f"tier {self.name!r}: the Redis server refused a command ({exc})") from None


def _client_from_url(redis: Any, url: Any, timeout: float) -> Any:
    """A ``redis.Redis`` for ``url``, or :class:`BadInputError` saying what a URL looks like."""
    expected = "expected e.g. 'redis://127.0.0.1:6379/0', 'rediss://host:port/db' or 'unix:///path/redis.sock'"
    if not isinstance(url, str):
        raise BadInputError(f"url must be a string, got {type(url).__name__} {url!r}; {expected}")
    try:
        parsed = urlparse(url)
        db = parsed.path.lstrip("/")
        if parsed.scheme in ("redis", "rediss") and db and not db.isdigit():  # redis-py ignores it
            raise ValueError(f"the database {db!r} is not a number")
        client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
    except (ValueError, TypeError, AttributeError, IndexError) as exc:
        raise BadInputError(f"bad Redis URL {url!r} ({exc}); {expected}") from None
    return client
