"""Report section "cluster", the routing part: every router at N = 8 with spread over slices and
seeds, and precise vs approximate routing as KV events arrive late or get lost
(docs/cluster_routers.md, docs/cluster.md).

Runs are registered on the section's :class:`~kvmm.reproduce._cluster_common.Runs` first
(``*_runs``) and read back after the one sweep (``*_table``).
"""

from __future__ import annotations

from kvmm.cluster import EventStream
from kvmm.report import mean_pm, plain_number, spread
from kvmm.reproduce._cluster_common import (
    AFFINITY,
    ROUTER_INSTANCES,
    ROUTER_SETTINGS,
    TOTAL_CAPACITY,
    GiB,
    bill_columns,
    hit,
    hit_points,
    mean_of,
    p95_s,
    usd_per_k_requests,
)

#: seeds of the routers that draw at random: each runs seed 0 on every slice, and every seed on the first
SEEDS = (0, 1, 2)
#: the routers that read the block index, and the approximate ones they are compared with
EVENT_ROUTERS = ("precise-prefix (Dynamo balance)", "weighted (llm-d precise)")
APPROX_ROUTERS = ("approx-prefix (smg)", "weighted (llm-d approximate)")
#: (delay_s, drop_rate) of the KV event streams: a delay sweep without loss, then loss at a
#: short delay (50 ms) and at a long one (5 s)
EVENT_SETTINGS = ((0.0, 0.0), (0.05, 0.0), (0.5, 0.0), (5.0, 0.0), (0.05, 0.1), (0.05, 0.5), (5.0, 0.5))
SPECULATIVE_TTL_S = 2.0  # llm-d's speculativeTTL default
EVENT_REQUESTS = 600  # requests per slice of the event sweep (the first of each slice of the trace)
EVENT_REQUESTS_QUICK = 100


# --------------------------------------------------------------------------- every router at N = 8
def router_runs(runs, slices) -> dict:
    """``{label: (keys over slices at seed 0, keys over SEEDS on the first slice or None)}``."""
    out = {}
    for label, _, _, seeded in ROUTER_SETTINGS:
        by_slice = [runs.cluster(w, ROUTER_INSTANCES, "private", label, 0) for w in slices]
        by_seed = [runs.cluster(slices[0], ROUTER_INSTANCES, "private", label, s) for s in SEEDS] if seeded else None
        out[label] = (by_slice, by_seed)
    return out


def _idle(r) -> int:
    return sum(1 for c in r.requests_per_instance if c == 0)


def router_table(report, runs, keys: dict) -> dict:
    """The router table; returns ``{label: [(mean, std) TTFT p95, (mean, std) USD / 1k requests]}``
    over the slices, for the plot."""
    n = ROUTER_INSTANCES
    res = {label: runs.many(by_slice) for label, (by_slice, _) in keys.items()}
    rows = []
    for label, (_, by_seed) in keys.items():
        rs = res[label]
        seeds = runs.many(by_seed) if by_seed else None
        rows.append((label, mean_pm([r.gpu_hit_token_share for r in rs], ".1f", scale=100),
                     mean_pm([hit(r) for r in rs], ".1f", scale=100), mean_pm([r.ttft_p95 for r in rs], ".3f"),
                     mean_pm([r.load_imbalance for r in rs], ".2f"), mean_pm([r.queue_imbalance for r in rs], ".2f"),
                     mean_pm([_idle(r) for r in rs], ".1f"), *bill_columns(rs)[:2],
                     mean_pm([hit(r) for r in seeds], ".1f", scale=100) if seeds else "-",
                     mean_pm([r.ttft_p95 for r in seeds], ".3f") if seeds else "-"))
    report.table(
        f"Routers at N = {n} (private DRAM {TOTAL_CAPACITY // n // GiB} GiB per instance, no shared tier)",
        ["router", "GPU hit %", "hit ratio %", "TTFT p95 s", "requests max/mean", "queue max/mean", "idle instances",
         "USD / 1k req", "USD / M tok", f"hit % ({len(SEEDS)} seeds)", f"TTFT p95 s ({len(SEEDS)} seeds)"], rows,
        note=_router_note(res, keys, runs))
    return {label: [spread([r.ttft_p95 for r in rs]), spread([usd_per_k_requests(r) for r in rs])]
            for label, rs in res.items()}


