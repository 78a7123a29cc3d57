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

Failure semantics: a server that cannot be reached (refused, reset, timed out) raises
:class:`~kvmm.errors.BackendUnavailableError`; nothing local changes (the object keeps no
cache, and its ``stats`` count only completed calls).  A value whose bytes do not match its
checksum, length or dtype/shape raises :class:`~kvmm.errors.CorruptEntryError`.
"""

from __future__ import annotations

import zlib
from typing import Any, Hashable

import numpy as np

from kvmm._validate import as_positive_float
from kvmm.errors import BackendUnavailableError, BadInputError, CapacityExceededError, CorruptEntryError, UnknownKeyError
from kvmm.tiers._base import TierBase, as_value_array, decode_key, encode_key, normalize_key
from kvmm.tiers.spec import TierSpec

__all__ = ["RedisTier"]

# KEYS: entry, used, cap, keys-set.  ARGV: meta, data, nbytes, encoded key, crc.
# Returns {1, used_after} on success, {0, used_now, cap} when the entry does not fit.
_PUT_LUA = """
local cap = tonumber(redis.call('GET', KEYS[3]))
local used = tonumber(redis.call('GET', KEYS[2]) or '0')
local old = tonumber(redis.call('HGET', KEYS[1], 'n') or '0')
local n = tonumber(ARGV[3])
local after = used - old + n
if after > cap then return {0, used, cap} end
redis.call('HSET', KEYS[1], 'm', ARGV[1], 'd', ARGV[2], 'n', ARGV[3], 'c', ARGV[5])
redis.call('SET', KEYS[2], after)
redis.call('SADD', KEYS[4], ARGV[4])
return {1, after}
"""

# KEYS: entry, used, keys-set.  ARGV: encoded key.  Returns the freed bytes, or -1 if absent.
_DELETE_LUA = """
local old = redis.call('HGET', KEYS[1], 'n')
if not old then return -1 end
redis.call('DEL', KEYS[1])
redis.call('DECRBY', KEYS[2], old)
redis.call('SREM', KEYS[3], ARGV[1])
return tonumber(old)
"""


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
        try:
            import redis
        except ImportError:  # pragma: no cover - depends on the environment
            raise BackendUnavailableError("RedisTier needs the redis package: pip install 'kvmm[redis]'") from None
        self._redis = redis
        self.prefix = prefix
        self.client = client if client is not None else redis.Redis.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=timeout)
        self._k_cap = f"{prefix}:cap"
        self._k_used = f"{prefix}:used"
        self._k_keys = f"{prefix}:keys"
        self._put_script = self.client.register_script(_PUT_LUA)
        self._delete_script = self.client.register_script(_DELETE_LUA)
        wanted = self.spec.capacity_bytes
        stored = self._call(lambda: (self.client.set(self._k_cap, wanted, nx=True), self.client.get(self._k_cap))[1])
        stored = int(stored)
        if capacity_bytes is None:
            self.spec = self.spec.with_capacity(stored)
        elif stored != wanted:
            raise BadInputError(f"pool {prefix!r} on the server has capacity {stored} bytes; this tier asked "
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
        result = self._call(lambda: self._put_script(
            keys=[self._entry(raw_key), self._k_used, self._k_cap, self._k_keys],
            args=[meta, payload, len(payload), raw_key, crc]))
        if int(result[0]) != 1:
            raise CapacityExceededError(
                f"tier {self.name!r}: storing {len(payload)} bytes under {k!r} does not fit; pool {self.prefix!r} "
                f"has {int(result[1])} of {int(result[2])} bytes in use")
        self._count_put(len(payload))

    def get(self, key: Hashable) -> np.ndarray:
        k = normalize_key(key)
        fields = self._call(lambda: self.client.hmget(self._entry(encode_key(k)), "m", "d", "n", "c"))
        out = self._decode(k, fields)
        self._count_get(out.nbytes)
        return out

    def get_many(self, keys: Any) -> list[np.ndarray]:
        """The values of ``keys`` in one round trip (a pipeline); all-or-nothing on errors.

        Runtime complexity: one round trip plus O(total bytes).
        """
        ks = [normalize_key(k) for k in keys]

        def fetch():
            pipe = self.client.pipeline(transaction=False)
            for k in ks:
                pipe.hmget(self._entry(encode_key(k)), "m", "d", "n", "c")
            return pipe.execute()

        rows = self._call(fetch) if ks else []
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
        freed = int(self._call(lambda: self._delete_script(
            keys=[self._entry(raw_key), self._k_used, self._k_keys], args=[raw_key])))
        if freed < 0:
            raise UnknownKeyError(f"tier {self.name!r} (pool {self.prefix!r}) holds no entry {k!r}")
        self._count_delete()

    def contains(self, key: Hashable) -> bool:
        raw_key = encode_key(normalize_key(key))
        return bool(self._call(lambda: self.client.exists(self._entry(raw_key))))

    def keys(self) -> list[Hashable]:
        return [decode_key(raw) for raw in self._call(lambda: self.client.smembers(self._k_keys))]

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
            entry = self._call(lambda: self.client.hmget(self._entry(raw), "n", "d"))
            # Every listed key has an entry whose recorded size is its byte length.
            assert entry[1] is not None and int(entry[0]) == len(entry[1]), raw
            sizes.append(int(entry[0]))
        # The shared counter is the sum of the entries' sizes, within capacity.
        assert self.used_bytes == sum(sizes)
        assert 0 <= self.used_bytes <= self.capacity_bytes

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
            if "OOM" in str(exc):
                raise CapacityExceededError(f"tier {self.name!r}: the Redis server is out of memory ({exc})") from None
            raise BackendUnavailableError(f"tier {self.name!r}: the Redis server refused a command ({exc})") from None
