"""Report section "cluster": the KV cache as a shared device (issue 20, item 5).

Four experiments on the cluster simulator (:mod:`kvmm.sim.engine.cluster`, whose module docstring is
the model), every assumption stated in the report text:

1. shared pool vs private tiers at equal total capacity, for N = 4, 8 and 16 instances;
2. the six routers at N = 8 (precise-prefix with and without a load weight);
3. write-through vs write-back, inclusive vs exclusive (private DRAM over a shared NVMe pool);
4. the ParaStor / Mooncake claim of the first seed article (KV offload to a DFS tier: 16x the
   throughput of no offload at 64K context and 7 concurrent requests per card, 80 % of a DRAM
   pool's throughput), in the closest configuration kvmm can express.

Clock: the physical one (roofline step times, chunked prefill, the KV pool from memory, except
ParaStor's stated 128 GiB pool); shared vs private at N = 8 and the ParaStor designs are rerun on
the old constant-rate clock for a "what the physical clock moved" table.

Spread: a run of the simulator is deterministic.  ``priority_seed`` only draws each request's
priority class, and with ``high_priority_share = 0`` (used throughout) it changes nothing, so
the trace experiments are spread over disjoint slices of the bundled conversation trace (the
three thirds of it in a full run) and the ParaStor workload over generator seeds.  Tables show
mean ± std over the slices / seeds.
"""

from __future__ import annotations

import warnings

from kvmm.report import mean_pm, plain_number, spread
from kvmm.reproduce._clock import MOVED_HEADERS, clock_text, moved_row, old_clock, old_clock_text
from kvmm.sim.config import GiB, SimConfig, TierLevel
from kvmm.sim.engine import QueueGrowthWarning
from kvmm.sim.load import offered_seconds
from kvmm.sim.serving import resolve_serving
from kvmm.sim.simulator import resolve_trace, simulate
from kvmm.traces.trace import KVTrace

TiB = 1024 * GiB
MODEL = "llama-3.1-8b"
LOAD = 0.7
TOTAL_CAPACITY = 2 * TiB  # the capacity both designs get in experiment 1
ROUTER_INSTANCES = 8
#: (label, router name, router_params) of experiment 2
ROUTER_SETTINGS = (
    ("round-robin", "round-robin", {}),
    ("least-loaded", "least-loaded", {}),
    ("session", "session", {}),
    ("approx-prefix", "approx-prefix", {}),
    ("precise-prefix (load_weight 0)", "precise-prefix", {}),
    ("precise-prefix (load_weight 4)", "precise-prefix", {"load_weight": 4.0}),
    ("precise-prefix (load_weight 32)", "precise-prefix", {"load_weight": 32.0}),
    ("weighted", "weighted", {}),
)
#: (label, private DRAM level kwargs, shared pool level kwargs) of experiment 3
FILL_SETTINGS = (
    ("DRAM write-through, pool write-through", {}, {}),
    ("DRAM write-back inclusive, pool write-through", {"fill": "write-back"}, {}),
    ("DRAM write-back inclusive, pool write-back inclusive", {"fill": "write-back"}, {"fill": "write-back"}),
    ("DRAM write-back exclusive, pool write-back exclusive", {"fill": "write-back", "inclusive": False},
     {"fill": "write-back", "inclusive": False}),
)
FILL_DRAM = 128 * GiB  # private DRAM per instance in experiment 3
FILL_POOL = 2 * TiB  # the shared NVMe pool of experiment 3
PARASTOR_MODEL = "qwen2.5-32b"
PARASTOR_CONCURRENCY = 7
PARASTOR_GPU_KV = 128 * GiB  # holds 8 contexts of 64K tokens at 256 KiB/token: the 7 running + 1
PARASTOR_SEEDS = (0, 1, 2)


