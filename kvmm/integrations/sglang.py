"""kvmm tiers and eviction orders inside SGLang (tested against ``sglang==0.5.23``).

* :class:`KvmmHiCacheStorage` - a SGLang HiCache storage backend (``HiCacheStorage``, SGLang's
  L3 below GPU and host memory) over any kvmm tier, optionally a
  :class:`~kvmm.tiers.ManagedTier` with a kvmm eviction policy and a kvmm admission policy: an
  ``MmapTier`` (crash-safe, survives a restart), a ``RedisTier`` (one pool shared by many SGLang
  instances) or an ``ArenaTier`` (with ARC, say).  SGLang's own ``StorageBackendFactory``
  loads it through its ``dynamic`` backend::

      --enable-hierarchical-cache --hicache-storage-backend dynamic
      --hicache-storage-backend-extra-config '{"backend_name": "kvmm",
          "module_path": "kvmm.integrations.sglang", "class_name": "KvmmHiCacheStorage",
          "tier": "mmap", "path": "/var/cache/kvmm", "capacity_bytes": 100000000000,
          "eviction": "lru"}'

  Keys of the extra config (besides the factory's ``backend_name``, ``module_path``,
  ``class_name`` and SGLang's own ``interface_v1``, ``prefetch_threshold``, ...):
  ``tier`` (``mmap`` | ``redis`` | ``arena``), ``path`` (mmap: the tier folder),
  ``capacity_bytes``, ``eviction`` (any online order of :data:`kvmm.policies.EVICTION_POLICIES`,
  ``lru`` | ``s3fifo`` | ... (not ``belady``), or ``none``),
  ``admission`` (a class of :mod:`kvmm.policies.admission`, e.g. ``"StoreThreshold"``, or
  ``"package.module:Class"``) with ``admission_args`` (``{"k": 2}``), ``url`` and ``prefix``
  (redis: server and pool name), ``sync`` (mmap: fsync each write) and ``on_full``
  (``fail``: ``set`` returns False, SGLang's documented result for a page not stored, as its
  file backend does when its disk budget is spent; ``raise``:
  :class:`~kvmm.errors.CapacityExceededError`, which SGLang's backup thread logs).
* :func:`make_eviction_strategy` - kvmm's LRU, FIFO and LFU as SGLang radix-cache
  ``EvictionStrategy`` classes (:mod:`kvmm.integrations.sglang_eviction`); every other order is refused.

SGLang's semantics, read from its ``HiCacheStorage`` and ``HiCacheFile`` (the file backend):

* keys are page hashes (``str``), scoped here by model and tensor-parallel shard exactly as
  HiCacheFile scopes its file names (MLA pages are shared by every TP rank), so two ranks never
  read each other's shard and two instances of one model share pages through a shared tier;
* ``get(key, target_location)`` fills ``target_location`` (the host pool's flat page) and
  returns it, ``None`` when the page is missing; without a target it returns a new tensor of
  the stored dtype and shape.  ``set`` of a stored page returns True without rewriting it (a
  hit for the eviction policy); ``batch_set`` returns whether every page was stored;
  ``batch_exists`` counts the leading pages stored (the prefix a prefetch can load);
* ``batch_get_v1`` / ``batch_set_v1`` (``"interface_v1": 1``) move pages between the registered
  host pool and the tier by host index, with the pool's own ``get_data_page`` /
  ``set_from_flat_data_page``, so page-first and layer-first host layouts both round-trip.
* ``register_mem_host_pool_v2``, ``batch_exists_v2``, ``batch_get_v2``, ``batch_set_v2``: a
  hybrid model's sidecar pools (Mamba and SWA states, the DSA indexer), which SGLang's
  ``HybridCacheController`` moves beside the KV pages, each page validated against its own
  pool's page; the answers, the per-pool keys (``key.<pool>``, Mamba state TP-sharded even for
  MLA) and the hit policies ``all_pages`` / ``trailing_pages`` are HiCacheFile's (the tests run
  both side by side); ``block_groups``, which HiCacheFile does not take either, raises.

A page is one tier value: a header naming dtype and shape, then the tensor's bytes, written in
one ``put`` (on MmapTier one record: a ``kill -9`` leaves the old state or the whole page,
never a torn one).  Bad input (a key that is not a ``str``, a value that is not a tensor or
whose dtype or size differs from the registered host pool's page, a batch whose lengths
differ) raises a :class:`~kvmm.errors.KvmmError` naming it before anything is written.

What runs where: the tests drive SGLang's factory, its host-pool page code and a real
``RadixCache`` on CPU.  On a GPU server the same flags load the same class; the scheduler, the
HiCache controller's threads and the GPU<->host copies are SGLang's and are not exercised here.

Importing this module imports SGLang's HiCache storage module; ``import kvmm`` never does.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

try:
    import torch
    from sglang.srt.mem_cache.hicache_storage import (
        HiCacheStorage,
        HiCacheStorageConfig,
        PoolHitPolicy,
        PoolName,
        PoolTransferResult,
    )
except ImportError as exc:  # pragma: no cover - exercised only without SGLang
    raise ImportError(
        "kvmm.integrations.sglang needs SGLang's HiCache storage module (tested with sglang==0.5.23). "
        "On a CPU machine: pip install torch==2.13.0 && pip install --no-deps sglang==0.5.23 && "
        "pip install -r .ci/requirements-sglang.txt (see README, 'Use inside SGLang'); "
        f"import failed with: {exc}") from exc

from kvmm.errors import BadInputError, CapacityExceededError, CorruptEntryError, DTypeError, ShapeError
from kvmm.integrations import _framed_value as framed_value
from kvmm.integrations._policy_factory import load_admission
from kvmm.integrations._tier_settings import build_tier, choice
from kvmm.integrations.sglang_eviction import STRATEGY_NAMES, make_eviction_strategy, register_eviction_strategies
from kvmm.policies.admission import AdmissionRequest, admission_mask
from kvmm.protocols import AdmissionPolicy
from kvmm.tiers import ManagedTier

__all__ = ["KvmmHiCacheStorage", "make_eviction_strategy", "register_eviction_strategies", "STRATEGY_NAMES",
           "MODULE_PATH", "CLASS_NAME"]

#: ``module_path`` and ``class_name`` for SGLang's ``dynamic`` storage backend.
MODULE_PATH = __name__
CLASS_NAME = "KvmmHiCacheStorage"

logger = logging.getLogger(__name__)

_MAGIC = b"KVMMSGL1"
# What a host pool needs for its pages to move (SGLang's HostKVCache page code).
_PAGE_METHODS = ("get_data_page", "get_dummy_flat_data_page", "set_from_flat_data_page")
# The factory's keys and SGLang's own HiCache keys, which share the extra config with ours.
_ENGINE_KEYS = ("backend_name", "module_path", "class_name", "interface_v1", "prefetch_threshold",
                "prefetch_timeout_base", "prefetch_timeout_per_ki_token", "hicache_storage_pass_prefix_keys",
                "tp_lcm_size")
_SETTINGS = ("tier", "path", "url", "prefix", "capacity_bytes", "eviction", "admission", "admission_args",
             "sync", "on_full")


class KvmmHiCacheStorage(HiCacheStorage):
    """A SGLang HiCache storage backend over a kvmm tier (see the module docstring for the keys).

    Built by SGLang's ``StorageBackendFactory`` (``dynamic`` backend) as
    ``KvmmHiCacheStorage(storage_config, kwargs)``, or in Python with ``tier=`` (any kvmm tier,
    e.g. a ``ManagedTier``) and optionally ``admission=`` (a kvmm AdmissionPolicy).

    Runtime complexity: ``exists`` O(1) (one round trip on Redis); ``batch_exists`` O(leading
    hits + 1); ``set`` / ``get`` O(page bytes) plus the tier's eviction; batch calls the sum.
    """

    def __init__(self, storage_config: HiCacheStorageConfig, kwargs: Any = None, *, tier: Any = None,
                 admission: Any = None, on_full: str = "fail") -> None:
        if not isinstance(storage_config, HiCacheStorageConfig):
            raise DTypeError(f"KvmmHiCacheStorage needs SGLang's HiCacheStorageConfig, got "
                             f"{type(storage_config).__name__}")
        extra = dict(storage_config.extra_config or {})
        settings = _settings(extra) if tier is None else {"on_full": on_full}
        self.on_full = _choice(settings.get("on_full", "fail"), ("fail", "raise"), "on_full")
        if admission is None and "admission" in settings:
            admission = _load_admission(settings["admission"], settings.get("admission_args") or {})
        if admission is not None and not isinstance(admission, AdmissionPolicy):
            raise BadInputError(f"admission must be a kvmm AdmissionPolicy (an admit(request) method), "
                                f"got {type(admission).__name__}")
        self.tier = _build_tier(settings) if tier is None else tier
        self.admission = admission
        self.storage_config = storage_config
        self.key_suffix = _key_suffix(storage_config)
        # Mamba state is sharded by TP rank even where the model's MLA KV is not (as HiCacheFile keys it).
        self.sharded_key_suffix = _key_suffix(storage_config, sharded=True)
        self.mem_pool_host = None
        #: pool name -> host pool of a hybrid model's sidecar pools (register_mem_host_pool_v2)
        self.registered_pools: dict[str, Any] = {}
        #: pages a full tier turned away, and pages the admission policy declined
        self.refused = 0
        self.admission_skipped = 0
        self._lock = threading.RLock()  # SGLang calls from its prefetch and backup threads

    # -- lookups ------------------------------------------------------------------------------
    def exists(self, key: str) -> bool:
        return self.tier.contains(self._tier_key(key))

    def batch_exists(self, keys: list[str], extra_info: Any = None) -> int:
        """How many leading ``keys`` are stored (SGLang loads only a prefix)."""
        tier_keys = [self._tier_key(k) for k in keys]
        for i, k in enumerate(tier_keys):
            if not self.tier.contains(k):
                return i
        return len(tier_keys)

    # -- reads --------------------------------------------------------------------------------
    def get(self, key: str, target_location: Any = None, target_sizes: Any = None) -> torch.Tensor | None:
        return self._read(self._tier_key(key), key, target_location)

    def _read(self, k: str, key: str, target_location: Any) -> torch.Tensor | None:
        """The page stored under tier key ``k`` (SGLang's ``key``), into ``target_location``."""
        if target_location is not None:
            _require_tensor(target_location, f"page {key!r}: target_location")
        with self._lock:
            if not self.tier.contains(k):
                return None
            raw = self.tier.get(k)
        dtype, shape, payload = _decode_page(k, raw)
        if target_location is None:
            out = torch.empty(shape, dtype=dtype)
            np.copyto(out.reshape(-1).view(torch.uint8).numpy(), payload)
            return out
        if target_location.dtype != dtype:
            raise DTypeError(f"page {key!r} holds {dtype}; target_location is {target_location.dtype}: "
                             "expected the host pool's page dtype")
        if target_location.nbytes != payload.size:
            raise ShapeError(f"page {key!r} holds {dtype} of shape {tuple(shape)} ({payload.size} bytes); "
                             f"target_location is {target_location.dtype} of shape {tuple(target_location.shape)} "
                             f"({target_location.nbytes} bytes): expected the host pool's page")
        if target_location.is_contiguous() and target_location.device.type == "cpu":
            # numpy's copy: torch's copy_ of a small CPU tensor wakes its thread pool (ms on a busy host)
            np.copyto(target_location.reshape(-1).view(torch.uint8).numpy(), payload)
        else:
            target_location.copy_(torch.from_numpy(payload.copy()).view(dtype).reshape(target_location.shape))
        return target_location

    def batch_get(self, keys: list[str], target_locations: Any = None, target_sizes: Any = None) -> list:
        keys = list(keys)
        targets = [None] * len(keys) if target_locations is None else list(target_locations)
        if len(targets) != len(keys):
            raise ShapeError(f"batch_get got {len(keys)} keys and {len(targets)} target locations; "
                             "expected one target per key")
        return [self.get(k, t) for k, t in zip(keys, targets)]

    def batch_get_v1(self, keys: list[str], host_indices: Any, extra_info: Any = None) -> list[bool]:
        """Load each page into the registered host pool at its host index; per-page success."""
        pool, starts = self._host_pages(keys, host_indices)
        out = []
        for key, start in zip(keys, starts):
            page = self.get(key, pool.get_dummy_flat_data_page())
            if page is not None:
                pool.set_from_flat_data_page(start, page)
            out.append(page is not None)
        return out

    # -- writes -------------------------------------------------------------------------------
    def set(self, key: str, value: Any = None, target_location: Any = None, target_sizes: Any = None) -> bool:
        return self.batch_set([key], [value])

    def batch_set(self, keys: list[str], values: Any = None, target_locations: Any = None,
                  target_sizes: Any = None) -> bool:
        """Store each page not already stored; True when every page is stored.  Every key and
        value is checked before the first write, so bad input raises with the tier unchanged.
        Pages go in order and stop at the first one refused (SGLang loads only a prefix)."""
        return all(self._store(list(keys), values))

    def batch_set_v1(self, keys: list[str], host_indices: Any, extra_info: Any = None) -> list[bool]:
        """Store the host pool's pages at ``host_indices``; per-page success."""
        pool, starts = self._host_pages(keys, host_indices)
        return self._store(list(keys), [pool.get_data_page(s, flat=True) for s in starts])

    def _store(self, keys: list, values: Any, pool_name: str = PoolName.KV, pool: Any = None) -> list[bool]:
        values = None if values is None else list(values)
        if values is None or len(values) != len(keys):
            n = "no" if values is None else len(values)
            raise ShapeError(f"batch_set got {len(keys)} keys and {n} values; expected one tensor per key")
        tier_keys = [self._tier_key(k, pool_name) for k in keys]
        expected = self._expected_page(pool)
        encoded = [_encode_page(k, v, expected) for k, v in zip(keys, values)]
        results = [False] * len(keys)
        with self._lock:
            stored = np.fromiter((self.tier.contains(k) for k in tier_keys), dtype=bool, count=len(keys))
            admitted = ~stored
            if self.admission is not None and len(keys):
                request = AdmissionRequest(keys=_key_words(tier_keys), cached=stored)
                admitted = admission_mask(self.admission.admit(request), len(keys), self.admission) & ~stored
            written: set[str] = set()
            for i, (k, value) in enumerate(zip(tier_keys, encoded)):
                if stored[i]:
                    self._touch(k)
                elif k in written:  # the same page twice in one batch: stored by its first copy
                    pass
                elif not admitted[i]:
                    self.admission_skipped += 1
                    break
                elif not self._put(k, value):
                    break
                else:
                    written.add(k)
                results[i] = True
        return results

    def _put(self, k: str, value: np.ndarray) -> bool:
        try:
            self.tier.put(k, value)
        except CapacityExceededError as exc:
            if self.on_full == "raise":
                raise
            self.refused += 1
            logger.warning("kvmm HiCache storage: page %s not stored: %s", k, exc)
            return False
        return True

    def _touch(self, k: str) -> None:
        """A re-set of a stored page counts as a use for the tier's eviction policy (which may
        evict on its own: the tier deletes those pages)."""
        if isinstance(self.tier, ManagedTier):
            self.tier.access(k)

    # -- a hybrid model's sidecar pools (Mamba/SWA states, DSA indexer): SGLang's v2 calls ------
    def register_mem_host_pool_v2(self, host_pool: Any, host_pool_name: Any) -> None:
        """A host pool whose pages travel beside the KV pages (``PoolTransfer.name``)."""
        missing = [m for m in _PAGE_METHODS if not callable(getattr(host_pool, m, None))]
        if missing:
            raise BadInputError(f"host pool {host_pool_name!r} ({type(host_pool).__name__}) lacks {', '.join(missing)}; "
                                "expected a SGLang host KV pool")
        self.registered_pools[host_pool_name] = host_pool

    def batch_exists_v2(self, keys: list[str], pool_transfers: Any = None, extra_info: Any = None) -> PoolTransferResult:
        """HiCacheFile's rule: the KV pages' leading run, cut by each pool's hit policy
        (``all_pages``: its page of every KV page; ``trailing_pages``: its pages of the last
        ``len(transfer.keys)`` KV pages of a prefix); ``restorable_prefix_pages`` lists the
        prefix lengths every pool can restore, the usable prefix is the longest."""
        keys, transfers = list(keys), list(pool_transfers or [])
        for transfer in transfers:
            if transfer.hit_policy not in (PoolHitPolicy.ALL_PAGES, PoolHitPolicy.TRAILING_PAGES):
                raise BadInputError(f"pool {transfer.name!r}: hit policy {transfer.hit_policy!r} is not supported by "
                                    "KvmmHiCacheStorage (nor by SGLang's file backend); expected all_pages or "
                                    "trailing_pages")
        for name in [PoolName.KV, *(t.name for t in transfers)]:
            for key in keys:
                self._tier_key(key, name)  # every key checked before the first lookup
        contains, seen = self.tier.contains, {}

        def has(i: int, name: str) -> bool:
            if (i, name) not in seen:
                seen[i, name] = contains(self._tier_key(keys[i], name))
            return seen[i, name]

        kv_pages = next((i for i in range(len(keys)) if not has(i, PoolName.KV)), len(keys))
        hits = {PoolName.KV: kv_pages} if kv_pages else {}
        restorable = list(range(1, kv_pages + 1))
        for transfer in transfers:
            if not restorable:
                break
            if transfer.hit_policy == PoolHitPolicy.ALL_PAGES:
                boundary = next((i for i in range(kv_pages) if not has(i, transfer.name)), kv_pages)
                pool_restorable = set(range(1, boundary + 1))
            else:
                trailing = max(1, len(transfer.keys or ()))
                pool_restorable = {n for n in range(1, kv_pages + 1)
                                   if all(has(i, transfer.name) for i in range(max(0, n - trailing), n))}
                boundary = max(pool_restorable, default=0)
            if boundary:
                hits[transfer.name] = boundary
            restorable = [n for n in restorable if n in pool_restorable]
        return PoolTransferResult(restorable[-1] if restorable else 0, hits, restorable)

    def batch_get_v2(self, transfers: list, extra_info: Any = None) -> dict[str, list[bool]]:
        """Each transfer's pages into its host pool at its host indices; per pool, per-page success."""
        return self._pool_io(list(transfers), write=False)

    def batch_set_v2(self, transfers: list, extra_info: Any = None) -> dict[str, list[bool]]:
        """Each transfer's host-pool pages at its host indices into the tier; per pool, per-page success."""
        return self._pool_io(list(transfers), write=True)

    def _pool_io(self, transfers: list, write: bool) -> dict[str, list[bool]]:
        """SGLang's v2 transfer contract (HiCacheFile's): a transfer whose host indices are not one
        page of its pool per key moves nothing and reports every page failed (the controller shrinks
        a window to avoid that); a pool never registered, or a key that is not a str, raises before
        any page moves."""
        pools = [self._pool(t.name) for t in transfers]
        for transfer in transfers:
            for key in transfer.keys or []:
                self._tier_key(key, transfer.name)
        results: dict[str, list[bool]] = {}
        for transfer, pool in zip(transfers, pools):
            keys = list(transfer.keys or [])
            page_size = int(getattr(pool, "page_size", 1) or 1)
            indices = transfer.host_indices
            if indices is None or torch.as_tensor(indices).numel() != len(keys) * page_size:
                logger.error("kvmm HiCache storage: pool %s: %d keys need %d host indices, got %s; nothing moved",
                             transfer.name, len(keys), len(keys) * page_size,
                             None if indices is None else torch.as_tensor(indices).numel())
                results[transfer.name] = [False] * len(keys)
                continue
            indices = torch.as_tensor(indices).reshape(-1)
            starts = [int(indices[i * page_size]) for i in range(len(keys))]
            if write:
                pages = [pool.get_data_page(start, flat=True) for start in starts]
                results[transfer.name] = self._store(keys, pages, transfer.name, pool)
                continue
            loaded = []
            for key, start in zip(keys, starts):
                page = self._read(self._tier_key(key, transfer.name), key, pool.get_dummy_flat_data_page())
                if page is not None:
                    pool.set_from_flat_data_page(start, page)
                loaded.append(page is not None)
            results[transfer.name] = loaded
        return results

    def _pool(self, name: Any) -> Any:
        pool = self.registered_pools.get(name)
        if pool is None and name == PoolName.KV:
            pool = self.mem_pool_host
        if pool is None:
            raise BadInputError(f"no host pool {name!r} registered (register_mem_host_pool_v2); registered: "
                                f"{sorted(map(str, self.registered_pools))}")
        return pool

    # -- management ---------------------------------------------------------------------------
    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        self.mem_pool_host = mem_pool_host

    def clear(self) -> int:
        """Remove this model's and shard's pages (another model's in a shared pool stay);
        returns how many were removed."""
        with self._lock:
            suffixes = (self.key_suffix, self.sharded_key_suffix)
            ours = [k for k in self.tier.keys() if isinstance(k, str) and k.endswith(suffixes)]
            for k in ours:
                self.tier.delete(k)
            return len(ours)

    def get_stats(self) -> None:
        return None  # SGLang's storage metrics object is its own backends'; none kept here

    def close(self) -> None:
        backend = getattr(self.tier, "backend", self.tier)
        if hasattr(backend, "close"):
            backend.close()

    # -- helpers ------------------------------------------------------------------------------
    def _tier_key(self, key: Any, pool_name: Any = PoolName.KV) -> str:
        """A page's key in the tier: HiCacheFile's file name, ``key`` (the KV pool) or
        ``key.<pool>``, then this rank's suffix (the TP-sharded one for Mamba state)."""
        if not isinstance(key, str):
            raise DTypeError(f"SGLang HiCache keys must be page hashes (str), got {type(key).__name__} {key!r:.60}")
        if pool_name == PoolName.KV:
            return key + self.key_suffix
        suffix = self.sharded_key_suffix if pool_name == PoolName.MAMBA else self.key_suffix
        return f"{key}.{pool_name}{suffix}"

    def _expected_page(self, pool: Any = None) -> tuple | None:
        """(dtype, bytes) of one page of ``pool`` (default: the KV host pool), or None without one."""
        pool = self.mem_pool_host if pool is None else pool
        if pool is None or not hasattr(pool, "get_dummy_flat_data_page"):
            return None
        page = pool.get_dummy_flat_data_page()
        return page.dtype, page.nbytes

    def _host_pages(self, keys: Sequence[str], host_indices: Any) -> tuple[Any, list[int]]:
        pool = self.mem_pool_host
        if pool is None:
            raise BadInputError("batch_get_v1/batch_set_v1 need the host pool SGLang registers "
                                "(register_mem_pool_host) before the first transfer")
        page_size = int(getattr(pool, "page_size", 1) or 1)
        indices = torch.as_tensor(host_indices).reshape(-1)
        if indices.numel() != len(keys) * page_size:
            raise ShapeError(f"{len(keys)} pages of {page_size} tokens need {len(keys) * page_size} host indices, "
                             f"got {indices.numel()}")
        for k in keys:
            self._tier_key(k)
        return pool, [int(indices[i * page_size]) for i in range(len(keys))]


# -- page encoding -----------------------------------------------------------------------------
def _require_tensor(value: Any, what: str) -> None:
    if not isinstance(value, torch.Tensor):
        raise DTypeError(f"{what} must be a torch.Tensor (a host-pool page), got {type(value).__name__}")


def _encode_page(key: str, value: Any, expected: tuple | None) -> np.ndarray:
    """One uint8 array: magic, header length, JSON header (dtype, shape), the tensor's bytes."""
    _require_tensor(value, f"page {key!r}: value")
    if expected is not None:
        dtype, nbytes = expected
        if value.dtype != dtype:
            raise DTypeError(f"page {key!r}: tensor dtype {value.dtype} differs from the host pool's {dtype}")
        if value.nbytes != nbytes:
            raise ShapeError(f"page {key!r}: tensor of shape {tuple(value.shape)} holds {value.nbytes} bytes; "
                             f"a page of the host pool holds {nbytes}")
    header = json.dumps({"dtype": str(value.dtype).removeprefix("torch."), "shape": list(value.shape)}).encode()
    data = value.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()
    return framed_value.join(framed_value.header_prefix(_MAGIC, header), data)


def _decode_page(k: str, raw: np.ndarray) -> tuple:
    try:
        header, payload = framed_value.split(raw, _MAGIC, "page")
        header = json.loads(header)
        dtype, shape = getattr(torch, header["dtype"]), torch.Size(header["shape"])
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"unknown dtype {header['dtype']!r}")
        if payload.size != shape.numel() * dtype.itemsize:
            raise ValueError(f"{payload.size} payload bytes, the header's shape needs {shape.numel() * dtype.itemsize}")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CorruptEntryError(f"tier entry {k!r} is not a page this backend wrote: {exc}") from None
    return dtype, shape, payload


