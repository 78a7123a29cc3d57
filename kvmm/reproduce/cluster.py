"""Report section "cluster": the KV cache as a shared device (issues 20 and 31).

Five experiments on the cluster simulator (:mod:`kvmm.sim.engine.cluster`, whose module docstring
is the model), every assumption stated in the report text:

1. shared pool vs private tiers at equal total capacity, for N = 4, 8 and 16 instances, under
   round-robin and under an affinity router (precise-prefix with Dynamo's balance), with a
   Mooncake-like pooled store (a segment per instance, 1 or 2 replicas, 90 % watermark) at N = 8;
   the whole bill per request and per token, the prefill/decode split as a breakdown;
2. every router at N = 8 with the peers' defaults, spread over slices and over seeds
   (:mod:`kvmm.reproduce._cluster_routing`);
3. precise vs approximate routing as KV events arrive late or get lost (an ``EventStream``
   sweep, with and without llm-d's speculative indexing);
4. write-through vs write-back, inclusive vs exclusive (private DRAM over a shared NVMe pool);
5. the ParaStor / Mooncake claim of the first seed article (:mod:`kvmm.reproduce._cluster_parastor`).

Clock: the physical one (roofline step times, chunked prefill, the KV pool from memory, except
ParaStor's stated 128 GiB pool); shared vs private at N = 8 and the ParaStor designs are rerun on
the old constant-rate clock for a "what the physical clock moved" table.

Spread: a run of the simulator is deterministic given its seeds.  The trace experiments are spread
over disjoint slices of the bundled conversation trace (its three thirds in a full run), the
routers that draw at random also over router seeds, the ParaStor workload over generator seeds.
Tables show mean ± std.

Time: every simulation of the section is registered first and run in one sweep on a process pool
of one worker per CPU (:class:`~kvmm.reproduce._cluster_common.Runs`); a run two tables need runs
once.
"""

from __future__ import annotations

from kvmm.report import mean_pm, plain_number, spread
from kvmm.reproduce._clock import (
    MOVED_HEADERS,
    clock_text,
    moved_row,
    old_clock,
    old_clock_text,
)
from kvmm.reproduce._cluster_common import (
    AFFINITY,
    DESIGNS,
    LOAD,
    MODEL,
    ROUTER_INSTANCES,
    TOTAL_CAPACITY,
    VM_BUNDLED_RAM_GIB,
    Runs,
    TiB,
    bill_columns,
    bundled_dram_credit,
    cluster_config,
    design_label,
    hit,
    hit_columns,
    hit_points,
    mean_of,
    p95_s,
    usd_per_k_requests,
    window,
)
from kvmm.reproduce._cluster_parastor import (
    PARASTOR_CONCURRENCY,
    PARASTOR_GPU_KV,
    PARASTOR_MODEL,
    ceiling_sentence,
    parastor_moved_rows,
    parastor_runs,
    parastor_table,
)
from kvmm.reproduce._cluster_routing import (
    EVENT_REQUESTS,
    EVENT_REQUESTS_QUICK,
    EVENT_ROUTERS,
    EVENT_SETTINGS,
    SPECULATIVE_TTL_S,
    draw_routers,
    event_runs,
    events_table,
    router_runs,
    router_table,
)
from kvmm.sim import ClusterConfig, PooledStore
from kvmm.sim.config import GiB, SimConfig, TierLevel
from kvmm.sim.simulator import resolve_trace
from kvmm.tiers.spec import PRESETS

COUNTS = (4, 8, 16)  # instances of the shared-vs-private table
ROUTINGS = ("round-robin", AFFINITY)
#: (label, private DRAM level kwargs, shared pool level kwargs) of the fill experiment
FILL_SETTINGS = (
    ("DRAM write-through, pool write-through", {}, {}),
    ("DRAM write-back inclusive, pool write-through", {"fill": "write-back"}, {}),
    ("DRAM write-back inclusive, pool write-back inclusive", {"fill": "write-back"}, {"fill": "write-back"}),
    ("DRAM write-back exclusive, pool write-back exclusive", {"fill": "write-back", "inclusive": False},
     {"fill": "write-back", "inclusive": False}),
)
FILL_DRAM = 128 * GiB  # private DRAM per instance in the fill experiment
FILL_POOL = 2 * TiB  # the shared NVMe pool of the fill experiment


