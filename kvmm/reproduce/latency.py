"""Report section "latency": the physical clock every simulating section runs on.

The simulator times each scheduler step with :class:`kvmm.sim.latency.Roofline` (docs/latency.md):
the larger of the step's compute time and memory time, plus tensor-parallel all-reduces.  This
section prints what that clock says, from the model alone (no simulation, so it costs
milliseconds):

(a) step time vs context and batch: a decode step of ``b`` sequences each reading ``c`` tokens of
    KV, for every shipped accelerator (:data:`kvmm.sim.latency.HARDWARE`), and a prefill chunk
    of :data:`CHUNK` new tokens vs the context before it;
(b) the recompute-vs-load break-even per tier preset (:data:`kvmm.tiers.PRESETS`): the prefix
    length above which loading its KV from the tier beats recomputing it on the GPU.

Formulas of (b), for a prefix of ``n`` tokens:

* ``load(n) = latency + n x kv_bytes_per_token / read_bandwidth``: one transfer of the whole
  model's KV (bf16) through the tier, as the simulator charges it (``TierSpec.transfer_seconds``);
* ``recompute(n)`` = ``Roofline.step_seconds([n], [0], [])``: one forward pass over the ``n``
  tokens at context 0 (not chunked), ``max(compute, memory) + all-reduces`` -- compute
  ``(G n + Hp n (n + 1) / 2) / (tp peak mfu_prefill)`` plus one logits row, memory the weights
  read once plus the new KV written;
* ``marginal(n)``: the same prefill's compute time and all-reduces only: what the ``n`` tokens add
  to a step that runs anyway (its weights already read for a decode batch);
* the break-even is the smallest ``n`` from which ``load(n) < recompute(n)`` holds for every
  longer prefix up to :data:`MAX_PREFIX`; "always" when that is ``n = 1``, "never" when no such
  ``n`` exists up to :data:`MAX_PREFIX`, and both ends when loading wins only for short and for
  long prefixes.
"""

from __future__ import annotations

import numpy as np

from kvmm.report import plain_number
from kvmm.sim.latency.accelerators import HARDWARE, kv_pool_bytes
from kvmm.sim.latency.arch import ModelArch
from kvmm.sim.latency.roofline import Roofline
from kvmm.tiers import PRESETS, preset

__all__ = ["reproduce", "decode_table", "prefill_table", "break_even", "recompute_seconds", "load_seconds",
           "CONTEXTS", "BATCHES", "CHUNK", "SETUPS", "MAX_PREFIX", "MODEL"]

MODEL = "llama-3.1-8b"
#: decode contexts of part (a), tokens
CONTEXTS = (1024, 4096, 16384, 32768, 65536, 131072)
#: decode batch sizes of part (a)
BATCHES = (1, 32, 256)
#: new tokens of the prefill chunk of part (a)
CHUNK = 2048
#: contexts before the chunk
CHUNK_CONTEXTS = (0, 4096, 16384, 32768, 65536, 131072)
#: (model, hardware, tp) of part (b)
SETUPS = (("llama-3.1-8b", "H100", 1), ("llama-3.1-8b", "H200", 1), ("llama-3.1-70b", "H100", 4),
          ("llama-3.1-70b", "H200", 4))
#: the longest prefix part (b) considers (Llama-3.1's context window)
MAX_PREFIX = 131072
#: prefix lengths of the break-even bandwidth table
BANDWIDTH_PREFIXES = (16, 256, 1024, 8192, 65536)


def _tokens(n: int) -> str:
    return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else str(n)


def setup_label(model: str, hardware: str, tp: int) -> str:
    return f"{model} on {tp} x {hardware}"


# --------------------------------------------------------------------------- (a) step time
def decode_table(model: str = MODEL, contexts=CONTEXTS, batches=BATCHES) -> list[dict]:
    """One dict per (hardware, batch): ``ms`` per context (a decode step of ``batch`` sequences
    each reading ``context`` tokens), ``fits`` per context (the batch's KV within the GPU's KV
    pool from memory), ``bound`` per context (``"compute"`` or ``"memory"``).  Runtime
    O(hardware x batches x contexts x batch)."""
    arch = ModelArch.named(model)
    out = []
    for hw in HARDWARE.values():
        r = Roofline(model, hw)
        pool = kv_pool_bytes(arch, hw)
        for b in batches:
            row = {"hardware": hw.name, "batch": b, "ms": [], "fits": [], "bound": []}
            for c in contexts:
                br = r.step_breakdown([], [], [c] * b)
                row["ms"].append(1e3 * br["seconds"])
                row["fits"].append(b * (c + 1) * arch.kv_bytes_per_token() <= pool)
                row["bound"].append("compute" if br["compute_s"] > br["memory_s"] else "memory")
            out.append(row)
    return out


