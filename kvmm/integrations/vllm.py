"""kvmm eviction and admission policies inside vLLM's CPU KV offloading (vLLM 0.33).

vLLM's CPU offloading connector loads its cache policy by class name and module path::

    --kv-transfer-config '{"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
        "kv_connector_extra_config": {"cpu_bytes_to_use": 8000000000,
            "eviction_policy": "KvmmARC", "cache_policy_module_path": "kvmm.integrations.vllm"}}'

* :class:`KvmmLRU`, :class:`KvmmFIFO`, :class:`KvmmLFU`, :class:`KvmmARC` - one vLLM
  ``CachePolicy`` per kvmm eviction policy; :func:`make_cache_policy` makes one from any object
  speaking :class:`~kvmm.protocols.EvictionPolicy` (a class, a zero-argument factory, or an
  instance used as a template).
* :class:`KvmmOffloadingSpec` (``"spec_name": "KvmmOffloadingSpec", "spec_module_path":
  "kvmm.integrations.vllm"``) - vLLM's CPU offloading spec whose manager,
  :class:`KvmmAdmissionManager`, asks any kvmm :class:`~kvmm.protocols.AdmissionPolicy`
  which offered blocks to write (``"kvmm_admission": "StoreThreshold"``,
  ``"kvmm_admission_args": {"k": 2}``).

How vLLM's events map onto a kvmm policy (one chunk = size 1; ``cache_capacity`` chunks):

* ``insert`` registers the chunk; registration is deferred to the next call that can evict
  (a new chunk's store is still in flight, so it cannot be evicted before), and a batch of one
  request is registered tail first (by token position when vLLM recorded positions), so heads
  are more recent than tails: vLLM evicts a prefix's tail before its head.
* ``on_request_access`` (a running request loads chunks or offers resident ones) refreshes them
  tail to head at once when the class sets ``refresh_stores`` (below), as vLLM's ``lru`` ranks
  them with the running request, so the request's own stores do not evict the prefix it loaded.
* ``on_request_finished`` applies the request's accesses tail to head: a chunk the request
  *reused* gets ``on_access`` (a hit, counted by LFU and promoting in ARC); a chunk it only
  *stored* gets ``on_access`` only when the class sets ``refresh_stores`` (LRU, whose access
  is a pure recency refresh, as vLLM's ``lru`` re-ranks every chunk of a finished request).
  ``touch`` is the same rule applied to the keys given.
* ``evict(n, protected)`` asks ``victims(n, protected | chunks in use)``; fewer than ``n``
  returns ``None`` and changes nothing, else each victim gets ``on_evict`` where the policy has
  it (2Q: the A1in victim becomes a ghost; LIRS: a resident HIR victim stays in S as
  non-resident; with ``on_remove`` both would forget it, as for a delete, and 2Q would be FIFO),
  else ``on_remove``.  ``remove`` (a failed store) is always ``on_remove``.
* Self-evictions (keys a policy evicts although vLLM asked for no room): vLLM frees chunks
  only through ``evict``, so such a chunk is *dropped*, not freed: the policy no longer has it
  (exactly as under :class:`~kvmm.tiers.ManagedTier`), vLLM still does, and the next ``evict``
  hands the dropped idle chunks over first, oldest first.  A dropped chunk vLLM reads again is
  a new insert for the policy (it had evicted it).  SLRU's and W-TinyLFU's cooling keep such
  keys themselves (tracked, first in ``victims``); for 2Q's Am quota and LIRS's demotions
  (``extra_victims``) this object asks the policy before each insert and access, removes the
  keys it names, as ManagedTier does, and keeps them as dropped.
* Pinning (``mark_evictable`` / ``mark_non_evictable``) never reorders: a chunk being read or
  written is only skipped, as in vLLM.
* Ghost hits need no ``on_store_miss``: kvmm's ARC adapts when a ghost key is inserted.

Difference from vLLM's own ``lru``, pinned in ``tests/integrations/test_vllm_policies.py``:
vLLM gives every chunk an *in-flight* request stores the request's provisional rank, taken
when the request started; kvmm registers it when it is stored.  Evictions while another
request that started earlier is still running can therefore pick different chunks; once the
request finishes both re-rank its chunks identically.  A sequential replay (each request
finishes before the next starts) gives the same stores, hits and evictions.  vLLM's real
scheduler overlaps even consecutive requests: it signals a request's ``on_request_finished``
in ``build_connector_meta`` of the *next* step, after that step's ``schedule()`` may have
loaded the next request's hit prefix (which gives it its rank).  Driven one request at a time
through the Scheduler, the totals are therefore the same but a few eviction sets differ (a
request that loaded a prefix right after another finished: vLLM evicts its own stored tail
first, kvmm the oldest chunk); pinned in ``test_scheduler_order_difference_is_pinned``.
Making them identical would mean ranking stores at the request's first access, i.e. vLLM's
heap of ranks instead of an O(1) recency list.

Importing this module imports vLLM; ``import kvmm`` never does.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Sequence
from typing import Any, Callable, ClassVar

import numpy as np

try:
    from vllm.v1.kv_offload.base import OffloadKey, PrepareStoreOutput, ReqContext
    from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager
    from vllm.v1.kv_offload.cpu.policies.base import CachePolicy, ChunkStatus, order_request_keys
    from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec
except ImportError as exc:  # pragma: no cover - exercised only without vLLM
    raise ImportError(
        "kvmm.integrations.vllm needs vLLM's KV offloading modules (tested with vllm==0.33.0). "
        "On a CPU machine: pip install torch==2.13.0 && pip install --no-deps vllm==0.33.0 && "
        "pip install -r .ci/requirements-vllm.txt (see README, 'Use inside vLLM'); "
        f"import failed with: {exc}") from exc

from kvmm.errors import BadInputError, KvmmError
from kvmm.integrations._policy_factory import (drop_extra_victims, eviction_hook, load_admission as _load_admission,
                                               policy_factory)
from kvmm.policies.admission import AdmissionRequest, admission_mask
from kvmm.policies.eviction import ARCPolicy, FIFOPolicy, LFUPolicy, LRUPolicy
from kvmm.protocols import AdmissionPolicy

__all__ = [
    "KvmmCachePolicy",
    "KvmmLRU",
    "KvmmFIFO",
    "KvmmLFU",
    "KvmmARC",
    "make_cache_policy",
    "KvmmAdmissionManager",
    "KvmmOffloadingSpec",
    "offload_key_words",
    "MODULE_PATH",
]

#: The value for ``cache_policy_module_path`` and ``spec_module_path``.
MODULE_PATH = __name__


class KvmmCachePolicy(CachePolicy):
    """A vLLM ``CachePolicy`` that keeps the chunks and lets a kvmm policy order them.

    Subclasses set ``new_policy`` (a zero-argument callable returning a fresh
    :class:`~kvmm.protocols.EvictionPolicy`) and ``refresh_stores`` (see the module docstring).
    A policy with ``attach(capacity)`` is told ``cache_capacity`` (in chunks).

    Runtime complexity: ``get`` O(1); ``insert``/``touch``/``remove`` O(1) plus the policy's
    cost per event; ``evict(n)`` O(in-use + protected chunks) plus the policy's ``victims``.
    """

    new_policy: ClassVar[Callable[[], Any]]
    refresh_stores: ClassVar[bool] = False

    def __init__(self, cache_capacity: int) -> None:
        super().__init__(cache_capacity)
        self._bind(_fresh_policy(type(self).new_policy, cache_capacity))
        # key -> ChunkStatus of every resident chunk (registered with the policy or pending).
        self.chunks: dict[OffloadKey, ChunkStatus] = {}
        # Resident keys whose ref_cnt != 0 (a store or a load in flight): never victims.
        self._in_use: set[OffloadKey] = set()
        # Inserted keys not yet told to the policy, as (request context, [keys in insert order]).
        self._pending: list[tuple[ReqContext, list[OffloadKey]]] = []
        self._pending_keys: set[OffloadKey] = set()
        # Resident keys the policy evicted on its own (extra_victims), oldest first: evicted first.
        self._dropped: dict[OffloadKey, None] = {}

    def get(self, key: OffloadKey) -> ChunkStatus | None:
        return self.chunks.get(key)

    def insert(self, key: OffloadKey, chunk: ChunkStatus, req_context: ReqContext) -> None:
        if key in self.chunks:
            raise BadInputError(f"{type(self).__name__}: chunk {key!r} is already resident; "
                                "expected insert only for keys get() does not find")
        self.chunks[key] = chunk
        if chunk.ref_cnt != 0:
            self._in_use.add(key)
        if self._pending and self._pending[-1][0] is req_context:
            self._pending[-1][1].append(key)
        else:
            self._pending.append((req_context, [key]))
        self._pending_keys.add(key)

    def remove(self, key: OffloadKey) -> None:
        if key not in self.chunks:
            raise BadInputError(f"{type(self).__name__}: cannot remove {key!r}, it is not resident")
        if key in self._pending_keys:  # a failed store the policy never saw
            self._pending_keys.discard(key)
        elif key in self._dropped:  # the policy already evicted it
            del self._dropped[key]
        else:
            self.policy.on_remove(key)
        del self.chunks[key]
        self._in_use.discard(key)

    def touch(self, keys: Iterable[OffloadKey], req_context: ReqContext) -> None:
        self._register_pending()
        chunks, access, refresh = self.chunks, self._access, self.refresh_stores
        for key in reversed(list(keys)):
            chunk = chunks.get(key)
            if chunk is not None and (refresh or chunk.ref_cnt >= 0):  # ref_cnt >= 0: is_ready
                access(key)

    def on_request_access(self, keys: Iterable[OffloadKey], req_context: ReqContext) -> None:
        """A running request reached these chunks (loaded them, or offered them for storing):
        with ``refresh_stores`` (recency-only policies) they are refreshed tail to head at once,
        as vLLM's lru gives them the request's rank, so a store of the same request does not
        evict the prefix it just loaded.  Frequency-counting policies wait for the finish."""
        if not self.refresh_stores:
            return
        self._register_pending()
        chunks, access = self.chunks, self._access
        for key in reversed(order_request_keys([list(keys)], req_context)):
            if key in chunks:
                access(key)

    def on_store_miss(self, keys: Iterable[OffloadKey], req_context: ReqContext) -> None:
        """No-op: a kvmm policy learns from ghost keys when they are inserted again."""

    def on_request_finished(self, key_groups: Sequence[Sequence[OffloadKey]],
                            insertion_only_keys: set[OffloadKey], reused_keys: set[OffloadKey],
                            req_context: ReqContext) -> None:
        self._register_pending()
        chunks, access = self.chunks, self._access
        if not self.refresh_stores and not reused_keys:
            return  # nothing reused, and stores are not refreshed: no policy event
        touched = reversed(order_request_keys(key_groups, req_context))
        if self.refresh_stores:
            for key in touched:
                if key in chunks:
                    access(key)
        else:
            for key in touched:
                if key in reused_keys and key in chunks:
                    access(key)

    def evict(self, n: int, protected: set[OffloadKey]) -> list[tuple[OffloadKey, ChunkStatus]] | None:
        self._register_pending()
        if n == 0:
            return []
        blocked = self._in_use | set(protected) if self._in_use else protected
        dropped = [k for k in self._dropped if k not in blocked][:n] if self._dropped else []
        wanted = n - len(dropped)
        victims = list(self.policy.victims(wanted, blocked))[:wanted] if wanted else []
        if len(victims) < wanted:
            return None
        if not self._trusted and (len(set(victims)) != wanted
                                  or any(k not in self.chunks or k in blocked or k in self._dropped for k in victims)):
            raise KvmmError(f"{type(self.policy).__name__}.victims({wanted}, ...) returned {victims!r}: expected "
                            f"{wanted} distinct resident keys outside the protected and in-use chunks")
        on_evict, chunks = self._evict_hook, self.chunks
        evicted = []
        for key in dropped:
            del self._dropped[key]
            evicted.append((key, chunks.pop(key)))
        for key in victims:
            on_evict(key)
            evicted.append((key, chunks.pop(key)))
        return evicted

    def clear(self) -> None:
        self._bind(_fresh_policy(type(self).new_policy, self.cache_capacity))
        self.chunks.clear()
        self._in_use.clear()
        self._pending.clear()
        self._pending_keys.clear()
        self._dropped.clear()

    def mark_evictable(self, key: OffloadKey) -> None:
        self._in_use.discard(key)

    def mark_non_evictable(self, key: OffloadKey) -> None:
        self._in_use.add(key)

    def check(self) -> None:
        """Assert every invariant (used by tests)."""
        # Every resident chunk is either pending or tracked by the policy, never both.
        tracked = set(self.policy.keys()) if hasattr(self.policy, "keys") else None
        if tracked is not None:
            assert tracked.isdisjoint(self._pending_keys) and tracked.isdisjoint(self._dropped)
            assert tracked | self._pending_keys | set(self._dropped) == set(self.chunks)
        # A dropped key is resident and not pending.
        assert self._pending_keys.isdisjoint(self._dropped) and all(k in self.chunks for k in self._dropped)
        # Every pending key is in a pending batch (a batch may still name keys removed since).
        assert self._pending_keys <= {k for _, ks in self._pending for k in ks}
        # In-use chunks are resident and have a non-zero ref_cnt.
        assert all(self.chunks[k].ref_cnt != 0 for k in self._in_use)
        # Every resident chunk with a non-zero ref_cnt is in use.
        assert all(k in self._in_use for k, c in self.chunks.items() if c.ref_cnt != 0)
        # No more chunks than the capacity.
        assert len(self.chunks) <= self.cache_capacity

    def _bind(self, policy: Any) -> None:
        """Adopt ``policy``; a built-in one's ``fast_hooks`` (LRU, FIFO, ARC) replace its checked
        ``on_access`` / ``on_insert``: this object guarantees what they check (an accessed key is
        registered, an inserted one is not, sizes are 1), and they make the same changes.  Only
        another policy's ``victims`` are checked (distinct, resident, not protected)."""
        self.policy = policy
        self._evict_hook = eviction_hook(policy)
        hooks = policy.fast_hooks() if hasattr(policy, "fast_hooks") else None
        # A built-in policy's victims are distinct resident unprotected keys (tested): not re-checked.
        self._trusted = hooks is not None
        if hooks is None:
            self._access, self._insert = policy.on_access, policy.on_insert
        else:
            self._access, self._insert = hooks[0], hooks[1]
        if hasattr(policy, "extra_victims"):
            self._policy_access, self._policy_insert = self._access, self._insert
            self._access, self._insert = self._access_dropping, self._insert_dropping

    def _access_dropping(self, key: OffloadKey) -> None:
        """An access for a policy with ``extra_victims``: those keys first; a dropped key is new."""
        if key in self._dropped:
            del self._dropped[key]
            self._insert_dropping(key, 1)
            return
        self._drop_extra(key, None)
        self._policy_access(key)

    def _insert_dropping(self, key: OffloadKey, size: int) -> None:
        self._drop_extra(key, size)
        self._policy_insert(key, size)

    def _drop_extra(self, key: OffloadKey, size: int | None) -> None:
        drop_extra_victims(self.policy, key, size, self._in_use | {key}, self._dropped)  # chunks in use protected

    def _register_pending(self) -> None:
        """Tell the policy about the chunks inserted since the last call, each request's batch
        tail first (by token position when known), so its head ends up the most recent."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        pending_keys, insert = self._pending_keys, self._insert
        for req_context, keys in pending:
            for key in reversed(order_request_keys([keys], req_context)):
                if key in pending_keys:
                    pending_keys.discard(key)
                    insert(key, 1)


def make_cache_policy(policy: Any, *, name: str | None = None, refresh_stores: bool = False) -> type[KvmmCachePolicy]:
    """A :class:`KvmmCachePolicy` subclass ordering chunks with ``policy``.

    ``policy``: a class or zero-argument callable returning an
    :class:`~kvmm.protocols.EvictionPolicy`, or such an object (each vLLM manager gets a deep
    copy of it).  ``refresh_stores``: ``True`` when the policy's ``on_access`` is a recency
    refresh only (LRU-like), so chunks a finished request stored are refreshed tail to head
    like the chunks it reused.  To load it from vLLM, bind the class to a module-level name of
    an importable module and give that module as ``cache_policy_module_path``.
    """
    factory, probe = policy_factory(policy)
    cls_name = name or f"Kvmm{type(probe).__name__}"
    return type(cls_name, (KvmmCachePolicy,), {
        "new_policy": staticmethod(factory), "refresh_stores": bool(refresh_stores), "__module__": __name__,
        "__doc__": f"vLLM CachePolicy ordered by kvmm's {type(probe).__name__}."})


KvmmLRU = make_cache_policy(LRUPolicy, name="KvmmLRU", refresh_stores=True)
KvmmFIFO = make_cache_policy(FIFOPolicy, name="KvmmFIFO")
KvmmLFU = make_cache_policy(LFUPolicy, name="KvmmLFU")
KvmmARC = make_cache_policy(ARCPolicy, name="KvmmARC")


class KvmmAdmissionManager(CPUOffloadingManager):
    """vLLM's ``CPUOffloadingManager`` that writes only the blocks a kvmm admission policy admits.

    ``prepare_store(keys)`` builds an :class:`~kvmm.policies.AdmissionRequest` (``keys``:
    :func:`offload_key_words` of the offered keys, ``cached``: resident in the CPU tier, ready or
    not) and passes on to vLLM's ``prepare_store`` the cached keys (so they still count as reused
    and stay protected) and the admitted ones, in the offered order.  ``admission_skipped``
    counts the blocks turned away.  Other keyword arguments are ``CPUOffloadingManager``'s
    (``cache_policy`` may name any policy vLLM can load, a kvmm one included).
    """

    def __init__(self, num_chunks: int, *, admission: Any, **kwargs: Any) -> None:
        if not isinstance(admission, AdmissionPolicy):
            raise BadInputError(f"admission must be a kvmm AdmissionPolicy (an admit(request) method), "
                                f"got {type(admission).__name__}")
        super().__init__(num_chunks, **kwargs)
        self.admission = admission
        self.admission_skipped = 0

    def prepare_store(self, keys: Collection[OffloadKey], req_context: ReqContext) -> PrepareStoreOutput | None:
        keys = list(keys)
        if keys:
            cached = np.fromiter((self._policy.get(k) is not None for k in keys), dtype=bool, count=len(keys))
            admitted = admission_mask(self.admission.admit(AdmissionRequest(keys=offload_key_words(keys), cached=cached)),
                                      len(keys), self.admission)
            self.admission_skipped += int(np.count_nonzero(~cached & ~admitted))
            keys = [k for k, keep in zip(keys, cached | admitted) if keep]
        return super().prepare_store(keys, req_context)


class KvmmOffloadingSpec(CPUOffloadingSpec):
    """vLLM's ``CPUOffloadingSpec`` with a :class:`KvmmAdmissionManager`.

    ``kv_connector_extra_config`` keys, besides CPUOffloadingSpec's own (``cpu_bytes_to_use``,
    ``eviction_policy``, ``cache_policy_module_path``, ``store_threshold``, ...):

    * ``kvmm_admission``: a class in :mod:`kvmm.policies.admission` (``"StoreThreshold"``) or
      ``"package.module:Class"``; default ``"WriteAll"``;
    * ``kvmm_admission_args``: keyword arguments for it (``{"k": 2}``).
    """

    def get_manager(self) -> CPUOffloadingManager:
        if not self._manager:
            self._manager = KvmmAdmissionManager(
                num_chunks=self.num_chunks,
                admission=load_admission(self.extra_config.get("kvmm_admission", "WriteAll"),
                                         self.extra_config.get("kvmm_admission_args") or {}),
                cache_policy=self.eviction_policy,
                cache_policy_module_path=self.cache_policy_module_path,
                enable_events=self.kv_events_config.enable_kv_cache_events,
                store_threshold=int(self.extra_config.get("store_threshold", 0)),
                max_tracker_size=int(self.extra_config.get("max_tracker_size", 64_000)),
                info=self.cpu_info,
            )
        return self._manager


def load_admission(spec: str, kwargs: dict) -> Any:
    """Instantiate ``spec`` (a name in :mod:`kvmm.policies.admission` or ``"module:Class"``)
    with ``kwargs``; a clear :class:`~kvmm.errors.BadInputError` when it cannot be found."""
    return _load_admission(spec, kwargs, setting="kvmm_admission", args_setting="kvmm_admission_args")


def offload_key_words(keys: Sequence[bytes]) -> np.ndarray:
    """vLLM ``OffloadKey`` bytes (block hash + 4-byte group index) as uint64 words, the key type
    of kvmm's admission and stack-distance code: the first 8 bytes of BLAKE2b of the whole key.

    Runtime complexity: O(total key bytes).
    """
    out = np.empty(len(keys), dtype=np.uint64)
    for i, key in enumerate(keys):
        if not isinstance(key, (bytes, bytearray)):
            raise BadInputError(f"offload keys must be bytes (vLLM OffloadKey), got {type(key).__name__} at {i}")
        out[i] = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little")
    return out


def _fresh_policy(factory: Callable[[], Any], capacity: int) -> Any:
    policy = factory()
    if hasattr(policy, "attach"):
        policy.attach(capacity)
    return policy