def _key_words(tier_keys: Iterable[str]) -> np.ndarray:
    """Scoped page keys as uint64 words (kvmm's admission key type): 8 bytes of BLAKE2b."""
    return np.array([int.from_bytes(hashlib.blake2b(k.encode(), digest_size=8).digest(), "little")
                     for k in tier_keys], dtype=np.uint64)


def _key_suffix(config: HiCacheStorageConfig, sharded: bool = False) -> str:
    """HiCacheFile's scoping of page keys: model, pipeline stage, context-parallel rank, and the
    TP shard unless the model is MLA (whose KV every TP rank holds whole) and not ``sharded``."""
    model = "-".join(config.model_name.split("/")) if config.model_name else ""
    shard = f"_{config.pp_size}_{config.pp_rank}" if config.pp_size > 1 else ""
    if config.attn_cp_size > 1:
        shard += f"_cp{config.attn_cp_rank}_{config.attn_cp_size}"
    if config.is_mla_model and not sharded:
        return f"_{model}{shard}"
    return f"_{model}_{config.tp_rank}_{config.tp_size}{shard}"


# -- configuration -----------------------------------------------------------------------------
def _settings(extra: dict) -> dict:
    unknown = sorted(k for k in extra if k not in _SETTINGS and k not in _ENGINE_KEYS)
    if unknown:
        raise BadInputError(f"unknown kvmm HiCache storage setting {unknown[0]!r} in "
                            f"--hicache-storage-backend-extra-config; expected one of {list(_SETTINGS)}")
    return {k: v for k, v in extra.items() if k in _SETTINGS}


def _choice(value: Any, allowed: Iterable[str], what: str) -> str:
    return choice(value, allowed, f"kvmm HiCache storage setting {what}")


def _build_tier(settings: dict[str, Any]) -> Any:
    return build_tier(settings, what="kvmm HiCache storage setting", redis_prefix="kvmm-sglang")


def _load_admission(spec: Any, kwargs: Any) -> Any:
    """A kvmm admission policy from ``admission`` (a class of kvmm.policies.admission or
    ``"module:Class"``) and ``admission_args``: the adapters' shared rule."""
    return load_admission(spec, kwargs, setting="kvmm HiCache storage setting admission",
                          args_setting="kvmm HiCache storage setting admission_args")
