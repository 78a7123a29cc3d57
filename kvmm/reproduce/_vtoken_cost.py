"""The step-time cost model behind the vtoken section's SLA-bound throughput (see :mod:`kvmm.reproduce.vtoken`)."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from kvmm._validate import as_count, as_positive_float
from kvmm.errors import BadInputError
from kvmm.sim.latency.roofline import Roofline
from kvmm.sim.latency.step import linear_step_seconds
from kvmm.tiers.spec import PRESETS, preset

__all__ = ["DecodeCostModel", "RooflineDecodeCost", "sla_throughput", "sla_comparison", "sla_ratios", "repetitions"]


def repetitions(st: dict) -> list[dict]:
    """One statistics dict per timing repetition, with scalar ``plan_s`` / ``commit_s`` / overhead."""
    out = []
    for rep in range(len(np.atleast_1d(st["vtoken"]["plan_s"]))):
        one = dict(st, vtoken=dict(st["vtoken"], plan_s=float(np.atleast_1d(st["vtoken"]["plan_s"])[rep]),
                                   commit_s=float(np.atleast_1d(st["vtoken"]["commit_s"])[rep])),
                   call_overhead_s=float(np.atleast_1d(st["call_overhead_s"])[rep]))
        out.append(one)
    return out


def sla_ratios(st: dict, block_size: int, model: DecodeCostModel | RooflineDecodeCost, kv_budget_bytes: float,
               sla_s: float) -> dict:
    """:func:`sla_comparison` per timing repetition: ``{key: array over repetitions}`` for the ratios."""
    runs = [sla_comparison(one, block_size, model, kv_budget_bytes, sla_s) for one in repetitions(st)]
    return {key: np.array([r[key] for r in runs]) for key in ("ratio", "ratio_reads_dead")} | {"runs": runs}


@dataclass(frozen=True)
class DecodeCostModel:
    """Modelled time of one decode step of a batch of ``B`` requests (documented constants, not fitted).

    ``step(B) = fixed_s + B * per_request_s``, where

    * ``fixed_s = launch_s + tier.transfer_seconds(weight_bytes)``: kernel launches, scheduling
      and sampling, plus reading the weights once per step (decode is memory bound);
    * ``per_request_s = per_seq_s + read_tokens * kv_bytes_per_token / tier.read_bandwidth
      + repack_s``: the request's share of the matmuls, the KV bytes its attention reads, and
      its share of the repacking cost.

    What attention reads: an unmodified paged kernel gets ``block_table(seq)`` and reads every
    slot up to the context length (``TokenTable.context_lengths``).  With naive evict that is
    every retained block in full, dead slots included (a kernel loads a block's tile, then masks
    it); with vToken, the live tokens once repacked, plus slots that died since the last repack.
    Repacking (vToken only; :func:`sla_comparison`): the wall time of its ``plan`` + ``commit``
    calls measured on this machine (the fixed per-call part, Python and dispatch, is charged per
    step; the rest per request-step, i.e. scaled linearly with the batch), plus the modelled copy
    of the moved tokens' K/V through the tier (a read and a write), per request-step.  Neither
    table is charged for freeing blocks whose tokens are all dead (a block manager does that
    when the last token dies); planning is charged in full although it can run in a background
    thread.

    Defaults: a Llama-3-8B-class model in fp16 on one H200 (``tier="hbm"``, 4.8 TB/s): 16 GB of
    weights; 128 KiB of K/V per token (32 layers x 8 KV heads x 128 dims x K and V x 2 bytes);
    1 ms of launch/scheduling overhead per step (assumed); 30 us of compute per sequence
    (2 x 8e9 FLOPs at ~530 TFLOP/s, about half the H200's dense fp16 peak; assumed).
    """

    weight_bytes: float = 16e9
    kv_bytes_per_token: int = 32 * 8 * 128 * 2 * 2
    launch_s: float = 1e-3
    per_seq_s: float = 30e-6
    tier: str = "hbm"

    def __post_init__(self) -> None:
        as_positive_float(self.weight_bytes, "weight_bytes", allow_zero=True)
        as_count(self.kv_bytes_per_token, "kv_bytes_per_token", minimum=1)
        as_positive_float(self.launch_s, "launch_s", allow_zero=True)
        as_positive_float(self.per_seq_s, "per_seq_s", allow_zero=True)
        if self.tier not in PRESETS:
            raise BadInputError(f"tier must be one of {sorted(PRESETS)}, got {self.tier!r}")

    @property
    def fixed_s(self) -> float:
        """Per-step time independent of the batch: overhead plus one read of the weights."""
        return self.launch_s + preset(self.tier).transfer_seconds(int(self.weight_bytes))

    def per_request_s(self, read_tokens: float, repack_s: float = 0.0) -> float:
        """Per-step time each request adds: compute, its KV read, its share of repacking."""
        return self.per_seq_s + read_tokens * self.kv_bytes_per_token / preset(self.tier).read_bandwidth + repack_s

    def copy_seconds(self, moves_per_commit) -> float:
        """Modelled time to copy the moved tokens' K/V, one tier read + one write per commit."""
        spec = preset(self.tier)
        total = 0.0
        for moves in moves_per_commit:
            if moves:
                nbytes = int(moves) * self.kv_bytes_per_token
                total += spec.transfer_seconds(nbytes) + spec.transfer_seconds(nbytes, write=True)
        return total

    def blocks_in(self, kv_budget_bytes: float, block_size: int) -> int:
        """KV blocks of ``block_size`` tokens that fit ``kv_budget_bytes``."""
        return int(kv_budget_bytes // (block_size * self.kv_bytes_per_token))

    def sla(self, read_tokens: float, fixed_extra_s: float, per_request_extra_s: float, memory_batch: int,
            sla_s: float) -> dict:
        """:func:`sla_throughput` of this model's step: ``fixed_s + extra + B x per_request_s``."""
        return sla_throughput(self.fixed_s + fixed_extra_s, self.per_request_s(read_tokens, per_request_extra_s),
                              memory_batch, sla_s)


@dataclass(frozen=True)
class RooflineDecodeCost:
    """Decode step time from the simulator's physical clock (:class:`kvmm.sim.latency.Roofline`).

    A step of ``B`` requests, each reading ``r`` KV slots, takes
    ``Roofline(model, hardware).step_seconds([], [], [r] * B)``: ``max(compute, memory)`` with
    compute = ``B`` tokens through the weight GEMMs, attention over ``r + 1`` keys and one logits
    row each, at the decode MFU, and memory = the weights once + ``B (r + 1)`` tokens of KV read
    and written, at HBM bandwidth (docs/latency.md).  So reading fewer slots shortens a step only
    while the step is memory-bound; once the batch is compute-bound its time no longer depends on
    the KV it reads.  vToken's repacking is added on top (not overlapped with the step), as in
    :class:`DecodeCostModel`; its K/V copies go through the ``tier`` preset (H200 HBM).
    """

    model: str = "llama-3.1-8b"
    hardware: str = "H200"
    tier: str = "hbm"

    def __post_init__(self) -> None:
        if self.tier not in PRESETS:
            raise BadInputError(f"tier must be one of {sorted(PRESETS)}, got {self.tier!r}")
        if self.roofline.arch.is_moe:
            raise BadInputError(f"RooflineDecodeCost needs a dense model (its step is linear in the batch); got {self.model!r}")

    @property
    def roofline(self):
        return _roofline(self.model, self.hardware)

    @property
    def kv_bytes_per_token(self) -> int:
        return int(self.roofline.arch.kv_bytes_per_token())

    copy_seconds = DecodeCostModel.copy_seconds
    blocks_in = DecodeCostModel.blocks_in

    def step_seconds(self, batch: int, read_tokens: float, fixed_extra_s: float = 0.0,
                     per_request_extra_s: float = 0.0) -> float:
        """One decode step of ``batch`` requests reading ``read_tokens`` slots each (a mean: may be
        fractional), plus the extra per-step and per-request costs; 0 for an empty batch."""
        if batch <= 0:
            return 0.0
        x = np.array([1.0, 0.0, 0.0, 0.0, batch, batch * read_tokens, batch], dtype=np.float64)
        return linear_step_seconds(self.roofline.coefficients(), x) + fixed_extra_s + batch * per_request_extra_s

    def sla(self, read_tokens: float, fixed_extra_s: float, per_request_extra_s: float, memory_batch: int,
            sla_s: float) -> dict:
        """The largest batch meeting both the memory bound and ``step_seconds <= sla_s`` (the step
        grows with the batch, so a bisection finds it); the same dict as :func:`sla_throughput`."""
        if sla_s <= 0 or memory_batch < 0:
            raise BadInputError(f"expected sla_s > 0 and memory_batch >= 0; got {sla_s!r}, {memory_batch!r}")

        def step(b: int) -> float:
            return self.step_seconds(b, read_tokens, fixed_extra_s, per_request_extra_s)

        if step(memory_batch) <= sla_s:
            batch, bound = int(memory_batch), "memory"
        else:
            lo, hi = 0, int(memory_batch)  # step(lo) <= sla (step(0) = 0), step(hi) > sla
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if step(mid) <= sla_s else (lo, mid)
            batch, bound = lo, "SLA"
        step_s = step(batch)
        return dict(batch=batch, bound=bound, step_s=step_s, tokens_per_s=batch / step_s if batch else 0.0)


@functools.lru_cache(maxsize=16)
def _roofline(model: str, hardware: str):
    return Roofline(model, hardware)


def sla_throughput(fixed_s: float, per_request_s: float, memory_batch: int, sla_s: float) -> dict:
    """Largest batch meeting both the memory and the TPOT SLA bound; its step time and throughput.

    SLA bound: ``fixed_s + B * per_request_s <= sla_s``; memory bound: ``B <= memory_batch``.
    Returns ``batch`` (0 when not even one request meets both), ``bound`` (``"memory"`` or
    ``"SLA"``, whichever is smaller; memory on a tie), ``step_s`` (the TPOT) and
    ``tokens_per_s = batch / step_s`` (each request emits one token per step).
    """
    if per_request_s <= 0 or fixed_s < 0 or sla_s <= 0 or memory_batch < 0:
        raise BadInputError(f"expected per_request_s > 0, fixed_s >= 0, sla_s > 0, memory_batch >= 0; got "
                            f"{per_request_s!r}, {fixed_s!r}, {sla_s!r}, {memory_batch!r}")
    # the relative slack keeps exact quotients (hand-computed configurations) from rounding down
    sla_batch = max(0, math.floor((sla_s - fixed_s) / per_request_s * (1 + 1e-12)))
    batch = min(int(memory_batch), sla_batch)
    bound = "memory" if memory_batch <= sla_batch else "SLA"
    step_s = fixed_s + batch * per_request_s
    return dict(batch=batch, bound=bound, step_s=step_s, tokens_per_s=batch / step_s if batch else 0.0)


def sla_comparison(st: dict, block_size: int, model: DecodeCostModel | RooflineDecodeCost, kv_budget_bytes: float,
                   sla_s: float) -> dict:
    """SLA-bound throughput of naive evict and vToken from one :func:`replay`'s statistics.

    Per request: the memory bound uses the peak blocks held per request (as the concurrency
    column); the step time uses the time-averaged slots read per request-step.  ``naive_masked``
    is naive evict with a kernel that skips dead slots (reads only live tokens; same memory): the
    main baseline, ``ratio``.  ``naive`` reads every retained slot, dead ones included:
    ``ratio_reads_dead``.
    """
    blocks = model.blocks_in(kv_budget_bytes, block_size)
    steps = st["naive"]["steps"]
    v = st["vtoken"]
    repacks = len(v["commit_moves"])
    # a repack call's fixed cost (Python, dispatch) is paid per call, whatever the batch: spread
    # over the table steps; the rest of its measured time and its copies scale with the requests
    fixed_repack_s = repacks * st["call_overhead_s"] / st["table_steps"]
    cpu_s = max(v["plan_s"] + v["commit_s"] - repacks * st["call_overhead_s"], 0.0) / v["steps"]
    copy_s = model.copy_seconds(v["commit_moves"]) / v["steps"]
    out = {}
    for name, table, read, fixed, extra in (
            ("naive", "naive", st["naive"]["read_steps"] / steps, 0.0, 0.0),
            ("vtoken", "vtoken", v["read_steps"] / v["steps"], fixed_repack_s, cpu_s + copy_s),
            ("naive_masked", "naive", st["live_steps"] / steps, 0.0, 0.0)):
        per_request_peak = st[table]["peak_total"] / st["requests"]
        memory_batch = int(blocks // per_request_peak)
        out[name] = model.sla(read, fixed, extra, memory_batch, sla_s)
        out[name].update(read_tokens=read, memory_batch=memory_batch)
    out.update(repack_fixed_s=fixed_repack_s, repack_cpu_s=cpu_s, repack_copy_s=copy_s)
    out["ratio"] = _ratio(out["vtoken"]["tokens_per_s"], out["naive_masked"]["tokens_per_s"])
    out["ratio_reads_dead"] = _ratio(out["vtoken"]["tokens_per_s"], out["naive"]["tokens_per_s"])
    return out


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else (math.inf if a > 0 else math.nan)
