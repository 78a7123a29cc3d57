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

How vLLM's events map onto a kvmm policy (one chunk = size 1; ``cache_capacity`` chunks).  A
class follows one of vLLM's two built-in policies, chosen by ``refresh_stores``:

* ``refresh_stores=True`` (:class:`KvmmLRU`: a recency order) ranks chunks exactly as vLLM's
  ``lru`` does (:mod:`kvmm.integrations._vllm_ranks`): a chunk stored without a token
  position, and every chunk ``touch`` or a finished request reaches (tail to head), takes a
  fresh rank: the kvmm policy sees it inserted or refreshed, in rank order.  A running request's
  chunks with token positions (stored, loaded, or offered again: ``on_request_access``) share
  the request's rank, taken when the request was first seen, tails before heads, and stay
  outside the policy until the request finishes; a victim list merges the two by rank.  So a
  batch stored without positions loses its first-stored chunk first, and a request that stores
  its prefix over several steps (chunked prefill) loses its tail first while it runs.
* ``refresh_stores=False`` (FIFO, LFU, ARC, every other order) follows vLLM's ``arc``: a stored
  chunk is inserted in store order (told to the policy at the next call, so that a store that
  fails before anything else happens leaves no trace); a finished request's chunks, tail to
  head, are a use (``on_access``: a hit, counted by LFU, promoting in ARC) when it reused them
  and an uncounted reference (the policy's ``touch``: ARC keeps the chunk in its list, LFU
  keeps its count; orders without ``touch`` see nothing) when it only stored them;
  ``on_store_miss`` (keys about to be stored, before the eviction that makes their room) and a
  ``touch`` of an evicted key adapt ARC on a ghost (``ARCPolicy.adapt``), and ``touch`` of a
  ready chunk is a use, of one still being written an uncounted reference.
* ``evict(n, protected)`` asks ``victims(n, protected | chunks in use)``; fewer than ``n``
  returns ``None`` and changes nothing, else each victim gets ``on_evict`` (2Q: the A1in victim
  becomes a ghost; LIRS: a resident HIR victim stays in S as non-resident; with ``on_remove``
  both would forget it, as for a delete, and 2Q would be FIFO; ``on_remove`` for a policy that
  is not an :class:`~kvmm.protocols.EvictionPolicyBase`).  ``remove`` (a failed store) is
  always ``on_remove``.
* Self-evictions (the keys ``on_insert`` / ``on_access`` return: 2Q's Am quota, LIRS's
  demotions, SLRU's and W-TinyLFU's cooling, evicted although vLLM asked for no room): vLLM
  frees chunks only through ``evict``, so such a chunk is *dropped*, not freed: the policy no
  longer has it (exactly as under :class:`~kvmm.tiers.ManagedTier`), vLLM still does, and the
  next ``evict`` hands the dropped idle chunks over first, oldest first.  The chunks in use are
  the events' ``protected`` keys.  A dropped chunk vLLM reads again is a new insert for the
  policy (it had evicted it).
* Pinning (``mark_evictable`` / ``mark_non_evictable``) never reorders: a chunk being read or
  written is only skipped, as in vLLM.

:class:`KvmmLRU` therefore makes vLLM ``lru``'s evictions, chunk for chunk, including while
requests overlap (vLLM 0.33.0's own ``tests/v1/kv_offload/cpu/test_manager.py`` runs against it:
``tests/integrations/test_vllm_upstream_manager.py``).  :class:`KvmmARC` is kvmm's ARC (the
paper's, as libCacheSim runs it: docs/eviction_orders.md) fed what vLLM's ``arc`` sees; where
vLLM's ``arc`` departs from the paper it is not followed: a returning ghost enters T2, not T1;
the victim comes from T1 when ``|T1| > p`` (vLLM: ``|T1| >= int(p)``); ghosts are forgotten by
the paper's bounds, not each list at ``cache_capacity``.  That test file and
``test_kvmm_arc_keeps_the_papers_rules_where_vllm_arc_departs`` pin the first two.

