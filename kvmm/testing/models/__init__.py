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
* :class:`~kvmm.testing.models.block_index.NaiveBlockIndex`: ``kvmm.cluster.BlockIndex``
  (docs/cluster_index.md: holders per key, consecutive prefix runs, LRU entry budget);
* :mod:`~kvmm.testing.models.siphash`: SipHash-2-4 from the paper's pseudo-code;
* :mod:`~kvmm.testing.models.routers`: the least-loaded, approx-prefix, precise-prefix, weighted
  and kv-cost routers, random tie-breaks included (docs/cluster_routers.md: smg's and sgl-router's
  cache-aware rules, llm-d's scorers and profiles, NVIDIA Dynamo's KV router cost).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvmm._lazy import lazy_exports

_LAZY = {
    "NaiveBlockAllocator": "kvmm.testing.models.block_allocator",
    "NaiveTokenTable": "kvmm.testing.models.token_table",
    "LedgerModel": "kvmm.testing.models.ledger",
    "NaiveBlockIndex": "kvmm.testing.models.block_index",
    "ApproxPrefixModel": "kvmm.testing.models.routers",
    "PrecisePrefixModel": "kvmm.testing.models.routers",
    "WeightedModel": "kvmm.testing.models.routers",
}
__all__ = [*_LAZY, "siphash"]

if TYPE_CHECKING:  # what editors and type checkers see; at run time each name loads on first use
    from kvmm.testing.models.block_allocator import NaiveBlockAllocator
    from kvmm.testing.models.block_index import NaiveBlockIndex
    from kvmm.testing.models.ledger import LedgerModel
    from kvmm.testing.models.routers import ApproxPrefixModel, PrecisePrefixModel, WeightedModel
    from kvmm.testing.models.token_table import NaiveTokenTable

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals(), frozenset({"siphash"}))
