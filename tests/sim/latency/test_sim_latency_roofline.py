"""Roofline against the naive reference written from docs/latency.md, the properties a step time
must have (monotone in work, KV-bound decode, MoE, tensor parallelism, fp8), ConstantRate against
the simulator's ModelSpec, and the LatencyModel Protocol."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from kvmm.errors import BadInputError, KvmmError
from kvmm.sim.latency import (
    COEF_LEN,
    FEATURES,
    HARDWARE,
    ConstantRate,
    Fitted,
    LatencyModel,
    ModelArch,
    Roofline,
    step_features,
)
from kvmm.sim.models import MODELS
from kvmm.testing.models import latency as naive

NAMES = sorted(ModelArch.names())


def valid_tp(name: str, tp: int) -> bool:
    try:
        ModelArch.named(name).check_tp(tp)
    except BadInputError:
        return False
    return True


steps = st.tuples(
    st.lists(st.tuples(st.integers(1, 1500), st.integers(0, 40_000)), max_size=3),
    st.lists(st.integers(0, 60_000), max_size=48),
)


@given(st.sampled_from(NAMES), st.sampled_from(sorted(HARDWARE)), st.sampled_from([1, 2, 4, 8]),
       st.sampled_from(["bf16", "fp8"]), st.sampled_from(["bf16", "fp8"]), steps,
       st.floats(0.0, 1e-3), st.sampled_from([None, 0.0, 2e-5]))
def test_roofline_matches_the_naive_reference(name, hw_name, tp, weights, kv, step, overhead, allreduce):
    assume(valid_tp(name, tp))
    chunks, decodes = step
    model = Roofline(name, hw_name, tp, weight_dtype=weights, kv_dtype=kv, step_overhead_s=overhead,
                     allreduce_latency_s=allreduce)
    new, ctx = [n for n, _ in chunks], [c for _, c in chunks]
    got = model.step_seconds(new, ctx, decodes)
    want = naive.step_seconds(model.arch, HARDWARE[hw_name], tp, new, ctx, decodes,
                              weight_bytes=1 if weights == "fp8" else 2, kv_bytes=1 if kv == "fp8" else 2,
                              step_overhead_s=overhead, allreduce_latency_s=allreduce)
    assert math.isclose(got, want, rel_tol=1e-9), (got, want)
    assert isinstance(got, float)


@st.composite
def grow(draw, step):
    """The step and a copy with one more token, context token, chunk or decode."""
    chunks, decodes = [list(c) for c in step[0]], list(step[1])
    more_chunks, more_decodes = [list(c) for c in chunks], list(decodes)
    kinds = ["chunk", "decode"] + (["token", "chunk_context"] if chunks else []) + (["decode_context"] if decodes else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "chunk":
        more_chunks.append([draw(st.integers(1, 500)), draw(st.integers(0, 5000))])
    elif kind == "decode":
        more_decodes.append(draw(st.integers(0, 5000)))
    elif kind == "token":
        more_chunks[draw(st.integers(0, len(chunks) - 1))][0] += draw(st.integers(1, 64))
    elif kind == "chunk_context":
        more_chunks[draw(st.integers(0, len(chunks) - 1))][1] += draw(st.integers(1, 64))
    else:
        more_decodes[draw(st.integers(0, len(decodes) - 1))] += draw(st.integers(1, 64))
    as_args = lambda cs, ds: ([c[0] for c in cs], [c[1] for c in cs], ds)  # noqa: E731
    return as_args(chunks, decodes), as_args(more_chunks, more_decodes)


@st.composite
def latency_models(draw):
    if draw(st.booleans()):
        name = draw(st.sampled_from(NAMES))
        tp = draw(st.sampled_from([1, 2, 8]))
        assume(valid_tp(name, tp))
        return Roofline(name, draw(st.sampled_from(sorted(HARDWARE))), tp,
                        weight_dtype=draw(st.sampled_from(["bf16", "fp8"])), kv_dtype=draw(st.sampled_from(["bf16", "fp8"])))
    beta = draw(st.lists(st.one_of(st.just(0.0), st.floats(1e-12, 1e-2)), min_size=6, max_size=6))
    return Fitted(draw(st.floats(0.0, 1e-2)), beta)


@given(latency_models(), steps.flatmap(grow))
def test_step_time_never_decreases_when_work_is_added(model, pair):
    before, after = pair
    assert model.step_seconds(*after) >= model.step_seconds(*before)


def test_decode_time_grows_with_context_llama_8b_on_h100():
    model = Roofline("llama-3.1-8b", "H100")
    short, long = model.step_seconds([], [], [1024]), model.step_seconds([], [], [32 * 1024])
    # one sequence is memory-bound: the 32K context adds 31K tokens x 128 KiB of KV reads
    extra = 31 * 1024 * 131072 / HARDWARE["H100"].hbm_bytes_per_s
    assert long > short * 1.2
    assert math.isclose(long - short, extra, rel_tol=1e-9)


def test_moe_reads_fewer_weight_bytes_than_its_dense_equivalent():
    moe = ModelArch.named("qwen3-30b-a3b")
    # the same parameters as one dense MLP per layer: all experts' weights read on every step
    dense = replace(moe, name="dense-equivalent", n_routed_experts=0, experts_per_token=0, moe_intermediate_size=0,
                    n_shared_experts=0, moe_layer_indices=(), router_bias=False,
                    intermediate_size=moe.n_routed_experts * moe.moe_intermediate_size)
    assert abs(dense.total_params() / moe.total_params() - 1) < 0.001  # routers aside
    sparse, full = Roofline(moe, "H100"), Roofline(dense, "H100")
    one = (sparse.step_breakdown([], [], [0])["memory_s"], full.step_breakdown([], [], [0])["memory_s"])
    assert one[0] < 0.2 * one[1]  # 8 of 128 experts per layer at batch 1
    # a 4096-token prefill picks practically every expert: the MoE reads as much as the dense model
    many = (sparse.step_breakdown([4096], [0], [])["memory_s"], full.step_breakdown([4096], [0], [])["memory_s"])
    assert abs(many[0] / many[1] - 1) < 0.01
    assert one[0] < sparse.step_breakdown([], [], [0] * 32)["memory_s"] < many[0]


def test_tensor_parallelism_halves_compute_and_adds_communication():
    one, two = Roofline("llama-3.1-70b", "H100", 1), Roofline("llama-3.1-70b", "H100", 2)
    step = ([4096], [0], [])
    b1, b2 = one.step_breakdown(*step), two.step_breakdown(*step)
    assert math.isclose(b2["compute_s"], b1["compute_s"] / 2, rel_tol=1e-12)
    assert b1["additive_s"] == 0.0 < b2["additive_s"]
    assert 0.5 * b1["seconds"] < b2["seconds"] < 0.75 * b1["seconds"]  # compute-bound prefill
    # two all-reduces per layer of 4096 x 8192 bf16 activations, half of them crossing NVLink, + latency
    ring = 2 * 80 * (4096 * 8192 * 2 * 2 * (2 - 1) / 2 / 450e9 + HARDWARE["H100"].allreduce_latency_s)
    assert math.isclose(b2["additive_s"], ring, rel_tol=1e-9)


def test_fp8_kv_halves_kv_bytes_and_fp8_weights_double_the_peak_where_supported():
    bf16, fp8 = Roofline("llama-3.1-8b", "H100"), Roofline("llama-3.1-8b", "H100", kv_dtype="fp8")
    kv_time = lambda m: m.step_seconds([], [], [65536]) - m.step_seconds([], [], [0])  # noqa: E731
    assert math.isclose(kv_time(fp8), kv_time(bf16) / 2, rel_tol=1e-9)
    assert Roofline("llama-3.1-8b", "H100", weight_dtype="fp8").peak_flops == 2 * bf16.peak_flops
    assert Roofline("llama-3.1-8b", "A100", weight_dtype="fp8").peak_flops == HARDWARE["A100-80GB"].bf16_flops


def test_coefficients_follow_the_documented_layout():
    model = Roofline("qwen3-30b-a3b", "H100", 2)
    coef = model.coefficients()
    assert coef.shape == (COEF_LEN,) and coef.dtype == np.float64 and coef[0] == 1.0
    assert (coef[1:] >= 0).all()
    assert tuple(coef[23:25]) == (128, 8) and coef[22] > 0
    assert tuple(Roofline("llama-3.1-8b", "H100").coefficients()[22:25]) == (0, 0, 0)
    coef[1] = 99.0  # a copy: the model is unchanged
    assert model.coefficients()[1] == 0.0
    x = step_features([300], [100], [5, 6])
    assert x.tolist() == [1, 300, 300 * 100 + 300 * 301 // 2, 100, 2, 11, 3]
    assert step_features([], [], []).tolist() == [0.0] * len(FEATURES)
    assert model.step_seconds([], [], []) == 0.0


def test_constant_rate_is_the_model_spec_bit_for_bit():
    for spec in MODELS.values():
        model = ConstantRate.from_spec(spec)
        assert model == ConstantRate.from_spec(spec.name)
        for prefill, batch in ((0, 0), (123, 0), (0, 1), (4096, 37), (16384, 128)):
            want = prefill / spec.prefill_tokens_per_s
            if batch:
                want += spec.decode_step_seconds(batch)
            assert model.step_seconds([prefill] if prefill else [], [0] if prefill else [], [999] * batch) == want
        coef = model.coefficients()
        assert coef.tolist()[:4] == [0.0, spec.prefill_tokens_per_s, spec.decode_tokens_per_s, spec.decode_batch_cost]
        assert not coef[4:].any()
    assert "prefill_tokens_per_s=20000" in repr(ConstantRate.from_spec("llama3-8b"))


def test_every_built_in_is_a_latency_model_and_so_is_a_user_class():
    class PerToken:
        def step_seconds(self, prefill_new, prefill_context, decode_context):
            return 1e-4 * (sum(prefill_new) + len(decode_context))

    for model in (Roofline("llama-3.1-8b", "H100"), ConstantRate(1e4, 100.0, 0.01), Fitted(1e-3), PerToken()):
        assert isinstance(model, LatencyModel)
    assert not isinstance(object(), LatencyModel)


def test_repr_names_the_configuration():
    text = repr(Roofline("deepseek-v3", "h200", 8, weight_dtype="fp8"))
    assert text.startswith("Roofline(deepseek-v3 on 8 x H200, fp8 weights, bf16 KV")
    assert "MFU 0.45/0.3" in text


@pytest.mark.parametrize("kwargs, match", [
    (dict(arch="llama-3.1-8b", hardware="H100", tp=3), "tp=3"),
    (dict(arch="llama-3.1-8b", hardware="H100", weight_dtype="int4"), "weight_dtype"),
    (dict(arch="llama-3.1-8b", hardware="H100", kv_dtype="fp4"), "kv_dtype"),
    (dict(arch="llama-3.1-8b", hardware="H100", mfu_prefill=0.0), "mfu_prefill"),
    (dict(arch="llama-3.1-8b", hardware="H100", bw_efficiency=1.5), "bw_efficiency"),
    (dict(arch="llama-3.1-8b", hardware="H100", step_overhead_s=-1.0), "step_overhead_s"),
    (dict(arch="llama-3.1-8b", hardware="TPU"), "unknown hardware"),
    (dict(arch="llama-9", hardware="H100"), "unknown model"),
])
def test_roofline_rejects_bad_configuration(kwargs, match):
    with pytest.raises(BadInputError, match=match):
        Roofline(**kwargs)


@pytest.mark.parametrize("args, match", [
    (([0], [0], []), "at least one new token"),
    (([5], [], []), "one context per prefill chunk"),
    (([5], [-1], []), "prefill_context"),
    (([], [], [-3]), "decode_context"),
    (([1.5], [0], []), "prefill_new"),
])
def test_steps_are_validated(args, match):
    with pytest.raises(KvmmError, match=match):
        Roofline("llama-3.1-8b", "H100").step_seconds(*args)
    with pytest.raises(KvmmError, match=match):
        step_features(*args)
    with pytest.raises(BadInputError, match="decode_tokens_per_s"):
        ConstantRate(1.0, 0.0)