def reproduce(report) -> None:
    quick = report.quick
    slice_len = 200 if quick else 4010  # full: the three thirds of the 12,031-request trace
    n_slices = 2 if quick else 3
    trace = resolve_trace("conversation", None)
    slices = [window(trace, k * slice_len, slice_len) for k in range(n_slices)]
    event_slices = [window(trace, k * slice_len, EVENT_REQUESTS_QUICK if quick else EVENT_REQUESTS)
                    for k in range(n_slices)]
    names = ", ".join(f"[{k * slice_len}:{min((k + 1) * slice_len, trace.num_requests)}]" for k in range(n_slices))

    runs = Runs()  # registered longest first, so the pool's last runs are short ones
    shared_keys = _shared_vs_private_runs(runs, slices)
    router_keys = router_runs(runs, slices)
    fill_keys = _fill_runs(runs, slices)
    old_keys = {design: [runs.add(("old clock", design, w.name), old_clock(cluster_config(w, ROUTER_INSTANCES, design)[1]))
                         for w in slices] for design in ("private", "shared")}
    event_keys = event_runs(runs, event_slices)
    parastor_keys = parastor_runs(runs, quick)

    report.heading("Cluster: shared KV pools, KV-aware routing, demotion and the cost account")
    report.text(
        f"Cluster simulator (kvmm.sim.engine.cluster; its module docstring is the model).  Workload: the bundled Mooncake "
        f"conversation trace, requests {names} ({n_slices} disjoint slices{'' if quick else ': the whole trace'}), each "
        f"slice's arrivals rescaled to load {LOAD} over all the cluster's GPUs.  Runs are deterministic given their "
        "seeds: `priority_seed` only draws priority classes and there is no high-priority class here, so it changes "
        "nothing; the spread (mean ± std) is over the slices, and for the routers that draw at random also over "
        f"router seeds.  Per instance: {MODEL} on one H200, a KV pool of "
        "512-token blocks (64 MiB each) with prefix caching, the protected CXL staging tier (100 GiB) and timely "
        "staging.  Tier specs and fabric figures: "
        "kvmm/tiers/spec.py and kvmm/cluster/fabric.py (figures marked assumed there are assumed); shared levels "
        "are read over the rdma400 fabric (50 GB/s link per instance, 3.2 TB/s aggregate, 5 us added); writes are "
        "off the critical path (not charged).  The block index, for the routers that read it, is fed exactly (every "
        "store and removal at once) except in the KV-event table.  Cost: the documented default prices (docs/cost.md): "
        "GPU-hours of every instance plus GiB-hours of every tier provisioned for the run's duration (the CXL staging "
        f"tier too, priced as DRAM), the whole bill given per thousand requests and per million tokens (prompt + "
        "output); the split between input and output tokens by the GPUs' prefill and decode busy seconds is an "
        f"allocation, shown as a labelled breakdown.  {_bundled_sentence()}  The conversation trace has no "
        "conversation ids, so the session router sends every request to the least-loaded instance (session -1).  "
        "Hit ratio = share of prompt tokens found in the GPU pool + share read from a lower tier.  "
        + clock_text(cluster_config(slices[0], ROUTER_INSTANCES, "shared")[1]))
    runs.run(report, workers=1 if quick else None)  # quick: a pool costs more than it saves
    report.text(_findings(runs, shared_keys, router_keys, event_keys))
    shared = _shared_vs_private_table(report, runs, shared_keys)
    routers = router_table(report, runs, router_keys)
    events_table(report, runs, event_keys, event_slices)
    _fill_table(report, runs, fill_keys)
    parastor = parastor_table(report, runs, parastor_keys, quick)
    _moved(report, runs, old_keys, shared_keys, parastor_keys, parastor, len(slices))
    _plots(report, shared, routers)


def _bundled_sentence() -> str:
    return (f"Host DRAM: the GPU-hour price is a VM's (one H200 with 16 vCPUs and {VM_BUNDLED_RAM_GIB} GiB of RAM, "
            "billed together), and the DRAM tiers here are billed on top of it as an explicit extra, memory added to "
            f"each node beyond what the VM bundles; the shared-vs-private table says what the bill would be if the "
            f"first {VM_BUNDLED_RAM_GIB} GiB of each node's KV DRAM were the VM's own (not billed again).")