def _same(a, b) -> bool:
    return all(x.requests_per_instance == y.requests_per_instance and x.ttft_p95 == y.ttft_p95 and hit(x) == hit(y)
               for x, y in zip(a, b))


def _router_note(res: dict, keys: dict, runs) -> str:
    hits = {k: mean_of(v, hit) for k, v in res.items()}
    p95 = {k: p95_s(v) for k, v in res.items()}
    cost = {k: mean_of(v, usd_per_k_requests) for k, v in res.items()}
    order = " > ".join(sorted(hits, key=lambda k: -hits[k]))
    best = min(p95, key=p95.get)
    cheapest = min(cost, key=cost.get)
    blind = "precise-prefix (load-blind ablation)"
    seed_sd = {k: spread([r.ttft_p95 for r in runs.many(s)])[1] for k, (_, s) in keys.items() if s}
    slice_sd = {k: spread([r.ttft_p95 for r in res[k]])[1] for k in seed_sd}
    seed_wider = [k for k in seed_sd if seed_sd[k] > slice_sd[k]]
    same = []
    if _same(res["kv-cost (Dynamo)"], res[AFFINITY]):
        same.append("kv-cost and precise-prefix (Dynamo balance) are the same rule with the same draws, and their rows are "
                    "identical run for run")
    if _same(res["session"], res["least-loaded"]):
        same.append("session equals least-loaded run for run: the conversation trace has no conversation ids, so the "
                    "session router sends every request to the least-loaded instance")
    return (
        "Measured, not assumed.  Each router runs with its peer's defaults (docs/cluster_routers.md): seed 0 on each "
        f"slice (the mean ± std columns: spread over the slices), and the routers that draw at random (ties, or "
        f"kv-cost's sample) also seeds {', '.join(map(str, SEEDS))} on the first slice (the last two columns: spread "
        "over seeds, '-' for the routers that draw nothing: round-robin, and least-loaded and session, whose ties go "
        f"to the lowest index by default).  Hit-ratio order: {order}.  Lowest p95 TTFT: {best} "
        f"({plain_number(p95[best])} s); cheapest per request: {cheapest}.  "
        f"{'; '.join(same) + '.  ' if same else ''}"
        f"The seeds move p95 TTFT more than the slices do for {len(seed_wider)} of the {len(seed_sd)} seeded routers"
        f"{' (' + ', '.join(seed_wider) + ')' if seed_wider else ''}.  "
        "Rules, in a line each: least-loaded: fewest waiting + running.  approx-prefix (smg, its command-line "
        "defaults): when the best match in the router's own memory of where it sent blocks exceeds 30 % of the "
        "request's blocks, the least loaded of the instances with that match (random ties), spilled to the "
        "least-loaded instance if its load exceeds both 1.5 x the fleet mean and the mean + 64; otherwise the "
        "least-loaded instance.  approx-prefix (sgl-router-2025): the least-loaded instance when the fleet is "
        "imbalanced (max - min load > 64 and max > 1.5 x min), else the best match above 30 %, else the instance "
        "with the fewest remembered blocks (the 'smallest tree').  precise-prefix (Dynamo balance), the default: "
        "the prefix each instance holds by the block index (fed exactly here), credited against its queued prefill "
        "and held KV blocks as NVIDIA Dynamo's KV router does.  The load-blind ablation (balance = 'none', no peer "
        "ships it) takes the longest held prefix, ties to the lower load and then at random: it left "
        f"{mean_of(res[blind], _idle):.1f} of {ROUTER_INSTANCES} instances idle on average (requests max/mean "
        f"{mean_of(res[blind], lambda r: r.load_imbalance):.2f}).  weighted: llm-d's scorers in [0, 1] (precise "
        "profile: index prefix 2, queue 1, KV utilisation 1; approximate profile, its code default: remembered "
        "prefix 3, queue 2, KV utilisation 2).  USD: the whole bill (GPUs and every tier) per thousand requests and "
        "per million prompt + output tokens.")


