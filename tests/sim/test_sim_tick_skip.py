"""Fast-forwarding the staging controller's idle ticks changes nothing: the same SimResult with
and without it, for every staging policy, on configs where capacity is plentiful and short."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvmm.policies.staging.ledger import CommitmentLedger
from kvmm.sim.config import STAGING_NAMES, TierLevel
from kvmm.sim.engine.staging import LedgerStaging
from kvmm.sim.simulator import GiB, SimConfig, simulate
from kvmm.tiers.spec import preset
from kvmm.traces import agent_trace

CONFIGS = {
    "default-busy": SimConfig(workload="conversation", max_requests=300, load=0.95),
    # a small protected tier: pending claims wait for capacity (grants blocked between events)
    "short-capacity": SimConfig(workload="conversation", max_requests=300, load=0.9, fast_tier=preset("cxl", 2 * GiB),
                                margin_s=0.005, recompute_fallback=True),
    "two-tiers-priority": SimConfig(workload="conversation", max_requests=200, load=0.8, high_priority_share=0.3,
                                    tiers=(TierLevel("dram", capacity_bytes=8 * GiB, eviction="arc"),
                                           TierLevel("nvme", eviction="lru", admission="refill-filter"))),
    # advance notice: claims made before arrival (announcements are events the skip must not pass)
    "agents-notice": SimConfig(workload=agent_trace(num_agents=24, tasks=24, max_context_tokens=32_768), load=None,
                               time_scale=1.5, gpu_kv_bytes=16 * GiB, notice_s=2.0),
}


class CountingLedger(CommitmentLedger):
    polls = 0

    def poll(self, now, **kw):
        CountingLedger.polls += 1
        return super().poll(now, **kw)


def run(cfg, skip, monkeypatch):
    monkeypatch.setattr(LedgerStaging, "skip_idle_ticks", skip)
    CountingLedger.polls = 0
    res = simulate(cfg, ledger_factory=CountingLedger)
    return replace(res, load=0.0) if cfg.load is None else res, CountingLedger.polls  # load nan != nan


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("policy", STAGING_NAMES)
def test_same_result_with_and_without_tick_skipping(name, policy, monkeypatch):
    cfg = CONFIGS[name].with_(policy=policy)
    every_tick, polls_every = run(cfg, False, monkeypatch)
    skipping, polls_skip = run(cfg, True, monkeypatch)
    assert skipping == every_tick  # every field, floats to the bit
    assert polls_skip <= polls_every
    if policy == "timely":
        assert every_tick.claims > 0
        assert polls_skip < polls_every / 2  # most timely ticks change nothing and are skipped
