"""kvmm eviction policies inside the real vLLM 0.33.0 CPU offloading manager (vLLM venv only).

Run by .ci/run in .ci/venvs/vllm; the main run does not collect tests/integrations.
"""

from __future__ import annotations

import importlib.metadata

import pytest
from vllm.v1.kv_offload.base import ReqContext
from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager
from vllm.v1.kv_offload.cpu.policies.base import CachePolicy, ChunkStatus
from vllm.v1.kv_offload.cpu.policies.factory import CachePolicyFactory

import kvmm.integrations.vllm as kv
from kvmm.errors import BadInputError
from kvmm.policies import ARCPolicy, BeladyPolicy, ClockPolicy, LFUPolicy, LRUPolicy
from kvmm.testing.engines.vllm_replay import (
    new_context,
    offload_key,
    replay_managed_tier,
    replay_vllm,
    request_keys,
    run_request,
)
from kvmm.traces import conversation_trace, load_mooncake

N_REQUESTS = 1500
CAPACITY = 600  # blocks; the largest of these requests fits, the working set does not


@pytest.fixture(scope="module")
def trace():
    return load_mooncake("conversation")


#: The bundled Mooncake trace (mostly one-off blocks, many evictions) and a generated
#: multi-turn conversation trace (each turn reuses the session's prefix: many hits).
TRACES = pytest.mark.parametrize("source, capacity", [("mooncake", CAPACITY), ("generated", 100)])


def trace_of(source, mooncake):
    trace = mooncake if source == "mooncake" else conversation_trace(num_sessions=40, seed=3)
    return trace, min(N_REQUESTS, trace.num_requests)


def manager(policy: str, capacity: int = CAPACITY, **kwargs) -> CPUOffloadingManager:
    module = None if policy in ("lru", "arc") else kv.MODULE_PATH
    return CPUOffloadingManager(capacity, cache_policy=policy, cache_policy_module_path=module, **kwargs)


def test_vllm_version_is_the_pinned_one():
    assert importlib.metadata.version("vllm") == "0.33.0"


@pytest.mark.parametrize("name", ["KvmmLRU", "KvmmFIFO", "KvmmLFU", "KvmmARC"])
def test_vllm_loads_each_policy_by_module_path(name):
    cls = CachePolicyFactory.get_cache_policy_cls(name, kv.MODULE_PATH)
    assert cls is getattr(kv, name) and issubclass(cls, CachePolicy)
    assert type(manager(name, 8)._policy) is cls


@TRACES
def test_lru_replay_matches_vllm_lru_and_managed_tier(trace, source, capacity):
    trace, n = trace_of(source, trace)
    ours = manager("KvmmLRU", capacity)
    kvmm_in_vllm = replay_vllm(ours, trace, n, check=ours._policy.check)
    vllm_lru = replay_vllm(manager("lru", capacity), trace, n)
    managed = replay_managed_tier(LRUPolicy(), capacity, trace, n)
    # The same stores, hits and evictions, in the same order, request by request.
    for i, (a, b, c) in enumerate(zip(kvmm_in_vllm, vllm_lru, managed)):
        assert a == b, f"request {i}: KvmmLRU {a[0]} hits differs from vLLM lru {b[0]} hits"
        assert a == c, f"request {i}: KvmmLRU differs from ManagedTier(LRUPolicy)"
    # The comparison means something: hits and evictions both happen.
    assert sum(r[0] for r in vllm_lru) > 500 and sum(len(r[2]) for r in vllm_lru) > 500
    # The finished requests' tails went first: the first eviction of a stored prefix is its tail.
    order = {key: i for i, key in enumerate(request_keys(trace, 0))}
    first_evicted = [k for r in vllm_lru for k in r[2] if k in order]
    assert first_evicted and first_evicted[0] == max(order, key=order.get)


@pytest.mark.parametrize("a_finishes_first, expected", [(False, "a2"), (True, "x2")])
def test_in_flight_request_ranks_as_in_vllm(a_finishes_first, expected):
    """vLLM ranks an in-flight request's chunks with the rank it took when it started, and
    KvmmLRU does the same (issue 33; until then KvmmLRU registered them when stored and evicted
    a1 here).  Request A stores a1, then (after request Y reused and finished X's blocks) stores
    a2.  While A still runs, both evict a2 (rank (R_A, -32), older than Y's re-rank); once A has
    finished both re-rank A's chunks head-most-recent and evict X's tail, x2."""
    keys = dict(zip(["x1", "x2", "a1", "a2", "b1"], (offload_key(k) for k in range(1, 6))))
    x, a = [keys["x1"], keys["x2"]], [keys["a1"], keys["a2"]]
    for policy in ("lru", "KvmmLRU"):
        m = manager(policy, 4)
        run_request(m, "X", x)
        ctx_a = new_context("A", a)
        m.on_new_request(ctx_a)
        m.complete_store(m.prepare_store(a[:1], ctx_a).keys_to_store, ctx_a)
        assert run_request(m, "Y", x) == (2, [], [])
        m.complete_store(m.prepare_store(a[1:], ctx_a).keys_to_store, ctx_a)
        if a_finishes_first:
            m.on_request_finished(ctx_a)
        assert run_request(m, "B", [keys["b1"]])[2] == [keys[expected]], policy
        m.on_request_finished(ctx_a)
        if policy == "KvmmLRU":
            m._policy.check()


