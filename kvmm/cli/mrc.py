"""``kvmm mrc``: the LRU miss-ratio curve and reuse working set of a trace.

    kvmm mrc conversation                  # a bundled Mooncake trace
    kvmm mrc path/to/trace.jsonl --sample-rate 0.01 --png mrc.png
    kvmm mrc big.jsonl --fixed-size 32768 --skip-bad
    kvmm mrc events.msgpack --format vllm        # any format kvmm.traces.load_trace reads
    kvmm mrc huge.oracleGeneral.bin --dask local --parts 16
    kvmm mrc huge.jsonl --dask tcp://scheduler:8786 --parts 64 --chunk-refs 1000000

The trackers come from :mod:`kvmm.policies`, a lazy package: each loads its kernels (numba) on
first use.  The optional extras (matplotlib for ``--png``, dask for ``--dask``) are imported where
they are used.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from kvmm import policies
from kvmm._validate import as_count, as_fraction
from kvmm.errors import BadInputError
from kvmm.report import _format_plain, fit_titles
from kvmm.traces import iter_trace_chunks, load_trace
from kvmm.traces.mooncake import resolve_trace_path
from kvmm.traces.trace import NO_REQUESTS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", help="trace file (Mooncake, Qwen-Bailian, LMCache, vLLM KV events, libCacheSim "
                                      "oracleGeneral), or a bundled trace name (conversation, synthetic)")
    parser.add_argument("--format", default=None, metavar="FMT",
                        help="trace format: mooncake, bailian, lmcache, vllm, oracle (default: detected)")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--sample-rate", type=float, default=None, metavar="R",
                       help="fixed-rate SHARDS sampling at rate R in (0, 1] (default: exact)")
    group.add_argument("--fixed-size", type=int, default=None, metavar="N",
                       help="fixed-size SHARDS keeping at most N sampled blocks")
    group.add_argument("--dask", default=None, metavar="SCHEDULER",
                       help="MRC from exact trackers over --parts key partitions on Dask: a scheduler address, or 'local'")
    parser.add_argument("--stratify-rate", default=None, metavar="R1",
                        help="with --sample-rate: share of keys counted for the frequency strata, in [R, 1], "
                             "'auto' (10 R, at most 0.25, at least R) or 'none' for plain SHARDS-adj (default auto)")
    parser.add_argument("--parts", type=int, default=8, metavar="P", help="key partitions for --dask (default 8)")
    parser.add_argument("--chunk-refs", type=int, default=1 << 18, metavar="N",
                        help="references read per chunk with --dask (default 262144)")
    parser.add_argument("--fraction", type=float, action="append", default=None, metavar="F",
                        help="working-set target share of unlimited-cache hits (repeatable; default 0.5 0.9 0.99)")
    parser.add_argument("--points", type=int, default=12, help="rows of the MRC table (default 12)")
    parser.add_argument("--skip-bad", action="store_true", help="skip malformed trace lines instead of failing")
    parser.add_argument("--png", default=None, metavar="PATH", help="also plot the MRC to this PNG (needs matplotlib)")


def run(args: argparse.Namespace) -> int:
    fractions = [as_fraction(f, "--fraction") for f in (args.fraction or [0.5, 0.9, 0.99])]
    points = as_count(args.points, "--points", minimum=2)
    if args.png:
        _check_png_path(args.png)  # before the (possibly long) run, not a traceback at savefig
    if args.stratify_rate is not None and args.sample_rate is None:
        raise BadInputError("--stratify-rate needs --sample-rate (only fixed-rate SHARDS is stratified)")
    if args.dask is not None:
        hist, name, summary = _dask_histogram(args)
        mode = f"exact per part, {args.parts} key partitions on Dask"
        print(f"trace {name}: {summary} ({mode})")
        return _report(args, hist, fractions, points, name, mode)
    if args.sample_rate is not None:
        stratify = _stratify_rate(args.stratify_rate or "auto")
        tracker = policies.ShardsTracker(rate=args.sample_rate, stratify_rate=stratify)
        mode = f"SHARDS fixed rate {args.sample_rate:g}" + (
            f", stratified (counting rate {tracker.stratify_rate:g})" if tracker.stratify_rate is not None else "")
    elif args.fixed_size is not None:
        tracker = policies.ShardsTracker(fixed_size=args.fixed_size)
        mode = f"SHARDS fixed size {args.fixed_size}"
    else:
        tracker = policies.StackDistanceTracker()
        mode = "exact"
    trace = load_trace(args.trace, args.format, skip_bad=args.skip_bad)
    if trace.num_requests == 0:
        raise BadInputError(NO_REQUESTS)  # the rule `kvmm simulate` follows too
    tracker.access(trace.block_ids)
    hist = tracker.histogram()
    print(f"trace {trace.name}: {trace.num_requests} requests, {trace.block_ids.size} block references, "
          f"{int(np.unique(trace.block_ids).size)} distinct blocks ({mode})"
          + (f", {trace.bad_lines} bad lines skipped" if trace.bad_lines else ""))
    return _report(args, hist, fractions, points, trace.name, mode)


def _report(args, hist, fractions, points, name, mode) -> int:
    print(f"hit ratio of an unlimited LRU cache: {hist.max_hits / hist.total:.4f}" if hist.total else "no references")
    for f in fractions:
        print(f"working set ({100 * f:g} % of unlimited-cache hits): {hist.working_set(f)} blocks")
    top = max(hist.max_capacity, 1)
    caps = np.unique(np.concatenate(([0], np.geomspace(1, top, points - 1).astype(np.int64))))
    mrc = hist.mrc(caps)
    print()
    print(_format_plain(["capacity (blocks)", "miss ratio", "hit ratio"],
                        [[int(c), f"{m:.4f}", f"{1 - m:.4f}"] for c, m in zip(caps, mrc)]))
    if args.png:
        try:  # the optional plot extra
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("matplotlib is not installed: no PNG written (pip install 'kvmm[plot]')")
            return 0
        fine = np.unique(np.geomspace(1, max(top, 2), 400).astype(np.int64))
        fig = mrc_figure(plt, fine, hist.mrc(fine), f"MRC of {name} ({mode})")
        fig.savefig(args.png)
        plt.close(fig)
        print(f"wrote {args.png}")
    return 0


def mrc_figure(plt, capacities, miss_ratios, title: str):
    """The ``kvmm mrc --png`` figure; the title is wrapped to the figure's width (a trace path and
    the SHARDS mode make it long) and the layout tightened around it."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=110)
    ax.plot(capacities, miss_ratios)
    ax.set_xscale("log")
    ax.set_xlabel("LRU capacity (blocks)")
    ax.set_ylabel("miss ratio (cold misses included)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    fit_titles(fig)
    return fig


def _check_png_path(png: str) -> None:
    """``--png`` must name a file whose folder exists (or can be created)."""
    path = Path(png)
    if path.is_dir():
        raise BadInputError(f"--png {png!r} is a folder; expected a file name such as mrc.png")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInputError(f"--png {png!r}: cannot create its folder ({exc})") from None


def _dask_histogram(args: argparse.Namespace):
    """Stream the trace in chunks through :func:`kvmm.policies.distributed_mrc`."""
    parts = as_count(args.parts, "--parts", minimum=1)
    chunk_refs = as_count(args.chunk_refs, "--chunk-refs", minimum=1)
    try:  # the optional dist extra
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise BadInputError("--dask needs dask[distributed]: pip install 'kvmm[dist]'") from None
    _, name = resolve_trace_path(args.trace)
    stats: dict = {}
    chunks = iter_trace_chunks(args.trace, args.format, chunk_refs=chunk_refs, skip_bad=args.skip_bad, stats=stats)
    if args.dask == "local":
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
                Client(cluster) as client:
            hist = policies.distributed_mrc(chunks, client, parts=parts)
    else:
        try:  # the optional dist extra
            from distributed.comm.addressing import parse_address, parse_host_port

            parse_host_port(parse_address(args.dask)[1])  # a malformed address fails here, before a Client
            # (a half-built Client leaves its event loop to the garbage collector, which can stop the
            # loop a later LocalCluster in this process is starting)
            client = Client(args.dask, timeout=30)
        except (OSError, ValueError, TypeError) as exc:
            raise BadInputError(f"cannot reach the Dask scheduler {args.dask!r}: {exc}") from None
        with client:
            hist = policies.distributed_mrc(chunks, client, parts=parts)
    bad = stats.get("bad_lines", 0)
    summary = (f"{int(hist.total)} block references, {int(hist.cold)} distinct blocks"
               + (f", {bad} bad lines skipped" if bad else ""))
    return hist, name, summary


def _stratify_rate(text: str):
    """``--stratify-rate``: 'auto', 'none' or a number (validated by ShardsTracker)."""
    if text.lower() in ("auto", "none"):
        return None if text.lower() == "none" else "auto"
    try:
        return float(text)
    except ValueError:
        raise BadInputError(f"--stratify-rate must be a number in [R, 1], 'auto' or 'none', got {text!r}") from None
