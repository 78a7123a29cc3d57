"""kvmm's pytest plugin (entry point ``pytest11: kvmm``): trace fixtures and policy benchmarks.

Loaded in every pytest run of an environment where kvmm is installed, so it stays cheap: it
imports nothing heavy until a fixture is used.

* ``--kvmm-bench-scale smoke|full`` (default: ``$KVMM_BENCH_SCALE``, else ``full``): ``smoke``
  replays only the first requests of a trace (use it with ``--benchmark-disable`` to keep
  benchmarks from rotting in a normal test run).  The option also sets ``KVMM_BENCH_SCALE``
  for the run, so kvmm's own ``bench/`` (which reads the variable) follows it.
* ``kvmm_bench_scale``: that value.  ``kvmm_trace``: a function, bundled name or path ->
  :class:`~kvmm.traces.KVTrace` (cached); ``kvmm_conversation_trace`` and
  ``kvmm_synthetic_trace``: the two bundled Mooncake traces.
* ``kvmm_policy_benchmark(policy_factory, trace="conversation", capacity=4000)``: a test that
  uses it runs twice, ``[policy]`` timing your policy and ``[lru]`` timing ``LRUPolicy`` on the
  same keys, both under pytest-benchmark (``benchmark.extra_info`` records ``role``,
  ``label``, ``items``/``unit`` and ``hit_ratio``, as bench/ does); it returns a
  :class:`~kvmm.testing.benchmarks.PolicyBenchmarkResult`.  At the end of the run a table
  prints each policy's hit ratio and throughput beside LRU's.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import pytest

BENCH_SCALES = ("smoke", "full")  # kvmm.testing.benchmarks.BENCH_SCALES (not imported: keep loading cheap)
_RESULTS = pytest.StashKey[list]()  # every PolicyBenchmarkResult of this run, for the summary table
_LRU_HITS = pytest.StashKey[dict]()  # (keys, capacity) -> LRUPolicy's hits, computed once per run
_ENV_BEFORE = pytest.StashKey[object]()  # KVMM_BENCH_SCALE before the option set it (restored at exit)


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("kvmm", "kvmm benchmarks")
    group.addoption("--kvmm-bench-scale", choices=BENCH_SCALES, default=None,
                    help="workload size of kvmm benchmarks: smoke (first requests only) or full "
                         "(default: $KVMM_BENCH_SCALE, else full)")


def pytest_configure(config: Any) -> None:
    config.stash[_RESULTS] = []
    # Code that reads the variable (kvmm's bench/ sizes its workloads at import) sees the option.
    scale = config.getoption("--kvmm-bench-scale", default=None)
    if scale is not None:
        config.stash[_ENV_BEFORE] = os.environ.get("KVMM_BENCH_SCALE")
        os.environ["KVMM_BENCH_SCALE"] = scale


def pytest_unconfigure(config: Any) -> None:
    if _ENV_BEFORE in config.stash:
        before = config.stash[_ENV_BEFORE]
        if before is None:
            os.environ.pop("KVMM_BENCH_SCALE", None)
        else:
            os.environ["KVMM_BENCH_SCALE"] = before


def bench_scale(config: Any) -> str:
    """The scale of this run: ``--kvmm-bench-scale``, else ``$KVMM_BENCH_SCALE``, else ``full``."""
    scale = config.getoption("--kvmm-bench-scale", default=None) or os.environ.get("KVMM_BENCH_SCALE") or "full"
    if scale not in BENCH_SCALES:
        raise pytest.UsageError(f"KVMM_BENCH_SCALE must be one of {BENCH_SCALES}, got {scale!r}")
    return scale


@pytest.fixture(scope="session")
def kvmm_bench_scale(pytestconfig: Any) -> str:
    return bench_scale(pytestconfig)


@pytest.fixture(scope="session")
def kvmm_trace() -> Callable[[str], Any]:
    # the plugin loads in every pytest run: kvmm's modules load only when a fixture is used
    from kvmm.traces import load_trace

    return lru_cache(maxsize=None)(load_trace)


@pytest.fixture(scope="session")
def kvmm_conversation_trace(kvmm_trace: Callable[[str], Any]) -> Any:
    return kvmm_trace("conversation")


@pytest.fixture(scope="session")
def kvmm_synthetic_trace(kvmm_trace: Callable[[str], Any]) -> Any:
    return kvmm_trace("synthetic")


@pytest.fixture(params=["kvmm", "baseline"], ids=["policy", "lru"])
def kvmm_policy_benchmark(request: Any, kvmm_bench_scale: str) -> Callable[..., Any]:
    role = request.param

    def run(policy_factory: Callable[[], Any], trace: str = "conversation", capacity: int = 4000,
            label: str | None = None) -> Any:
        # the plugin loads in every pytest run: kvmm's modules load only when a fixture is used
        from kvmm.policies.eviction import LRUPolicy
        from kvmm.testing.benchmarks import SMOKE_REQUESTS, PolicyBenchmarkResult, replay_policy, timed, trace_keys

        keys = trace_keys(str(trace), SMOKE_REQUESTS if kvmm_bench_scale == "smoke" else None)
        factory = policy_factory if role == "kvmm" else LRUPolicy
        if role == "kvmm":  # a policy is built for its class name only when the factory has no __name__
            name = label or getattr(policy_factory, "__name__", None) or type(policy_factory()).__name__
        else:
            name = "LRUPolicy"
        group = f"{request.node.originalname}: {trace}, {capacity} blocks, {kvmm_bench_scale}"
        replay_policy(factory(), keys[:200], capacity)  # warm up (numba kernels compile here)
        benchmark = request.getfixturevalue("benchmark")  # pytest-benchmark (kvmm[test])
        benchmark.group = group
        benchmark.extra_info.update(role=role, label=name, items=len(keys), unit="refs", trace=str(trace),
                                    capacity=capacity, source="kvmm_policy_benchmark")
        rounds = 1 if kvmm_bench_scale == "smoke" else 3
        hits, seconds = timed(lambda: benchmark.pedantic(lambda: replay_policy(factory(), keys, capacity),
                                                         rounds=rounds, iterations=1))
        stats = getattr(getattr(benchmark, "stats", None), "stats", None)
        seconds = stats.mean if stats is not None and stats.mean else seconds / rounds
        baseline_hits = hits if role == "baseline" else _lru_hits(request.config, keys, capacity)
        result = PolicyBenchmarkResult(label=name, role=role, group=group, trace=str(trace), capacity=capacity,
                                       refs=len(keys), hits=hits, seconds=seconds, baseline_hits=baseline_hits)
        benchmark.extra_info.update(hits=hits, hit_ratio=result.hit_ratio, baseline_hit_ratio=result.baseline_hit_ratio)
        request.config.stash[_RESULTS].append(result)
        return result

    return run


def _lru_hits(config: Any, keys: tuple, capacity: int) -> int:
    # the plugin loads in every pytest run: kvmm's modules load only when a fixture is used
    from kvmm.policies.eviction import LRUPolicy
    from kvmm.testing.benchmarks import replay_policy

    cache = config.stash.setdefault(_LRU_HITS, {})
    key = (len(keys), hash(keys), capacity)
    if key not in cache:
        cache[key] = replay_policy(LRUPolicy(), keys, capacity)
    return cache[key]


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: Any) -> None:
    results = config.stash.get(_RESULTS, [])
    if not results:
        return
    # the plugin loads in every pytest run: kvmm's modules load only when a fixture is used
    from kvmm.testing.benchmarks import same_run_table

    rows = same_run_table(results)
    if not rows:
        return
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    terminalreporter.section("kvmm policy vs LRU (same run)")
    for row in rows:
        terminalreporter.write_line("  ".join(c.ljust(w) for c, w in zip(row, widths)))