def reproduce(report) -> None:
    quick = report.quick
    slice_len = 400 if quick else 4010  # full: the three thirds of the 12,031-request trace
    n_slices = 2 if quick else 3
    trace = resolve_trace("conversation", None)
    slices = [_window(trace, k * slice_len, slice_len) for k in range(n_slices)]
    names = ", ".join(f"[{k * slice_len}:{min((k + 1) * slice_len, trace.num_requests)}]" for k in range(n_slices))

    report.heading("Cluster: shared KV pools, KV-aware routing, demotion and the cost account")
    report.text(
        f"Cluster simulator (kvmm.sim.engine.cluster; its module docstring is the model).  Workload: the bundled Mooncake "
        f"conversation trace, requests {names} ({n_slices} disjoint slices{'' if quick else ': the whole trace'}), each "
        f"slice's arrivals rescaled to load {LOAD} over all the cluster's GPUs.  Runs are deterministic: "
        "`priority_seed` only draws priority classes and there is no high-priority class here, so it changes "
        f"nothing; the spread (mean ± std) is over the slices.  Per instance: {MODEL} on one H200, a KV pool of "
        "512-token blocks (64 MiB each) with prefix caching, the protected CXL staging tier (100 GiB) and timely "
        "staging.  Tier specs and fabric figures: "
        "kvmm/tiers/spec.py and kvmm/cluster/fabric.py (figures marked assumed there are assumed); shared levels "
        "are read over the rdma400 fabric (50 GB/s link per instance, 3.2 TB/s aggregate, 5 us added); writes are "
        "off the critical path (not charged).  Prices: the documented defaults (docs/cost.md; GPU-hours of every "
        "instance plus GiB-hours of every tier provisioned for the run's duration, split between input and output "
        "tokens by the GPU's prefill and decode busy seconds).  The conversation trace has no conversation ids, so "
        "the session router sends every request to the least-loaded instance (session -1).  Hit ratio = share of "
        "prompt tokens found in the GPU pool + share read from a lower tier.  "
        + clock_text(_design_config(slices[0], ROUTER_INSTANCES, "shared")))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", QueueGrowthWarning)  # overload shows in the tables (TTFT, queues)
        shared, shared_runs = _shared_vs_private(report, slices, quick)
        routers = _routers(report, slices)
        _fill(report, slices)
        parastor = _parastor(report, quick)
        _moved(report, slices, shared_runs, parastor)
    _plots(report, shared, routers)


# --------------------------------------------------------------------------- experiment 1
def _shared_vs_private(report, slices, quick) -> dict:
    counts = (4, 8, 16)
    res = _simulate_slices(report, "cluster: shared vs private", slices,
                           [(n, design) for n in counts for design in ("private", "shared")],
                           lambda key, w: _design_config(w, *key))
    rows = []
    for n in counts:
        for design in ("private", "shared"):
            rows.append((n, _design_label(n, design), *_summary(res[(n, design)])))
    report.table(
        f"Shared pool vs private tiers at equal total capacity ({TOTAL_CAPACITY // TiB} TiB), round-robin routing",
        ["instances", "lower tier", "GPU hit %", "lower-tier hit %", "hit ratio %", "TTFT p50 s", "TTFT p95 s",
         "USD / M input tok", "USD / M output tok"], rows,
        note="private: each instance has its own DRAM tier (dram preset: 55 GB/s, 10 us) of total / N; shared: one "
             "pooled-dram level (MeshFusion / Mooncake Store preset: 800 GB/s aggregate, 20 us, priced as pooled "
             "DRAM) of the whole capacity that every instance reads over its own 50 GB/s link.  Both are LRU, "
             "written through with every prefilled block.  Round-robin routing has no cache affinity, so a private "
             "tier only helps a request that lands where its prefix was computed (1 in N); the shared pool sees "
             "every instance's blocks, so its hits do not fall with N.  Its price per GiB-hour is higher than local "
             "DRAM's, so the USD per million output tokens can rise while the input side falls.")
    return _ttft_p95_and_usd_in(res), res