def _findings(runs, shared_keys: dict, router_keys: dict, event_keys: dict) -> str:
    """What the section finds, from its runs, in a few sentences (the tables below give the spread)."""

    n = ROUTER_INSTANCES
    res = {k: runs.many(v) for k, v in shared_keys.items()}
    pts, p95 = hit_points, p95_s
    def bill(rs):
        return mean_of(rs, usd_per_k_requests)
    shared = []
    for routing in ROUTINGS:
        pr, sh = res[(n, routing, "private")], res[(n, routing, "shared")]
        shared.append(f"under {routing} the shared pool's hit ratio is {pts(sh):.1f} % vs {pts(pr):.1f} % private, "
                      f"p95 TTFT {p95(sh):.2f} vs {p95(pr):.2f} s, the bill {bill(sh):.3f} vs {bill(pr):.3f} USD per "
                      "1k requests")
    routers = {label: runs.many(k[0]) for label, k in router_keys.items()}
    fastest = min(routers, key=lambda k: p95(routers[k]))
    most = max(routers, key=lambda k: pts(routers[k]))
    idle = [k for k, rs in routers.items() if any(c == 0 for r in rs for c in r.requests_per_instance)]
    precise = {k: runs.many(v) for k, v in event_keys["precise"].items()}
    exact, worst = EVENT_SETTINGS[0], max(EVENT_SETTINGS, key=lambda s: (s[1], s[0]))
    loss = ", ".join(f"{label} {pts(precise[(label, *worst, None)]) - pts(precise[(label, *exact, None)]):+.1f}"
                     for label in EVENT_ROUTERS)
    spec = ", ".join(f"{label} {p95(precise[(label, *exact, None)]):.2f} -> "
                     f"{p95(precise[(label, *exact, SPECULATIVE_TTL_S)]):.2f} s" for label in EVENT_ROUTERS)
    return (
        f"**What this section finds** (N = {n}, means over the slices; the tables give the spread).  Shared vs "
        f"private at equal capacity: {'; '.join(shared)}.  Routers: the lowest p95 TTFT is {fastest}'s "
        f"({p95(routers[fastest]):.2f} s), the highest hit ratio {most}'s ({pts(routers[most]):.1f} %); "
        f"{len(idle)} router{'s' if len(idle) != 1 else ''} left an instance idle on some slice"
        f"{' (' + ', '.join(idle) + ')' if idle else ''}.  KV events: losing {plain_number(100 * worst[1])} % of the "
        f"batches {plain_number(worst[0])} s late changes the precise routers' hit ratio by (points) {loss}; "
        f"llm-d's speculative indexing moves their p95 TTFT with exact events: "
        f"{spec}.")


# --------------------------------------------------------------------------- shared vs private
def _shared_vs_private_runs(runs, slices) -> dict:
    """``{(n, router, design): keys over slices}``; the Mooncake-like store at N = 8 under the affinity router."""
    keys = {(n, routing, design): [runs.cluster(w, n, design, routing) for w in slices]
            for n in COUNTS for routing in ROUTINGS for design in ("private", "shared")}
    for design in ("store r1", "store r2"):
        keys[(ROUTER_INSTANCES, AFFINITY, design)] = [runs.cluster(w, ROUTER_INSTANCES, design, AFFINITY) for w in slices]
    return keys


def _shared_vs_private_table(report, runs, keys: dict) -> dict:
    res = {k: runs.many(v) for k, v in keys.items()}
    rows = [(n, routing, design_label(n, design), *hit_columns(res[(n, routing, design)]),
             *bill_columns(res[(n, routing, design)])) for (n, routing, design) in keys]
    report.table(
        f"Shared pool vs private tiers at equal total capacity ({TOTAL_CAPACITY // TiB} TiB), round-robin and "
        "affinity routing",
        ["instances", "router", "lower tier", "GPU hit %", "hit ratio %", "TTFT p50 s", "TTFT p95 s", "USD / 1k req",
         "USD / M tok", "split: USD / M in", "split: USD / M out"], rows, note=_shared_note(res))
    return {k: spread([r.ttft_p95 for r in v]) for k, v in res.items()}


def _gaps(res: dict, routing: str, metric) -> str:
    diffs = [round(metric(res[(n, routing, "shared")]) - metric(res[(n, routing, "private")]), 1) + 0.0 for n in COUNTS]
    return " / ".join(f"{d:+.1f}" for d in diffs)  # + 0.0: no "-0.0"


