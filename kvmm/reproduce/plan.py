"""Report section "plan": `kvmm plan` on the bundled conversation trace (docs/plan.md).

Two experiments, every assumption stated in the report text:

1. the planner (:func:`kvmm.plan.plan`) on the conversation trace with ``kvmm plan``'s default
   candidate tiers (per-node DRAM, a shared Layer 3.5 pool, per-node NVMe) for 8 instances, at two
   p95 TTFT objectives: the frontier, the verified points, the decision and its reasons;
2. the first seed article's question for this trace: a budget spent on per-node DRAM, on a
   shared Layer 3.5 pool (ContextCube) or on DFS offload (ParaStor), *at equal cost*: each
   design gets the capacity the same USD per hour buys at its price, and the simulator says
   what each does to p95 TTFT and to the cost per token.

Spread: a run of the simulator is deterministic (``priority_seed`` only draws priority classes,
and there is no high-priority class here), so experiment 2 is spread over disjoint slices of
the trace (mean ± std).  The planner runs once per SLO: its frontier is a deterministic function
of the trace.  The two plans share their simulations (``plan(..., simulated=)``: a point both
pick is simulated once), and the section's every simulation runs in one process pool.
"""

from __future__ import annotations

import os
import warnings
from concurrent.futures import ProcessPoolExecutor

from kvmm.plan import SLO, TierCandidate, plan
from kvmm.plan._configs import point_config
from kvmm.plan.progress import StageProgress
from kvmm.plan.writers import draw_frontier, plan_summary, point_label
from kvmm.report import mean_pm, plain_number, spread
from kvmm.reproduce._cluster_common import window
from kvmm.sim import ClusterConfig
from kvmm.sim._sweep import sweep
from kvmm.sim.config import GiB, SimConfig
from kvmm.sim.engine import QueueGrowthWarning
from kvmm.sim.serving import resolve_serving
from kvmm.sim.simulator import resolve_trace
from kvmm.tiers.spec import PRESETS

TiB = 1024 * GiB
MODEL = "llama-3.1-8b"  # on the default H200, roofline clock, chunked prefill (kvmm.sim.serving)
LOAD = 0.7
INSTANCES = 8
#: the candidate tiers of experiment 1 (``kvmm plan``'s defaults: kvmm.cli.plan.DEFAULT_TIERS)
TIERS = ("dram:0-4TiB", "layer3.5:0-64TiB:shared", "nvme:0-16TiB")
#: experiment 2: (label, tier kind, shared) of the three designs the seed article compares
DESIGNS = (("per-node DRAM", "dram", False), ("shared Layer 3.5 pool", "layer3.5", True), ("DFS offload", "dfs", True))
#: experiment 2: how requests reach instances (the planner assumes round-robin)
ROUTINGS = ("round-robin", "prefix-aware")
#: the router of the prefix-aware routing (kvmm.cluster.routers; a load weight keeps it balanced)
PREFIX_ROUTER = ("precise-prefix", {"load_weight": 4.0})
#: experiment 2: USD per hour spent on the KV tier (on top of the GPUs), one run per budget
BUDGETS_USD_PER_HOUR = (0.05, 0.5, 8.0)
#: the budgets of a quick run
QUICK_BUDGETS = (0.5,)