@pytest.mark.parametrize("policy", ["lru", "KvmmLRU", "arc", "KvmmARC"])
def test_chunked_prefill_loses_its_tail_first_while_it_runs(policy):
    """Issue 33, item 1b: a running request stores its prefix one chunk per step (positions
    16/32/48, the chunked-prefill path), then another request needs room.  vLLM's lru evicts the
    running request's tail (3), which keeps the prefix 1, 2 useful for prefix hits; KvmmLRU
    evicted the head (1) before.  vLLM's arc keeps T1 in store order while the request runs, so
    it and KvmmARC evict the head (1)."""
    keys = [offload_key(k) for k in (1, 2, 3, 4)]
    m = manager(policy, 3)
    ctx = ReqContext("prefill")
    for key, position in zip(keys, (16, 32, 48)):
        ctx.set_offload_key_position(key, position)
    m.on_new_request(ctx)
    for key in keys[:3]:
        m.complete_store(m.prepare_store([key], ctx).keys_to_store, ctx)
    other = new_context("other", keys[3:])
    m.on_new_request(other)
    assert m.prepare_store(keys[3:], other).evicted_keys == [keys[2] if "lru" in policy.lower() else keys[0]]


@pytest.mark.parametrize("policy", ["lru", "KvmmLRU", "arc", "KvmmARC", "KvmmFIFO", "KvmmLFU"])
def test_a_batch_stored_without_positions_loses_its_first_key_first(policy):
    """Issue 33, item 1a: keys stored in one batch without token positions rank in store
    order in vLLM (lru: a fresh rank each; arc: appended to T1), so the first-stored goes first;
    kvmm's classes ranked the batch tail first and evicted the last-stored before."""
    keys = [offload_key(k) for k in (1, 2, 3, 4)]
    m = manager(policy, 3)
    ctx = ReqContext("batch")  # no positions recorded
    m.complete_store(m.prepare_store(keys[:3], ctx).keys_to_store, ctx)
    assert m.prepare_store(keys[3:], ReqContext("next")).evicted_keys == [keys[0]]


def test_arc_replay_end_to_end(trace):
    ours = manager("KvmmARC")
    result = replay_vllm(ours, trace, N_REQUESTS, check=lambda: (ours._policy.check(), ours._policy.policy.check()))
    policy = ours._policy.policy
    assert isinstance(policy, ARCPolicy) and policy.c == CAPACITY
    hits = sum(r[0] for r in result)
    assert hits > 1000 and sum(len(r[2]) for r in result) > 1000
    lists = policy.lists()
    # Reused blocks were promoted, evicted ones remembered as ghosts.
    assert lists["T2"] and (lists["B1"] or lists["B2"])
    assert len(lists["T1"]) + len(lists["T2"]) == len(ours._policy.chunks) <= CAPACITY


def test_arc_reuse_promotes_and_ghost_hit_adapts():
    k1, k2, k3 = (offload_key(k) for k in (1, 2, 3))
    m = manager("KvmmARC", 2)
    arc = m._policy.policy
    run_request(m, "store", [k1, k2])
    assert arc.lists() == {"T1": [k2, k1], "T2": [], "B1": [], "B2": []}  # tail first
    assert run_request(m, "reuse", [k1]) == (1, [], [])
    assert arc.lists() == {"T1": [k2], "T2": [k1], "B1": [], "B2": []}
    assert run_request(m, "new", [k3]) == (0, [k3], [k2])  # |T1| = 1 > p = 0: T1's oldest
    assert arc.lists() == {"T1": [k3], "T2": [k1], "B1": [k2], "B2": []}
    # The B1 ghost's store miss grows T1's target before the eviction (vLLM's on_store_miss, and
    # the paper's order); with |T1| = 1 = p the paper's REPLACE takes T2's k1 (vLLM's arc, whose
    # rule is |T1| >= int(p), would take T1's k3), and the ghost returns to T2.
    assert run_request(m, "ghost", [k2]) == (0, [k2], [k1])
    assert arc.p == 1.0
    assert arc.lists() == {"T1": [k3], "T2": [k2], "B1": [], "B2": [k1]}


