"""Report section "triattention": TriAttention on the bundled trained model's real attention.

Model and text.  ``pydoc-llama`` (:mod:`kvmm.compress.pydoc_model`: a 4-layer Llama, 4 query
heads / 2 KV heads, head_dim 32, RoPE theta 10,000, trained on Python's documentation topics)
runs on held-out text it never saw in training.  The first chunks of the held-out text calibrate
TriAttention (the paper's "a little text"); evaluation windows further on give, per layer, the
captured pre-RoPE q/k (:func:`kvmm.compress.hf.capture_qk`) and the model's own attention logits
(:func:`kvmm.compress.hf.attention_logits`).

Experiment.  In each window the first ``N`` tokens are cached; every method keeps ``B`` of them
(10 % or 25 %) in each (layer, KV head) from the evidence it would have at position ``N``; the
next ``F`` queries of every layer and head then attend over the ``N`` cached keys (softmax
renormalised over them), and **recall** is the share of that attention mass on kept keys,
averaged over queries, heads and layers (1.0 = nothing lost).

Methods.  TriAttention (:class:`~kvmm.compress.TriAttentionPolicy`, each layer scored with its
own calibration) under every aggregation (``head``: per KV head, layers averaged, the paper's
runs; ``global``: max over (layer, KV head), the official default; ``layer``; ``layer_head``),
and the old single-layer behaviour (one layer's scores decide every layer) for each layer.
Baselines from :mod:`kvmm.compress.scorers`, each fed *its own layer's* real evidence and
choosing per layer: H2O (accumulated prefix attention + a recent window of B/2), SnapKV (last 32
queries, max-pooled, kernel 7), StreamingLLM (4 sinks + recent), recent only, key norm (lowest
L2 norm of the layer's keys kept), random.  Oracle: per (layer, KV head) the top-B keys by the
future attention itself (the ceiling).  Prompt protection is off here: the cached tokens play
the part of generated text (the paper's long-reasoning setting).

Also reported: Pearson per head between :func:`logit_curve` (centers only) and the measured mean
logit by distance, in sample and out of sample; and the CPU decode-step time with a full vs a
10x-compressed KV cache (:mod:`kvmm.reproduce._decode_timing`), beside the paper's 2.5x claim.
"""

from __future__ import annotations

import numpy as np

from kvmm.compress.calibration import calibrate, logit_curve, mean_logit_by_distance, pearson
from kvmm.compress.pydoc_model import heldout_ids, load_model
from kvmm.compress.scorers import (
    H2OScorer,
    KeyNormScorer,
    RandomScorer,
    SnapKVScorer,
    StreamingLLMScorer,
    select_victims,
)
from kvmm.compress.triattention import TriAttentionScorer
from kvmm.compress.triattention_policy import AGGREGATIONS, TriAttentionPolicy
from kvmm.errors import BackendUnavailableError
from kvmm.report import mean_pm, plain_number, spread
from kvmm.reproduce._decode_timing import report_decode_timing

#: Where the baselines come from (printed in the report).
BASELINES = "kvmm.compress.scorers (H2OScorer, SnapKVScorer, StreamingLLMScorer, KeyNormScorer, RandomScorer)"
PAPER = {"pearson": "0.6-0.9 (Qwen3, Qwen2.5, Llama3)", "speedup": "2.5x end-to-end throughput"}
FRACTIONS = (0.1, 0.25)
TRIATTENTION = tuple(f"TriAttention ({agg})" for agg in AGGREGATIONS)
BASELINE_METHODS = ("H2O", "SnapKV", "StreamingLLM", "recent only", "key norm", "random")
ORACLE = "oracle (per layer and KV head)"


def workload(quick: bool) -> dict:
    """Sizes: cached tokens N, future queries F, evaluation windows, calibration chunks of 1,024."""
    if quick:
        return dict(n_tokens=384, n_future=64, windows=2, calibration_chunks=1, seed=0)
    return dict(n_tokens=896, n_future=128, windows=6, calibration_chunks=2, seed=0)


