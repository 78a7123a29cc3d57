"""Miss ratio vs capacity of every eviction order on block streams (docs/eviction_orders.md), for the report.

Used by the ``working-set`` section (the bundled Mooncake traces' block streams, capacities as
multiples of each trace's working set) and the ``allocator`` section (its own streams at its pool
sizes, beside the prefix-cache allocator's own miss ratio).  Every order
:func:`kvmm.policies.replay` knows at run time is a column (``REPLAY_ORDERS``, so an order added
to ``_replay._KERNELS`` appears here with nothing else to change), each with its libCacheSim
default options; ``belady``, the offline optimum, when registered, is the last column.

The working set is the working-set section's "WS 90 %": the smallest LRU capacity that gets 90 %
of an unlimited cache's hits (:meth:`StackDistanceTracker.working_set` over the same stream).  It is
always one of the capacities, marked in the table and drawn as a vertical line in the plot.  A
miss ratio is ``1 - hits / references`` (cold misses included), the formula of
:meth:`DistanceHistogram.mrc`, so LRU's column equals the exact stack-distance MRC bit for bit.

Cost: one replay per order, capacity and trace, each O(references) in numba.  The bundled
streams hold 288,500 and 121,877 block references; at about 9 capacities (10 in the allocator
section) and 12 orders that is about 45 M references per section, a few seconds at the replays'
>= 10 M references/s (plus each kernel's first compilation, cached on disk); the tables' notes
print the measured time.
Runtime complexity: O(orders x capacities x references).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from kvmm.errors import BadInputError
from kvmm.policies import REPLAY_ORDERS, StackDistanceTracker, replay
from kvmm.report import plain_number

__all__ = ["WS_FRACTIONS", "QUICK_WS_FRACTIONS", "WS_HIT_FRACTION", "report_orders", "table_orders",
           "capacity_grid", "order_miss_ratios", "working_set"]

#: the working-set section's capacities, as multiples of the trace's working set
WS_FRACTIONS = (0.05, 0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 4.0)
#: the same with ``kvmm reproduce --quick``
QUICK_WS_FRACTIONS = (0.1, 0.5, 1.0, 2.0)
#: the working set's share of an unlimited cache's hits (the working-set section's "WS 90 %")
WS_HIT_FRACTION = 0.9


def table_orders() -> list[str]:
    """The orders in table order: every registered replay order, sorted, ``belady`` last."""
    return sorted(REPLAY_ORDERS, key=lambda name: (name == "belady", name))


def working_set(keys: np.ndarray) -> int:
    """The working set of a block stream: the working-set section's WS 90 %.  Runtime complexity:
    O(n log n) (the stack-distance tracker)."""
    tracker = StackDistanceTracker()
    tracker.access(keys)
    return int(tracker.working_set(WS_HIT_FRACTION))


def capacity_grid(ws: int, fractions: Sequence[float]) -> list[int]:
    """``round(f * ws)`` (at least 1) for each fraction, plus ``ws`` itself, sorted and distinct."""
    caps = {max(1, int(round(f * ws))) for f in fractions} | {max(1, int(ws))}
    return sorted(caps)


def order_miss_ratios(keys: np.ndarray, capacities: Sequence[int],
                      orders: Sequence[str] | None = None, *, fingerprints: dict | None = None) -> dict[str, np.ndarray]:
    """``{order: miss ratio at each capacity}`` from :func:`kvmm.policies.replay` (default
    options), ``1 - hits / len(keys)``; NaN where the order cannot run at that capacity (S3-FIFO
    below ``1 / small_size_ratio`` entries: libCacheSim needs both its queues non-empty).
    ``fingerprints``: filled with ``{order: (hash of which references hit, ...) per capacity}``,
    so two orders with equal columns can be told to hit on the very same references.
    Runtime complexity: O(orders x capacities x n)."""
    keys = np.ascontiguousarray(keys, dtype=np.int64)
    n = keys.size
    out = {}
    for order in table_orders() if orders is None else orders:
        ratios = np.ones(len(capacities))
        prints: list = []
        for i, c in enumerate(capacities):
            try:
                hits = replay(order, keys, int(c))
            except BadInputError:  # the capacity is too small for this order's own structure
                ratios[i] = np.nan
                prints.append(None)
                continue
            ratios[i] = 1.0 - np.count_nonzero(hits) / n if n else 1.0
            prints.append(hashlib.sha1(np.packbits(np.asarray(hits, dtype=bool)).tobytes()).hexdigest())
        out[order] = ratios
        if fingerprints is not None:
            fingerprints[order] = tuple(prints)
    return out


def report_orders(report, streams: Mapping[str, np.ndarray], *, section: str, fractions: Sequence[float] = (),
                  capacities: Mapping[str, Sequence[int]] | None = None,
                  extra: Mapping[str, Mapping[int, float]] | None = None, extra_label: str = "") -> dict:
    """Add one table per stream (rows: capacities; columns: every order's miss ratio) and one
    figure (a panel per stream, the working set as a vertical line) to ``report``.

    ``capacities``: per stream (default :func:`capacity_grid` of its working set and
    ``fractions``); the working set is always added.  ``extra``: per stream, ``{capacity: miss
    ratio}`` of one more column named ``extra_label`` (the allocator's own), blank where absent.
    Returns ``{stream: {"ws", "capacities", "miss": {order: array}, "seconds"}}``.
    """
    results = {}
    for name, keys in streams.items():
        ws = working_set(keys)
        caps = capacity_grid(ws, fractions) if capacities is None else sorted(set(capacities[name]) | {max(ws, 1)})
        warm_up()  # compile or load every replay kernel first: the timing below excludes JIT compilation
        start = time.perf_counter()
        prints: dict = {}
        miss = order_miss_ratios(keys, caps, fingerprints=prints)
        seconds = time.perf_counter() - start
        results[name] = {"ws": ws, "capacities": caps, "miss": miss, "seconds": seconds}
        orders = list(miss)
        column = (extra or {}).get(name)
        rows = []
        for i, cap in enumerate(caps):
            mark = plain_number(cap / ws if ws else 0.0, 2) + (" = WS 90 %" if cap == max(ws, 1) else "")
            row = [cap, mark] + [_cell(miss[o][i]) for o in orders]
            if column is not None:
                row.append(round(float(column[cap]), 4) if cap in column else "-")
            rows.append(row)
        report.table(
            f"{section}: miss ratio vs capacity, every eviction order ({name}: {keys.size:,} block refs)",
            ["capacity (blocks)", "capacity / WS"] + orders + ([extra_label] if column is not None else []), rows,
            note=(f"WS 90 % = {ws:,} blocks (smallest LRU capacity with 90 % of the unlimited-cache hits). "
                  "Miss ratios include cold misses; each order with libCacheSim's default options "
                  "(kvmm.policies.replay); - where an order cannot run at that capacity"
                  + ("; belady is the offline optimum. " if "belady" in orders else ". ") +
                  f"{len(orders) * len(caps)} replays in {seconds:.2f} s (kernels compiled before timing)."
                  + identical_note(prints, name, keys)))

    def draw(axes):
        from matplotlib.ticker import (  # the optional plot extra: Report.figure calls this only when matplotlib is installed
            FuncFormatter,
            NullFormatter,
        )

        for ax, (name, res) in zip(np.atleast_1d(axes), results.items()):
            for order, ratios in res["miss"].items():
                ax.plot(res["capacities"], ratios, label=order, **line_style(order, list(res["miss"])))
            ax.axvline(max(res["ws"], 1), color="gray", linestyle=":", label="WS 90 %")
            ax.set_xscale("log")
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))  # plain labels
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_xlabel("capacity (blocks)")
            ax.set_ylabel("miss ratio (cold misses included)")
            ax.set_title(f"{name}: miss ratio vs capacity per eviction order")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7, ncol=2)

    if results:
        report.figure(f"{section.replace('-', '_')}_orders", draw, size=(6.0 * len(results), 4.2), ncols=len(results))
    return results


#: 13 distinct colours (tab10, then three more) and the line styles and markers cycled over the orders
_COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:gray",
            "tab:olive", "tab:cyan", "navy", "darkgoldenrod", "lime")
_STYLES = ("-", "--", "-.", ":")
_MARKERS = ("o", "s", "^", "v", "D", "P", "X")


def line_style(order: str, orders: Sequence[str]) -> dict:
    """Matplotlib keyword arguments of ``order``'s line among ``orders``: a colour of its own and
    a line style and marker cycled (``belady``, the optimum, in black, thick and dashed), so
    every line has its own (colour, style) pair and two lines that coincide stay visible."""
    if order == "belady":
        return {"color": "black", "linestyle": "--", "linewidth": 2.0, "marker": "*", "markersize": 5}
    i = [o for o in orders if o != "belady"].index(order)
    return {"color": _COLOURS[i % len(_COLOURS)], "linestyle": _STYLES[i % len(_STYLES)],
            "marker": _MARKERS[i % len(_MARKERS)], "markersize": 3.5, "linewidth": 1.2}


def warm_up() -> None:
    """Run every order once on a tiny stream, so numba compiles (or loads) each replay kernel
    before anything is timed.  Runtime complexity: O(orders)."""
    keys = np.array([1, 2, 3, 1, 2, 4, 1, 5, 2, 6, 7, 1] * 4, dtype=np.int64)
    order_miss_ratios(keys, [10])


def identical_groups(fingerprints: Mapping[str, tuple]) -> list[list[str]]:
    """Groups of two or more orders that hit on exactly the same references at every capacity."""
    groups: dict = {}
    for order, prints in fingerprints.items():
        if all(p is not None for p in prints):
            groups.setdefault(prints, []).append(order)
    return [g for g in groups.values() if len(g) > 1]


#: why two orders can hit on the same references, where we know it
_WHY_IDENTICAL = {
    frozenset({"lfu", "sieve"}):
        "LFU evicts the oldest key never hit since its insert while one is cached (count 1; FIFO within a count), "
        "and SIEVE's hand, until it first wraps round, stops at that same key (keys behind the hand were visited, "
        "keys ahead of it unvisited since their insert); where most blocks are referenced once, every eviction finds "
        "such a key and the two never part",
}


def identical_note(fingerprints: Mapping[str, tuple], stream: str, keys: np.ndarray | None = None) -> str:
    """A sentence per group of identical columns (empty when there is none); ``keys``: the stream,
    for the share of its blocks referenced once."""
    once = ""
    if keys is not None and keys.size:
        counts = np.unique(keys, return_counts=True)[1]
        once = f" ({np.mean(counts == 1):.0%} of {stream}'s blocks are referenced once)"
    out = []
    for group in identical_groups(fingerprints):
        why = _WHY_IDENTICAL.get(frozenset(group))
        out.append(f" Identical columns: {' = '.join(group)} hit on exactly the same references at every capacity of "
                   f"{stream} (checked reference by reference, not only the totals)" + (f": {why}{once}." if why else "."))
    return "".join(out)


def _cell(ratio: float) -> Any:
    """A miss ratio rounded for the table, ``-`` where the order could not run (NaN)."""
    return "-" if np.isnan(ratio) else round(float(ratio), 4)