def reproduce(report) -> None:
    quick = report.quick
    trace = resolve_trace("conversation", None)
    plan_requests = 600 if quick else None  # full: the whole trace
    report.heading("Plan: the cheapest KV hierarchy meeting a p95 TTFT SLO (kvmm plan)")
    serving = _serving()
    report.text(
        f"`kvmm.plan.plan` (docs/plan.md) on the bundled Mooncake conversation trace.  {INSTANCES} instances of "
        f"{MODEL} on one {serving.hardware.name} each, timed by the roofline step model (docs/latency.md; stage 1 of "
        f"the planner replays the same clock) with vLLM's chunked-prefill scheduler ({serving.max_num_batched_tokens:,} "
        f"tokens and at most {serving.max_num_seqs:,} sequences a step), a KV pool sized from the GPU's memory "
        f"({_gib(serving.gpu_kv_bytes)} of 512-token blocks) with prefix caching, the protected CXL staging tier "
        f"(100 GiB) and timely staging; arrivals rescaled to load {LOAD} over all the GPUs.  Tier specs: "
        "kvmm/tiers/spec.py (figures marked assumed there are assumed); shared tiers are read over the rdma400 fabric.  "
        f"Prices: the documented defaults (docs/cost.md): {serving.hardware.name} at "
        f"${plain_number(serving.gpu_usd_per_hour)} per "
        "GPU-hour, DRAM at its cloud list price, NVMe, Layer 3.5 and DFS per GiB-hour as kvmm/tiers/spec.py derives "
        "them (the Layer 3.5 price is assumed: ContextCube publishes none).")
    # one pool for every simulation of the section: its workers load the simulator's kernels once
    with warnings.catch_warnings(), ProcessPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        warnings.simplefilter("ignore", QueueGrowthWarning)  # overload shows in the tables (TTFT, queues)
        plans = _frontiers(report, plan_requests, quick, pool)
        _equal_cost(report, trace, quick, pool)
    _plot(report, plans)


# --------------------------------------------------------------------------- experiment 1
def _frontiers(report, n_requests: int, quick: bool, pool) -> list:
    points = 8 if quick else 32  # full: 32 points per tier (32,768 combinations), TierCandidate's default
    tiers = [TierCandidate.parse(f"{t}:points={points}") for t in TIERS]
    base = SimConfig(workload="conversation", max_requests=n_requests, load=LOAD, model=MODEL)
    plans = []
    simulated: dict = {}  # the SLOs pick many of the same points: each is simulated once
    for slo_s in _slos(quick):
        progress = StageProgress(enabled=report.progress_enabled)
        try:
            result = plan("conversation", slo=SLO(slo_s), tiers=tiers, instances=INSTANCES, base=base,
                          verify=4 if quick else 8, progress=progress, simulated=simulated, executor=pool)
        finally:
            progress.close()
        plans.append(result)
        rows = [(i + 1, point_label(p), " / ".join(f"{h:.3f}" for h in p.hit_ratio), round(p.est_ttft_p95_s, 3),
                 "" if p.sim_ttft_p95_s is None else round(p.sim_ttft_p95_s, 3), round(p.usd_per_hour, 3),
                 round(p.usd_per_m_tokens, 4), _mark(result, p)) for i, p in enumerate(result.frontier)]
        requests = f"{n_requests:,} requests" if n_requests else "the whole trace"
        report.table(
            f"Frontier at p95 TTFT <= {plain_number(slo_s)} s ({requests}, {INSTANCES} instances, "
            f"{result.points_evaluated:,} capacity combinations of {' x '.join(str(t.points) for t in tiers)})",
            ["#", "capacities", f"hit ratio per tier ({' / '.join(t.kind for t in tiers)})", "est p95 TTFT s",
             "sim p95 TTFT s", "USD / h", "USD / M tok", ""],
            rows,
            note="\n".join(plan_summary(result)) + "\n\n" + "\n".join(f"- {r}" for r in result.reasons)
                 + "\n\nhit ratio per tier: share of the trace's blocks served by each tier in the analytic "
                   "(inclusive LRU) model; est: the analytic stage's step-replay estimate; sim: the composed simulator "
                   f"(verified points only).  Timings: {', '.join(f'{k} {v:.1f} s' for k, v in result.timings_s.items())}.")
        errors = [e["rel_error"] for e in result.errors() if e["rel_error"] is not None]
        if errors:
            report.text(f"Estimate vs simulation at {plain_number(slo_s)} s, over the {len(errors)} verified points: "
                        f"relative error of the p95 TTFT estimate {mean_pm(errors, '.1f', scale=100, unit=' %')} "
                        f"(largest {max(abs(e) for e in errors) * 100:.1f} %).")
    used = {t.kind for p in plans for q in p.frontier for t, c in zip(tiers, q.capacities) if c}
    unused = [t.kind for t in tiers if t.kind not in used]
    answers = "; ".join(f"at {plain_number(p.slo.ttft_p95_s)} s, " + (point_label(p.chosen) if p.chosen is not None
                        else "nothing (closest: " + point_label(p.closest) + ")" if p.closest is not None else "nothing")
                        for p in plans)
    report.text(f"The planner's answers: {answers}."
                + (f"  {' and '.join(unused)} never reach the frontier: every combination with them is dominated "
                   "by one that is cheaper and, by the estimate, at least as fast (the Layer 3.5 pool costs under 1 % "
                   "of DRAM per GiB here)." if unused else ""))
    return plans