def reproduce(report) -> None:
    report.heading("TriAttention: RoPE trig-series KV compression (bundled trained model, real attention)")
    try:  # kvmm.compress.hf needs the optional hf extra (torch, transformers)
        from kvmm.compress import hf
    except (ImportError, BackendUnavailableError) as exc:
        report.text(f"Skipped: this section needs the hf extra (torch, transformers): {exc}")
        return
    w = workload(report.quick)
    model = load_model()
    rope = hf.rope_from_config(model.config)
    cal_q, cal_k = _capture_chunks(hf, model, [heldout_ids(1024, 1024 * i) for i in range(w["calibration_chunks"])])
    cal = calibrate(cal_q, cal_k, rope=rope)
    length = w["n_tokens"] + w["n_future"]
    first = 1024 * w["calibration_chunks"]
    starts = np.linspace(first, first + 30_000, w["windows"]).astype(int)
    recalls: dict[tuple[str, float], list[float]] = {}
    pearson_out = []
    with report.progress(len(starts), "triattention windows") as bar:
        for start in starts:
            ids = heldout_ids(length, int(start))
            pairs = hf.capture_qk(model, ids)
            logits = hf.attention_logits(model, ids)
            run = recall_experiment(pairs, logits, cal, w["n_tokens"], seed=w["seed"])
            for key, value in run.items():
                recalls.setdefault(key, []).append(value)
            pearson_out.append(_pearson_per_head(cal, rope, pairs, w["n_tokens"]))
            bar.update(1)
    pearson_in = _pearson_per_head(cal, rope, list(zip(cal_q, cal_k)), min(1024, cal_q[0].shape[0]))
    pearson_out = np.mean(pearson_out, axis=0)
    report.text(
        f"Model: pydoc-llama ({cal.num_layers} layers, {cal.num_heads} query / {cal.num_kv_heads} KV heads, head_dim "
        f"{cal.head_dim}, RoPE theta {plain_number(rope.theta)}, byte vocabulary) on held-out Python documentation text. "
        f"Calibration: the first {w['calibration_chunks']} x 1,024 held-out bytes; evaluation: {len(starts)} windows "
        f"of {w['n_tokens']} cached + {w['n_future']} future tokens further on. Recall: share of the future "
        "queries' attention (renormalised over the cached keys) that falls on kept keys, mean over queries, heads "
        f"and layers; ± is the std over windows. Baselines: {BASELINES}, each scoring every layer from that "
        "layer's own attention or keys.")
    report.table(
        "Pearson(logit_curve from centers, measured mean logit by distance), per (layer, head)",
        ["measured on", "median", "min", "max", "heads", "paper"],
        [[label, float(np.nanmedian(r)), float(np.nanmin(r)), float(np.nanmax(r)), int(r.size), PAPER["pearson"]]
         for label, r in (("calibration text (in sample)", pearson_in), ("evaluation windows (out of sample)",
                                                                          pearson_out))],
        note="Distances 1..N-1. Out of sample: the calibration's curve against the windows' measured logits, "
             "per head averaged over windows.")
    rows = [[method] + [mean_pm(recalls[(method, f)]) for f in FRACTIONS]
            for method in _method_order(cal.num_layers)]
    report.table(
        "Attention recall of the next queries on the kept keys (real attention, bundled model)",
        ["method"] + [f"keep {int(100 * f)} %" for f in FRACTIONS],
        rows,
        note="TriAttention (head) is the policy's default (the paper's runs); '(layer i for all)' is the earlier "
             "behaviour, layer i's scores deciding every layer's evictions. recent only = the last B tokens.")
    report.figure("triattention_recall", lambda ax: _draw_recall(ax, recalls, cal.num_layers),
                  size=(7.0, 1.4 + 0.38 * len(_method_order(cal.num_layers))))

    report_decode_timing(report, model, quick=report.quick, claim=PAPER["speedup"])


