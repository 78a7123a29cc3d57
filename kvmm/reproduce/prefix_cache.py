"""Reproduction section "allocator": Mooncake traces through the prefix-cached block allocator.

Model (documented in docs/allocator.md): each request's ``hash_ids`` become its full-block keys
``(id, 0)``.  Requests arrive in trace order; up to ``window`` of them run at once.  Admitting a
request is one :meth:`BlockAllocator.admit`: lookup of its keys, touch of the cached prefix,
allocation of the rest, which are cached under their keys right away (their prefill is about to
compute them, as vLLM caches full blocks when they are computed).  When the window is full, or
the pool cannot hold the new request, the oldest running request finishes and frees its blocks
last-first; a request that does not fit even in an empty pool is counted as all misses.

With a pool of at least the trace's unique block count no cached block is ever evicted, so the
hit ratio is ``1 - unique / refs``: 36.6 % (conversation) and 64.0 % (synthetic).

The section then replays the same block streams through every eviction order (and Belady, when
registered) at the same pool sizes plus the stream's working set (:mod:`kvmm.reproduce.orders`),
beside the allocator's own miss ratio.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from kvmm.allocators import prefix_secret
from kvmm.allocators.block_allocator import BlockAllocator
from kvmm.errors import OutOfBlocksError
from kvmm.report import plain_number
from kvmm.reproduce.orders import report_orders
from kvmm.traces import load_trace

__all__ = ["replay", "reproduce", "POOL_FRACTIONS", "WINDOW"]

#: Pool sizes as fractions of the trace's unique block count (1.0 = never evicts).
POOL_FRACTIONS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0)
#: Concurrently running requests.
WINDOW = 32


def replay(block_offsets: np.ndarray, block_ids: np.ndarray, num_blocks: int, *, window: int = WINDOW,
           allocator=None, num_requests: int | None = None) -> dict[str, int | float]:
    """Replay a CSR trace (``block_offsets``, ``block_ids``) through a prefix-cached pool.

    ``allocator``: any object with ``admit(keys) -> (ids, hits)``, ``free(ids)`` and ``stats``
    (default: a fresh :class:`BlockAllocator` of ``num_blocks`` blocks); ``admit`` must raise
    (``OutOfBlocksError`` or ``ValueError``) without changing anything when the blocks do not fit.
    Returns ``{"refs", "hits", "hit_ratio", "evictions", "oversized"}``.
    Runtime complexity: O(total blocks) allocator operations.
    """
    if allocator is None:
        allocator = BlockAllocator(num_blocks, 512, secret=prefix_secret())
    r_total = block_offsets.shape[0] - 1 if num_requests is None else num_requests
    keys_all = np.zeros((block_ids.shape[0], 2), dtype=np.uint64)
    keys_all[:, 0] = block_ids.astype(np.uint64)
    running: deque = deque()
    hits = refs = oversized = 0
    for r in range(r_total):
        keys = keys_all[block_offsets[r]:block_offsets[r + 1]]
        refs += keys.shape[0]
        if len(running) >= window:
            allocator.free(running.popleft())
        while True:
            try:
                ids, h = allocator.admit(keys)
                break
            except (OutOfBlocksError, ValueError):
                if not running:
                    ids, h = None, 0
                    oversized += 1
                    break
                allocator.free(running.popleft())
        if ids is not None:
            hits += h
            running.append(np.asarray(ids, dtype=np.int32)[::-1].copy())  # freed last-first
    while running:
        allocator.free(running.popleft())
    return {"refs": refs, "hits": hits, "hit_ratio": hits / refs if refs else 0.0,
            "evictions": int(allocator.stats["evictions"]), "oversized": oversized}


def reproduce(report) -> None:
    if report.trace is not None:  # kvmm reproduce --trace PATH [--format FMT]
        traces = [load_trace(report.trace, report.trace_format)]
        report.heading(f"allocator: prefix-cache hit ratio vs pool size ({traces[0].name}, {traces[0].source_format})")
    else:
        traces = [load_trace(name) for name in ("conversation", "synthetic")]
        report.heading("allocator: prefix-cache hit ratio vs pool size (Mooncake traces)")
    fractions = tuple(dict.fromkeys(POOL_FRACTIONS[::2] + (1.0,))) if report.quick else POOL_FRACTIONS
    limit = 1500 if report.quick else None
    curves = {}
    streams = {}
    with report.progress(len(traces) * len(fractions), "allocator replay") as bar:
        for tr in traces:
            r = tr.num_requests if limit is None else min(limit, tr.num_requests)
            end = int(tr.block_offsets[r])
            unique = int(np.unique(tr.block_ids[:end]).size)
            rows = []
            for frac in fractions:
                pool = max(int(round(frac * unique)), 1)
                res = replay(tr.block_offsets, tr.block_ids, pool, num_requests=r)
                rows.append((frac, pool, res["hit_ratio"], res["hits"], res["evictions"], res["oversized"]))
                bar.update(1)
            curves[tr.name] = rows
            streams[tr.name] = tr.block_ids[:end]
            report.table(
                f"{tr.name} trace: {r:,} requests, {end:,} block refs, {unique:,} unique blocks",
                ["pool / unique", "pool blocks", "hit ratio", "hits", "evictions", "too large"],
                [(plain_number(f), p, round(h, 4), n, e, o) for f, p, h, n, e, o in rows],
                note=(f"Unlimited-capacity hit ratio 1 - unique/refs = {1 - unique / end:.4f}; window of "
                      f"{WINDOW} running requests, keys = hash_ids as (id, 0), frees last-first."),
            )

    def draw(ax):
        for name, rows in curves.items():
            ax.plot([p for _, p, *_ in rows], [100 * h for _, _, h, *_ in rows], marker="o", label=name)
        ax.set_xscale("log")
        ax.set_xlabel(f"pool size (blocks of {traces[0].block_tokens} tokens)")
        ax.set_ylabel("block hit ratio (%)")
        ax.set_title("Prefix-cache hit ratio vs pool size")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="lower right")

    report.figure("allocator_hit_ratio", draw)

    # every eviction order (and Belady) on the same block streams at the same pool sizes
    report_orders(report, streams, section="allocator",
                  capacities={name: [pool for _, pool, *_ in rows] for name, rows in curves.items()},
                  extra={name: {pool: 1.0 - h for _, pool, h, *_ in rows} for name, rows in curves.items()},
                  extra_label="prefix-cache allocator")
