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
staging are not part of this comparison (the colocated runs have none either).  The runs use the
physical clock; colocated and two links are rerun on the old constant-rate clock for the "what
the physical clock moved" table (:mod:`kvmm.reproduce._clock`), and the table's note says in one
sentence whether p95 TPOT gets worse than colocated on every link.
"""

from __future__ import annotations

import numpy as np

from kvmm.reproduce._clock import MOVED_HEADERS, clock_text, moved_row, old_clock, old_clock_text
from kvmm.sim.config import GiB, PDConfig, SimConfig
from kvmm.sim.load import decode_seconds, offered_seconds
from kvmm.sim.serving import resolve_serving
from kvmm.sim.simulator import resolve_trace, simulate
from kvmm.tiers.spec import LINK_PRESETS

INSTANCES = 6
LOAD = 0.7
MODEL = "llama-3.1-8b"
#: the links whose runs are repeated on the old clock (with colocated), for "what the physical clock moved"
MOVED_LINKS = ("rdma400", "cross-dc")


def split(trace, cfg: SimConfig) -> tuple[float, int, int]:
    """Prefill's share of the offered work under ``cfg``'s clock, and the P:D split it gives."""
    m = resolve_serving(cfg.with_(workload=trace))
    prefill_share = 1.0 - decode_seconds(trace, m) / offered_seconds(trace, m)
    p = min(INSTANCES - 1, max(1, round(prefill_share * INSTANCES)))
    return prefill_share, p, INSTANCES - p


def configs(trace, base: SimConfig, links) -> list[tuple[str, str, SimConfig]]:
    """(serving, link, config) of colocated and of each link with and without layer-wise overlap."""
    _, p, d = split(trace, base)
    out = [("colocated", "-", base.with_(instances=INSTANCES))]
    for name in links:
        for overlap in (True, False):
            out.append((f"{p}P x {d}D", f"{name}{' (layer-wise)' if overlap else ''}",
                        base.with_(pd=PDConfig(p, d, name, overlap))))
    return out


def reproduce(report) -> None:
    quick = report.quick
    n = 300 if quick else 2000
    links = ("rdma400", "cross-dc") if quick else tuple(LINK_PRESETS)
    trace = resolve_trace("conversation", n)
    base = SimConfig(workload=trace, load=LOAD, model=MODEL, tiers=())
    prefill_share, p, d = split(trace, base)

    report.heading("PD disaggregation: colocated vs prefill/decode instances over each link")
    report.text(
        f"Mooncake conversation trace, first {n} requests, {INSTANCES} GPUs, load {LOAD} over all of them.  Prefill is "
        f"{prefill_share:.0%} of the offered work on this clock, so the disaggregated runs use {p} prefill + {d} decode "
        "instances.  Prefill instances keep a prefix cache (least-loaded routing, no cache affinity); the whole "
        "prompt KV crosses the link to the least-loaded decode instance; one FIFO ingress link per decode "
        "instance; the first token comes from the prefill instance.  TPOT includes the hand-off.  Link figures "
        "and their sources: kvmm/tiers/spec.py LINK_PRESETS (bandwidths nominal, latencies partly assumed).  "
        + clock_text(base))
    rows, results = [], []
    with report.progress(len(links) * 2 + 1, "pd simulations") as bar:
        for label, link, cfg in configs(trace, base, links):
            r = simulate(cfg)
            results.append((label if link == "-" else link, r))
            rows.append((label, link, round(r.ttft_p50, 3), round(r.ttft_p95, 3), round(1000 * r.tpot_p50, 1),
                         round(1000 * r.tpot_p95, 1), r.max_running, round(r.kv_bytes_transferred / GiB, 1),
                         f"{100 * r.link_busy_share:.1f} %", round(r.output_tokens_per_s, 1)))
            bar.update(1)
    colocated = results[0][1]
    worse = [name for name, r in results[1:] if r.tpot_p95 > colocated.tpot_p95]
    better_ttft = [name for name, r in results[1:] if r.ttft_p95 < colocated.ttft_p95]
    report.table(
        "Colocated vs disaggregated serving (same arrivals, same GPUs)",
        ["serving", "link", "TTFT p50 s", "TTFT p95 s", "TPOT p50 ms", "TPOT p95 ms", "largest decode batch",
         "KV over links GiB", "busiest link busy", "output tok/s"], rows,
        note=f"{_verdict(worse, better_ttft, len(results) - 1, d)}  Disaggregation takes prefill chunks out of the "
             "decode steps (TTFT), at the price of moving every prompt's KV and of batching every decode on "
             f"{d} instance{'s' if d > 1 else ''}, whose steps read all their sequences' KV.  The cross-datacenter "
             "path (20 ms, 100 Gb/s assumed) keeps its link busy and adds its latency to every second token.")
    report.figure("pd_latency", lambda axes: _draw_latency(axes, results), size=(9.0, 1.6 + 0.42 * len(results)), ncols=2)
    _moved(report, trace, base, results, quick)


def _verdict(worse: list, better_ttft: list, total: int, d: int) -> str:
    """The table's conclusion in two short sentences."""
    tpot = ("p95 TPOT is worse than colocated on every link." if len(worse) == total else
            f"p95 TPOT is worse than colocated on {len(worse)} of {total} set-ups ({', '.join(worse) or 'none'}).")
    ttft = ("p95 TTFT is better on every link." if len(better_ttft) == total else
            f"p95 TTFT is better on {len(better_ttft)} of {total} set-ups.")
    return f"{tpot}  {ttft}"


def _moved(report, trace, base: SimConfig, results: list, quick: bool) -> None:
    """Colocated and :data:`MOVED_LINKS` (layer-wise) rerun on the old clock."""
    old_base = old_clock(base)
    links = MOVED_LINKS[:1] if quick else MOVED_LINKS
    new = dict(results)
    _, p_old, d_old = split(trace, old_base)
    rows = []
    for label, link, cfg in configs(trace, old_base, links):
        if link != "-" and "layer-wise" not in link:
            continue
        r_old, r_new = simulate(cfg), new[label if link == "-" else link]
        name = label if link == "-" else link
        rows += [moved_row(name, "TTFT p95 s", r_old.ttft_p95, r_new.ttft_p95),
                 moved_row(name, "TPOT p50 ms", r_old.tpot_p50, r_new.tpot_p50, ".1f", scale=1000),
                 moved_row(name, "TPOT p95 ms", r_old.tpot_p95, r_new.tpot_p95, ".1f", scale=1000)]
    _, p_new, d_new = split(trace, base)
    report.table(
        "PD: what the physical clock moved (same arrivals, one run each)", MOVED_HEADERS, rows,
        note=f"{old_clock_text()}  P:D from each clock's work split: {p_old}P x {d_old}D on the old clock, {p_new}P x "
             f"{d_new}D on the physical one.  Both clocks rescale the arrivals to load {LOAD} by their own work estimate.")


def _draw_latency(axes, results) -> None:
    """TTFT (s) and TPOT (ms), p50 and p95, one bar pair per serving set-up (colocated, then each
    link with and without layer-wise overlap)."""
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
