"""Tiny hand-made traces and specs for simulator tests (round numbers, times easy to derive)."""

from __future__ import annotations

import numpy as np

from kvmm.sim.config import SimConfig, TierLevel
from kvmm.sim.models import ModelSpec
from kvmm.tiers.spec import TierSpec
from kvmm.traces.mooncake import MooncakeTrace

# 1000 prefill tokens/s, 1000 KV bytes per token, one prompt per step (budget 4096 tokens)
TOY_MODEL = ModelSpec("toy", prefill_tokens_per_s=1000.0, decode_tokens_per_s=100.0, decode_batch_cost=0.0,
                      kv_bytes_per_token=1000, max_batch=8, max_prefill_tokens=4096)
TOY_SLOW = TierSpec("toy-slow", 10**12, read_bandwidth=1e6, write_bandwidth=1e6, latency_s=0.01)
TOY_FAST = TierSpec("toy-fast", 10**8, read_bandwidth=1e7, write_bandwidth=1e7, latency_s=0.0)


def trace(rows) -> MooncakeTrace:
    """rows: (timestamp_ms, input_length, output_length, block ids)."""
    offsets = np.cumsum([0] + [len(r[3]) for r in rows]).astype(np.int64)
    return MooncakeTrace("toy", np.array([r[0] for r in rows], dtype=np.int64), np.array([r[1] for r in rows], dtype=np.int64),
                         np.array([r[2] for r in rows], dtype=np.int64), offsets,
                         np.array([b for r in rows for b in r[3]], dtype=np.int64))


#: r0 computes blocks 0,1; r1 (long, unrelated) occupies the engine from 5.0 s to 9.096 s;
#: r2 arrives at 5.001 s, hits blocks 0,1 (1024 tokens = 1,024,000 bytes) in the slow tier.
QUEUED_HIT = trace([
    (0, 1024, 1, [0, 1]),
    (5000, 4096, 1, list(range(10, 18))),
    (5001, 1536, 1, [0, 1, 2]),
])


def toy_config(policy: str, workload=QUEUED_HIT, **kw) -> SimConfig:
    """A toy run: trace timestamps as given (load=None), no GPU prefix cache, one slow tier."""
    kw.setdefault("gpu_prefix_cache", False)
    kw.setdefault("gpu_kv_bytes", 10**9)
    kw.setdefault("load", None)
    kw.setdefault("recompute_fallback", True)
    kw.setdefault("stage_efficiency", 1.0)
    kw.setdefault("model", TOY_MODEL)
    kw.setdefault("fast_tier", TOY_FAST)
    kw.setdefault("tiers", (TierLevel(TOY_SLOW),))
    return SimConfig(workload=workload, policy=policy, **kw)


def run_engine(cfg: SimConfig):
    """``(SimResult, Instance)`` of a one-instance run (tests read the request table and the
    instance's parts)."""
    from kvmm.sim.simulator import simulate

    engines = []
    res = simulate(cfg, engine_hook=engines.append)
    return res, engines[0]


def make_engine(cfg: SimConfig, **kw):
    """An instance built but not run (tests drive its pieces)."""
    from kvmm.policies.staging.ledger import CommitmentLedger
    from kvmm.sim.engine import Instance, RequestTable
    from kvmm.sim.load import arrival_times
    from kvmm.sim.serving import resolve_serving
    from kvmm.sim.simulator import resolve_trace

    t = resolve_trace(cfg.workload, cfg.max_requests)
    serving = resolve_serving(cfg)
    table = RequestTable(t, arrival_times(t, serving, cfg), priority_share=cfg.high_priority_share,
                         priority_seed=cfg.priority_seed)
    return Instance(cfg, serving, table, CommitmentLedger, None, **kw)


def finish(eng):
    """Run a built instance to the end and return its SimResult."""
    from kvmm.sim.results import collect
    from kvmm.sim.simulator import prompt_tokens

    end = eng.run()
    return collect(eng.cfg, eng.serving, [eng], [eng.table], eng.table.arrival, end, prompt_tokens(eng.table.trace))
