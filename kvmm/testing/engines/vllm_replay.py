"""Drive vLLM's real CPU offloading manager and a kvmm ManagedTier with one trace's requests.

Each request, in trace order, as vLLM's offloading scheduler does for a request that runs
alone: look its blocks up (the hit prefix ends at the first miss), load the hits, offer the
rest for storing (``prepare_store``: all-or-nothing, the offered keys protected), complete the
store, finish the request.  The kvmm replay applies the same rules with a
:class:`~kvmm.tiers.ManagedTier` of one byte per block: the loaded hit prefix is accessed tail to
head (vLLM ranks it with the running request), the misses are put (evicting with the offered keys
protected) only if they all fit, and the finished request accesses its resident blocks tail to
head (vLLM re-ranks them so heads are evicted last).
"""

from __future__ import annotations

from vllm.v1.kv_offload.base import LookupResult, ReqContext, make_offload_key

from kvmm.tiers import ManagedTier, SimulatedTier

BLOCK_TOKENS = 512


def offload_key(block: int) -> bytes:
    return make_offload_key(int(block).to_bytes(8, "big"), 0)


def request_keys(trace, index: int) -> list[bytes]:
    return list(dict.fromkeys(offload_key(b) for b in trace.blocks_of(index)))


def new_context(name: str, keys: list[bytes]) -> ReqContext:
    ctx = ReqContext(req_id=name)
    for position, key in enumerate(keys):
        ctx.set_offload_key_position(key, (position + 1) * BLOCK_TOKENS)
    return ctx


def run_request(manager, name: str, keys: list[bytes]) -> tuple[int, list[bytes], list[bytes]]:
    """One request through vLLM's manager: (hit blocks, stored keys, evicted keys)."""
    ctx = new_context(name, keys)
    manager.on_new_request(ctx)
    hits = 0
    for key in keys:
        if manager.lookup(key, ctx) is not LookupResult.HIT:
            break
        hits += 1
    if hits:
        manager.prepare_load(keys[:hits], ctx)
        manager.complete_load(keys[:hits], ctx)
    stored: list[bytes] = []
    evicted: list[bytes] = []
    if keys[hits:]:
        output = manager.prepare_store(keys[hits:], ctx)
        if output is not None:
            stored, evicted = list(output.keys_to_store), list(output.evicted_keys)
            manager.complete_store(stored, ctx)
    manager.on_request_finished(ctx)
    return hits, stored, evicted


def replay_vllm(manager, trace, n_requests: int, *, check=None) -> list[tuple]:
    out = []
    for i in range(n_requests):
        out.append(run_request(manager, f"r{i}", request_keys(trace, i)))
        if check is not None:
            check()
    return out


def replay_managed_tier(policy, capacity: int, trace, n_requests: int) -> list[tuple]:
    tier = ManagedTier(SimulatedTier(capacity), policy)
    out = []
    for i in range(n_requests):
        keys = request_keys(trace, i)
        hits = 0
        while hits < len(keys) and tier.contains(keys[hits]):
            hits += 1
        for key in reversed(keys[:hits]):  # the loaded prefix is in use by the running request
            tier.get(key)
        offered = keys[hits:]
        new = [k for k in offered if not tier.contains(k)]
        resident_offered = len(offered) - len(new)
        stored: list[bytes] = []
        evicted: list[bytes] = []
        # vLLM's prepare_store is all-or-nothing: it stores nothing unless every new block fits
        # after evicting unprotected (not offered) blocks.
        if len(new) <= capacity - resident_offered:
            for key in new:
                evicted += tier.put_size(key, 1, protected=offered)
            stored = new
        for key in reversed(keys):
            if tier.contains(key):
                tier.get(key)
        tier.check()
        out.append((hits, stored, evicted))
    return out
