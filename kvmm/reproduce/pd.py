"""Report section "pd": colocated vs prefill/decode-disaggregated serving over each link preset.

The seeds (Biren PD in llm-d, Infinigence's cross-cluster PDD, supernode pooling) move the
prefill -> decode KV hand-off from inside one GPU to NVLink, a supernode's unified bus, RDMA and
finally a 4000 km Ethernet path.  The same arrivals (the bundled Mooncake conversation trace,
rescaled to one load over the same number of GPUs) are served:

* colocated: N instances, each prefilling and decoding (continuous batching, prefix caching),
  requests dealt round-robin;
* disaggregated: P prefill + D decode instances (P + D = N), P:D chosen from the trace's work
  split (prefill of never-seen tokens vs decode at a full batch), over each link preset, with and
  without layer-wise overlap of the transfer.

The trace's arrival times are deterministic (no randomness: one run per cell).  Lower tiers and
staging are not part of this comparison (the colocated runs have none either).
"""

from __future__ import annotations

from kvmm.sim.config import GiB, PDConfig, SimConfig
from kvmm.sim.load import decode_seconds, offered_seconds
from kvmm.sim.serving import resolve_serving
from kvmm.sim.simulator import resolve_trace, simulate
from kvmm.tiers.spec import LINK_PRESETS

INSTANCES = 6
LOAD = 0.7
MODEL = "llama3-8b"


def reproduce(report) -> None:
    quick = report.quick
    n = 300 if quick else 2000
    links = ("rdma400", "cross-dc") if quick else tuple(LINK_PRESETS)
    trace = resolve_trace("conversation", n)
    m = resolve_serving(SimConfig(workload=trace, model=MODEL))
    prefill_share = 1.0 - decode_seconds(trace, m) / offered_seconds(trace, m)
    p = min(INSTANCES - 1, max(1, round(prefill_share * INSTANCES)))
    d = INSTANCES - p

    report.heading("PD disaggregation: colocated vs prefill/decode instances over each link")
    report.text(
        f"Mooncake conversation trace, first {n} requests, {MODEL} (rates assumed, kvmm/sim/models.py), "
        f"{INSTANCES} GPUs with {96} GiB of KV pool each, load {LOAD} over all of them.  Prefill is "
        f"{prefill_share:.0%} of the offered work, so the disaggregated runs use {p} prefill + {d} decode "
        "instances.  Prefill instances keep a prefix cache (least-loaded routing, no cache affinity); the whole "
        "prompt KV crosses the link to the least-loaded decode instance; one FIFO ingress link per decode "
        "instance; the first token comes from the prefill instance.  TPOT includes the hand-off.  Link figures "
        "and their sources: kvmm/tiers/spec.py LINK_PRESETS (bandwidths nominal, latencies partly assumed).")
    configs = [("colocated", "-", SimConfig(workload=trace, load=LOAD, model=MODEL, instances=INSTANCES, tiers=()))]
    for name in links:
        for overlap in (True, False):
            configs.append((f"{p}P x {d}D", f"{name}{' (layer-wise)' if overlap else ''}",
                            SimConfig(workload=trace, load=LOAD, model=MODEL, tiers=(), pd=PDConfig(p, d, name, overlap))))
    rows, results = [], []
    with report.progress(len(configs), "pd simulations") as bar:
        for label, link, cfg in configs:
            r = simulate(cfg)
            results.append((label if link == "-" else link, r))
            rows.append((label, link, round(r.ttft_p50, 3), round(r.ttft_p95, 3), round(1000 * r.tpot_p50, 1),
                         round(1000 * r.tpot_p95, 1), round(r.kv_bytes_transferred / GiB, 1), f"{100 * r.link_busy_share:.1f} %",
                         round(r.output_tokens_per_s, 1)))
            bar.update(1)
    report.table(
        "Colocated vs disaggregated serving (same arrivals, same GPUs)",
        ["serving", "link", "TTFT p50 s", "TTFT p95 s", "TPOT p50 ms", "TPOT p95 ms", "KV over links GiB",
         "busiest link busy", "output tok/s"], rows,
        note="Disaggregation removes prefill/decode interference (colocated decode steps wait for prefills in the "
             "same step: TPOT), at the price of moving every prompt's KV.  Over NVLink, a supernode bus or RDMA the "
             "hand-off is a small share of a decode step; the cross-datacenter path (20 ms, 100 Gb/s assumed) "
             "keeps its link busy and adds its latency to every request's second token.")
    report.figure("pd_latency", lambda axes: _draw_latency(axes, results), size=(9.0, 1.6 + 0.42 * len(results)), ncols=2)


def _draw_latency(axes, results) -> None:
    """TTFT (s) and TPOT (ms), p50 and p95, one bar pair per serving set-up (colocated, then each
    link with and without layer-wise overlap)."""
    import numpy as np

    labels = [name for name, _ in results]
    y = np.arange(len(labels))
    panels = ((axes[0], "TTFT (s)", lambda r: (r.ttft_p50, r.ttft_p95)),
              (axes[1], "TPOT (ms)", lambda r: (1000 * r.tpot_p50, 1000 * r.tpot_p95)))
    for ax, what, values in panels:
        p50, p95 = zip(*(values(r) for _, r in results))
        ax.barh(y - 0.2, p50, 0.4, label="p50")
        ax.barh(y + 0.2, p95, 0.4, label="p95")
        ax.set_yticks(y, labels if ax is axes[0] else [""] * len(labels), fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel(what)
        ax.grid(True, axis="x", alpha=0.3)
        ax.set_title(f"{what.split()[0]} per link (colocated first)")
    axes[1].legend(fontsize=8)
