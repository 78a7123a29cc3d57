"""Shared benchmark plumbing.

Conventions every benchmark follows:

* Each benchmark belongs to a pytest-benchmark *group* (``@pytest.mark.benchmark(group=...)``)
  that holds the kvmm implementation and at least one baseline timed in the same run.
* It records ``benchmark.extra_info["role"] = "kvmm"`` or ``"baseline"``, a ``"label"``
  (e.g. ``"plain-Python reference"``, ``"libCacheSim LRU"``), and ``"items"``: how many
  units one call processes, with ``"unit"`` naming them (blocks, refs, keys, ...).
* numba kernels are warmed up (called once on tiny input) before timing: use :func:`warm`.

At the end of the run a table prints each group's throughput and the kvmm/baseline ratio, from
the *median* time per call: on a shared machine a few rounds preempted by other jobs move the
mean by several times, the median hardly at all.  A group whose kvmm benchmarks passed with no
baseline passing beside them, or holding a benchmark whose role is neither, prints a ``no baseline
timed in this run:`` line (also under ``--benchmark-disable``, so tests/test_bench_smoke.py fails on it).

``KVMM_BENCH_SCALE=smoke`` shrinks every workload (the default test run uses it, with
``--benchmark-disable``, so benchmarks never rot); ``full`` (default) uses the sizes the issues
name.  Use :func:`size` to pick a size.
"""

from __future__ import annotations

import os
from collections import defaultdict

import numpy as np
import pytest

NO_BASELINE = "no baseline timed in this run:"
_ROLES = pytest.StashKey[dict]()  # benchmark group -> roles of its benchmarks that passed in this run

SCALE = os.environ.get("KVMM_BENCH_SCALE", "full")


def size(full: int, smoke: int) -> int:
    """The workload size for the current scale."""
    return smoke if SCALE == "smoke" else full


def info(benchmark, role: str, label: str, items, unit: str) -> None:
    """Record the convention's fields: ``role`` ("kvmm" or "baseline"), ``label``, ``items`` per call, ``unit``."""
    benchmark.extra_info.update(role=role, label=label, items=items, unit=unit)


def warm(fn, *args, **kwargs):
    """Call ``fn`` once (compiles numba kernels) and return its result."""
    return fn(*args, **kwargs)


def libcachesim_trace(keys: np.ndarray, path) -> str:
    """``keys`` (int64) written as a libCacheSim oracleGeneral file of unit-size objects (what a
    libCacheSim baseline reads); returns the path as text."""
    from kvmm.traces.oracle import ORACLE_GENERAL_DTYPE

    records = np.zeros(keys.size, dtype=ORACLE_GENERAL_DTYPE)
    records["time"] = np.arange(keys.size, dtype=np.uint32)
    records["obj_id"] = keys.view(np.uint64)
    records["size"] = 1
    records["next_access_vtime"] = -1
    records.tofile(path)
    return str(path)


@pytest.fixture
def scale() -> str:
    return SCALE


def _rows(config):
    session = getattr(config, "_benchmarksession", None)
    if session is None:
        return []
    groups = defaultdict(list)
    for bench in session.benchmarks:
        if not bench or not bench.extra_info.get("role"):
            continue
        groups[bench.group].append(bench)
    rows = []
    for group, benches in sorted(groups.items(), key=lambda kv: str(kv[0])):
        ours = [b for b in benches if b.extra_info["role"] == "kvmm"]
        bases = [b for b in benches if b.extra_info["role"] == "baseline"]
        for mine in ours:
            items = mine.extra_info.get("items", 1)
            unit = mine.extra_info.get("unit", "calls")
            rate = items / mine.stats.median if mine.stats.median else float("nan")
            label = mine.extra_info.get("label", mine.name)
            if not bases:
                rows.append((group, label, f"{rate:,.0f} {unit}/s", "-", "-", "-"))
            for base in bases:
                b_items = base.extra_info.get("items", items)
                b_rate = b_items / base.stats.median if base.stats.median else float("nan")
                ratio = rate / b_rate if b_rate else float("nan")
                rows.append((group, label, f"{rate:,.0f} {unit}/s", base.extra_info.get("label", base.name),
                             f"{b_rate:,.0f} {unit}/s", f"{ratio:,.1f}x"))
    return rows


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    bench = getattr(item, "funcargs", {}).get("benchmark")
    if report.when == "call" and report.passed and bench is not None:
        # a benchmark with no role (None) or a misspelt one is reported below, not left out
        item.config.stash.setdefault(_ROLES, defaultdict(set))[bench.group].add(bench.extra_info.get("role"))


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter, exitstatus, config):
    for group, roles in sorted(config.stash.get(_ROLES, {}).items(), key=lambda kv: str(kv[0])):
        if roles - {"kvmm", "baseline"}:
            terminalreporter.write_line(f"{NO_BASELINE} {group} (a benchmark there records role "
                                        f"{sorted(roles - {'kvmm', 'baseline'}, key=str)}, not kvmm or baseline)")
        elif "kvmm" in roles and "baseline" not in roles:
            terminalreporter.write_line(f"{NO_BASELINE} {group}")
    rows = _rows(config)
    if not rows:
        return
    headers = ("group", "kvmm", "kvmm rate", "baseline", "baseline rate", "speedup")
    widths = [max(len(str(r[i])) for r in rows + [headers]) for i in range(len(headers))]
    tr = terminalreporter
    tr.section("kvmm vs baseline (same run, median time per call)")
    tr.write_line("  ".join(h.ljust(w) for h, w in zip(headers, widths)))
    for r in rows:
        tr.write_line("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))
