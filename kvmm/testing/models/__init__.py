"""Plain-Python models of kvmm's structures and algorithms, written from their documented behaviour.

The one home of kvmm's reference implementations, in the style of stumpy's ``tests/naive.py``:
slow and obviously correct (dicts, lists, ``OrderedDict``), each written from the docs page (or
the peer's documented rule) named in its docstring, never from the numba code it checks.  The
stateful machines compare the numba structures with them step by step, the tests check every
kernel against them, and the benchmarks time them as the same-run baseline.  Errors are plain
``ValueError``/``IndexError`` raised before any change (the ledger model raises the documented
KvmmErrors).  None imports Hypothesis or pytest.

Models of a structure, step by step (exported here by name):

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

Whole-run references, imported by module (``from kvmm.testing.models import lirs``):

* eviction orders, each a replay or a step-by-step model written from the peer's documented rule
  (docs/eviction_orders.md): :mod:`~kvmm.testing.models.replay` (LRU, FIFO),
  :mod:`~kvmm.testing.models.eviction` (LRU, FIFO, LFU, ARC from the paper, sized ARC),
  :mod:`~kvmm.testing.models.belady`, :mod:`~kvmm.testing.models.clock`,
  :mod:`~kvmm.testing.models.lirs`, :mod:`~kvmm.testing.models.s3fifo`,
  :mod:`~kvmm.testing.models.sieve`, :mod:`~kvmm.testing.models.slru`,
  :mod:`~kvmm.testing.models.twoq`, :mod:`~kvmm.testing.models.wtinylfu`;
* :mod:`~kvmm.testing.models.stack_distance`: the Mattson stack, an LRU replay and SHARDS
  (docs/working_set.md);
* :mod:`~kvmm.testing.models.scorers`, :mod:`~kvmm.testing.models.triattention`,
  :mod:`~kvmm.testing.models.rope`: the token scorers, TriAttention and RoPE (docs/vtoken.md,
  docs/triattention.md);
* :mod:`~kvmm.testing.models.latency`: the roofline step time (docs/latency.md);
* :mod:`~kvmm.testing.models.plan`: the planner's analytic stage and step replay (docs/plan.md).
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