# --------------------------------------------------------------------------- KV events late and lost
def event_runs(runs, slices) -> dict:
    """``{(router, delay, drop, ttl): keys over slices}`` and ``{approx router: keys}``."""

    precise = {}
    for label in EVENT_ROUTERS:
        for delay, drop in EVENT_SETTINGS:
            for ttl in (None, SPECULATIVE_TTL_S):
                ev = EventStream(delay_s=delay, drop_rate=drop, speculative_ttl_s=ttl)
                precise[(label, delay, drop, ttl)] = [runs.cluster(w, ROUTER_INSTANCES, "private", label, 0, ev)
                                                      for w in slices]
    approx = {label: [runs.cluster(w, ROUTER_INSTANCES, "private", label, 0) for w in slices] for label in APPROX_ROUTERS}
    return {"precise": precise, "approx": approx}


def _short(label: str) -> str:
    return "Dynamo" if label.startswith("precise-prefix") else "llm-d"


def events_table(report, runs, keys: dict, slices) -> None:
    precise = {k: runs.many(v) for k, v in keys["precise"].items()}
    approx = {k: runs.many(v) for k, v in keys["approx"].items()}
    headers = ["delay s", "batches lost %"]
    for label in EVENT_ROUTERS:
        for ttl in (None, SPECULATIVE_TTL_S):
            tag = _short(label) + (" + spec." if ttl else "")
            headers += [f"{tag}: hit %", f"{tag}: TTFT p95 s"]
    rows = []
    for delay, drop in EVENT_SETTINGS:
        row = [plain_number(delay), plain_number(100 * drop)]
        for label in EVENT_ROUTERS:
            for ttl in (None, SPECULATIVE_TTL_S):
                rs = precise[(label, delay, drop, ttl)]
                row += [mean_pm([hit(r) for r in rs], ".1f", scale=100), mean_pm([r.ttft_p95 for r in rs], ".2f")]
        rows.append(row)
    n_req = slices[0].num_requests
    report.table(
        f"Precise vs approximate routing as KV events arrive late or get lost (N = {ROUTER_INSTANCES}, private DRAM, "
        f"mean ± std over {len(slices)} slices of {n_req:,} requests)",
        headers, rows, note=_events_note(precise, approx, slices))


