"""What the simulating report sections share about the simulator's clock (docs/latency.md).

Every section that simulates runs on the physical clock (``SimConfig``'s defaults: Roofline step
times of the model on an H200, vLLM V1 chunked-prefill scheduling, the GPU KV pool from memory)
and states its assumptions with :func:`clock_text`.  Each also reruns its headline configuration
on the *old clock* (:data:`OLD_CLOCK`: the constant rates of ``kvmm/sim/models.py``, whole
prefills, a 96 GiB pool typed in; exactly the numbers the report printed before the clock
changed) and prints both in a compact "what the physical clock moved" table
(:func:`moved_row`).
"""

from __future__ import annotations

from collections.abc import Sequence

from kvmm.report import mean_pm, plain_number, spread
from kvmm.sim.models import MODELS
from kvmm.sim.serving import resolve_serving

__all__ = ["OLD_CLOCK", "old_clock", "clock_text", "old_clock_text", "moved_row", "MOVED_HEADERS"]

GiB = 1 << 30
#: SimConfig fields that give the old clock (with a model name that has constant rates)
OLD_CLOCK = dict(latency="constant", gpu_kv_bytes=96 * GiB)
#: the model names of the old clock (kvmm.sim.models.MODELS) for the sections' physical models
_OLD_NAME = {"llama-3.1-8b": "llama3-8b", "llama3-8b": "llama3-8b", "qwen2.5-32b": "qwen2.5-32b"}
MOVED_HEADERS = ["setting", "metric", "old clock", "physical clock", "change"]


def old_clock(cfg, *, keep_pool: bool = False):
    """``cfg`` (a SimConfig) on the old clock: the same model's constant rates, whole prefills,
    the old scheduler limits (fields the section set itself, e.g. ``max_num_seqs``, are kept) and
    a 96 GiB pool (``keep_pool``: the pool ``cfg`` gives)."""
    name = cfg.model if isinstance(cfg.model, str) else cfg.model.name
    changes = dict(OLD_CLOCK, model=_OLD_NAME[name])
    if keep_pool:
        changes.pop("gpu_kv_bytes")
    return cfg.with_(**changes)


def clock_text(cfg) -> str:
    """One paragraph: the physical clock's modelling assumptions as ``cfg`` resolves them."""
    s = resolve_serving(cfg)
    if s.latency_name != "roofline":
        return f"Clock: {s.latency_name} ({s.latency!r})."
    r, hw = s.latency, s.hardware
    pool = (f"the GPU KV pool from memory: {plain_number(0.9 * hw.hbm_bytes * s.tp / GiB)} GiB (0.9 x HBM) - weights - "
            f"activation reserve = {s.gpu_kv_bytes / GiB:.1f} GiB per instance" if s.kv_from_memory else
            f"a GPU KV pool of {s.gpu_kv_bytes / GiB:.1f} GiB per instance (set by this section, not from memory)")
    return (f"Clock (physical, docs/latency.md): Roofline step times of {s.name} on {s.tp} x {hw.name} "
            f"({plain_number(hw.bf16_flops / 1e12)} TFLOP/s bf16 at MFU {plain_number(r.mfu_prefill)} prefill / "
            f"{plain_number(r.mfu_decode)} decode"
            f"{' (assumed: the H100 calibration of BLIS)' if 'mfu_prefill' in hw.assumed else ''}, "
            f"{plain_number(hw.hbm_bytes_per_s / 1e12)} TB/s HBM, bf16 weights and "
            "KV): a step takes max(compute, memory) + all-reduces; decode reads every sequence's KV, so steps slow "
            "down as contexts grow; prefill attention is quadratic in the context; no launch overhead.  Scheduling "
            f"as vLLM V1: {'chunked prefill' if s.chunked_prefill else 'whole prefills'}, "
            f"{s.max_num_batched_tokens:,} tokens and {s.max_num_seqs:,} sequences per step, decodes first.  "
            f"{pool[0].upper() + pool[1:]}.  "
            f"GPU-hours at ${plain_number(s.gpu_usd_per_hour)}/h.")


def old_clock_text(model: str = "llama3-8b", *, pool_gib: int = 96, max_seqs: int | None = None) -> str:
    """One sentence: what the old clock assumed for ``model`` (its name in kvmm.sim.models.MODELS),
    with the pool and sequence cap the section used (``max_seqs=None``: the model's own)."""
    m = MODELS[_OLD_NAME.get(model, model)]
    return (f"Old clock: {m.name}'s constant rates (kvmm/sim/models.py, assumed for an H200): prefill at "
            f"{m.prefill_tokens_per_s:,.0f} tokens/s whatever the context, a decode step of (1 + "
            f"{plain_number(m.decode_batch_cost)} (b - 1)) / {plain_number(m.decode_tokens_per_s)} s for b sequences "
            f"whatever they read, prefill and decode of a step added, whole prefills of up to {m.max_prefill_tokens:,} "
            f"tokens, at most {m.max_batch if max_seqs is None else max_seqs} sequences, a {pool_gib} GiB pool typed in.")


def moved_row(setting: str, metric: str, old: Sequence[float] | float, new: Sequence[float] | float,
              fmt: str = ".3f", *, scale: float = 1.0, difference: str = "") -> tuple:
    """A row of a "what the physical clock moved" table: ``setting``, ``metric``, the old and the
    physical clock's value (``mean ± std`` when given one value per seed or slice) and the
    relative change of the means (``difference``: their difference instead, in that unit, e.g.
    ``"pp"`` for a percentage)."""
    old_v = [float(x) for x in (old if isinstance(old, (list, tuple)) else [old])]
    new_v = [float(x) for x in (new if isinstance(new, (list, tuple)) else [new])]
    o, n = spread(old_v)[0], spread(new_v)[0]
    if o != o or n != n:  # nothing to compare (e.g. no lower-tier hit to stage)
        return (setting, metric, "-" if o != o else _cell(old_v, fmt, scale), "-" if n != n else _cell(new_v, fmt, scale), "-")

    if difference:
        change = f"{scale * (n - o):+{fmt[:-1]}f} {difference}"
    else:
        change = f"{100 * (n / o - 1):+.0f} %" if o else "-"
    return (setting, metric, _cell(old_v, fmt, scale), _cell(new_v, fmt, scale), change)


def _cell(values: list, fmt: str, scale: float) -> str:
    return mean_pm(values, fmt, scale=scale) if len(values) > 1 else f"{scale * values[0]:{fmt}}"
