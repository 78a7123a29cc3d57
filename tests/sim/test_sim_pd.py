"""PD disaggregation: hand-derived hand-off timings, conservation, link presets, CLI and report."""

from __future__ import annotations

import io

import numpy as np
import pytest

from kvmm.cli import main
from kvmm.errors import BadInputError
from kvmm.sim import PDConfig, SimConfig, simulate
from kvmm.tiers.spec import LINK_PRESETS, TierSpec, link_preset
from tests.sim.sim_helpers import TOY_MODEL, trace

# 1 MB/s, 10 ms: a 1024-token prompt (1,024,000 bytes) takes 1.024 s + 10 ms to hand off
TOY_LINK = TierSpec("toy-link", 0, 1e6, 1e6, 0.01)
ONE = trace([(0, 1024, 3, [0, 1])])


def run_one(overlap):
    return simulate(SimConfig(workload=ONE, load=None, model=TOY_MODEL, gpu_kv_bytes=10**8, tiers=(),
                              pd=PDConfig(1, 1, TOY_LINK, overlap)))


def test_serial_hand_off_timings():
    r = run_one(False)
    # prefill 1.024 s (first token), copy 1.024 s + 10 ms, then 2 decode steps of 10 ms
    assert r.ttft_p50 == pytest.approx(1.024)
    assert r.tpot_p50 == pytest.approx((1.024 + 0.01 + 0.02) / 2)
    assert r.kv_bytes_transferred == 1_024_000
    assert r.link_busy_share == pytest.approx(1.024 / (2.048 + 0.01 + 0.02))


def test_layerwise_overlap_hides_all_but_the_last_layer():
    r = run_one(True)
    # the copy runs during the prefill: it ends 1/32 of the copy after the step (32 layers)
    assert r.ttft_p50 == pytest.approx(1.024)
    assert r.tpot_p50 == pytest.approx((1.024 / 32 + 0.01 + 0.02) / 2)


def test_a_run_conserves_requests_and_bytes():
    cfg = SimConfig(workload="conversation", max_requests=300, load=0.7, tiers=(), pd=PDConfig(5, 1, "rdma400"))
    r = simulate(cfg)
    from kvmm.sim.simulator import resolve_trace

    t = resolve_trace("conversation", 300)
    multi = t.output_length > 1
    assert r.requests == 300 and r.policy == "pd"
    assert r.kv_bytes_transferred == int((np.maximum(t.input_length, 1)[multi]).sum()) * 32 * 8 * 128 * 2 * 2
    assert 0 < r.ttft_p50 <= r.ttft_p95 and 0 < r.tpot_p50 <= r.tpot_p95 and 0 < r.link_busy_share < 1
    assert simulate(cfg) == r  # deterministic
    # a slower link is busier and never makes the second token come sooner
    slow = simulate(cfg.with_(pd=PDConfig(5, 1, "cross-dc")))
    assert slow.link_busy_share > r.link_busy_share and slow.tpot_p95 >= r.tpot_p95


def test_link_presets_cite_their_figures():
    assert {"nvlink", "supernode", "rdma200", "rdma400", "cross-dc"} <= set(LINK_PRESETS)
    assert link_preset("rdma400").read_bandwidth == 50e9 and link_preset("rdma200").read_bandwidth == 25e9
    assert all(spec.source for spec in LINK_PRESETS.values())
    with pytest.raises(BadInputError, match="unknown link preset"):
        PDConfig(1, 1, "carrier-pigeon")
    with pytest.raises(BadInputError):
        PDConfig(0, 1)


def test_cli_pd(capsys):
    assert main(["simulate", "--requests", "40", "--pd", "2x1:nvlink", "--no-progress"]) == 0
    assert "pd 2x1 nvlink" in capsys.readouterr().out
    assert main(["simulate", "--requests", "5", "--pd", "2by1:nvlink", "--no-progress"]) == 2
    assert "2by1" in capsys.readouterr().err
    assert main(["simulate", "--requests", "5", "--pd", "2x1:wifi", "--no-progress"]) == 2
    assert "'wifi'" in capsys.readouterr().err


def test_pd_report_section_quick(tmp_path):
    from kvmm.report import Report
    from kvmm.reproduce.pd import reproduce

    rep = Report(out=tmp_path, quick=True, progress_enabled=False, stream=io.StringIO())
    reproduce(rep)
    text = "\n".join(rep.chunks)
    assert "| colocated |" in text and "cross-dc (layer-wise)" in text and "rdma400 |" in text
    pytest.importorskip("matplotlib")
    assert "![pd_latency](report-quick-pd_latency.png)" in text  # the TTFT / TPOT per link plot
    assert (tmp_path / "report-quick-pd_latency.png").stat().st_size > 1000