def test_kvmm_arc_keeps_the_papers_rules_where_vllm_arc_departs():
    """The same four requests through vLLM's arc and KvmmARC: the same until the ghost returns.
    Both adapt the target to 1 at the store miss; then vLLM takes T1's k3 (|T1| = 1 >= int(p))
    and puts the ghost in T1, kvmm's ARC (the paper's, docs/eviction_orders.md) takes T2's k1
    (|T1| > p fails) and puts the ghost in T2."""
    k1, k2, k3 = (offload_key(k) for k in (1, 2, 3))
    runs = {}
    for policy in ("arc", "KvmmARC"):
        m = manager(policy, 2)
        runs[policy] = [run_request(m, name, keys) for name, keys in
                        [("store", [k1, k2]), ("reuse", [k1]), ("new", [k3]), ("ghost", [k2])]]
        if policy == "arc":
            lists = {"T1": list(m._policy.t1), "T2": list(m._policy.t2)}
            p = m._policy.target_t1_size
        else:
            lists = {k: v for k, v in m._policy.policy.lists().items() if k in ("T1", "T2")}
            p = m._policy.policy.p
        runs[policy].append((p, lists))
    assert runs["arc"][:3] == runs["KvmmARC"][:3]
    assert runs["arc"][3:] == [(0, [k2], [k3]), (1.0, {"T1": [k2], "T2": [k1]})]
    assert runs["KvmmARC"][3:] == [(0, [k2], [k1]), (1.0, {"T1": [k3], "T2": [k2]})]


def test_lfu_counts_reuse_not_stores():
    k1, k2, k3 = (offload_key(k) for k in (1, 2, 3))
    m = manager("KvmmLFU", 2)
    run_request(m, "store", [k1, k2])
    run_request(m, "reuse", [k1])
    lfu = m._policy.policy
    assert isinstance(lfu, LFUPolicy) and (lfu.frequency(k1), lfu.frequency(k2)) == (2, 1)
    assert run_request(m, "new", [k3])[2] == [k2]


def test_fifo_ignores_reuse():
    k1, k2, k3 = (offload_key(k) for k in (1, 2, 3))
    m = manager("KvmmFIFO", 2)
    run_request(m, "store", [k1, k2])   # registered in store order, as vLLM's arc appends to T1
    run_request(m, "reuse", [k1])
    assert run_request(m, "new", [k3])[2] == [k1]


def test_evict_is_all_or_nothing_and_skips_chunks_in_use():
    policy = kv.KvmmLRU(3)
    ctx = ReqContext("r")
    keys = [offload_key(k) for k in range(3)]
    for i, key in enumerate(keys):
        policy.insert(key, ChunkStatus(i), ctx)
    assert policy.evict(1, set()) is None  # stores in flight: nothing evictable
    for key in keys:
        policy.get(key).ref_cnt = 0
        policy.mark_evictable(key)
    policy.get(keys[0]).ref_cnt = 1
    policy.mark_non_evictable(keys[0])
    before = (policy.policy.keys(), dict(policy.chunks))
    assert policy.evict(3, {keys[1]}) is None
    assert (policy.policy.keys(), dict(policy.chunks)) == before
    assert [k for k, _ in policy.evict(1, {keys[1]})] == [keys[2]]
    policy.check()
    policy.clear()
    assert policy.chunks == {} and len(policy.policy) == 0


def test_failed_store_is_forgotten():
    m = manager("KvmmARC", 2)
    ctx = new_context("r", [offload_key(1)])
    m.prepare_store([offload_key(1)], ctx)
    m.complete_store([offload_key(1)], ctx, success=False)
    m.on_request_finished(ctx)
    assert m._policy.chunks == {} and m._policy.policy.lists()["B1"] == []
    m._policy.check()
    retry = new_context("retry", [offload_key(1)])  # the same block stored again, successfully
    m.complete_store(m.prepare_store([offload_key(1)], retry).keys_to_store, retry)
    m.on_request_finished(retry)
    m._policy.check()
    assert m._policy.policy.lists()["T1"] == [offload_key(1)]


def test_make_cache_policy_from_any_eviction_policy():
    cls = kv.make_cache_policy(LRUPolicy(), name="TemplateLRU", refresh_stores=True)
    a, b = cls(2), cls(2)
    assert a.policy is not b.policy and issubclass(cls, kv.KvmmCachePolicy)
    factory_cls = kv.make_cache_policy(lambda: ARCPolicy(ghost_limit=4))
    assert factory_cls.__name__ == "KvmmARCPolicy" and factory_cls(8).policy.c == 8
    with pytest.raises(BadInputError, match="EvictionPolicy"):
        kv.make_cache_policy(object())
    with pytest.raises(BadInputError, match="lacks the EvictionPolicy"):
        kv.make_cache_policy(lambda: 3)


