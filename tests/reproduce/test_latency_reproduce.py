"""The ``latency`` report section (kvmm/reproduce/latency.py): it runs in quick mode, its tables have
the rows and columns they promise, and its recompute-vs-load break-even agrees with a hand
computation written from docs/latency.md's formula and the published figures (not from the code's
coefficient array)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from kvmm.reproduce import SECTIONS
from kvmm.reproduce import latency as L
from kvmm.sim.latency import HARDWARE, ModelArch, Roofline, hardware
from kvmm.tiers import PRESETS, preset
from kvmm.tiers.spec import TierSpec
from tests.reproduce.report_helpers import markdown_table, run_quick_section


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory):
    return run_quick_section(tmp_path_factory, "latency")


def test_section_is_registered():
    assert ("latency", "kvmm.reproduce.latency") in SECTIONS


def test_decode_table_has_every_hardware_and_batch(quick_report):
    md, _ = quick_report
    headers, rows = markdown_table(md, "Decode step time (ms) vs context")
    assert headers[:2] == ["hardware", "batch"] and headers[2:8] == ["1K", "4K", "16K", "32K", "64K", "128K"]
    assert [(r[0], int(r[1])) for r in rows] == [(hw.name, b) for hw in HARDWARE.values() for b in L.BATCHES]
    h200 = next(r for r in rows if r[0] == "H200" and r[1] == "32")
    model = Roofline("llama-3.1-8b", "H200")
    assert float(h200[2]) == pytest.approx(1e3 * model.step_seconds([], [], [1024] * 32), rel=1e-3)
    assert h200[5].endswith("*") and not h200[2].endswith("*")  # 32 x 32K of KV exceeds the H200's pool, 32 x 1K does not
    for r in rows:  # a decode step never gets faster with more context
        ms = [float(c.rstrip(" *").replace(",", "")) for c in r[2:8]]
        assert ms == sorted(ms), r


def test_prefill_table_grows_with_the_context(quick_report):
    md, _ = quick_report
    headers, rows = markdown_table(md, f"Prefill chunk of {L.CHUNK:,} new tokens")
    assert headers[1] == "context 0" and len(rows) == len(HARDWARE)
    h100 = next(r for r in rows if r[0] == "H100")
    assert float(h100[1]) == pytest.approx(1e3 * Roofline("llama-3.1-8b", "H100").step_seconds([L.CHUNK], [0], []), rel=1e-3)
    for r in rows:
        ms = [float(c.replace(",", "")) for c in r[1:1 + len(L.CHUNK_CONTEXTS)]]
        assert ms == sorted(ms) and ms[-1] > 2 * ms[0], r  # quadratic attention: a late chunk costs much more


def test_break_even_tables_have_every_tier_and_setup(quick_report):
    md, report = quick_report
    labels = [L.setup_label(*s) for s in L.SETUPS]
    for kind in ("a standalone forward pass", "marginal"):
        headers, rows = markdown_table(md, f"Break-even prefix length (tokens) per tier preset, recompute = {kind}")
        assert headers == ["tier", "read GB/s", "latency us", *labels]
        assert [r[0] for r in rows] == list(PRESETS)
        for r in rows:
            assert all(re.fullmatch(r"always|n >= [\d,]+|never \(n <= [\d,]+\)|n <= [\d,]+( and n >= [\d,]+| only)", c)
                       for c in r[3:]), r
    headers, rows = markdown_table(md, "Break-even read bandwidth (GB/s)")
    assert len(rows) == 2 * len(L.SETUPS) and headers[2:] == [f"prefix {L._tokens(n)}" for n in L.BANDWIDTH_PREFIXES]
    assert "load(n) = latency + n x kv_bytes_per_token / read_bandwidth" in md  # the formula is stated


def test_the_step_time_plot_is_written(quick_report):
    pytest.importorskip("matplotlib")
    _, report = quick_report
    assert [p.name for p in report.figures] == ["report-quick-only-latency-latency_steps.png"]
    assert report.figures[0].stat().st_size > 1000


# --------------------------------------------------------------------------- by hand
def _hand_recompute(n: np.ndarray, *, marginal: bool) -> np.ndarray:
    """llama-3.1-8b prefill of n tokens at context 0 on one H100, from docs/latency.md's roofline:
    compute = (G n + Hp n (n + 1) / 2) / (peak x mfu_prefill) + R / (peak x mfu_decode), memory =
    (streamed weights x 2 bytes + kv x n) / bandwidth; standalone = max, marginal = compute."""
    arch, hw = ModelArch.named("llama-3.1-8b"), hardware("H100")
    # G: per layer q, k, v, o projections + three SwiGLU matrices, 2 FLOPs per multiply-add; plus the lm_head row
    h, inter, layers = arch.hidden_size, arch.intermediate_size, arch.num_layers
    q_dim, kv_dim = arch.num_attention_heads * arch.head_dim, arch.num_kv_heads * arch.head_dim
    g = 2 * layers * (h * q_dim + 2 * h * kv_dim + q_dim * h + 3 * h * inter)
    hp = 4 * layers * arch.num_attention_heads * arch.head_dim  # QK^T and AV of one query-key pair
    r = 2 * h * arch.vocab_size
    n = n.astype(np.float64)
    compute = (g * n + hp * n * (n + 1) / 2) / (hw.bf16_flops * hw.mfu_prefill) + r / (hw.bf16_flops * hw.mfu_decode)
    if marginal:
        return compute
    # weights read once: every layer's matrices and its two norms, the final norm and the (untied) lm_head; the
    # embedding table is a gather of a few rows; bf16
    weights = layers * (h * q_dim + 2 * h * kv_dim + q_dim * h + 3 * h * inter + 2 * h) + h + h * arch.vocab_size
    memory = (2 * weights + arch.kv_bytes_per_token() * n) / hw.hbm_bytes_per_s
    return np.maximum(compute, memory)


def _hand_break_even(tier: TierSpec, *, marginal: bool) -> int | None:
    n = np.arange(1, L.MAX_PREFIX + 1)
    load = tier.latency_s + n * 131072 / tier.read_bandwidth  # 32 layers x 2 x 8 KV heads x 128 x 2 bytes
    loses = np.flatnonzero(load >= _hand_recompute(n, marginal=marginal))
    return 1 if loses.size == 0 else (int(loses[-1]) + 2 if loses[-1] + 1 < L.MAX_PREFIX else None)


def test_hand_recompute_matches_the_sections_vectorised_roofline():
    n = np.array([1, 7, 512, 4096, 65536])
    model = Roofline("llama-3.1-8b", "H100")
    for marginal in (False, True):
        np.testing.assert_allclose(L.recompute_seconds(model, n, marginal=marginal), _hand_recompute(n, marginal=marginal),
                                   rtol=1e-9)
    assert L.recompute_seconds(model, n)[2] == pytest.approx(model.step_seconds([512], [0], []), rel=1e-12)


def test_break_even_of_the_dfs_tier_agrees_with_the_hand_computation(quick_report):
    dfs = preset("dfs")
    hand = _hand_break_even(dfs, marginal=True)
    # 500 us of latency against ~32 us of compute per recomputed token: loading wins from a few tokens on
    assert hand is not None and 2 < hand < 100
    assert L.break_even(dfs, "llama-3.1-8b", "H100", 1, marginal=True)["first"] == hand
    assert _hand_break_even(dfs, marginal=False) == 1  # a standalone pass reads 15 GB of weights: always slower
    md, _ = quick_report
    _, rows = markdown_table(md, "Break-even prefix length (tokens) per tier preset, recompute = marginal")
    assert next(r for r in rows if r[0] == "dfs")[3] == f"n >= {hand:,}"
    _, rows = markdown_table(md, "Break-even prefix length (tokens) per tier preset, recompute = a standalone")
    assert next(r for r in rows if r[0] == "dfs")[3] == "always"


def test_break_even_labels_for_a_tier_that_never_wins():
    slow = TierSpec("tape", capacity_bytes=1 << 50, read_bandwidth=1e9, write_bandwidth=1e9, latency_s=0.0)
    # 131 us per token of KV at 1 GB/s vs at most ~110 us per token to recompute up to 128K: never
    assert _hand_break_even(slow, marginal=True) is None
    out = L.break_even(slow, "llama-3.1-8b", "H100", 1, marginal=True)
    assert out["first"] is None and out["label"] == f"never (n <= {L.MAX_PREFIX:,})"
    # standalone: the weights' floor makes a short prefix cheaper to load, a longer one not
    out = L.break_even(slow, "llama-3.1-8b", "H100", 1)
    assert out["short"] > 0 and out["label"].startswith("n <= ")