def _design_config(w: KVTrace, n: int, design: str) -> SimConfig:
    from kvmm.sim import ClusterConfig

    if design == "private":
        return SimConfig(workload=w, load=LOAD, model=MODEL, tiers=(TierLevel("dram", capacity_bytes=TOTAL_CAPACITY // n),),
                         cluster=ClusterConfig(instances=n, fabric="rdma400"))
    return SimConfig(workload=w, load=LOAD, model=MODEL, tiers=(),
                     cluster=ClusterConfig(instances=n, shared_tiers=(TierLevel("pooled-dram", capacity_bytes=TOTAL_CAPACITY),),
                                           fabric="rdma400"))


def _design_label(n: int, design: str) -> str:
    if design == "private":
        return f"private DRAM {TOTAL_CAPACITY // n // GiB} GiB x {n}"
    return f"shared pooled-dram {TOTAL_CAPACITY // TiB} TiB"


# --------------------------------------------------------------------------- experiment 2
def _routers(report, slices) -> dict:
    from kvmm.sim import ClusterConfig

    n = ROUTER_INSTANCES
    routers = {label: (name, params) for label, name, params in ROUTER_SETTINGS}

    def config(label, w):
        name, params = routers[label]
        return SimConfig(workload=w, load=LOAD, model=MODEL, tiers=(TierLevel("dram", capacity_bytes=TOTAL_CAPACITY // n),),
                         cluster=ClusterConfig(instances=n, router=name, router_params=params, fabric="rdma400"))

    res = _simulate_slices(report, "cluster: routers", slices, list(routers), config)
    rows = []
    for label, _, _ in ROUTER_SETTINGS:
        rs = res[label]
        idle = [sum(1 for c in r.requests_per_instance if c == 0) for r in rs]
        rows.append((label, *_summary(rs)[:5], mean_pm([r.load_imbalance for r in rs], ".2f"),
                     mean_pm([r.queue_imbalance for r in rs], ".2f"), mean_pm(idle, ".1f"),
                     mean_pm([r.usd_per_million_input_tokens for r in rs], ".4f")))
    best = min(res, key=lambda k: spread([r.ttft_p95 for r in res[k]])[0])
    top_hit = max(res, key=lambda k: spread([r.gpu_hit_token_share + r.slow_hit_token_share for r in res[k]])[0])
    ranking = " > ".join(sorted(res, key=lambda k: -spread([r.gpu_hit_token_share + r.slow_hit_token_share
                                                            for r in res[k]])[0]))
    lw0 = res["precise-prefix (load_weight 0)"]
    piled = (f"In this run precise-prefix with load_weight 0 left {spread([sum(1 for c in r.requests_per_instance if c == 0) for r in lw0])[0]:.1f} "
             f"of {n} instances idle on average (requests max/mean {spread([r.load_imbalance for r in lw0])[0]:.2f}).  ")
    report.table(
        f"Routers at N = {n} (private DRAM {TOTAL_CAPACITY // n // GiB} GiB per instance, no shared tier)",
        ["router", "GPU hit %", "lower-tier hit %", "hit ratio %", "TTFT p50 s", "TTFT p95 s",
         "requests max/mean", "queue max/mean", "idle instances", "USD / M input tok"], rows,
        note=f"Measured, not assumed.  Hit-ratio order here: {ranking}.  Highest hit ratio: {top_hit}; lowest "
             f"p95 TTFT: {best}.  {piled}requests max/mean = load_imbalance (requests routed per instance); queue "
             "max/mean = queue_imbalance (max / mean waiting queue, averaged over the routing decisions where some "
             "queue is non-empty); idle instances: instances that got no request.  precise-prefix with load_weight 0 "
             "sends each request to the instance holding its longest prefix: the first requests put the shared "
             "system-prompt blocks on a few instances, every later request's longest prefix is there, ties go to "
             "the lower load and then the lowest index, so the other instances are never chosen and the loaded ones "
             "queue (the TTFT and cost of that row).  A load weight (score = prefix blocks - load_weight x (waiting "
             "+ running)) trades a few blocks of prefix for a shorter queue and spreads the load again.  approx-prefix "
             "(SGLang cache-aware, its default thresholds) falls back to the least-loaded instance when loads "
             "diverge, which keeps it balanced.  weighted: llm-d's default weights (prefix 2, load 1, KV use 1).")
    return _ttft_p95_and_usd_in(res)


# --------------------------------------------------------------------------- experiment 3
def _fill(report, slices) -> None:
    from kvmm.sim import ClusterConfig

    n = ROUTER_INSTANCES
    fills = {label: (dram_kw, pool_kw) for label, dram_kw, pool_kw in FILL_SETTINGS}

    def config(label, w):
        dram_kw, pool_kw = fills[label]
        return SimConfig(workload=w, load=LOAD, model=MODEL, tiers=(TierLevel("dram", capacity_bytes=FILL_DRAM, **dram_kw),),
                         cluster=ClusterConfig(instances=n, fabric="rdma400",
                                               shared_tiers=(TierLevel("pooled-nvme", capacity_bytes=FILL_POOL, **pool_kw),)))

    res = _simulate_slices(report, "cluster: write-through / write-back", slices, list(fills), config)
    wt_pool = [r.tier_block_hits[1] for r in res[FILL_SETTINGS[0][0]]]
    wb_pool = [r.tier_block_hits[1] for r in res[FILL_SETTINGS[2][0]]]
    rows = []
    for label, _, _ in FILL_SETTINGS:
        rs = res[label]
        rows.append((label, *_summary(rs)[:3],
                     mean_pm([r.tier_block_hits[0] for r in rs], ".0f"), mean_pm([r.tier_block_hits[1] for r in rs], ".0f"),
                     mean_pm([_level(r.demoted_blocks, 0) for r in rs], ".0f"),
                     mean_pm([_level(r.demoted_blocks, 1) for r in rs], ".0f"),
                     *_summary(rs)[3:5], mean_pm([r.usd_per_million_input_tokens for r in rs], ".4f")))
    report.table(
        f"Write-through vs write-back, inclusive vs exclusive: N = {n}, round-robin, private DRAM {FILL_DRAM // GiB} GiB "
        f"per instance over one shared pooled-nvme pool of {FILL_POOL // TiB} TiB",
        ["fill", "GPU hit %", "lower-tier hit %", "hit ratio %", "DRAM block hits", "pool block hits",
         "DRAM demoted blocks", "pool demoted blocks", "TTFT p50 s", "TTFT p95 s", "USD / M input tok"], rows,
        note="Block hits and demoted blocks are summed over the instances (the pool's are its one tier's).  "
             "write-through: every prefilled block is offered to the level at prefill.  write-back: nothing is "
             "written at prefill; blocks the GPU prefix cache hands out again are demoted into DRAM, DRAM's LRU "
             "victims into the pool (LMCache / SGLang HiCache write_back).  exclusive: a block read from a level "
             "into the GPU leaves it, so a block lives in one level at a time and the levels' capacities add up "
             "instead of the lower one duplicating the upper.  Pool admission: write-all, LRU.  "
             f"Pool block hits: {spread(wt_pool)[0]:.0f} written through vs {spread(wb_pool)[0]:.0f} written back.  Why "
             "write-back loses on a shared pool: written through, a block reaches the pool at its first prefill and "
             "every other instance can read it from then on; written back, it reaches the pool only after the GPU "
             "pool and then the private DRAM of the instance that computed it have both evicted it, so a request "
             "routed elsewhere in the meantime recomputes it.  Exclusive levels lose more: a block read from the "
             "pool leaves it, so the next instance that needs it misses.  Write-back saves write bandwidth (not "
             "charged in this model), not hits.")


def _level(values: tuple, i: int) -> int:
    return int(values[i]) if len(values) > i else 0


# --------------------------------------------------------------------------- experiment 4
PARASTOR_DESIGNS = (("no offload (GPU prefix cache only)", ()),
                    ("DFS tier (dfs preset: 40 GB/s, 500 us)", (TierLevel("dfs", capacity_bytes=4 * TiB),)),
                    ("DRAM pool (pooled-dram preset: 800 GB/s, 20 us)", (TierLevel("pooled-dram", capacity_bytes=4 * TiB),)))
PARASTOR_CONTEXT = 65_536  # the claim's context length


def parastor_workloads(quick: bool) -> list:
    """The ParaStor experiment's traces, one per generator seed."""
    from kvmm.traces.generators import conversation_trace

    seeds = PARASTOR_SEEDS[:2] if quick else PARASTOR_SEEDS
    return [conversation_trace(_sessions(quick), turns=(4, 8), arrival_rate_per_s=0.05, system_prompts=10_000,
                               system_prompt_tokens=61_440, user_tokens=(20, 400), output_tokens=(64, 512),
                               think_time_mean_s=60.0, max_context_tokens=69_632, seed=s) for s in seeds]


def _sessions(quick: bool) -> int:
    return 12 if quick else 40


def parastor_config(tr, tiers) -> SimConfig:
    return SimConfig(workload=tr, load=None, gpu_kv_bytes=PARASTOR_GPU_KV, tiers=tiers, model=PARASTOR_MODEL,
                     max_num_seqs=PARASTOR_CONCURRENCY)


def parastor_summary(res: dict, work: list) -> dict:
    """Per design: capacity (tokens / GPU-busy second) per seed, and its ratios to no offload and to the DRAM pool."""
    tokens = [int(tr.input_length.sum() + tr.output_length.sum()) for tr in work]
    cap = {label: [tokens[k] / sum(r.busy_seconds) for k, r in enumerate(rs)] for label, rs in res.items()}
    base, dram = cap[PARASTOR_DESIGNS[0][0]], cap[PARASTOR_DESIGNS[2][0]]
    return {label: {"capacity": c, "vs_none": [x / b for x, b in zip(c, base)], "vs_dram": [x / d for x, d in zip(c, dram)]}
            for label, c in cap.items()}


def _parastor(report, quick) -> dict:
    from kvmm.sim.latency import kv_pool_bytes
    from kvmm.tiers.spec import preset

    work = parastor_workloads(quick)
    seeds = PARASTOR_SEEDS[:len(work)]
    res: dict = {label: [] for label, _ in PARASTOR_DESIGNS}
    with report.progress(len(PARASTOR_DESIGNS) * len(work), "cluster: ParaStor / Mooncake") as bar:
        for tr in work:
            for label, tiers in PARASTOR_DESIGNS:
                res[label].append(simulate(parastor_config(tr, tiers)))
                bar.update(1)
    summary = parastor_summary(res, work)
    rows = []
    for label, _ in PARASTOR_DESIGNS:
        rs, sm = res[label], summary[label]
        rows.append((label, mean_pm(sm["capacity"], ".0f"), mean_pm(sm["vs_none"], ".2f", unit="x"),
                     mean_pm(sm["vs_dram"], ".1f", scale=100, unit=" %"),
                     mean_pm([r.output_tokens_per_s for r in rs], ".1f"),
                     mean_pm([r.gpu_hit_token_share for r in rs], ".1f", scale=100),
                     mean_pm([r.slow_hit_token_share for r in rs], ".1f", scale=100),
                     mean_pm([r.ttft_mean for r in rs], ".1f"), mean_pm([r.ttft_p95 for r in rs], ".1f"),
                     mean_pm([r.usd_per_million_output_tokens for r in rs], ".2f")))
    # kvmm's ceiling for this mix: every previously computed token hits (offered work counts only
    # never-seen prompt tokens) vs every prompt token recomputed
    ceiling = _ceiling(work, lambda tr: parastor_config(tr, ()))
    serving = resolve_serving(parastor_config(work[0], ()))
    recompute_s = serving.latency.step_seconds([PARASTOR_CONTEXT], [0], [])
    load_s = preset("dfs").transfer_seconds(PARASTOR_CONTEXT * serving.kv_bytes_per_token)
    own_pool = kv_pool_bytes(PARASTOR_MODEL, serving.hardware) / GiB
    mean_in = spread([float(tr.input_length.mean()) for tr in work])[0]
    mean_req = spread([tr.num_requests for tr in work])[0]
    same = summary[PARASTOR_DESIGNS[1][0]]["capacity"] == summary[PARASTOR_DESIGNS[2][0]]["capacity"]
    report.table(
        f"ParaStor / Mooncake claim: KV offload to a DFS tier at 64K context, {PARASTOR_CONCURRENCY} concurrent per card "
        f"(one instance; mean ± std over generator seeds {list(seeds)})",
        ["KV offload", "capacity tok / GPU-busy s", "vs no offload", "vs DRAM pool", "output tok/s (arrival-bound)",
         "GPU hit %", "lower-tier hit %", "TTFT mean s", "TTFT p95 s", "USD / M output tok"], rows,
        note=f"Claim (first seed article, Sugon ParaStor F9000 + SGLang on domestic accelerators): 16x the throughput of "
             f"no offload, 80 % of a DRAM pool's, mean and P90 TTFT under 10 s.  {_parastor_verdict(summary, res)}  "
             "kvmm's closest setup: "
             f"{PARASTOR_MODEL} (256 KiB of KV per token) on one H200, the physical clock (the article's card and model "
             f"are not published), at most {PARASTOR_CONCURRENCY} sequences in a batch, a {PARASTOR_GPU_KV // GiB} GiB KV "
             f"pool (8 contexts of 64K tokens; assumed: one H200's pool from memory beside this model's weights would "
             f"be {own_pool:.0f} GiB); {_sessions(quick)} chat sessions (conversation_trace: a private "
             f"60K-token document + user turns of 20-400 tokens, 4-8 turns, 60 s mean think time, sessions arriving at "
             f"0.05/s; {mean_req:.0f} requests, mean prompt {mean_in / 1024:.1f}K tokens), replayed at the generator's "
             "timestamps; lower tiers LRU, written through, 4 TiB.  'capacity' = prompt + output tokens / GPU-busy "
             "seconds, the throughput a card kept busy with this mix sustains; output tok/s is bounded by the arrivals.  "
             f"Why the DFS matches the DRAM pool here: a 64K context's KV is {PARASTOR_CONTEXT * serving.kv_bytes_per_token / GiB:.0f} "
             f"GiB, {load_s:.2f} s from the DFS vs {recompute_s:.1f} s to recompute on the roofline (prefill attention is "
             "quadratic in the context), and a tier read overlaps compute (timely staging), so both tiers deliver the "
             f"same hits{' and the same capacity' if same else ''}; kvmm charges neither the DFS's per-request software path "
             "nor its small-I/O behaviour.  Why far below 16x: offload cannot remove each session's first turn, the "
             "decode, or turns that arrive while their previous turn is still queued (kvmm's ceiling for this mix, "
             f"every earlier-computed token a hit vs every prompt token recomputed: {mean_pm(ceiling, '.2f', unit='x')}).  "
             "The DRAM pool costs more per GiB-hour, so its USD per million output tokens is higher at equal speed.  "
             f"TTFT: mean {spread([r.ttft_mean for r in res[PARASTOR_DESIGNS[1][0]]])[0]:.1f} s with the DFS tier; above "
             "10 s these arrivals overload one card and TTFT measures the queue.")
    return {"res": res, "work": work, "summary": summary, "ceiling": ceiling, "recompute_s": recompute_s}


def _parastor_verdict(summary: dict, res: dict) -> str:
    """Met or missed, claim by claim, in short sentences."""
    dfs = PARASTOR_DESIGNS[1][0]
    gain = spread(summary[dfs]["vs_none"])[0]
    vs_dram = 100 * spread(summary[dfs]["vs_dram"])[0]
    ttft = spread([r.ttft_mean for r in res[dfs]])[0]
    return (f"Here: {gain:.2f}x, so the 16x is {'met' if gain >= 16 else 'missed'}.  The DFS reaches {vs_dram:.0f} % "
            f"of the DRAM pool's capacity (claim: 80 %).  Mean TTFT is {ttft:.1f} s, so 'under 10 s' is "
            f"{'met' if ttft < 10 else 'missed'}.")


def _ceiling(work: list, config) -> list[float]:
    """Recompute-everything work over cached work (the ideal offload gain), per trace, on ``config(tr)``'s clock."""
    out = []
    for tr in work:
        m = resolve_serving(config(tr))
        out.append(offered_seconds(tr, m, recompute_all=True) / offered_seconds(tr, m))
    return out


# --------------------------------------------------------------------------- the physical clock vs the old one
def _moved(report, slices, shared_runs: dict, parastor: dict) -> None:
    """Shared vs private at N = 8 (every slice) and the ParaStor designs (every seed) on the old clock."""
    n = ROUTER_INSTANCES
    rows = []
    with report.progress(2 * len(slices) + len(PARASTOR_DESIGNS) * len(parastor["work"]), "cluster: old clock") as bar:
        for design in ("private", "shared"):
            old = []
            for w in slices:
                old.append(simulate(old_clock(_design_config(w, n, design))))
                bar.update(1)
            new = shared_runs[(n, design)]
            label = _design_label(n, design)
            rows += [moved_row(label, "hit ratio %", [r.gpu_hit_token_share + r.slow_hit_token_share for r in old],
                               [r.gpu_hit_token_share + r.slow_hit_token_share for r in new], ".1f", scale=100, difference="pp"),
                     moved_row(label, "TTFT p95 s", [r.ttft_p95 for r in old], [r.ttft_p95 for r in new])]
        old_res = {label: [] for label, _ in PARASTOR_DESIGNS}
        for tr in parastor["work"]:
            for label, tiers in PARASTOR_DESIGNS:
                old_res[label].append(simulate(old_clock(parastor_config(tr, tiers), keep_pool=True)))
                bar.update(1)
    old_sum, new_sum = parastor_summary(old_res, parastor["work"]), parastor["summary"]
    dfs = PARASTOR_DESIGNS[1][0]
    old_ceiling = _ceiling(parastor["work"], lambda tr: old_clock(parastor_config(tr, ()), keep_pool=True))
    rows += [moved_row("ParaStor: DFS tier", "capacity vs no offload (x)", old_sum[dfs]["vs_none"], new_sum[dfs]["vs_none"], ".2f"),
             moved_row("ParaStor: DFS tier", "capacity vs DRAM pool %", old_sum[dfs]["vs_dram"], new_sum[dfs]["vs_dram"], ".1f",
                       scale=100, difference="pp"),
             moved_row("ParaStor: DFS tier", "TTFT mean s", [r.ttft_mean for r in old_res[dfs]],
                       [r.ttft_mean for r in parastor["res"][dfs]], ".1f"),
             moved_row("ParaStor", "ceiling: recompute all / cached (x)", old_ceiling, parastor["ceiling"], ".2f")]
    report.table(
        f"Cluster: what the physical clock moved (mean ± std over the {len(slices)} slices / {len(parastor['work'])} seeds)",
        MOVED_HEADERS, rows,
        note=f"{old_clock_text()}  ParaStor's old clock: "
             f"{old_clock_text(PARASTOR_MODEL, pool_gib=PARASTOR_GPU_KV // GiB, max_seqs=PARASTOR_CONCURRENCY).split(': ', 1)[1]}  "
             f"{_ceiling_sentence(old_ceiling, parastor['ceiling'], parastor['recompute_s'])}")


def _ceiling_sentence(old: list, new: list, recompute_s: float) -> str:
    from kvmm.sim.models import MODELS

    o, n = spread(old)[0], spread(new)[0]
    old_s = PARASTOR_CONTEXT / MODELS[PARASTOR_MODEL].prefill_tokens_per_s
    how = "raises" if n > o else "lowers" if n < o else "leaves"
    return (f"Recomputing a 64K context takes {recompute_s:.1f} s on the roofline (attention quadratic in the context) "
            f"vs {old_s:.1f} s at the old constant rate; with decode and the uncached first turns priced on the same "
            f"clock, the physical clock {how} the ceiling of what offload can save ({o:.2f}x -> {n:.2f}x).")


# --------------------------------------------------------------------------- helpers
def _simulate_slices(report, what: str, slices, keys, config) -> dict:
    """``{key: [simulate(config(key, w)) for w in slices]}`` for each key in order, under one
    progress bar titled ``what``.  Runtime complexity: O(len(keys) x len(slices)) simulations."""
    res: dict = {}
    with report.progress(len(keys) * len(slices), what) as bar:
        for key in keys:
            res[key] = []
            for w in slices:
                res[key].append(simulate(config(key, w)))
                bar.update(1)
    return res


def _ttft_p95_and_usd_in(res: dict) -> dict:
    """``{key: [(mean, std) of TTFT p95, (mean, std) of USD / M input tokens]}`` over each key's
    runs (the slices): what the plots draw, with the spread the tables give as error bars."""
    return {k: [spread([r.ttft_p95 for r in v]), spread([r.usd_per_million_input_tokens for r in v])]
            for k, v in res.items()}


def _summary(rs) -> tuple:
    """GPU hit %, lower-tier hit %, hit ratio %, TTFT p50, TTFT p95, USD / M input, USD / M output (mean ± std)."""
    return (mean_pm([r.gpu_hit_token_share for r in rs], ".1f", scale=100),
            mean_pm([r.slow_hit_token_share for r in rs], ".1f", scale=100),
            mean_pm([r.gpu_hit_token_share + r.slow_hit_token_share for r in rs], ".1f", scale=100),
            mean_pm([r.ttft_p50 for r in rs], ".3f"), mean_pm([r.ttft_p95 for r in rs], ".3f"),
            mean_pm([r.usd_per_million_input_tokens for r in rs], ".4f"),
            mean_pm([r.usd_per_million_output_tokens for r in rs], ".3f"))


def _window(trace: KVTrace, start: int, n: int) -> KVTrace:
    """Requests ``[start, start + n)`` of ``trace`` as a trace of their own (views; offsets rebased).
    Runtime complexity: O(n)."""
    end = min(start + n, trace.num_requests)
    a, b = int(trace.block_offsets[start]), int(trace.block_offsets[end])
    return KVTrace(f"{trace.name}[{start}:{end}]", trace.timestamp_ms[start:end], trace.input_length[start:end],
                   trace.output_length[start:end], trace.block_offsets[start:end + 1] - a, trace.block_ids[a:b],
                   trace.bad_lines, trace.block_tokens, {k: c[start:end] for k, c in trace.columns.items()},
                   trace.source_format)


def _plots(report, shared: dict, routers: dict) -> None:
    counts = sorted({n for n, _ in shared})

    def draw_shared(ax):
        for design, marker in (("private", "o"), ("shared", "s")):
            mean, std = zip(*(shared[(n, design)][0] for n in counts))
            ax.errorbar(counts, mean, yerr=std, marker=marker, capsize=4, label=f"{design} (TTFT p95, mean ± std)")
        ax.set_xlabel("instances")
        ax.set_ylabel("TTFT p95 (s)")
        ax.set_xticks(counts)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.set_title(f"Shared pool vs private DRAM, {TOTAL_CAPACITY // TiB} TiB in all (error bars: std over slices)")
        ax.legend()

    report.figure("cluster-shared-vs-private", draw_shared)
    report.figure("cluster-routers", lambda axes: draw_routers(axes, routers), size=(10.0, 4.4), ncols=2)


def draw_routers(axes, routers: dict) -> None:
    """TTFT p95 and USD per million input tokens per router: linear bars with the slices' std as
    error bars.  A bar far above the rest is cut at 3x the largest other (mean + std) and labelled
    with its value, so the other routers stay readable on a linear axis."""
    labels = list(routers)
    xs = list(range(len(labels)))
    ticks = [k.replace("precise-prefix", "precise").replace(" (load_weight ", "\nlw ").rstrip(")") for k in labels]
    for ax, i, what, colour in ((axes[0], 0, "TTFT p95 (s)", "tab:blue"), (axes[1], 1, "USD / million input tokens", "tab:red")):
        mean = [routers[k][i][0] for k in labels]
        std = [routers[k][i][1] for k in labels]
        tops = sorted(m + s for m, s in zip(mean, std))
        cap = 3 * tops[-2] if len(tops) > 1 and tops[-1] > 3 * tops[-2] > 0 else None
        ax.bar(xs, mean, color=colour, alpha=0.8)
        ax.errorbar(xs, mean, yerr=std, fmt="none", ecolor="black", capsize=4)
        if cap is not None:
            ax.set_ylim(0, cap)
            for x, m, sd in zip(xs, mean, std):
                if m + sd > cap:
                    ax.annotate(f"{plain_number(m)} ± {plain_number(sd)}\n(cut)", (x, cap), textcoords="offset points",
                                xytext=(0, -24), ha="center", fontsize=7,
                                bbox=dict(facecolor="white", alpha=0.9, edgecolor="none"))
        else:
            ax.set_ylim(bottom=0)
        ax.set_ylabel(what)
        ax.set_xticks(xs)
        ax.set_xticklabels(ticks, rotation=45, ha="right", fontsize=7)
        ax.grid(True, axis="y", alpha=0.3)
        ax.set_title(f"{what.split(' (')[0]} per router at N = {ROUTER_INSTANCES} (mean ± std over slices)")
