"""The paper reproductions behind ``kvmm reproduce``: one module per paper, each a *section*.

A section is a module with a function ``reproduce(report: Report) -> None`` that runs its
experiment and calls :meth:`~kvmm.report.Report.table`, :meth:`~kvmm.report.Report.text` and
:meth:`~kvmm.report.Report.figure`.  Sections are listed in :data:`SECTIONS`, so a new paper adds
one module and one line here.  They use only the public library (allocators, policies, tiers,
compress, cluster, sim, plan); the component packages hold no experiment code.

* :mod:`~kvmm.reproduce.prefix_cache`: prefix-cache hit ratio vs pool size (BlockAllocator)
* :mod:`~kvmm.reproduce.latency`: the physical clock against published step times
* :mod:`~kvmm.reproduce.vtoken`: vToken (token table + repacking)
* :mod:`~kvmm.reproduce.efficientagent`: EfficientAgent (working set, refill admission)
* :mod:`~kvmm.reproduce.tempokv`: TempoKV (commitment ledger, staging policies)
* :mod:`~kvmm.reproduce.pd`: prefill/decode disaggregation
* :mod:`~kvmm.reproduce.triattention`: TriAttention (RoPE trig-series scoring)
* :mod:`~kvmm.reproduce.cluster`: routed instances over shared tiers
* :mod:`~kvmm.reproduce.plan`: ``kvmm plan``'s frontiers

Importing this package loads no section: :func:`run_sections` imports each by name when it runs.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Sequence

from kvmm.errors import BadInputError
from kvmm.report import Report

__all__ = ["SECTIONS", "TRACE_SECTION", "run_sections"]

#: the section that replays ``kvmm reproduce --trace`` (the others use their own workloads)
TRACE_SECTION = "allocator"

#: (section name, module path).  The module defines ``reproduce(report)``.
SECTIONS: list[tuple[str, str]] = [
    ("allocator", "kvmm.reproduce.prefix_cache"),
    ("latency", "kvmm.reproduce.latency"),
    ("vtoken", "kvmm.reproduce.vtoken"),
    ("working-set", "kvmm.reproduce.efficientagent"),
    ("tempokv", "kvmm.reproduce.tempokv"),
    ("pd", "kvmm.reproduce.pd"),
    ("triattention", "kvmm.reproduce.triattention"),
    ("cluster", "kvmm.reproduce.cluster"),
    ("plan", "kvmm.reproduce.plan"),
]


def run_sections(report: Report, only: Sequence[str] | None = None) -> list[str]:
    """Run every registered section (or those named in ``only``); return the names that ran."""
    names = [n for n, _ in SECTIONS]
    if only:
        unknown = [n for n in only if n not in names]
        if unknown:
            raise BadInputError(f"unknown section(s) {unknown}; expected some of {names}")
    ran = []
    for name, module_path in SECTIONS:
        if only and name not in only:
            continue
        # by name: a section loads its experiment's kernels only when it runs
        module = importlib.import_module(module_path)
        t0 = time.perf_counter()
        module.reproduce(report)
        # wall time of the whole section, numba compilation (or cache loading) of its kernels included
        print(f"({name}: {time.perf_counter() - t0:.1f}s wall, JIT compilation included)", file=report.stream)
        ran.append(name)
        report.sections.append(name)
    return ran