def prefill_table(model: str = MODEL, chunk: int = CHUNK, contexts=CHUNK_CONTEXTS) -> list[dict]:
    """One dict per hardware: ``ms`` of a ``chunk``-token prefill chunk after each context."""
    rooflines = {hw.name: Roofline(model, hw) for hw in HARDWARE.values()}
    return [{"hardware": name, "ms": [1e3 * r.step_seconds([chunk], [c], []) for c in contexts]}
            for name, r in rooflines.items()]


# --------------------------------------------------------------------------- (b) break-even
def recompute_seconds(roofline, n: np.ndarray, *, marginal: bool = False) -> np.ndarray:
    """Seconds to prefill ``n`` tokens at context 0 in one step (each element of ``n`` >= 1):
    ``Roofline.step_seconds([n], [0], [])``, or with ``marginal`` only its compute time and
    all-reduces.  Vectorised over ``n`` from ``roofline.coefficients()`` (layout in
    :mod:`kvmm.sim.latency._kernels`).  Runtime O(len(n))."""
    n = np.asarray(n, dtype=np.float64)
    coef = roofline.coefficients()
    x = np.zeros((n.size, 7))
    x[:, 0] = 1.0  # step
    x[:, 1] = n  # prefill tokens
    x[:, 2] = n * (n + 1) / 2  # causal query-key pairs
    x[:, 6] = 1.0  # one sequence
    compute, memory, additive = x @ coef[1:8], x @ coef[8:15], x @ coef[15:22]
    per_expert, experts, k = coef[22], coef[23], coef[24]
    if per_expert > 0 and experts > 0:
        memory = memory + per_expert * experts * (1.0 - (1.0 - k / experts) ** n)
    return compute + additive if marginal else np.maximum(compute, memory) + additive


def load_seconds(tier, kv_bytes_per_token: int, n: np.ndarray) -> np.ndarray:
    """``latency + n x kv_bytes_per_token / read_bandwidth`` of a TierSpec."""
    return tier.latency_s + np.asarray(n, dtype=np.float64) * kv_bytes_per_token / tier.read_bandwidth


def break_even(tier, model: str, hardware: str, tp: int, *, marginal: bool = False,
               max_prefix: int = MAX_PREFIX) -> dict:
    """Where loading a prefix from ``tier`` beats recomputing it: ``{"first": smallest n from
    which loading wins for every longer prefix up to max_prefix (None: never), "short": the
    longest n up to which loading also wins for every shorter prefix (0: not at n = 1),
    "label": the table cell}``.  Runtime O(max_prefix)."""
    n = np.arange(1, max_prefix + 1)
    wins = load_seconds(tier, ModelArch.named(model).kv_bytes_per_token(), n) < \
        recompute_seconds(Roofline(model, hardware, tp), n, marginal=marginal)
    loses = np.flatnonzero(~wins)
    if loses.size == 0:
        return {"first": 1, "short": max_prefix, "label": "always"}
    first = int(loses[-1]) + 2 if loses[-1] + 1 < max_prefix else None
    short = int(loses[0])  # wins on n = 1 .. loses[0] (loses[0] is the index of the first loss)
    if first is None:
        label = f"never (n <= {max_prefix:,})" if short == 0 else f"n <= {short:,} only"
    else:
        label = f"n >= {first:,}" if short == 0 else f"n <= {short:,} and n >= {first:,}"
    return {"first": first, "short": short, "label": label}


def break_even_bandwidth(model: str, hardware: str, tp: int, n: int, *, marginal: bool = False) -> float:
    """The read bandwidth (bytes/s) at which loading ``n`` tokens' KV takes as long as
    recomputing them, latency aside: ``n x kv_bytes_per_token / recompute(n)``."""
    seconds = float(recompute_seconds(Roofline(model, hardware, tp), np.array([n]), marginal=marginal)[0])
    return n * ModelArch.named(model).kv_bytes_per_token() / seconds