def _events_note(precise: dict, approx: dict, slices) -> str:
    h, t = hit_points, p95_s
    exact, longest = EVENT_SETTINGS[0], max(d for d, p in EVENT_SETTINGS if p == 0)
    worst = max(EVENT_SETTINGS, key=lambda s: (s[1], s[0]))
    def idle(rs):
        return mean_of(rs, _idle)

    parts, reversed_ = [], []
    for label in EVENT_ROUTERS:
        base = precise[(label, *exact, None)]
        delayed = precise[(label, longest, 0.0, None)]
        lossy = precise[(label, *worst, None)]
        spec0 = precise[(label, *exact, SPECULATIVE_TTL_S)]
        specw = precise[(label, *worst, SPECULATIVE_TTL_S)]
        parts.append(
            f"{label}: hit ratio {h(base):.1f} % exact, {h(delayed):.1f} % with events {plain_number(longest)} s late, "
            f"{h(lossy):.1f} % with {plain_number(100 * worst[1])} % of batches lost {plain_number(worst[0])} s late "
            f"(p95 TTFT {t(base):.2f} -> {t(delayed):.2f} -> {t(lossy):.2f} s; idle instances {idle(base):.1f} -> "
            f"{idle(delayed):.1f} -> {idle(lossy):.1f}); with speculative indexing {h(spec0):.1f} % exact and "
            f"{h(specw):.1f} % at the worst stream (p95 TTFT {t(spec0):.2f} and {t(specw):.2f} s; idle instances "
            f"{idle(spec0):.1f} and {idle(specw):.1f})")
        if t(delayed) < 0.8 * t(base) and idle(delayed) < idle(base):
            reversed_.append(label)
    refs = []
    plain = {k: v for k, v in precise.items() if k[3] is None}
    for label, rs in approx.items():
        fewer_hits = sum(h(prs) < h(rs) for prs in plain.values())
        faster = sum(t(prs) < t(rs) for prs in plain.values())
        refs.append(f"{label} reaches {h(rs):.1f} % (p95 TTFT {t(rs):.2f} s); of the {len(plain)} precise rows without "
                    f"speculation, {fewer_hits} hit less and {faster} have a lower p95 TTFT")
    moved = max(abs(h(precise[(lab, d, 0.0, None)]) - h(precise[(lab, *exact, None)]))
                for lab in EVENT_ROUTERS for d, p in EVENT_SETTINGS if p == 0)
    late = (f"  Late events lowered the p95 TTFT of {', '.join(reversed_)} and left fewer instances idle: blocks "
            "indexed later leave the first requests of a shared prefix to the load scores, so several instances hold "
            "it before any is seen as its only holder (speculative indexing's effect, reversed)." if reversed_ else "")
    llmd = "weighted (llm-d precise)"
    piled = (llmd in EVENT_ROUTERS and mean_of(precise[(llmd, *exact, SPECULATIVE_TTL_S)], _idle) > 0
             and t(precise[(llmd, *exact, SPECULATIVE_TTL_S)]) > t(precise[(llmd, *exact, None)]))
    why = ("  Why speculative indexing hurts llm-d's profile here (idle instances, longer p95 TTFT): the chosen "
           "instance becomes at once the only holder of the request's first block; llm-d's precise prefix score is 0 "
           "for every instance without that block and 1 for the best holder, so that holder scores at least 2 "
           "(prefix weight 2) against at most 2 (queue 1 + KV utilisation 1) for any other, and later requests with "
           "that block follow it; without speculation the blocks appear only after prefill, by which time several "
           "instances hold them and the load scores decide among them." if piled else "")
    return (
        "KV events (kvmm.cluster.EventStream): each engine step's events are one batch (vLLM's publisher), applied "
        "`delay` after they are sent; a lost batch is lost whole (drop draws seeded 0); the index is what the "
        f"delivered batches built.  'spec.': llm-d's speculative indexing, the router's own choice indexed at once for "
        f"{plain_number(SPECULATIVE_TTL_S)} s (llm-d's default TTL) unless an event confirms it.  Slices: the first "
        f"{slices[0].num_requests:,} requests of each slice of the trace, so their rows are not those of the router "
        f"table.  Dynamo: precise-prefix with Dynamo's balance (kv-cost's rule); llm-d: weighted, precise profile.  "
        f"Without loss, delay moves a precise router's hit ratio by at most {moved:.1f} points.  " + ".  ".join(parts) +
        ".  The approximate routers read no index, so no stream moves them: " + "; ".join(refs) + "." + why + late)


# --------------------------------------------------------------------------- plot
def draw_routers(axes, routers: dict) -> None:
    """TTFT p95 and the whole bill per thousand requests per router: linear bars with the slices' std as
    error bars.  A bar far above the rest is cut at 3x the largest other (mean + std) and labelled
    with its value, so the other routers stay readable on a linear axis."""
    labels = list(routers)
    xs = list(range(len(labels)))
    ticks = [k.replace(" (", "\n(") for k in labels]
    for ax, i, what, colour in ((axes[0], 0, "TTFT p95 (s)", "tab:blue"),
                                (axes[1], 1, "USD / 1k requests (whole bill)", "tab:red")):
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
                                bbox={"facecolor": "white", "alpha": 0.9, "edgecolor": "none"})
        else:
            ax.set_ylim(bottom=0)
        ax.set_ylabel(what)
        ax.set_xticks(xs)
        ax.set_xticklabels(ticks, rotation=60, ha="right", fontsize=6)
        ax.grid(True, axis="y", alpha=0.3)
        ax.set_title(f"{what.split(' (')[0]} per router at N = {ROUTER_INSTANCES} (mean ± std over slices)")