def recall_experiment(pairs, logits, calibration, n_tokens, *, seed=0, fractions=FRACTIONS) -> dict:
    """Recall of every method at each kept fraction on one window.

    ``pairs``: per layer pre-RoPE ``(q (T, H, d), k (T, G, d))``; ``logits``: per layer the
    model's pre-softmax logits ``(H, T, T)``; the first ``n_tokens`` are cached, the rest are the
    future queries.  Returns ``{(method, fraction): recall}``.
    """
    layers = len(pairs)
    heads, kv_heads = pairs[0][0].shape[1], pairs[0][1].shape[1]
    group = heads // kv_heads
    n = n_tokens
    causal = np.tril(np.ones((n, n), dtype=bool))
    prefix = np.stack([_softmax(np.where(causal[None], lg[:, :n, :n], -np.inf)) for lg in logits])  # (L, H, n, n)
    future = np.stack([_softmax(lg[:, n:, :n]) for lg in logits])  # (L, H, F, n)
    keys = np.stack([k[:n] for _, k in pairs], axis=1)  # (n, L, G, d)
    positions = np.arange(n)
    out = {}
    for frac in fractions:
        budget = max(1, int(round(frac * n)))
        masks = {}
        for agg, name in zip(AGGREGATIONS, TRIATTENTION):
            policy = TriAttentionPolicy.from_calibration(calibration, budget=budget, aggregation=agg,
                                                         protect_prompt=False)
            policy.observe(0, keys=keys, positions=positions)
            masks[name] = np.moveaxis(policy.select(0, budget), 0, -1)
        for layer in range(layers):
            single = TriAttentionPolicy(TriAttentionScorer(calibration, layer=layer), budget=budget,
                                        aggregation="global", protect_prompt=False)
            single.observe(0, keys=keys[:, layer], positions=positions)
            kept = single.select(0, budget)[:, 0, 0]
            masks[f"TriAttention (layer {layer} for all)"] = np.broadcast_to(kept, (layers, kv_heads, n))
        for method in BASELINE_METHODS:
            masks[method] = _baseline_mask(method, prefix, keys, budget, seed)
        mass = future.sum(axis=2).reshape(layers, kv_heads, group, n).sum(axis=2)  # (L, G, n)
        oracle = np.zeros((layers, kv_heads, n), dtype=bool)
        for layer in range(layers):
            for g in range(kv_heads):
                oracle[layer, g, np.argsort(-mass[layer, g], kind="stable")[:budget]] = True
        masks[ORACLE] = oracle
        for method, mask in masks.items():
            per_head = np.repeat(mask, group, axis=1)[:, :, None, :]  # (L, H, 1, n)
            out[(method, frac)] = float((future * per_head).sum(axis=3).mean())
    return out


def _baseline_mask(method, prefix, keys, budget, seed):
    """Kept mask ``(L, G, n)`` of one baseline choosing per layer from that layer's own evidence."""
    layers, _, n, _ = prefix.shape
    kv_heads = keys.shape[2]
    mask = np.zeros((layers, kv_heads, n), dtype=bool)
    for layer in range(layers):
        scorer = _make_scorer(method, budget, seed)
        scorer.observe(0, attention=prefix[layer], keys=keys[:, layer], positions=np.arange(n))
        keep = np.setdiff1d(np.arange(n), select_victims(scorer.scores(0), budget))
        mask[layer, :, keep] = True
    return mask


def _make_scorer(method, budget, seed):
    if method == "H2O":  # half heavy hitters, half recent window, as in the H2O paper
        return H2OScorer(recent_window=budget // 2)
    if method == "SnapKV":
        return SnapKVScorer(window_size=32, kernel_size=7, pooling="max")
    if method == "StreamingLLM":
        return StreamingLLMScorer(sink_tokens=4)
    if method == "recent only":
        return StreamingLLMScorer(sink_tokens=0)
    if method == "key norm":
        return KeyNormScorer()
    return RandomScorer(seed=seed)


def _capture_chunks(hf, model, chunks):
    """Per layer q and k of several text chunks, concatenated over tokens (each chunk from position 0)."""
    captured = [hf.capture_qk(model, ids) for ids in chunks]
    layers = len(captured[0])
    q = [np.concatenate([c[layer][0] for c in captured]) for layer in range(layers)]
    k = [np.concatenate([c[layer][1] for c in captured]) for layer in range(layers)]
    return q, k


def _pearson_per_head(cal, rope, pairs, n_tokens):
    """Pearson per (layer, head) between the calibration's curve and ``pairs``' measured logits by distance."""
    deltas = np.arange(1, n_tokens)
    predicted = logit_curve(cal, deltas)
    return np.stack([pearson(predicted[layer], mean_logit_by_distance(q[:n_tokens], k[:n_tokens], rope, deltas))
                     for layer, (q, k) in enumerate(pairs)])


def _method_order(layers):
    return list(TRIATTENTION) + [f"TriAttention (layer {i} for all)" for i in range(layers)] + \
        list(BASELINE_METHODS) + [ORACLE]




def _softmax(x):
    m = np.max(x, axis=-1, keepdims=True)
    e = np.exp(x - m)
    return e / e.sum(axis=-1, keepdims=True)


def _draw_recall(ax, recalls, layers):
    """Horizontal bars, one group per method (top to bottom in the table's order): the labels
    stay readable with 15 methods."""
    methods = _method_order(layers)
    y = np.arange(len(methods))
    for i, frac in enumerate(FRACTIONS):
        ax.barh(y + (i - 0.5) * 0.4, [np.mean(recalls[(m, frac)]) for m in methods], 0.4,
                xerr=[spread(recalls[(m, frac)])[1] for m in methods], label=f"keep {int(100 * frac)} %")
    ax.set_yticks(y, methods, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("attention recall (mean ± std over windows)")
    ax.set_xlim(0, 1)
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(loc="lower right")
    ax.set_title("Recall of future attention, pydoc-llama, held-out text")