# --------------------------------------------------------------------------- the section
def reproduce(report) -> None:
    arch = ModelArch.named(MODEL)
    r200 = Roofline(MODEL, "H200")
    report.heading("latency: the simulator's physical clock (roofline step times, recompute vs load)")
    report.text(
        f"Every simulating section times its steps with Roofline (docs/latency.md): a step takes max(compute, memory) "
        f"+ tensor-parallel all-reduces.  Compute = GEMM FLOPs of the new tokens + 2 FLOPs per multiply-add of every "
        f"causal query-key pair (prefill attention is quadratic in the context), at the hardware's dense bf16 peak x "
        f"MFU (prefill / decode: {_mfu_sources()}); memory = the weights read once per step + every sequence's "
        f"KV read + the new KV written, at peak HBM bandwidth.  Not counted: softmax, norms, kernel launches (no fixed "
        f"step overhead), speculative decoding.  Default run: {r200}.  {MODEL}: {arch.kv_bytes_per_token():,} bytes of "
        f"KV per token (bf16), {arch.total_params() / 1e9:.2f}B parameters.  Every number below is the model's, not a "
        "measurement.")
    hw_names = [hw.name for hw in HARDWARE.values()]

    rows = []
    decode = decode_table()
    for d in decode:
        cells = [f"{plain_number(ms)}{'' if fits else ' *'}" for ms, fits in zip(d["ms"], d["fits"])]
        bound = "/".join(dict.fromkeys(b[0] for b in d["bound"]))  # m, c or m/c along the contexts
        rows.append((d["hardware"], d["batch"], *cells, f"{d['ms'][-1] / d['ms'][0]:.2f}x", bound))
    report.table(
        f"Decode step time (ms) vs context, {MODEL}, one GPU of each kind",
        ["hardware", "batch", *[f"{c // 1024}K" for c in CONTEXTS], f"{CONTEXTS[-1] // 1024}K / {CONTEXTS[0] // 1024}K",
         "bound (1K..128K)"], rows,
        note="A step of `batch` decoding sequences, each reading `context` tokens of KV.  * : the batch's KV does not fit "
             "that GPU's KV pool from memory (kv_pool_bytes: 0.9 x HBM - weights - activation reserve); shown for the "
             "shape of the curve only.  bound: m = memory-bound, c = compute-bound, in the order met from 1K to 128K "
             "(c/m: compute-bound at short contexts, memory-bound at long ones).  A memory-bound step grows with the KV "
             "it reads; a single decode mostly reads the 16 GB of weights, so its context matters less than a large "
             "batch's.  The 128K / 1K column repeats down the GPUs where a row is memory-bound throughout: weights and "
             "KV are read at the same bandwidth, so the ratio (weights + KV at 128K) / (weights + KV at 1K) does not "
             "depend on the GPU.")
    prefill = prefill_table()
    report.table(
        f"Prefill chunk of {CHUNK:,} new tokens: step time (ms) vs the context before it, {MODEL}",
        ["hardware", *[f"context {plain_number(c / 1024)}K" if c else "context 0" for c in CHUNK_CONTEXTS],
         f"{CHUNK_CONTEXTS[-1] // 1024}K / 0"],
        [(p["hardware"], *[plain_number(ms) for ms in p["ms"]], f"{p['ms'][-1] / p['ms'][0]:.1f}x") for p in prefill],
        note="H100 and H200 share their compute figures, so their compute-bound prefill rows are equal.  "
             "The chunk's tokens attend to the whole context before them (new x context pairs) and to each other "
             "(new (new + 1) / 2 pairs), so a chunk late in a long prompt costs many times the first one; the "
             "scheduler's token budget (8,192 on H100/H200) bounds the chunk, not its context.")
    report.figure("latency_steps", lambda axes: _draw_steps(axes, decode, prefill, hw_names), size=(11.0, 4.4), ncols=2)

    # (b) break-even per tier
    tiers = list(PRESETS)
    specs = {t: preset(t) for t in tiers}
    kv = {m: ModelArch.named(m).kv_bytes_per_token() for m in dict.fromkeys(s[0] for s in SETUPS)}
    labels = [setup_label(*s) for s in SETUPS]
    report.text(
        "Recompute vs load.  For a prefix of n tokens: load(n) = latency + n x kv_bytes_per_token / read_bandwidth (the "
        "whole model's bf16 KV in one transfer through the tier, as the simulator charges a tier read; at tp 4 the "
        "shards do not get one link each); recompute(n) = Roofline.step_seconds([n], [0], []), one forward pass at "
        "context 0 = max((G n + Hp n (n + 1) / 2) / (tp x peak x MFU_prefill) + one logits row, weights / tp + new KV) / "
        "HBM bandwidth) + all-reduces (G: GEMM FLOPs per token, Hp: attention FLOPs per query-key pair); marginal(n) = "
        "its compute and all-reduces only, what n tokens add to a step that reads the weights anyway (batched with "
        f"decodes).  Break-even: the smallest n from which load(n) < recompute(n) for every longer prefix up to "
        f"{MAX_PREFIX:,} tokens; 'always': from n = 1; 'never': at no n up to {MAX_PREFIX:,}.  Not modelled: the tier's "
        "queueing and contention, the copy into the GPU's paged layout, overlap of the load with other work.")
    kinds = (("recompute = a standalone forward pass", False), ("recompute = marginal (compute + all-reduces only)", True))
    for title, marginal in kinds:
        rows = []
        for t in tiers:
            spec = specs[t]
            rows.append((t, plain_number(spec.read_bandwidth / 1e9), plain_number(spec.latency_s * 1e6),
                         *[break_even(spec, *s, marginal=marginal)["label"] for s in SETUPS]))
        report.table(f"Break-even prefix length (tokens) per tier preset, {title}",
                     ["tier", "read GB/s", "latency us", *labels], rows,
                     note=_break_even_note(marginal, specs, kv))
    rows = []
    for s, label in zip(SETUPS, labels):
        for marginal in (False, True):
            rows.append((label, "marginal" if marginal else "standalone",
                         *[plain_number(break_even_bandwidth(*s, n, marginal=marginal) / 1e9) for n in BANDWIDTH_PREFIXES]))
    report.table(
        "Break-even read bandwidth (GB/s): below it, loading a prefix is slower than recomputing it (latency aside)",
        ["setup", "recompute", *[f"prefix {_tokens(n)}" for n in BANDWIDTH_PREFIXES]], rows,
        note="n x kv_bytes_per_token / recompute(n).  A tier that reads faster than this loads the prefix sooner than "
             "the GPU recomputes it, up to its latency.  Short prefixes: a standalone pass is memory-bound (the weights "
             "are read whatever n is), so even a slow tier wins; marginal recompute of a few tokens is cheap, so only a "
             "fast tier does.  Long prefixes: quadratic attention makes each recomputed token dearer, so the "
             "break-even bandwidth falls again.  Every preset above reads faster than every figure here except "
             "where the first two tables say otherwise (its latency).")