def _slos(quick: bool) -> tuple[float, float]:
    """The two objectives (the planner's estimates at load 0.7 on 8 instances, roofline clock).
    On the whole trace p95 TTFT is about 31 s with no KV tier and 9.3 s with every reusable block
    held: 12 s needs a pool of about 1 TiB, 10 s one of about 2.3 TiB.  On the quick run's 600
    requests it is 11 s with none and 9.4 s with all: 10.5 s and 9.5 s need a pool."""
    return (10.5, 9.5) if quick else (12.0, 10.0)


def _serving():
    """What the section's runs serve with (kvmm.sim.serving.resolve_serving)."""
    return resolve_serving(SimConfig(model=MODEL))


def _gib(nbytes: int) -> str:
    return f"{plain_number(nbytes / GiB)} GiB"


def _mark(plan, point) -> str:
    if plan.chosen is not None and tuple(point.capacities) == tuple(plan.chosen.capacities):
        return "chosen"
    if plan.closest is not None and tuple(point.capacities) == tuple(plan.closest.capacities):
        return "closest"
    return ""


# --------------------------------------------------------------------------- experiment 2
def _equal_cost(report, trace, quick: bool, pool) -> None:
    slice_len = 400 if quick else 4010
    n_slices = 2 if quick else 3
    budgets = QUICK_BUDGETS if quick else BUDGETS_USD_PER_HOUR
    slices = [window(trace, k * slice_len, slice_len) for k in range(n_slices)]
    cases = [(None, routing, "no KV tier", None, False, 0) for routing in ROUTINGS]
    for b in budgets:
        for routing in ROUTINGS:
            for label, kind, shared in DESIGNS:
                capacity = equal_cost_capacity(b, PRESETS[kind].usd_per_gib_hour, INSTANCES, shared)
                cases.append((b, routing, label, kind, shared, capacity))
    keys, configs = [], []
    for case in cases:
        for w in slices:
            keys.append(case)
            configs.append(_design_config(w, *case[1:]))
    with report.progress(len(configs), "plan: equal cost") as bar:
        results = sweep(configs, pool, progress=bar.update)
    grouped: dict = {}
    for key, r in zip(keys, results):
        grouped.setdefault(key, []).append(r)
    rows, by_case = [], {}
    for (b, routing, label, _, _, capacity), rs in grouped.items():
        p95 = [r.ttft_p95 for r in rs]
        if b is not None:
            by_case.setdefault((b, routing), []).append((label, *spread(p95)))
        rows.append(("none" if b is None else f"${plain_number(b)}/h", routing, label,
                     "" if b is None else _capacity_text(capacity, label),
                     mean_pm([100 * r.slow_hit_token_share for r in rs], ".1f"),
                     mean_pm([100 * (r.gpu_hit_token_share + r.slow_hit_token_share) for r in rs], ".1f"),
                     mean_pm(p95, ".3f"), mean_pm([r.usd_per_million_input_tokens for r in rs], ".4f")))
    answers = "; ".join(f"at ${plain_number(b)}/h with {routing} routing, {_best(v)}" for (b, routing), v in by_case.items())
    router, params = PREFIX_ROUTER
    report.table(
        f"The first article's question, at equal cost: per-node DRAM vs a shared Layer 3.5 pool vs DFS offload "
        f"({INSTANCES} instances, {n_slices} slices of {slice_len} requests)",
        ["KV tier budget", "routing", "design", "capacity it buys", "lower-tier hit %", "hit ratio %", "TTFT p95 s",
         "USD / M input tok"], rows,
        note=f"Lowest p95 TTFT (mean over the slices): {answers}.  Each design spends the same USD per hour on its KV "
             f"tier: per-node DRAM gets budget / ({INSTANCES} x its price per GiB-hour) per node; the shared Layer 3.5 "
             "pool (ContextCube preset: 120 GB/s per box, 30 us) and the DFS (ParaStor preset: 40 GB/s, 500 us) get "
             "budget / price in all, read over the rdma400 fabric.  Per GiB the shared tiers are 20 to 130 times "
             "cheaper than DRAM (docs/cost.md), so at equal cost they hold far more of the reuse working set; what "
             "DRAM keeps is bandwidth and latency.  Two routings: round-robin (what the planner assumes) and "
             f"prefix-aware (the {router} router with load_weight {plain_number(params['load_weight'])}: each request goes where "
             "its longest prefix is held, less 4 blocks per queued or running request).  Without affinity a private "
             "tier only helps a request that lands where its prefix was computed; with it, the GPU pools themselves "
             "hit more (the hit ratio counts GPU hits too), so compare each design with the no-KV-tier row of the "
             "same routing to see what the tier adds.  A private tier smaller than the GPU pool "
             f"({_gib(_serving().gpu_kv_bytes)}) holds "
             "nothing the pool does not (the levels are inclusive).  Every tier is LRU, written through with every "
             "prefilled block.  hit ratio = share of prompt tokens found in the GPU pool + read from the lower tier.")


