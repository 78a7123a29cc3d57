"""Plain-Python models of kvmm's structures, written from their documented behaviour.

Slow and obviously correct (dicts, lists, ``OrderedDict``): the stateful machines compare the
numba structures with them step by step, and the benchmarks time them as the same-run
baseline.  Errors are plain ``ValueError``/``IndexError`` raised before any change.

* :class:`~kvmm.testing.models.block_allocator.NaiveBlockAllocator`: ``BlockAllocator``
  (docs/allocator.md: free-queue order, ref counts, prefix cache, keyed block hashes);
* :class:`~kvmm.testing.models.token_table.NaiveTokenTable`: ``TokenTable`` (docs/vtoken.md:
  logical views, dead tokens, two-phase repacking);
* :class:`~kvmm.testing.models.ledger.LedgerModel`: ``CommitmentLedger`` (docs/tempokv.md:
  claims, triggers, grants, estimators, leases; raises the documented KvmmErrors);
* :mod:`~kvmm.testing.models.siphash`: SipHash-2-4 from the paper's pseudo-code.
"""

from __future__ import annotations

import importlib

__all__ = ["NaiveBlockAllocator", "NaiveTokenTable", "LedgerModel", "siphash"]


def __getattr__(name: str):
    if name == "NaiveBlockAllocator":
        return importlib.import_module("kvmm.testing.models.block_allocator").NaiveBlockAllocator
    if name == "NaiveTokenTable":
        return importlib.import_module("kvmm.testing.models.token_table").NaiveTokenTable
    if name == "LedgerModel":
        return importlib.import_module("kvmm.testing.models.ledger").LedgerModel
    if name == "siphash":
        return importlib.import_module("kvmm.testing.models.siphash")
    raise AttributeError(f"module 'kvmm.testing.models' has no attribute {name!r}")