Importing this module imports vLLM; ``import kvmm`` never does.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

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

from kvmm._policy_hooks import PolicyHooks
from kvmm.errors import BadInputError, KvmmError
from kvmm.integrations._policy_factory import load_admission as _load_admission
from kvmm.integrations._policy_factory import policy_factory
from kvmm.integrations._vllm_ranks import LruRanks
from kvmm.policies.admission import AdmissionRequest, admission_mask
from kvmm.policies.eviction import ARCPolicy, FIFOPolicy, LFUPolicy, LRUPolicy
from kvmm.protocols import AdmissionPolicy, EvictionPolicyBase

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


@dataclass(slots=True)
class _RequestRank:
    """A request's rank ``R`` in one :class:`KvmmCachePolicy` (kept on vLLM's ``ReqContext``)."""

    owner: object
    generation: int
    rank: int


class KvmmCachePolicy(CachePolicy):
    """A vLLM ``CachePolicy`` that keeps the chunks and lets a kvmm policy order them.

    Subclasses set ``new_policy`` (a zero-argument callable returning a fresh
    :class:`~kvmm.protocols.EvictionPolicy`) and ``refresh_stores`` (``True``: the chunks are
    ranked as vLLM's ``lru`` ranks them, over a recency order; ``False``: told to the policy in
    the order vLLM's ``arc`` sees them; see the module docstring).  The policy is told
    ``cache_capacity`` (in chunks) by ``attach``.

    Runtime complexity: ``get`` O(1); ``insert``/``touch``/``remove`` O(1) (a positioned chunk
    of a running request, with ``refresh_stores``: O(log p) for p such chunks) plus the
    policy's cost per event; ``evict(n)`` O(n + in-use + protected chunks) plus the policy's
    ``victims``.
    """

    new_policy: ClassVar[Callable[[], Any]]
    refresh_stores: ClassVar[bool] = False

    def __init__(self, cache_capacity: int) -> None:
        super().__init__(cache_capacity)
        # key -> ChunkStatus of every resident chunk
        self.chunks: dict[OffloadKey, ChunkStatus] = {}
        # Resident keys whose ref_cnt != 0 (a store or a load in flight): never victims.
        self._in_use: set[OffloadKey] = set()
        self._generation = 0  # a request rank from before clear() is stale
        self._bind(type(self).new_policy())

    def get(self, key: OffloadKey) -> ChunkStatus | None:
        return self.chunks.get(key)

    def insert(self, key: OffloadKey, chunk: ChunkStatus, req_context: ReqContext) -> None:
        if key in self.chunks:
            raise BadInputError(f"{type(self).__name__}: chunk {key!r} is already resident; "
                                "expected insert only for keys get() does not find")
        self.chunks[key] = chunk
        if chunk.ref_cnt != 0:
            self._in_use.add(key)
        if self._ranks is None:
            self._pending[key] = None
            return
        position = req_context.get_offload_key_position(key)
        if position is None:
            self._ranks.commit(key)
        else:
            self._ranks.raise_to(key, (self._request_rank(req_context), -position))

    def remove(self, key: OffloadKey) -> None:
        if key not in self.chunks:
            raise BadInputError(f"{type(self).__name__}: cannot remove {key!r}, it is not resident")
        if key in self._pending:  # a failed store the policy never saw
            del self._pending[key]
        elif key in self._dropped:  # the policy already evicted it
            del self._dropped[key]
        elif self._ranks is not None:
            self._ranks.forget(key)
        else:
            self.policy.on_remove(key)
        del self.chunks[key]
        self._in_use.discard(key)

    def touch(self, keys: Iterable[OffloadKey], req_context: ReqContext) -> None:
        """vLLM's ``touch``, tail (last key) first: with ``refresh_stores`` a fresh rank for each
        resident chunk; else a ready chunk is a use (``on_access``), one still being written an
        uncounted reference (the policy's ``touch``), a ghost a miss (``adapt``, ARC)."""
        chunks = self.chunks
        if self._ranks is not None:
            commit = self._ranks.commit
            for key in reversed(list(keys)):
                if key in chunks:
                    commit(key)
            return
        self._register_pending()
        for key in reversed(list(keys)):
            chunk = chunks.get(key)
            if chunk is None:
                self._adapt(key)
            elif chunk.ref_cnt >= 0 or key in self._dropped:  # ref_cnt >= 0: is_ready
                self._access(key)
            else:
                self._touch(key)

    def on_store_miss(self, keys: Iterable[OffloadKey], req_context: ReqContext) -> None:
        """Keys about to be stored, before the eviction that makes room for them (once per
        request): a ghost among them adapts ARC now (``adapt``), as vLLM's ``arc`` does."""
        if self._ranks is not None:
            self.touch(keys, req_context)  # vLLM's default, which its lru keeps
        elif self._adapts:
            self._register_pending()
            for key in reversed(list(keys)):
                if key not in self.chunks:
                    self._adapt(key)

    def on_request_access(self, keys: Iterable[OffloadKey], req_context: ReqContext) -> None:
        """A running request reached these chunks (loaded them, or offered them for storing):
        with ``refresh_stores``, each positioned resident one takes the request's rank
        ``(R, -position)`` when that ranks it newer, as in vLLM's ``lru``.  Else nothing."""
        if self._ranks is None:
            return
        rank, chunks = self._request_rank(req_context), self.chunks
        for key in keys:
            position = req_context.get_offload_key_position(key)
            if position is not None and key in chunks:
                self._ranks.raise_to(key, (rank, -position))

    def on_request_finished(self, key_groups: Sequence[Sequence[OffloadKey]],
                            insertion_only_keys: set[OffloadKey], reused_keys: set[OffloadKey],
                            req_context: ReqContext) -> None:
        """The request's chunks, tail to head: with ``refresh_stores`` each resident one takes a
        fresh rank (vLLM's ``lru``); else, as vLLM's ``arc``, a reused chunk is a use
        (``on_access``) and one it only stored an uncounted reference (``touch``)."""
        chunks = self.chunks
        touched = reversed(order_request_keys(key_groups, req_context))
        if self._ranks is not None:
            commit = self._ranks.commit
            for key in touched:
                if key in chunks:
                    commit(key)
            return
        self._register_pending()
        access, touch, dropped = self._access, self._touch, self._dropped
        for key in touched:
            if key not in chunks:
                continue
            if key in insertion_only_keys:
                if key not in dropped:
                    touch(key)
            elif key in reused_keys:
                access(key)

    def evict(self, n: int, protected: set[OffloadKey]) -> list[tuple[OffloadKey, ChunkStatus]] | None:
        self._register_pending()
        if n == 0:
            return []
        blocked = self._in_use | set(protected) if self._in_use else protected
        dropped = [k for k in self._dropped if k not in blocked][:n] if self._dropped else []
        wanted = n - len(dropped)
        if not wanted:
            victims = []
        elif self._ranks is not None:
            victims = self._ranks.victims(wanted, blocked)
        else:
            victims = list(self.policy.victims(wanted, blocked))[:wanted]
        if len(victims) < wanted:
            return None
        if not self._trusted and (len(set(victims)) != wanted
                                  or any(k not in self.chunks or k in blocked or k in self._dropped for k in victims)):
            raise KvmmError(f"{type(self.policy).__name__}.victims({wanted}, ...) returned {victims!r}: expected "
                            f"{wanted} distinct resident keys outside the protected and in-use chunks")
        chunks = self.chunks
        evicted = []
        for key in dropped:
            del self._dropped[key]
            evicted.append((key, chunks.pop(key)))
        if self._ranks is not None:
            self._ranks.evict(victims)
        else:
            on_evict = self._evict_hook
            for key in victims:
                on_evict(key)
        evicted.extend((key, chunks.pop(key)) for key in victims)
        return evicted

    def clear(self) -> None:
        self._generation += 1
        self._bind(type(self).new_policy())
        self.chunks.clear()
        self._in_use.clear()

    def mark_evictable(self, key: OffloadKey) -> None:
        self._in_use.discard(key)

    def mark_non_evictable(self, key: OffloadKey) -> None:
        self._in_use.add(key)

    def check(self) -> None:
        """Assert every invariant (used by tests)."""
        resident = set(self.chunks)
        # A dropped key is resident and not pending; dropped and pending keys are resident.
        assert self._pending.keys().isdisjoint(self._dropped)
        assert set(self._pending) <= resident and set(self._dropped) <= resident
        if self._ranks is not None:
            # Every resident chunk is dropped or ranked (committed: tracked by the policy), once.
            self._ranks.check(resident - set(self._dropped))
            assert not self._pending
        elif self._hooks.keys is not None:
            # Every resident chunk is pending, dropped or tracked by the policy, exactly once.
            tracked = set(self._hooks.keys())
            assert tracked.isdisjoint(self._pending) and tracked.isdisjoint(self._dropped)
            assert tracked | set(self._pending) | set(self._dropped) == resident
        # In-use chunks are resident and have a non-zero ref_cnt.
        assert all(self.chunks[k].ref_cnt != 0 for k in self._in_use)
        # Every resident chunk with a non-zero ref_cnt is in use.
        assert all(k in self._in_use for k, c in self.chunks.items() if c.ref_cnt != 0)
        # No more chunks than the capacity.
        assert len(self.chunks) <= self.cache_capacity

    def _bind(self, policy: Any) -> None:
        """Adopt a fresh ``policy`` and tell it ``cache_capacity`` (``attach``).  A built-in one's
        ``fast_hooks`` replace its checked ``on_access`` / ``on_insert`` (this object guarantees
        what they check: an accessed key is registered, an inserted one is not, sizes are 1; they
        make the same changes), and its ``victims`` are trusted; another policy's ``victims`` are
        checked (distinct, resident, not protected).
        A policy that may evict on its own (:attr:`~kvmm.protocols.EvictionPolicyBase.self_evicting`,
        or any that does not say) is called through :meth:`_access_dropping` /
        :meth:`_insert_dropping`, its checked events with the chunks in use protected."""
        hooks = PolicyHooks(policy)
        if self.refresh_stores and isinstance(policy, EvictionPolicyBase) and policy.self_evicting:
            raise BadInputError(f"{type(self).__name__}: refresh_stores ranks chunks as vLLM's lru does, over a "
                                f"recency order; {type(policy).__name__} evicts on its own (self_evicting): "
                                "expected refresh_stores=False for it")
        hooks.attach(self.cache_capacity)  # a policy that is not an EvictionPolicyBase is told nothing
        self.policy, self._hooks = policy, hooks
        self._evict_hook = hooks.evict
        fast = hooks.fast_hooks()
        # A built-in policy's victims are distinct resident unprotected keys (tested): not re-checked.
        self._trusted = fast is not None
        if self.refresh_stores and hooks.self_evicting:  # a policy that does not say: held to it
            self._access, self._insert = _evicting_nothing(hooks.access), _evicting_nothing(hooks.insert)
        elif hooks.self_evicting:
            self._access, self._insert = self._access_dropping, self._insert_dropping
        elif fast is None:
            self._access, self._insert = hooks.access, hooks.insert
        else:  # what they return is always empty (self_evicting False): not read
            self._access, self._insert = fast.access, fast.insert
        # Resident keys the policy evicted on its own, oldest first: evicted first.
        self._dropped: dict[OffloadKey, None] = {}
        # Uncounted references (ARC, LFU: the policy's touch; a no-op for the others) and ghost
        # misses (ARC's adapt; on_store_miss prepares for them only where adapt does something)
        self._touch, self._adapt, self._adapts = hooks.touch, hooks.adapt, hooks.adapts
        # Without refresh_stores: inserted keys not yet told to the policy, in store order.
        self._pending: dict[OffloadKey, None] = {}
        self._ranks = (LruRanks(policy, self._access, self._insert, self._evict_hook, hooks.keys)
                       if self.refresh_stores else None)

    def _request_rank(self, req_context: ReqContext) -> int:
        """The request's rank ``R``: taken from the counter the first time this object sees it."""
        state = req_context.get_state(_RequestRank)
        if state is None or state.owner is not self or state.generation != self._generation:
            state = _RequestRank(self, self._generation, self._ranks.new_rank())
            req_context.set_state(state)
        return state.rank

    def _access_dropping(self, key: OffloadKey) -> None:
        """An access for a policy that may evict on its own: a dropped key is new again; the keys
        the access evicts are dropped (the chunks in use protected)."""
        if key in self._dropped:
            del self._dropped[key]
            self._insert_dropping(key, 1)
            return
        evicted = self._hooks.access(key, None, self._in_use)
        if evicted:
            self._dropped.update(dict.fromkeys(evicted))

    def _insert_dropping(self, key: OffloadKey, size: int) -> None:
        evicted = self._hooks.insert(key, size, self._in_use)
        if evicted:
            self._dropped.update(dict.fromkeys(evicted))

    def _register_pending(self) -> None:
        """Tell the policy about the chunks inserted since the last call, in store order (vLLM's
        ``arc`` appends a stored chunk to T1 when it is inserted).  Deferred only so that a store
        that fails before anything else happens leaves no trace (ARC would keep a ghost)."""
        if not self._pending:
            return
        pending, self._pending = self._pending, {}
        insert = self._insert
        for key in pending:
            insert(key, 1)