def _shared_note(res: dict) -> str:

    mc = PooledStore.mooncake()
    n = ROUTER_INSTANCES
    pts, p95 = hit_points, p95_s
    rr_gap = [pts(res[(k, 'round-robin', 'shared')]) - pts(res[(k, 'round-robin', 'private')]) for k in COUNTS]
    aff_gap = [pts(res[(k, AFFINITY, 'shared')]) - pts(res[(k, AFFINITY, 'private')]) for k in COUNTS]
    narrower = sum(a < r for a, r in zip(aff_gap, rr_gap))
    p_dram, p_pool = PRESETS["dram"].usd_per_gib_hour, PRESETS["pooled-dram"].usd_per_gib_hour
    if p_dram == p_pool:
        price = (f"pooled-dram is priced as dram (${plain_number(p_dram)} per GiB-hour in kvmm/tiers/spec.py: the pool "
                 "is the nodes' own DRAM), so at equal capacity both designs pay the same per hour and their bills "
                 "differ only through how long the run takes")
    else:
        price = (f"pooled-dram costs ${plain_number(p_pool)} per GiB-hour and dram ${plain_number(p_dram)} "
                 "(kvmm/tiers/spec.py)")
    bundled = []
    for design in ("private", "shared"):
        rs = res[(n, AFFINITY, design)]
        after = [usd_per_k_requests(r) - 1e3 * bundled_dram_credit(r, n) / r.requests for r in rs]
        bundled.append(f"{design} {mean_of(rs, usd_per_k_requests):.3f} -> {spread(after)[0]:.3f}")
    stores = [(d, res[(n, AFFINITY, d)]) for d in ("store r1", "store r2")]
    one = res[(n, AFFINITY, "shared")]
    store_text = "; ".join(f"{DESIGNS[d]} replica{'s' if DESIGNS[d] > 1 else ''}: hit ratio {pts(rs):.1f} % vs "
                           f"{pts(one):.1f} % in the one pool, p95 TTFT "
                           f"{p95(rs):.2f} vs {p95(one):.2f} s" for d, rs in stores)
    return (
        "private: each instance has its own DRAM tier (dram preset: 55 GB/s, 10 us) of total / N; shared: one "
        "pooled-dram level (MeshFusion / Mooncake Store preset: 800 GB/s aggregate, 20 us) of the whole capacity "
        "that every instance reads over its own 50 GB/s link.  Both LRU, written through with every prefilled block.  "
        f"Routers: round-robin (no cache affinity) and {AFFINITY} (the block index's view of each instance's GPU "
        "pool and private DRAM, balanced by NVIDIA Dynamo's cost; the shared level is not indexed, since every "
        "instance reaches it alike).  Shared minus private hit ratio, points at N = "
        f"{' / '.join(map(str, COUNTS))}: {_gaps(res, 'round-robin', pts)} under round-robin, "
        f"{_gaps(res, AFFINITY, pts)} under {AFFINITY} (the gap is narrower under affinity at {narrower} of "
        f"{len(COUNTS)} sizes{'; the shared pool still hits more at every size' if min(aff_gap) > 0 else ''}); shared "
        f"minus private p95 TTFT, s: {_gaps(res, 'round-robin', p95)} under round-robin, {_gaps(res, AFFINITY, p95)} "
        "under affinity.  Round-robin has no cache affinity, so a private tier helps only a request that lands where "
        "its prefix was computed; an affinity router sends it there when the balance allows; the shared pool sees "
        "every instance's blocks whatever the router.  Mooncake-like store "
        f"(PooledStore.mooncake: a segment of {TOTAL_CAPACITY // n // GiB} GiB per instance, each instance writes "
        f"its own and reads it without the fabric, eviction from {100 * mc.watermark:.0f} % of a segment down to "
        f"{100 * (mc.watermark - mc.evict_fraction):.0f} %, with 2 replicas a "
        f"block read from another segment is copied into the reader's), at N = {n} under {AFFINITY}: {store_text}.  "
        f"Cost: USD / 1k req and USD / M tok are the whole bill; {price}.  Host DRAM bundled with the VM: at N = {n} "
        f"under {AFFINITY}, counting the first {VM_BUNDLED_RAM_GIB} GiB of each node's KV DRAM as the VM's own would "
        f"change USD / 1k req {', '.join(bundled)} (the same cut for both designs per hour: each holds "
        f"{TOTAL_CAPACITY // n // GiB} GiB per node).")


# --------------------------------------------------------------------------- write-through vs write-back
def _fill_config(w, label: str) -> SimConfig:

    dram_kw, pool_kw = next((d, p) for lab, d, p in FILL_SETTINGS if lab == label)
    return SimConfig(workload=w, load=LOAD, model=MODEL, tiers=(TierLevel("dram", capacity_bytes=FILL_DRAM, **dram_kw),),
                     cluster=ClusterConfig(instances=ROUTER_INSTANCES, fabric="rdma400",
                                           shared_tiers=(TierLevel("pooled-nvme", capacity_bytes=FILL_POOL, **pool_kw),)))


def _fill_runs(runs, slices) -> dict:
    return {label: [runs.add(("fill", label, w.name), _fill_config(w, label)) for w in slices]
            for label, _, _ in FILL_SETTINGS}


