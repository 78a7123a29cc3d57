"""Report section "tempokv": timely staging vs fair baselines in the composed serving simulator.

The TempoKV paper (arXiv:2609.35065) claims 63-91 % less protected fast-tier byte-time than
staging every hit immediately, keeping most of immediate staging's TTFT benefit.  Baselines, all
on the same arrivals, hierarchy and parameters (no slack for any policy: ``margin_s = 0``):

* ``immediate`` (FIFO grant order) and ``immediate-edf`` (earliest-deadline-first): commit at arrival;
* ``on-demand``: commit when the request is scheduled (the copy is on the critical path);
* ``timely``: the ledger commits when predicted time until use reaches predicted time to ready;
* ``write-through-lru``: no staging control (an unmodified LMCache-style deployment): the fast tier
  is an LRU cache written through with every prefilled block; its byte-time is its occupancy.

Experiments: the bundled Mooncake conversation trace at loads 0.6, 0.8 and 0.95 (arrivals
rescaled, no randomness: one run each), and on a seeded shared-prefix workload (three seeds,
mean ± std) the scenarios bursty arrivals (a Markov-modulated Poisson process) at loads 0.6, 0.8
and 0.95, a slow remote tier (the ``dfs`` preset) and staging bandwidth at 50 % of nominal.  The goal checked per cell: >= 50 % less protected byte-time than immediate staging
with p95 TTFT within 5 % of the best baseline.  The recompute fallback is off everywhere.
"""

from __future__ import annotations

import warnings


from kvmm.report import mean_pm, spread
from kvmm.sim.config import GiB, SimConfig, TierLevel
from kvmm.sim.engine import QueueGrowthWarning
from kvmm.sim.simulator import simulate
from kvmm.sim.workload import Workload

POLICIES = ("on-demand", "immediate", "immediate-edf", "timely", "write-through-lru")
BASELINES = ("on-demand", "immediate", "immediate-edf", "write-through-lru")
LOADS = (0.6, 0.8, 0.95)
SEEDS = (0, 1, 2)
PAPER_REDUCTION = "63-91 %"
# scenario -> (SimConfig changes, Workload changes); loads as listed
SCENARIOS = {
    "nominal (NVMe tier, staged at 85 % of its bandwidth)": ({}, {}),
    "bursty arrivals (MMPP, rates 1.8x / 0.2x, 30 s phases)": ({}, {"burstiness": 0.8}),
    "slow remote tier (dfs preset: 40 GB/s, 500 us)": ({"tiers": (TierLevel("dfs"),)}, {}),
    "staging bandwidth at 50 % of nominal": ({"stage_efficiency": 0.5}, {}),
}
BURSTY = "bursty arrivals (MMPP, rates 1.8x / 0.2x, 30 s phases)"