def make_cache_policy(policy: Any, *, name: str | None = None, refresh_stores: bool = False) -> type[KvmmCachePolicy]:
    """A :class:`KvmmCachePolicy` subclass ordering chunks with ``policy``.

    ``policy``: a class or zero-argument callable returning an
    :class:`~kvmm.protocols.EvictionPolicy`, or such an object (each vLLM manager gets a deep
    copy of it).  ``refresh_stores``: ``True`` when the policy's order is recency only
    (LRU-like: ``on_access`` a refresh, ``on_remove`` then ``on_insert`` the same): chunks are
    then ranked as vLLM's ``lru`` ranks them (see the module docstring); a policy that evicts
    on its own (``self_evicting``) is refused.  ``False``: vLLM's ``arc`` sequence of events.
    To load it from vLLM, bind the class to a module-level name of an importable module and
    give that module as ``cache_policy_module_path``.
    """
    factory, probe = policy_factory(policy)
    if refresh_stores and isinstance(probe, EvictionPolicyBase) and probe.self_evicting:
        raise BadInputError(f"make_cache_policy: refresh_stores ranks chunks as vLLM's lru does, over a recency "
                            f"order; {type(probe).__name__} evicts on its own (self_evicting): expected "
                            "refresh_stores=False for it")
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


def _evicting_nothing(event: Callable) -> Callable:
    """``event`` for the recency ranking (``refresh_stores``), which needs a policy that evicts
    nothing on its own: keys coming back (from a policy that did not declare ``self_evicting``)
    are a :class:`KvmmError`."""
    def checked(key: OffloadKey, *size: int) -> None:
        evicted = event(key, *size)
        if evicted:
            raise KvmmError(f"refresh_stores ranks chunks over a recency order, but the policy evicted {list(evicted)!r} "
                            f"on its own; expected refresh_stores=False for a policy that evicts on its own")
    return checked