def _fill_table(report, runs, keys: dict) -> None:
    n = ROUTER_INSTANCES
    res = {label: runs.many(k) for label, k in keys.items()}
    wt_pool = [r.tier_block_hits[1] for r in res[FILL_SETTINGS[0][0]]]
    wb_pool = [r.tier_block_hits[1] for r in res[FILL_SETTINGS[2][0]]]
    rows = []
    for label, _, _ in FILL_SETTINGS:
        rs = res[label]
        rows.append((label, mean_pm([r.gpu_hit_token_share for r in rs], ".1f", scale=100),
                     mean_pm([r.slow_hit_token_share for r in rs], ".1f", scale=100),
                     mean_pm([hit(r) for r in rs], ".1f", scale=100),
                     mean_pm([r.tier_block_hits[0] for r in rs], ".0f"), mean_pm([r.tier_block_hits[1] for r in rs], ".0f"),
                     mean_pm([_level(r.demoted_blocks, 0) for r in rs], ".0f"),
                     mean_pm([_level(r.demoted_blocks, 1) for r in rs], ".0f"),
                     *hit_columns(rs)[2:], bill_columns(rs)[0]))
    report.table(
        f"Write-through vs write-back, inclusive vs exclusive: N = {n}, round-robin, private DRAM {FILL_DRAM // GiB} GiB "
        f"per instance over one shared pooled-nvme pool of {FILL_POOL // TiB} TiB",
        ["fill", "GPU hit %", "lower-tier hit %", "hit ratio %", "DRAM block hits", "pool block hits",
         "DRAM demoted blocks", "pool demoted blocks", "TTFT p50 s", "TTFT p95 s", "USD / 1k req"], rows,
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


# --------------------------------------------------------------------------- the physical clock vs the old one
def _moved(report, runs, old_keys: dict, shared_keys: dict, parastor_keys: dict, parastor: dict, n_slices: int) -> None:
    """Shared vs private at N = 8 under round-robin (every slice) and the ParaStor designs (every seed) on the old clock."""

    n = ROUTER_INSTANCES
    rows = []
    for design in ("private", "shared"):
        old, new = runs.many(old_keys[design]), runs.many(shared_keys[(n, "round-robin", design)])
        label = design_label(n, design)
        rows += [moved_row(label, "hit ratio %", [hit(r) for r in old], [hit(r) for r in new], ".1f", scale=100,
                           difference="pp"),
                 moved_row(label, "TTFT p95 s", [r.ttft_p95 for r in old], [r.ttft_p95 for r in new])]
    rows += parastor_moved_rows(runs, parastor_keys, parastor)
    parastor_clock = old_clock_text(PARASTOR_MODEL, pool_gib=PARASTOR_GPU_KV // GiB, max_seqs=PARASTOR_CONCURRENCY)
    report.table(
        f"Cluster: what the physical clock moved (mean ± std over the {n_slices} slices / {len(parastor['work'])} seeds)",
        MOVED_HEADERS, rows,
        note=f"{old_clock_text()}  Shared vs private rows: round-robin.  ParaStor's old clock: "
             f"{parastor_clock.split(': ', 1)[1]}  "
             f"{ceiling_sentence(parastor['old_ceiling'], parastor['ceiling'], parastor['recompute_s'])}")


# --------------------------------------------------------------------------- plots
def _plots(report, shared: dict, routers: dict) -> None:
    def draw_shared(ax):
        styles = {("private", "round-robin"): ("o", "-"), ("shared", "round-robin"): ("s", "-"),
                  ("private", AFFINITY): ("o", "--"), ("shared", AFFINITY): ("s", "--")}
        top = max(m + sd for k, (m, sd) in shared.items() if k[2] in ("private", "shared"))
        for (design, routing), (marker, line) in styles.items():
            mean, std = zip(*(shared[(n, routing, design)] for n in COUNTS))
            ax.errorbar(COUNTS, mean, yerr=std, marker=marker, linestyle=line, capsize=4,
                        label=f"{design}, {routing.split(' (')[0]}{' (Dynamo)' if routing == AFFINITY else ''}")
        ax.set_xlabel("instances")
        ax.set_ylabel("TTFT p95 (s), mean ± std")
        ax.set_xticks(COUNTS)
        ax.set_ylim(0, 1.35 * top)  # room for the legend above the lines
        ax.grid(True, alpha=0.3)
        ax.set_title(f"Shared pool vs private DRAM, {TOTAL_CAPACITY // TiB} TiB in all (error bars: std over slices)")
        ax.legend(fontsize=8, ncol=2, loc="upper center")

    report.figure("cluster-shared-vs-private", draw_shared)
    report.figure("cluster-routers", lambda axes: draw_routers(axes, routers), size=(10.0, 4.6), ncols=2)
