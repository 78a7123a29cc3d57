"""kvmm tiers and eviction policies inside LMCache (tested against ``lmcache==0.5.6``).

* :class:`KvmmStoragePlugin` - an LMCache storage plugin (``StoragePluginInterface``) over any
  kvmm tier, optionally a :class:`~kvmm.tiers.ManagedTier` with a kvmm eviction policy: an
  ``MmapTier`` (crash-safe, survives a restart), a ``RedisTier`` (shared by many LMCache
  instances) or an ``ArenaTier``.  LMCache's own ``storage_plugin_launcher`` loads it::

      storage_plugins: ["kvmm"]
      extra_config:
        storage_plugin.kvmm.module_path: kvmm.integrations.lmcache
        storage_plugin.kvmm.class_name: KvmmStoragePlugin
        storage_plugin.kvmm.tier: mmap            # mmap | redis | arena
        storage_plugin.kvmm.path: /var/cache/kvmm  # mmap: the tier folder
        storage_plugin.kvmm.capacity_bytes: 100000000000
        storage_plugin.kvmm.eviction: lru         # any online order (lru, s3fifo, ...) | none

  Other keys: ``url`` and ``prefix`` (redis: server and pool name), ``sync`` (mmap: fsync each
  write), ``on_full`` (``skip``, LMCache's own rule for a full disk: the chunk is not stored and
  a warning is logged; or ``raise``: :class:`~kvmm.errors.CapacityExceededError`).
* :class:`KvmmLRU`, :class:`KvmmFIFO`, :class:`KvmmLFU` - kvmm eviction orders as LMCache
  ``BaseCachePolicy`` classes for ``cache_policy`` (LocalCPUBackend, LocalDiskBackend).
  LMCache resolves ``cache_policy`` from a closed dict, so they are added by one call,
  :func:`register_cache_policies` (``cache_policy: kvmm_lru`` then works), made before LMCache
  builds its storage backends (in the script that starts the engine, or a ``sitecustomize``).
  :func:`make_cache_policy` makes one from any :class:`~kvmm.protocols.EvictionPolicy`.
  ARC is not registered: an LMCache cache policy is never told the cache's capacity, which
  ARC's target sizes need (``make_cache_policy(lambda: ARCPolicy(capacity=chunks))`` works when
  the chunk capacity is known); the plugin's ``eviction: arc`` is told it by ManagedTier.

Pin and ref-count rules (LMCache's, read from its LocalCPUBackend and LocalDiskBackend):

* ``contains(key, pin=True)``, ``batched_async_contains(..., pin=True)`` and ``pin(key)``
  pin a stored chunk; ``unpin`` releases one pin.  A pinned chunk is never evicted (it is a
  protected key of every put) and ``remove(key, force=False)`` refuses it; ``remove(key)``
  (forced, from outside) drops it and its pins, like LocalCPUBackend.
* ``batched_submit_put_task`` copies each chunk into the tier before it returns: the plugin
  keeps no reference to the caller's ``MemoryObj`` (no ``ref_count_up``), so the storage
  manager's ``ref_count_down`` frees it; ``exists_in_put_tasks`` is always False.
* ``get_blocking`` returns a new ``MemoryObj`` from the LocalCPUBackend's allocator with one
  reference, owned by the caller (it calls ``ref_count_down``), as LocalDiskBackend does.
* A chunk is stored as one tier value: a header naming its shape, dtype and memory format,
  then its bytes.  One value is one tier write, so a crash (``kill -9``) leaves the old state
  or the new chunk, never a chunk without its header (MmapTier drops a torn record).

What runs where: everything here is CPU-side (LMCache's storage manager calls the plugin with
CPU ``MemoryObj`` objects); on a GPU server the same plugin and policies run unchanged inside
vLLM or SGLang with LMCache, whose GPU connectors copy KV between GPU and these CPU objects.
The tests drive LMCache's storage layer on CPU only; the GPU connectors are not exercised.

Importing this module imports LMCache; ``import kvmm`` never does.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from typing import Any, ClassVar

import numpy as np

try:
    import torch
    from lmcache.utils import CacheEngineKey
    from lmcache.v1.memory_management import MemoryFormat
    from lmcache.v1.storage_backend import cache_policy as _lmcache_policies
    from lmcache.v1.storage_backend.abstract_backend import StoragePluginInterface
    from lmcache.v1.storage_backend.cache_policy.base_policy import BaseCachePolicy
except ImportError as exc:  # pragma: no cover - exercised only without LMCache
    raise ImportError(
        "kvmm.integrations.lmcache needs LMCache's storage backends (tested with lmcache==0.5.6). "
        "On a CPU machine: pip install torch==2.13.0 && pip install --no-deps lmcache==0.5.6 && "
        "pip install -r .ci/requirements-lmcache.txt (see README, 'Use inside LMCache'); "
        f"import failed with: {exc}") from exc

from kvmm._policy_hooks import PolicyHooks
from kvmm.errors import BadInputError, CapacityExceededError, CorruptEntryError, DTypeError, ShapeError
from kvmm.integrations import _framed_value as framed_value
from kvmm.integrations._policy_factory import policy_factory
from kvmm.integrations._tier_settings import build_tier, choice
from kvmm.policies.eviction import FIFOPolicy, LFUPolicy, LRUPolicy
from kvmm.tiers import ManagedTier

__all__ = [
    "KvmmStoragePlugin",
    "KvmmCachePolicy",
    "KvmmLRU",
    "KvmmFIFO",
    "KvmmLFU",
    "make_cache_policy",
    "register_cache_policies",
    "CACHE_POLICY_NAMES",
    "MODULE_PATH",
]

#: The value for ``storage_plugin.<name>.module_path``.
MODULE_PATH = __name__

logger = logging.getLogger(__name__)

_MAGIC = b"KVMMLMC1"
_SETTINGS = ("module_path", "class_name", "tier", "path", "url", "prefix", "capacity_bytes", "eviction",
             "sync", "on_full")


class KvmmStoragePlugin(StoragePluginInterface):
    """An LMCache storage plugin over a kvmm tier (see the module docstring for the keys).

    Built by LMCache's ``storage_plugin_launcher`` from ``extra_config``, or in Python with
    ``tier=`` (any kvmm tier, e.g. a ``ManagedTier``); ``local_cpu_backend`` is the allocator
    of the chunks ``get_blocking`` returns.

    Runtime complexity: ``contains``/``pin``/``unpin``/``remove`` O(1) (one round trip on
    Redis); ``batched_submit_put_task`` O(chunk bytes) per chunk plus the tier's eviction;
    ``get_blocking`` O(chunk bytes).
    """

    def __init__(self, dst_device: str = "cpu", config: Any = None, metadata: Any = None,
                 local_cpu_backend: Any = None, loop: Any = None, *, tier: Any = None,
                 on_full: str = "skip") -> None:
        super().__init__(dst_device=dst_device, config=config, metadata=metadata,
                         local_cpu_backend=local_cpu_backend, loop=loop)
        settings = _plugin_settings(config, type(self).__name__) if tier is None else {"on_full": on_full}
        self.on_full = _choice(settings.get("on_full", "skip"), ("skip", "raise"), "on_full")
        self.tier = _build_tier(settings) if tier is None else tier
        #: chunks a full tier turned away (``on_full: skip``)
        self.refused = 0
        self._pins: dict[str, int] = {}  # tier key -> pin count (stored chunks only)
        self._lock = threading.RLock()
        self.keys_in_request: list[str] = []

    def __str__(self) -> str:
        return type(self).__name__

    # -- lookups and pins ---------------------------------------------------------------------
    def contains(self, key: CacheEngineKey, pin: bool = False) -> bool:
        k = _tier_key(key)
        if not pin:
            return self.tier.contains(k)
        with self._lock:
            if not self._add_pin(k):
                return False
            self.keys_in_request.append(k)  # touch_cache counts the lookup's pins as hits
            return True

    async def batched_async_contains(self, lookup_id: str, keys: list[CacheEngineKey], pin: bool = False) -> int:
        """The number of leading keys stored (LMCache counts prefix hits only)."""
        return self.batched_contains(keys, pin)

    def exists_in_put_tasks(self, key: CacheEngineKey) -> bool:
        _tier_key(key)
        return False  # puts complete before batched_submit_put_task returns

    def pin(self, key: CacheEngineKey) -> bool:
        return self._add_pin(_tier_key(key))

    def unpin(self, key: CacheEngineKey) -> bool:
        k = _tier_key(key)
        with self._lock:
            if not self.tier.contains(k):
                return False
            count = self._pins.get(k, 0)
            if count <= 1:
                self._pins.pop(k, None)
            else:
                self._pins[k] = count - 1
            return True

    def touch_cache(self) -> None:
        """The chunks pinned by the last lookup count as hits for the tier's eviction policy,
        suffix first (LocalCPUBackend's order), so a request's head ends most recent."""
        with self._lock:
            if isinstance(self.tier, ManagedTier):  # a tier without a policy has nothing to tell
                for k in reversed(self.keys_in_request):
                    self.tier.access(k)  # deletes what the policy evicts on its own (an SLRU hit's cooling)
            self.keys_in_request = []

    # -- puts ---------------------------------------------------------------------------------
    def batched_submit_put_task(self, keys: Sequence[CacheEngineKey], memory_objs: Sequence[Any],
                                transfer_spec: Any = None, on_complete_callback: Callable | None = None) -> None:
        """Store each chunk not already stored.  Every key and object is checked before the
        first write, so bad input raises (a KvmmError naming it) with the tier unchanged."""
        keys, memory_objs = list(keys), list(memory_objs)
        if len(keys) != len(memory_objs):
            raise ShapeError(f"batched_submit_put_task got {len(keys)} keys and {len(memory_objs)} memory objects; "
                             "expected one object per key")
        values = [(_tier_key(key), _encode_chunk(key, obj)) for key, obj in zip(keys, memory_objs)]
        for key, (k, value) in zip(keys, values):
            with self._lock:
                if self.tier.contains(k):
                    continue
                try:
                    if isinstance(self.tier, ManagedTier):
                        self.tier.put(k, value, protected=list(self._pins))
                    else:
                        self.tier.put(k, value)
                except CapacityExceededError as exc:
                    if self.on_full == "raise":
                        raise
                    self.refused += 1
                    logger.warning("kvmm plugin: chunk %s not stored: %s", k, exc)
                    continue
            if on_complete_callback is not None:
                try:
                    on_complete_callback(key)
                except Exception as exc:  # LMCache's rule: a callback failure is logged, not raised
                    logger.warning("on_complete_callback failed for key %s: %s", key, exc)

    def submit_put_task(self, key: CacheEngineKey, memory_obj: Any, on_complete_callback: Callable | None = None) -> None:
        self.batched_submit_put_task([key], [memory_obj], on_complete_callback=on_complete_callback)

    # -- gets ---------------------------------------------------------------------------------
    def get_blocking(self, key: CacheEngineKey) -> Any:
        """A new MemoryObj (one reference, the caller's) with the stored bytes, or None."""
        k = _tier_key(key)
        with self._lock:
            if not self.tier.contains(k):
                return None
            raw = self.tier.get(k)
        shape, dtype, fmt, payload = _decode_chunk(k, raw, key.dtype)
        if self.local_cpu_backend is None:
            raise BadInputError("KvmmStoragePlugin.get_blocking needs local_cpu_backend (LMCache passes its "
                                "LocalCPUBackend): the chunk is copied into memory it allocates")
        memory_obj = self.local_cpu_backend.allocate(shape, dtype, fmt)
        if memory_obj is None:
            return None
        # numpy's copy: torch's copy_ of a small CPU tensor can wait on its busy intra-op pool
        np.copyto(memory_obj.tensor.reshape(-1).view(torch.uint8).numpy(), payload)
        return memory_obj

    def get_non_blocking(self, key: CacheEngineKey, location: str | None = None) -> Future | None:
        memory_obj = self.get_blocking(key)
        if memory_obj is None:
            return None
        future: Future = Future()
        future.set_result(memory_obj)
        return future

    async def batched_get_non_blocking(self, lookup_id: str, keys: list[CacheEngineKey],
                                       transfer_spec: Any = None) -> list[Any]:
        """The chunks of ``keys`` in order, stopping at the first that is gone; each loaded
        chunk's lookup pin is released (LocalDiskBackend's rule)."""
        out = []
        for key in keys:
            memory_obj = self.get_blocking(key)
            if memory_obj is None:
                break
            self.unpin(key)
            out.append(memory_obj)
        return out

    # -- removal ------------------------------------------------------------------------------
    def remove(self, key: CacheEngineKey, force: bool = True) -> bool:
        k = _tier_key(key)
        with self._lock:
            if not self.tier.contains(k) or (not force and self._pins.get(k, 0) > 0):
                return False
            self.tier.delete(k)
            self._pins.pop(k, None)  # a forced remove releases the lookup pins (LocalCPUBackend)
            return True

    def clear(self) -> int:
        """Remove every unpinned chunk; returns the number of chunks removed (LMCache's
        storage manager adds it to its cleared-token count: the plugin keeps no token counts)."""
        with self._lock:
            victims = [k for k in self.tier.keys() if self._pins.get(k, 0) == 0]
            for k in victims:
                self.tier.delete(k)
            return len(victims)

    def get_allocator_backend(self) -> Any:
        return self.local_cpu_backend

    def close(self) -> None:
        backend = getattr(self.tier, "backend", self.tier)
        if hasattr(backend, "close"):
            backend.close()

    def pinned(self) -> dict[str, int]:
        """Pin count of every pinned chunk, by tier key (for tests and monitoring)."""
        with self._lock:
            return dict(self._pins)

    def _add_pin(self, k: str) -> bool:
        with self._lock:
            if not self.tier.contains(k):
                return False
            self._pins[k] = self._pins.get(k, 0) + 1
            return True


class KvmmCachePolicy(BaseCachePolicy):
    """An LMCache ``BaseCachePolicy`` whose eviction order is a kvmm policy's.

    Subclasses set ``new_policy`` (a zero-argument callable returning a fresh
    :class:`~kvmm.protocols.EvictionPolicy`).  Each chunk is one entry (size 1).  The mapping
    from ``init_mutable_mapping`` tells the policy of every removal (LMCache removes victims
    itself, by ``pop``, and tells a policy only of forced removes), so the policy tracks exactly
    the resident chunks whatever path removed them.

    Events: ``update_on_put`` -> ``on_insert``; ``update_on_hit`` -> ``on_access`` (a key no
    longer resident is ignored: LMCache's LRU would raise KeyError there);
    ``get_evict_candidates`` -> the policy's order, skipping chunks that are not resident yet
    (a disk write in flight) or cannot be evicted (pinned, or referenced), best effort like
    LMCache's policies: fewer than asked when fewer can go.  A candidate LMCache then pops is an
    eviction (``on_evict``: 2Q keeps a ghost, LIRS a non-resident entry); any other removal is
    ``on_remove``.  The keys an ``on_insert`` / ``on_access`` returns, evicted on the policy's
    own (2Q's Am quota, LIRS's demotions, SLRU's and W-TinyLFU's cooling), are no longer the
    policy's, as under ManagedTier, and stay in LMCache as *dropped* chunks, the first
    candidates; a hit on one is a new insert for the policy.

    Runtime complexity: O(1) per event for LRU/FIFO (LFU: O(log n)); candidates
    O(skipped + returned) amortised.
    """

    new_policy: ClassVar[Callable[[], Any]]

    def __init__(self) -> None:
        self.policy = type(self).new_policy()
        self._hooks = PolicyHooks(self.policy)
        # Resident keys the policy evicted on its own, oldest first: the first candidates.
        self.dropped: dict[Any, None] = {}
        # The policy's candidates of the last get_evict_candidates: popping one is an eviction.
        self._candidates: set = set()

    def init_mutable_mapping(self) -> _PolicyMapping:
        return _PolicyMapping(self)

    def update_on_hit(self, key: Any, cache_dict: Any) -> None:
        if key in self.dropped:  # the policy had evicted it: back as a new entry
            del self.dropped[key]
            self._insert(key)
        elif key in self.policy:
            self._hand_over(self._hooks.access(key))

    def update_on_put(self, key: Any) -> None:
        self.dropped.pop(key, None)
        if key in self.policy:  # a re-put the mapping did not see leave: a fresh entry
            self.policy.on_remove(key)
        self._insert(key)

    def update_on_force_evict(self, key: Any) -> None:
        self._forget(key)

    def get_evict_candidates(self, cache_dict: Any, num_candidates: int = 1) -> list[Any]:
        if num_candidates <= 0:
            return []
        dropped = [k for k in self.dropped if _evictable(cache_dict, k)][:num_candidates]
        wanted = num_candidates - len(dropped)
        chosen = self._policy_candidates(cache_dict, wanted) if wanted else []
        self._candidates = set(chosen)
        return dropped + chosen

    def _policy_candidates(self, cache_dict: Any, wanted: int) -> list[Any]:
        """Up to ``wanted`` evictable keys in the policy's order (asking for more victims while
        too many are skipped)."""
        n = wanted
        while True:
            order = self.policy.victims(n)
            out = [key for key in order if _evictable(cache_dict, key)][:wanted]
            if len(out) == wanted or len(order) < n:
                return out
            n *= 2

    def check(self) -> None:
        """Assert every invariant (used by tests)."""
        # A dropped key is resident in LMCache (the mapping forgets it on removal) and not tracked.
        assert all(key not in self.policy for key in self.dropped)

    def _insert(self, key: Any) -> None:
        self._hand_over(self._hooks.insert(key, 1))

    def _hand_over(self, evicted: Any) -> None:
        """The keys the policy evicted on its own during an event: dropped, oldest first."""
        if evicted:
            self.dropped.update(dict.fromkeys(evicted))

    def _forget(self, key: Any) -> None:
        """``key`` left LMCache: an eviction if it was the policy's candidate, else a delete."""
        if key in self.dropped:
            del self.dropped[key]
        elif key in self.policy:
            (self._hooks.evict if key in self._candidates else self._hooks.remove)(key)
        self._candidates.discard(key)


def _evictable(cache_dict: Any, key: Any) -> bool:
    entry = cache_dict.get(key)
    return entry is not None and entry.can_evict


class _PolicyMapping(dict):
    """LMCache's hot cache dict that tells the kvmm cache policy when a chunk leaves it."""

    def __init__(self, owner: KvmmCachePolicy) -> None:
        super().__init__()
        self._forget = owner._forget

    def __delitem__(self, key: Any) -> None:
        super().__delitem__(key)
        self._forget(key)

    def pop(self, key: Any, *default: Any) -> Any:
        present = key in self
        value = super().pop(key, *default)
        if present:
            self._forget(key)
        return value

    def popitem(self) -> tuple:
        key, value = super().popitem()
        self._forget(key)
        return key, value

    def clear(self) -> None:
        for key in list(self):
            self._forget(key)
        super().clear()


def make_cache_policy(policy: Any, *, name: str | None = None) -> type[KvmmCachePolicy]:
    """A :class:`KvmmCachePolicy` subclass ordered by ``policy``: a class or zero-argument
    callable returning an :class:`~kvmm.protocols.EvictionPolicy`, or such an object (each
    LMCache backend gets a deep copy of it)."""
    factory, probe = policy_factory(policy, need_contains=True)
    return type(name or f"Kvmm{type(probe).__name__}", (KvmmCachePolicy,), {
        "new_policy": staticmethod(factory), "__module__": __name__,
        "__doc__": f"LMCache cache policy ordered by kvmm's {type(probe).__name__}."})


KvmmLRU = make_cache_policy(LRUPolicy, name="KvmmLRU")
KvmmFIFO = make_cache_policy(FIFOPolicy, name="KvmmFIFO")
KvmmLFU = make_cache_policy(LFUPolicy, name="KvmmLFU")

#: ``cache_policy`` name -> class, added to LMCache by :func:`register_cache_policies`.
CACHE_POLICY_NAMES = {"KVMM_LRU": KvmmLRU, "KVMM_FIFO": KvmmFIFO, "KVMM_LFU": KvmmLFU}


def register_cache_policies(extra: dict[str, Any] | None = None) -> list[str]:
    """Add kvmm's cache policies (and ``extra``: name -> policy class, EvictionPolicy or factory)
    to LMCache's closed ``POLICY_MAPPING``; returns the names, as ``cache_policy`` accepts
    them (any case).  Idempotent.  Call it before LMCache builds its storage backends."""
    added = dict(CACHE_POLICY_NAMES)
    for name, policy in (extra or {}).items():
        if not isinstance(name, str) or not name:
            raise BadInputError(f"cache policy names must be non-empty strings, got {name!r}")
        cls = policy if isinstance(policy, type) and issubclass(policy, BaseCachePolicy) else make_cache_policy(policy)
        added[name.upper()] = cls
    taken = [n for n in added if n in ("LRU", "LFU", "FIFO", "MRU")]
    if taken:
        raise BadInputError(f"cache policy name {taken[0]!r} is LMCache's own; choose another name")
    _lmcache_policies.POLICY_MAPPING.update(added)
    return sorted(added)


# -- helpers ------------------------------------------------------------------------------------
def _tier_key(key: Any) -> str:
    if not isinstance(key, CacheEngineKey):
        raise DTypeError(f"LMCache keys must be CacheEngineKey objects, got {type(key).__name__} {key!r}")
    return key.to_string()


def _encode_chunk(key: CacheEngineKey, memory_obj: Any) -> np.ndarray:
    """One uint8 array: magic, header length, JSON header (shape, dtype, format), bytes."""
    tensor = getattr(memory_obj, "tensor", None)
    if not isinstance(tensor, torch.Tensor):
        raise BadInputError(f"chunk {key.to_string()}: expected an LMCache MemoryObj with a tensor, "
                            f"got {type(memory_obj).__name__}")
    if tensor.dtype != key.dtype:
        raise DTypeError(f"chunk {key.to_string()}: tensor dtype {tensor.dtype} differs from the key's dtype "
                         f"{key.dtype}; expected the KV dtype the key names")
    prefix = _header_prefix(tuple(tensor.shape), str(tensor.dtype).removeprefix("torch."),
                            int(memory_obj.get_memory_format().value))
    data = tensor.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy()
    return framed_value.join(prefix, data)


@functools.lru_cache(maxsize=256)
def _header_prefix(shape: tuple, dtype: str, fmt: int) -> np.ndarray:
    """Magic, header length and JSON header of a chunk of this shape, dtype and format (the same
    bytes for every chunk of a model: built once)."""
    return framed_value.header_prefix(_MAGIC, json.dumps({"shape": list(shape), "dtype": dtype, "fmt": fmt}).encode())


@functools.lru_cache(maxsize=256)
def _parse_header(header: bytes) -> tuple:
    """(shape, dtype, format) of a chunk header (``KeyError`` / ``ValueError`` / ... when it is not
    one this plugin wrote); parsed once per distinct header."""
    fields = json.loads(header)
    return torch.Size(fields["shape"]), getattr(torch, fields["dtype"]), MemoryFormat(fields["fmt"])


def _decode_chunk(k: str, raw: np.ndarray, key_dtype: Any) -> tuple:
    try:
        header, payload = framed_value.split(raw, _MAGIC, "chunk")
        shape, dtype, fmt = _parse_header(header)
        expected = shape.numel() * dtype.itemsize
        if payload.size != expected:
            raise ValueError(f"{payload.size} payload bytes, the header's shape needs {expected}")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CorruptEntryError(f"tier entry {k!r} is not a chunk this plugin wrote: {exc}") from None
    if dtype != key_dtype:
        raise CorruptEntryError(f"tier entry {k!r} holds dtype {dtype}, its key names {key_dtype}")
    return shape, dtype, fmt, payload


def _plugin_settings(config: Any, class_name: str) -> dict[str, Any]:
    """The ``storage_plugin.<name>.*`` keys of the one plugin whose class_name is ours."""
    extra = dict(getattr(config, "extra_config", None) or {})
    names = [n for n in (getattr(config, "storage_plugins", None) or [])
             if extra.get(f"storage_plugin.{n}.class_name") == class_name]
    if len(names) != 1:
        raise BadInputError(f"{class_name}: expected exactly one storage plugin with class_name {class_name!r} in "
                            f"storage_plugins, found {names or 'none'} (one kvmm plugin per LMCache config)")
    prefix = f"storage_plugin.{names[0]}."
    settings = {k[len(prefix):]: v for k, v in extra.items() if k.startswith(prefix)}
    unknown = sorted(set(settings) - set(_SETTINGS))
    if unknown:
        raise BadInputError(f"unknown kvmm plugin setting {prefix}{unknown[0]}; expected one of "
                            f"{[prefix + s for s in _SETTINGS]}")
    return settings


def _choice(value: Any, allowed: Iterable[str], what: str) -> str:
    return choice(value, allowed, f"kvmm plugin setting {what}")


def _build_tier(settings: dict[str, Any]) -> Any:
    return build_tier(settings, what="kvmm plugin setting", redis_prefix="kvmm-lmcache")