def _mfu_sources() -> str:
    """Which accelerators' MFUs are calibrated (BLIS) and which are assumed (Hardware.assumed)."""
    assumed = [hw.name for hw in HARDWARE.values() if "mfu_prefill" in hw.assumed]
    calibrated = [hw.name for hw in HARDWARE.values() if "mfu_prefill" not in hw.assumed]
    return (f"BLIS's calibrated values for {', '.join(calibrated)}; assumed for {', '.join(assumed)} (the H100's, or "
            "scaled from it: Hardware.sources)")


def _break_even_note(marginal: bool, specs: dict, kv: dict) -> str:
    per_token = ", ".join(f"{t} {plain_number(1e6 * kv[MODEL] / s.read_bandwidth)}" for t, s in specs.items())
    first = (f"Loading one token's KV of {MODEL} takes (us, latency aside): {per_token}.  " if not marginal else "")
    why = ("A standalone pass reads the weights whatever n is (3 to 10 ms here), more than any tier's latency plus "
           "its transfer of a short prefix, so loading wins from the first token." if not marginal else
           "Without the weights' floor only the tier's latency can make a short prefix cheaper to recompute: the "
           "break-even is where the recompute time of n tokens passes latency + transfer.")
    return first + why


def _draw_steps(axes, decode, prefill, hw_names) -> None:
    """Left: decode step time vs context per hardware (colour) and batch (line style); right:
    the prefill chunk's time vs the context before it."""
    from matplotlib.ticker import (
        FuncFormatter,  # the optional plot extra: Report.figure calls this only when matplotlib is installed
    )

    colours = {name: f"C{i}" for i, name in enumerate(hw_names)}
    styles = dict(zip(BATCHES, ("-", "--", ":")))
    for d in decode:
        axes[0].plot([c / 1024 for c in CONTEXTS], d["ms"], color=colours[d["hardware"]], linestyle=styles[d["batch"]],
                     marker=".", label=d["hardware"] if d["batch"] == BATCHES[0] else None)
    for b, st in styles.items():
        axes[0].plot([], [], color="gray", linestyle=st, label=f"batch {b}")
    for p in prefill:
        axes[1].plot([max(c, 512) / 1024 for c in CHUNK_CONTEXTS], p["ms"], color=colours[p["hardware"]], marker=".",
                     label=p["hardware"])
    for ax, what in ((axes[0], "decode step (ms)"), (axes[1], f"prefill chunk of {CHUNK:,} tokens (ms)")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: plain_number(v) + "K"))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: plain_number(v)))
        ax.set_ylabel(what)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_xlabel("context per sequence (tokens)")
    axes[1].set_xlabel("context before the chunk (tokens; 0 drawn at 0.5K)")
    axes[0].set_title(f"Decode step vs context, {MODEL} (colour: GPU, style: batch)")
    axes[1].set_title(f"Prefill chunk vs context, {MODEL}")
    axes[0].legend(fontsize=6, ncol=2)
    axes[1].legend(fontsize=6, ncol=2)
