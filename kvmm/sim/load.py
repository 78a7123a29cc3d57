"""Load control: rescale a trace's arrivals so the offered work is a chosen share of capacity.

``offered_seconds(trace, model)`` estimates the engine time the requests need on an ideal
hierarchy (every block computed once, reused for free afterwards):

* prefill of each request's *new* tokens (blocks not seen earlier in the trace) at the model's
  prefill rate, and
* its output tokens at the per-sequence cost of a full decode batch
  (``decode_step_seconds(max_batch) / max_batch``).

``load = offered_seconds / (instances x arrival span)`` (with PD: prefill + decode instances): the arrivals (their gaps, order kept) are
stretched or compressed by one factor to reach the target.  The estimate ignores reading hits
and imperfect batching, so the engine saturates somewhat below ``load = 1``; the simulator warns
(:class:`~kvmm.sim.engine.QueueGrowthWarning`) when the queue grows without bound.
"""

from __future__ import annotations

import numpy as np

from kvmm.sim.models import ModelSpec
from kvmm.traces.mooncake import MooncakeTrace

__all__ = ["offered_seconds", "decode_seconds", "arrival_times"]


def offered_seconds(trace: MooncakeTrace, model: ModelSpec) -> float:
    """Engine seconds of work the trace offers (see the module docstring).  O(blocks log blocks)."""
    n = trace.num_requests
    ids = trace.block_ids
    if ids.size:
        _, first = np.unique(ids, return_index=True)
        owner = np.repeat(np.arange(n), np.diff(trace.block_offsets))
        new_blocks = np.bincount(owner[first], minlength=n)
    else:
        new_blocks = np.zeros(n, dtype=np.int64)
    new_tokens = np.minimum(new_blocks * int(trace.block_tokens), np.maximum(trace.input_length, 1))
    return float(new_tokens.sum()) / model.prefill_tokens_per_s + decode_seconds(trace, model)


def decode_seconds(trace: MooncakeTrace, model: ModelSpec) -> float:
    """The decode part of :func:`offered_seconds`: every output token at the per-sequence cost of
    a full decode batch.  O(requests)."""
    decode = model.decode_step_seconds(model.max_batch) / model.max_batch
    return float(np.maximum(trace.output_length, 1).sum()) * decode


def arrival_times(trace: MooncakeTrace, model: ModelSpec, cfg) -> np.ndarray:
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
    return t * (offered_seconds(trace, model) / (cfg.load * span * instances))
