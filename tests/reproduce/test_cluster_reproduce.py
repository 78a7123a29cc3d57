"""The ``cluster`` report section (kvmm/reproduce/cluster.py) runs in quick mode and writes its tables.

Checks the tables' rows and columns exist and that every number in them is finite; the paper's
figures are not asserted (the section measures them).
"""

from __future__ import annotations

import math
import re

import pytest

from kvmm.reproduce import SECTIONS
from tests.reproduce.report_helpers import markdown_table, run_quick_section


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory):
    return run_quick_section(tmp_path_factory, "cluster")


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?|nan|inf", re.IGNORECASE)


def _numbers(cell: str) -> list[float]:
    return [float(x) for x in _NUMBER.findall(cell)]


def _assert_finite_fixed(rows, columns):
    for row in rows:
        for c in columns:
            values = _numbers(row[c])
            assert values, f"no number in cell {row[c]!r} of row {row[0]!r}"
            assert all(math.isfinite(v) for v in values), row
            assert "e+" not in row[c] and "e-" not in row[c], f"scientific notation in {row[c]!r}"


def test_section_is_registered():
    assert ("cluster", "kvmm.reproduce.cluster") in SECTIONS


def _spread_cells(rows, columns):
    """Every cell of ``columns`` is "mean ± std"."""
    return all("±" in row[c] for row in rows for c in columns)


def test_shared_vs_private_under_round_robin_and_the_affinity_router(quick_report):
    from kvmm.reproduce._cluster_common import AFFINITY

    md, _ = quick_report
    headers, rows = markdown_table(md, "Shared pool vs private tiers")
    assert headers == ["instances", "router", "lower tier", "GPU hit %", "hit ratio %", "TTFT p50 s", "TTFT p95 s",
                       "USD / 1k req", "USD / M tok", "split: USD / M in", "split: USD / M out"]
    pairs = [(int(r[0]), r[1], r[2].split(" ")[0]) for r in rows]
    # the same affinity router for both designs at every N, not only round-robin
    for n in (4, 8, 16):
        for router in ("round-robin", AFFINITY):
            assert (n, router, "private") in pairs and (n, router, "shared") in pairs, (n, router)
    stores = [r for r in rows if r[2].startswith("Mooncake-like store")]
    assert [(r[0], r[1]) for r in stores] == [("8", AFFINITY)] * 2
    assert [r[2].split(", ")[-1] for r in stores] == ["1 replica", "2 replicas"]
    _assert_finite_fixed(rows, range(3, len(headers)))
    assert _spread_cells(rows, range(3, len(headers)))  # error bars on every number
    whole, split_in, split_out = (headers.index(h) for h in ("USD / M tok", "split: USD / M in", "split: USD / M out"))
    for r in rows:  # the whole bill per token is the token-weighted mix of the split: between its two prices
        lo, hi = sorted((_numbers(r[split_in])[0], _numbers(r[split_out])[0]))
        assert lo <= _numbers(r[whole])[0] <= hi, r


def test_the_cost_sentences_say_what_is_true(quick_report):
    from kvmm.tiers.spec import PRESETS

    md, _ = quick_report
    assert "higher than local DRAM" not in md and "Its price per GiB-hour is higher" not in md
    if PRESETS["pooled-dram"].usd_per_gib_hour == PRESETS["dram"].usd_per_gib_hour:
        assert "pooled-dram is priced as dram" in md
    # host DRAM bundled in the GPU VM's price: billed as an explicit extra, and what not billing it again gives
    assert "explicit extra" in md and "not billed again" in md
    assert re.search(r"counting the first 200 GiB of each node's KV DRAM as the VM's own would change USD / 1k req "
                     r"private [\d.]+ -> [\d.]+, shared [\d.]+ -> [\d.]+", md)


def test_bundled_dram_credit_by_hand():
    from types import SimpleNamespace

    from kvmm.reproduce._cluster_common import bundled_dram_credit

    h, price = 2.0, 0.004
    # 8 private DRAM tiers of 256 GiB: 200 GiB of each is the VM's; the CXL staging tier is not host DRAM
    cost = SimpleNamespace(duration_s=3600 * h, tier_names=("cxl", "dram"), tier_counts=(8, 8),
                           tier_usd_per_gib_hour=(price, price), tier_gib_hours=(8 * 100 * h, 8 * 256 * h))
    assert bundled_dram_credit(SimpleNamespace(cost=cost), 8) == pytest.approx(price * 8 * 200 * h)
    # one 2 TiB pool over 16 nodes: 128 GiB of each node's DRAM, all of it inside the bundle
    cost = SimpleNamespace(duration_s=3600 * h, tier_names=("pooled-dram",), tier_counts=(1,),
                           tier_usd_per_gib_hour=(price,), tier_gib_hours=(2048 * h,))
    assert bundled_dram_credit(SimpleNamespace(cost=cost), 16) == pytest.approx(price * 2048 * h)


