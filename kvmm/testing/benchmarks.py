"""Replaying a request trace through an eviction policy: hit ratio and throughput.

The ``kvmm_policy_benchmark`` fixture of :mod:`kvmm.testing.plugin` times :func:`replay_policy`
under pytest-benchmark; these functions work without pytest too::

    from kvmm.testing.benchmarks import replay_policy, trace_keys
    hits = replay_policy(MyPolicy(), trace_keys("conversation"), capacity=4000)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from kvmm._policy_hooks import PolicyHooks
from kvmm._validate import as_count
from kvmm.traces import load_trace

__all__ = ["BENCH_SCALES", "SMOKE_REQUESTS", "PolicyBenchmarkResult", "replay_policy", "trace_keys", "same_run_table"]

#: ``--kvmm-bench-scale`` values: ``smoke`` replays the first :data:`SMOKE_REQUESTS` requests.
BENCH_SCALES = ("smoke", "full")
SMOKE_REQUESTS = 200


def replay_policy(policy: Any, keys: Sequence[Any], capacity: int) -> int:
    """Replay ``keys`` through ``policy`` as a cache of ``capacity`` entries; return the hits.

    ManagedTier's calling convention with every entry of size 1
    (:class:`~kvmm._policy_hooks.PolicyHooks`): a hit is ``on_access(key)``; a miss on a full
    cache asks ``victims(1)`` (with ``incoming=key`` for an EvictionPolicyBase), removes that
    victim (``on_remove``) and then inserts (``on_insert(key)``); the keys an event returns,
    evicted on the policy's own, leave the cache.  Nothing is protected.
    Runtime complexity: O(len(keys)) policy calls.
    """
    capacity = as_count(capacity, "capacity", minimum=1)
    hooks = PolicyHooks(policy)
    on_access, on_insert, on_remove, victims = hooks.access, hooks.insert, hooks.remove, hooks.victims
    resident: set = set()
    hits = 0
    for key in keys:
        if key in resident:
            evicted = on_access(key)
            if evicted:
                resident.difference_update(evicted)
            hits += 1
            continue
        if len(resident) >= capacity:
            chosen = victims(1, (), incoming=key)
            if len(chosen) != 1 or chosen[0] not in resident:
                raise AssertionError(f"victims(1) on a full cache returned {chosen!r}; expected one resident key")
            on_remove(chosen[0])
            resident.remove(chosen[0])
        evicted = on_insert(key)
        resident.add(key)
        if evicted:
            resident.difference_update(evicted)
    return hits


@lru_cache(maxsize=8)
def trace_keys(trace: str, max_requests: int | None = None) -> tuple[int, ...]:
    """The block keys of a bundled trace (or a trace file of any format kvmm reads) in request
    order, as ints; only the first ``max_requests`` requests when given."""
    loaded = load_trace(trace)
    end = loaded.block_offsets[min(max_requests, loaded.num_requests)] if max_requests is not None else None
    return tuple(loaded.block_ids[:end].tolist())


@dataclass
class PolicyBenchmarkResult:
    """One timed replay: the policy, the workload, hits, and seconds per replay."""

    label: str
    role: str  # "kvmm" (the policy under test) or "baseline" (LRUPolicy), as in bench/
    group: str
    trace: str
    capacity: int
    refs: int
    hits: int
    seconds: float
    baseline_hits: int  # LRUPolicy's hits on the same keys and capacity

    @property
    def hit_ratio(self) -> float:
        return self.hits / self.refs if self.refs else 0.0

    @property
    def baseline_hit_ratio(self) -> float:
        return self.baseline_hits / self.refs if self.refs else 0.0

    @property
    def refs_per_second(self) -> float:
        return self.refs / self.seconds if self.seconds > 0 else float("inf")


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """``fn()`` and the seconds it took."""
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def same_run_table(results: Sequence[PolicyBenchmarkResult]) -> list[tuple[str, ...]]:
    """Rows (with a header) pairing each policy's result with LRU's in the same group."""
    rows = [("group", "policy", "hit ratio", "refs/s", "LRU hit ratio", "LRU refs/s", "speed vs LRU")]
    baselines = {r.group: r for r in results if r.role == "baseline"}
    for r in results:
        if r.role != "kvmm":
            continue
        base = baselines.get(r.group)
        rows.append((r.group, r.label, f"{r.hit_ratio:.4f}", f"{r.refs_per_second:,.0f}",
                     f"{r.baseline_hit_ratio:.4f}", f"{base.refs_per_second:,.0f}" if base else "-",
                     f"{r.refs_per_second / base.refs_per_second:.2f}x" if base else "-"))
    return rows if len(rows) > 1 else []