def _design_config(w, routing: str, label: str, kind, shared: bool, capacity: int) -> SimConfig:
    """The SimConfig of one design on slice ``w``: the planner's own point config (kvmm.plan._configs)."""
    base = SimConfig(workload=w, load=LOAD, model=MODEL)
    if routing == "prefix-aware":
        base = base.with_(cluster=ClusterConfig(instances=INSTANCES, router=PREFIX_ROUTER[0],
                                                router_params=PREFIX_ROUTER[1]))
    if kind is None:
        return point_config(base, (), (), INSTANCES)
    return point_config(base, (TierCandidate(kind, capacity, capacity, points=1, shared=shared),), (capacity,),
                        INSTANCES)


def _best(rows: list) -> str:
    """``design (x s p95 TTFT)``, with the designs whose mean is within the spread of the best named as ties."""
    label, mean, std = min(rows, key=lambda r: r[1])
    ties = [r[0] for r in rows if r[0] != label and r[1] - r[2] <= mean + std]
    return (f"{label} ({plain_number(mean)} s p95 TTFT)"
            + (f", tied within the spread with: {'; '.join(ties)}" if ties else ""))


def equal_cost_capacity(budget_usd_per_hour: float, usd_per_gib_hour: float, instances: int, shared: bool) -> int:
    """The capacity (bytes, per instance for a private tier, in all for a shared one) that
    ``budget_usd_per_hour`` buys at ``usd_per_gib_hour``.  Runtime complexity: O(1)."""
    gib = budget_usd_per_hour / usd_per_gib_hour / (1 if shared else instances)
    return int(gib * GiB)


def _capacity_text(capacity: int, label: str) -> str:
    gib = capacity / GiB
    text = f"{plain_number(gib / 1024)} TiB" if gib >= 1024 else f"{plain_number(gib)} GiB"
    return text + (" per node" if label.startswith("per-node") else " shared")


def _plot(report, plans: list) -> None:
    if not plans:
        return

    def draw(axes):
        for ax, p in zip(axes if len(plans) > 1 else [axes], plans):
            draw_frontier(p, None, ax=ax)
            ax.set_title(f"conversation, {INSTANCES} instances, SLO {plain_number(p.slo.ttft_p95_s)} s")

    report.figure("plan-frontier", draw, size=(11.0, 4.2), ncols=len(plans))
