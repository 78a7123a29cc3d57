"""Load control: rescale a trace's arrivals so the offered work is a chosen share of capacity.

``offered_seconds(trace, serving)`` estimates the GPU time the requests need on an ideal
hierarchy (every block computed once, reused for free afterwards), with the run's latency
model:

* the prefill of each request's *new* tokens (blocks not seen earlier in the trace) after its
  cached prefix (so the attention over a long cached context counts), one request at a time, and
* its output tokens at the per-sequence cost of a decode step at the *reference batch*: as many
  sequences as the GPU KV pool holds at the trace's mean context (prompt + half the output),
  at most ``max_num_seqs``, at that mean context.

With the constant-rate model (``latency="constant"``) this is the old estimate exactly: new
tokens at the prefill rate, output tokens at ``decode_step(max_batch) / max_batch``.

``load = offered_seconds / (instances x arrival span)`` (with PD: prefill + decode instances): the
arrivals (their gaps, order kept) are stretched or compressed by one factor to reach the target.
The estimate ignores reading hits and imperfect batching, so the engine saturates somewhat below
``load = 1``; the simulator warns (:class:`~kvmm.sim.engine.QueueGrowthWarning`) when the queue
grows without bound.
"""

from __future__ import annotations

import numpy as np

from kvmm.sim.engine.clock import ConstantClock, make_clock
from kvmm.traces.trace import KVTrace

__all__ = ["offered_seconds", "decode_seconds", "arrival_times", "new_tokens", "reference_batch"]


def offered_seconds(trace: KVTrace, serving, *, recompute_all: bool = False) -> float:
    """GPU seconds of work the trace offers (see the module docstring).  ``recompute_all``: every
    prompt token computed, none reused (the work with no cache at all).  O(blocks log blocks +
    requests) (one prefill time per request with a non-constant model)."""
    clock = make_clock(serving.latency)
    new = np.maximum(trace.input_length, 1) if recompute_all else new_tokens(trace)
    if isinstance(clock, ConstantClock):
        return float(new.sum()) / clock.prefill_rate + decode_seconds(trace, serving)
    inp = np.maximum(trace.input_length, 1)
    prefill = 0.0
    for tokens, prompt in zip(new.tolist(), inp.tolist()):
        if tokens:
            prefill += clock.prefill_seconds(tokens, prompt - tokens)
    return prefill + decode_seconds(trace, serving)


def new_tokens(trace: KVTrace) -> np.ndarray:
    """Per request: prompt tokens in blocks not seen earlier in the trace (at most its prompt)."""
    n = trace.num_requests
    ids = trace.block_ids
    if ids.size:
        _, first = np.unique(ids, return_index=True)
        owner = np.repeat(np.arange(n), np.diff(trace.block_offsets))
        new_blocks = np.bincount(owner[first], minlength=n)
    else:
        new_blocks = np.zeros(n, dtype=np.int64)
    return np.minimum(new_blocks * int(trace.block_tokens), np.maximum(trace.input_length, 1))


def reference_batch(trace: KVTrace, serving) -> tuple[int, int]:
    """``(sequences, mean context)`` of the decode batch the offered work is priced at: the
    sequences the GPU KV pool holds at the trace's mean context, within ``[1, max_num_seqs]``."""
    inp = np.maximum(trace.input_length, 1)
    out = np.maximum(trace.output_length, 1)
    context = int(round(float((inp + out / 2.0).mean()))) if trace.num_requests else 1
    pool_tokens = serving.gpu_kv_bytes // serving.kv_bytes_per_token
    return int(min(max(pool_tokens // max(context, 1), 1), serving.max_num_seqs)), context


def decode_seconds(trace: KVTrace, serving) -> float:
    """The decode part of :func:`offered_seconds`: every output token at the per-sequence cost
    of a decode step at the reference batch.  O(requests)."""
    clock = make_clock(serving.latency)
    outputs = float(np.maximum(trace.output_length, 1).sum())
    if isinstance(clock, ConstantClock):
        b = serving.max_num_seqs
        return outputs * (clock.step(0, 0, 0, b, 0, b)[1] / b)
    b, context = reference_batch(trace, serving)
    if clock.needs_arrays:
        per_token = clock.seconds((), (), np.full(b, context, dtype=np.int64)) / b
    else:
        per_token = sum(clock.step(0, 0, 0, b, b * context, b)) / b
    return outputs * per_token


def arrival_times(trace: KVTrace, serving, cfg) -> np.ndarray:
    """Arrival seconds from 0: the trace's timestamps, rescaled to ``cfg.load`` (or x ``time_scale``)."""
    t = trace.timestamp_ms.astype(np.float64) / 1000.0
    t = t - t[0] if t.size else t
    if cfg.load is None:
        return t * cfg.time_scale
    span = float(t[-1]) if t.size else 0.0
    if span <= 0.0:
        return t
    if cfg.pd is not None:
        instances = cfg.pd.instances
    elif getattr(cfg, "cluster", None) is not None:
        instances = cfg.cluster.instances
    else:
        instances = cfg.instances
    return t * (offered_seconds(trace, serving) / (cfg.load * span * instances))