def test_router_table_has_every_router_with_spread_over_slices_and_seeds(quick_report):
    from kvmm.reproduce._cluster_common import ROUTER_SETTINGS

    md, _ = quick_report
    headers, rows = markdown_table(md, "Routers at N = 8")
    assert headers == ["router", "GPU hit %", "hit ratio %", "TTFT p95 s", "requests max/mean", "queue max/mean",
                       "idle instances", "USD / 1k req", "USD / M tok", "hit % (3 seeds)", "TTFT p95 s (3 seeds)"]
    names = [r[0] for r in rows]
    assert names == ["round-robin", "least-loaded", "session", "approx-prefix (smg)", "approx-prefix (sgl-router-2025)",
                     "precise-prefix (Dynamo balance)", "precise-prefix (load-blind ablation)", "kv-cost (Dynamo)",
                     "weighted (llm-d precise)", "weighted (llm-d approximate)"]
    assert not any("load_weight" in n for n in names)
    _assert_finite_fixed(rows, range(1, 9))
    assert _spread_cells(rows, range(1, 9))
    seeded = {label for label, _, _, s in ROUTER_SETTINGS if s}
    for r in rows:  # spread over seeds for the routers that draw at random, a dash for the others
        if r[0] in seeded:
            assert "±" in r[-1] and "±" in r[-2], r
        else:
            assert r[-1] == r[-2] == "-", r
    imbalance = headers.index("requests max/mean")
    assert all(_numbers(r[imbalance])[0] >= 1.0 for r in rows)  # max / mean is never below 1
    by_name = {r[0]: r for r in rows}
    # kv-cost is Dynamo's rule, the balance precise-prefix takes by default: the same decisions, the same row
    assert by_name["kv-cost (Dynamo)"][1:] == by_name["precise-prefix (Dynamo balance)"][1:]
    assert "balance = 'none'" in md and "smallest tree" in md and "1.5 x the fleet mean and the mean + 64" in md


def test_router_configs_are_the_labelled_ones():
    from kvmm.reproduce._cluster_common import cluster_config, window
    from kvmm.sim.simulator import resolve_trace

    w = window(resolve_trace("conversation", None), 0, 10)
    _, cfg = cluster_config(w, 8, "private", "precise-prefix (load-blind ablation)", seed=2)
    assert cfg.cluster.router == "precise-prefix" and dict(cfg.cluster.router_params) == {"balance": "none", "seed": 2}
    _, cfg = cluster_config(w, 8, "private", "precise-prefix (Dynamo balance)", seed=1)
    assert dict(cfg.cluster.router_params) == {"seed": 1}  # the default balance: Dynamo's
    _, cfg = cluster_config(w, 8, "private", "approx-prefix (sgl-router-2025)")
    assert dict(cfg.cluster.router_params) == {"rule": "sgl-router-2025", "seed": 0}
    _, cfg = cluster_config(w, 8, "private", "weighted (llm-d approximate)")
    assert dict(cfg.cluster.router_params) == {"profile": "approximate", "seed": 0}
    key, cfg = cluster_config(w, 8, "private", "least-loaded", seed=5)
    assert dict(cfg.cluster.router_params) == {} and key[5] == 0  # no draws: the seed is not passed and runs once
    _, cfg = cluster_config(w, 8, "store r2", "round-robin")
    assert cfg.cluster.store[0].replicas == 2 and cfg.cluster.store[0].watermark == 0.9 and cfg.tiers == ()


def test_events_table_shape(quick_report):
    from kvmm.reproduce._cluster_routing import EVENT_SETTINGS

    md, _ = quick_report
    headers, rows = markdown_table(md, "Precise vs approximate routing as KV events arrive late or get lost")
    assert headers[:2] == ["delay s", "batches lost %"]
    assert headers[2:] == [f"{who}{spec}: {m}" for who in ("Dynamo", "llm-d") for spec in ("", " + spec.")
                           for m in ("hit %", "TTFT p95 s")]
    assert [(float(r[0]), float(r[1])) for r in rows] == [(d, 100 * p) for d, p in EVENT_SETTINGS]
    assert {d for d, _ in EVENT_SETTINGS} >= {0.0, 0.05, 0.5, 5.0} and {p for _, p in EVENT_SETTINGS} >= {0.0, 0.1, 0.5}
    _assert_finite_fixed(rows, range(2, len(headers)))
    assert _spread_cells(rows, range(2, len(headers)))
    # the approximate routers are the reference, and the section says what it finds
    assert "approx-prefix (smg) reaches" in md and "weighted (llm-d approximate) reaches" in md
    assert "**What this section finds**" in md


def test_fillmarkdown_table(quick_report):
    md, _ = quick_report
    headers, rows = markdown_table(md, "Write-through vs write-back")
    assert "DRAM demoted blocks" in headers and "pool demoted blocks" in headers and "pool block hits" in headers
    assert [r[0].split(",")[0] for r in rows] == ["DRAM write-through", "DRAM write-back inclusive",
                                                  "DRAM write-back inclusive", "DRAM write-back exclusive"]
    _assert_finite_fixed(rows, range(1, len(headers)))
    demoted = headers.index("DRAM demoted blocks")
    assert _numbers(rows[0][demoted])[0] == 0.0  # write-through demotes nothing


def test_parastormarkdown_table(quick_report):
    md, _ = quick_report
    headers, rows = markdown_table(md, "ParaStor / Mooncake claim")
    assert [r[0].split(" ")[0] for r in rows] == ["no", "DFS", "DRAM"]
    assert "vs no offload" in headers and "vs DRAM pool" in headers
    _assert_finite_fixed(rows, range(1, len(headers)))
    vs_none = headers.index("vs no offload")
    assert _numbers(rows[0][vs_none])[:2] == [1.0, 0.0]  # the baseline against itself
    assert "16x" in md and "80 %" in md  # the claim is stated next to what kvmm measures


def test_figures_are_written_when_matplotlib_is_installed(quick_report):
    pytest.importorskip("matplotlib")
    md, report = quick_report
    names = sorted(p.name for p in report.figures)
    assert names == ["report-quick-only-cluster-cluster-routers.png", "report-quick-only-cluster-cluster-shared-vs-private.png"]
    assert all(p.is_file() and p.stat().st_size > 0 for p in report.figures)
    assert all(f"]({n})" in md for n in names)