def reproduce(report) -> None:
    quick = report.quick
    n_trace = 150 if quick else 600
    n_wl = 80 if quick else 200
    loads = LOADS[1:2] if quick else LOADS
    seeds = SEEDS[:1] if quick else SEEDS
    scenarios = dict(list(SCENARIOS.items())[:1]) if quick else SCENARIOS

    report.heading("TempoKV: timely staging of lower-tier KV hits vs fair baselines (commitment ledger)")
    report.text(
        "Composed simulator (kvmm.sim): GPU pool = BlockAllocator (96 GiB of 512-token blocks, prefix caching), "
        "lower tier = ManagedTier(SimulatedTier(NVMe preset), LRU) with write-all admission, protected staging "
        "tier = CXL preset (100 GiB), llama3-8b rates assumed for one H200 (kvmm/sim/models.py).  Every "
        "lower-tier hit is a CommitmentLedger claim; the policies differ only in when a claim takes capacity "
        "and in grant order.  Protected byte-time: bytes held x seconds from commit until the step that uses "
        "them has read them (write-through-lru: fast-tier occupancy x time).  Load = offered work (never-seen "
        "prompt tokens at the prefill rate + output tokens at a full decode batch's per-sequence cost) / "
        "arrival span; arrivals keep the trace's order and relative gaps.  Assumptions: output blocks are "
        "reserved at scheduling; lower tiers are written through; the recompute fallback is off; no policy has "
        "a tuned slack (margin 0).")
    cells = [(name, ld) for name in scenarios for ld in (loads if name == BURSTY else (0.8,))]
    n_runs = len(loads) * len(POLICIES) + len(cells) * len(seeds) * len(POLICIES)
    with report.progress(n_runs, "tempokv simulations") as bar, warnings.catch_warnings():
        # bursts at load 0.95 overload the engine for a while: the tables show the queue instead
        warnings.simplefilter("ignore", QueueGrowthWarning)
        trace_res = {}
        for ld in loads:
            for p in POLICIES:
                trace_res[(ld, p)] = simulate(SimConfig(workload="conversation", max_requests=n_trace, load=ld, policy=p))
                bar.update(1)
        wl_res = {}
        for name, ld in cells:
            sim_kw, wl_kw = scenarios[name]
            for s in seeds:
                wl = Workload(num_requests=n_wl, prefix_ratio=0.75, input_tokens=16_384, num_prefixes=400, seed=s, **wl_kw)
                for p in POLICIES:
                    wl_res[(name, ld, s, p)] = simulate(SimConfig(workload=wl, load=ld, policy=p, **sim_kw))
                    bar.update(1)

    rows = []
    for ld in loads:
        res = {p: trace_res[(ld, p)] for p in POLICIES}
        for p in POLICIES:
            r = res[p]
            rows.append((ld, p, round(r.ttft_p50, 3), round(r.ttft_p95, 3), round(r.protected_byte_seconds_per_request / GiB, 4),
                         round(r.peak_protected_bytes / GiB, 2), f"{r.ready_in_time}/{r.claims}", r.max_waiting))
        rows.append((ld, "goal", "", "", _goal(res), "", "", ""))
    report.table(
        f"Protected byte-time and TTFT on the Mooncake conversation trace (first {n_trace} requests; deterministic, one run per cell)",
        ["load", "staging", "TTFT p50 s", "TTFT p95 s", "protected GiB*s / req", "peak protected GiB", "ready in time / claims",
         "max queue"], rows,
        note=f"Paper: {PAPER_REDUCTION} less byte-time than immediate staging.  goal: timely's byte-time reduction vs "
             "immediate (FIFO) and its p95 TTFT vs the best baseline's; 'met' needs >= 50 % and <= +5 %.")
    report.figure("tempokv_tradeoff", lambda ax: _draw_tradeoff(ax, trace_res, loads))

    rows = []
    for name, ld in cells:
        per_seed = {p: _per_seed([wl_res[(name, ld, s, p)] for s in seeds]) for p in POLICIES}
        for p in POLICIES:
            v = per_seed[p]
            rows.append((name, ld, p, mean_pm(v["ttft_p95"], ".3f"), mean_pm(v["bs"], ".4f"), mean_pm(v["in_time"], ".2f"),
                         mean_pm(v["queue"], ".0f")))
        mean = {p: {k: spread(v)[0] for k, v in per_seed[p].items()} for p in POLICIES}
        reduction = 1 - mean["timely"]["bs"] / mean["immediate"]["bs"] if mean["immediate"]["bs"] else float("nan")
        best = min(mean[p]["ttft_p95"] for p in BASELINES)
        delta = mean["timely"]["ttft_p95"] / best - 1 if best else float("nan")
        ok = reduction >= 0.5 and delta <= 0.05
        rows.append((name, ld, "goal", f"{100 * delta:+.1f} % vs best", f"{100 * reduction:.0f} % less than immediate",
                     "met" if ok else "missed", ""))
    report.table(
        f"Scenarios on a seeded shared-prefix workload (16k-token prompts, 75 % one of 400 shared contexts, Zipf 0.8: "
        f"more than the GPU pool holds; {n_wl} requests; mean ± std over seeds {list(seeds)})",
        ["scenario", "load", "staging", "TTFT p95 s", "protected GiB*s / req", "ready-in-time share", "max queue"], rows,
        note="Why the goal is met or missed: a claim's byte-time under immediate staging is the queueing time before "
             "its use plus the copy and read time every policy pays; timely staging can only remove the first part.  "
             "With Poisson arrivals at load 0.8 the queue ahead of a request is short, so there is little to remove "
             "(single-digit savings with equal TTFT: missed because of the workload, not because of late "
             "predictions).  Bursty arrivals build queues; there the saving is large with p95 TTFT within noise.  "
             "A slow tier or a channel at half its nominal speed lengthens the copy both policies pay, so the share "
             "timely staging can save shrinks.  immediate and immediate-edf coincide here: with one FCFS queue and "
             "a fast tier that never fills, claim order is use order.")


def _goal(res) -> str:
    im = res["immediate"].protected_byte_seconds
    red = 1 - res["timely"].protected_byte_seconds / im if im else float("nan")
    best = min(res[p].ttft_p95 for p in BASELINES)
    delta = res["timely"].ttft_p95 / best - 1 if best else float("nan")
    verdict = "met" if red >= 0.5 and delta <= 0.05 else "missed"
    return f"{verdict}: {100 * red:.0f} % less byte-time, p95 TTFT {100 * delta:+.1f} % vs best baseline"


def _per_seed(results) -> dict:
    """The scenario table's columns, one value per seed."""
    return {"ttft_p95": [r.ttft_p95 for r in results],
            "bs": [r.protected_byte_seconds_per_request / GiB for r in results],
            "in_time": [r.ready_in_time / r.claims if r.claims else 0.0 for r in results],
            "queue": [r.max_waiting for r in results]}


def _draw_tradeoff(ax, trace_res, loads) -> None:
    """Protected byte-time per request against p95 TTFT, one line per policy through its loads
    (conversation trace): down and left is better.  Log byte-time axis: write-through LRU holds
    two orders of magnitude more than the staging policies."""
    from matplotlib.ticker import FuncFormatter

    from kvmm.report import plain_number

    markers = dict(zip(POLICIES, "osD^v"))
    for p in POLICIES:
        pts = [(trace_res[(ld, p)].ttft_p95, trace_res[(ld, p)].protected_byte_seconds_per_request / GiB, ld)
               for ld in loads]
        pts = [pt for pt in pts if pt[1] > 0]  # a log axis has no room for zero byte-time
        if not pts:
            continue
        ax.plot([x for x, _, _ in pts], [y for _, y, _ in pts], marker=markers[p], label=p,
                linestyle="-" if len(pts) > 1 else "none", alpha=0.85)
        if p == "timely":
            for x, y, ld in pts:
                ax.annotate(f"load {ld:.2f}", (x, y), textcoords="offset points", xytext=(6, -10), fontsize=7)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: plain_number(v)))
    ax.set_xlabel("TTFT p95 (s)")
    ax.set_ylabel("protected byte-time per request (GiB*s)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("TempoKV trade-off on the conversation trace: byte-time vs p95 TTFT per staging policy")