def test_clock_runs_inside_vllm_and_belady_is_refused(trace):
    cls = kv.make_cache_policy(lambda: ClockPolicy(n_bit_counter=2), name="KvmmClock2")
    ours = manager("KvmmARC")
    ours._policy = cls(cache_capacity=CAPACITY)  # vLLM loads policies by name; swap in CLOCK
    result = replay_vllm(ours, trace, N_REQUESTS, check=lambda: (ours._policy.check(), ours._policy.policy.check()))
    assert isinstance(ours._policy.policy, ClockPolicy)
    assert sum(r[0] for r in result) > 0 and sum(len(r[2]) for r in result) > 0  # hits and evictions happened
    with pytest.raises(BadInputError, match="future reference stream"):
        kv.make_cache_policy(BeladyPolicy)  # an engine cannot know its future references


def test_double_insert_is_refused_without_change():
    policy = kv.KvmmLRU(2)
    ctx = ReqContext("r")
    policy.insert(offload_key(1), ChunkStatus(0), ctx)
    with pytest.raises(BadInputError, match="already resident"):
        policy.insert(offload_key(1), ChunkStatus(1), ctx)
    assert policy.get(offload_key(1)).chunk_id == 0
    policy.check()


class PlainARC(ARCPolicy):
    """A subclass: no fast hooks, so the adapter calls the checked on_access / on_insert."""


@TRACES
def test_arc_fast_hooks_make_the_same_decisions_as_the_checked_events(trace, source, capacity):
    trace, n = trace_of(source, trace)
    fast = manager("KvmmARC", capacity)
    plain_cls = kv.make_cache_policy(PlainARC, name="KvmmPlainARC")
    plain = manager("KvmmARC", capacity)
    plain._policy = plain_cls(cache_capacity=capacity)  # vLLM loads policies by name; swap in the plain one
    assert fast._policy._access == fast._policy.policy._access_unchecked
    assert plain._policy._access == plain._policy.policy.on_access
    results = replay_vllm(fast, trace, n), replay_vllm(plain, trace, n)
    assert results[0] == results[1]  # the same hits, stores and evictions, request by request
    a, b = fast._policy.policy, plain._policy.policy
    assert (a.lists(), a.list_sizes(), a.p) == (b.lists(), b.list_sizes(), b.p)
    # The comparison means something: hits, evictions and adaptation happened.
    assert sum(r[0] for r in results[0]) > 100 and sum(len(r[2]) for r in results[0]) > 100
    assert a.lists()["T2"] and (a.lists()["B1"] or a.lists()["B2"])


@pytest.mark.parametrize("p_finishes_before_a_loads, expected", [(True, "p1"), (False, "a2")])
def test_scheduler_order_matches_vllm(p_finishes_before_a_loads, expected):
    """Driven as vLLM's real Scheduler drives it, KvmmLRU makes vLLM lru's evictions (issue 19,
    item 8, and issue 33: until then KvmmLRU evicted x1 here, not a2).

    OffloadingConnectorScheduler signals ``on_request_finished`` of request P in
    ``build_connector_meta`` of the step *after* P finished, while that step's ``schedule()`` may
    already have scheduled the next request A and loaded its hit prefix (``prepare_load``, whose
    ``on_request_access`` gives A its lru rank R_A).  P's finish then re-ranks P's chunks newer
    than R_A, and every chunk A stores later gets rank (R_A, -position): older than P's.  So with
    the cache full both evict A's own stored tail (a2); when P's finish comes before A's load,
    both evict P's p1."""
    keys = dict(zip(["x1", "p1", "a1", "a2", "a3"], (offload_key(k) for k in range(1, 6))))
    for policy in ("lru", "KvmmLRU"):
        m = manager(policy, 4)
        run_request(m, "X", [keys["x1"]])
        ctx_p = new_context("P", [keys["p1"]])
        m.on_new_request(ctx_p)
        m.complete_store(m.prepare_store([keys["p1"]], ctx_p).keys_to_store, ctx_p)
        if p_finishes_before_a_loads:
            m.on_request_finished(ctx_p)
        a = [keys[k] for k in ("x1", "a1", "a2", "a3")]  # A's prompt: X's block, then its own
        ctx_a = new_context("A", a)
        m.on_new_request(ctx_a)
        m.prepare_load(a[:1], ctx_a)  # A's hit prefix, loaded in the step it is scheduled
        m.complete_load(a[:1], ctx_a)
        if not p_finishes_before_a_loads:
            m.on_request_finished(ctx_p)  # build_connector_meta of the same step
        for key in a[1:3]:  # A's blocks, stored one step at a time: the cache fills (4 chunks)
            m.complete_store(m.prepare_store([key], ctx_a).keys_to_store, ctx_a)
        out = m.prepare_store(a[3:], ctx_a)
        assert out.evicted_keys == [keys[expected]], policy
        m.complete_store(out.keys_to_store, ctx_a)
        m.on_request_finished(ctx_a)
