"""Single-instance (and round-robin, PD) results stay bit-identical to before the cluster work,
on the old clock: the constant-rate model with whole prefills (``latency="constant"``, whose
default scheduler is the old one) and the old 96 GiB KV pool.

The md5 of each configuration's ``SimResult`` fields as they were at commit 28518b3 (before
``kvmm.cluster``; fields added since are not part of the digest) is pinned here: the engine's
event loop, the hierarchy and the collection were refactored for routed instances and
write-back demotion, then split into parts (request table, scheduler, staging controller,
clock, stats; PD as roles of the same loop), and none of that may change a result on the old
clock.

Deliberate model fixes that changed digests (each in its own commit, which says why):
``default``, ``instances4``, ``two-tiers-arc`` (timely staging): the ledger no longer learns idle
time between polls as a poll gap (its trigger fired early after every idle stretch).
``pd``: PD now reports ``max_running`` (the largest decode batch of any decode instance; it was
left 0); every other field is as before.
"""

from __future__ import annotations

import hashlib

import pytest

from kvmm.sim import GiB, PDConfig, SimConfig, TierLevel, simulate

FIELDS = ['label', 'policy', 'model', 'requests', 'duration_s', 'load', 'output_tokens_per_s', 'ttft_p50', 'ttft_p95', 'ttft_p99', 'ttft_mean', 'tpot_p50', 'tpot_p95', 'ttft_p95_high_priority', 'high_priority_requests', 'protected_byte_seconds', 'protected_byte_seconds_per_request', 'peak_protected_bytes', 'fast_tier_bytes', 'claims', 'ready_in_time', 'ready_late', 'claims_cancelled', 'claims_recomputed', 'slow_hit_token_share', 'gpu_hit_token_share', 'gpu_pool_blocks', 'gpu_lookup_hits', 'gpu_lookup_queries', 'tier_block_hits', 'tier_blocks_offered', 'tier_evictions', 'steps', 'max_waiting', 'max_running', 'tokens_evicted', 'kv_bytes_transferred', 'link_busy_share']

DIGESTS = {
    'default': '4f18c4525e8cfd3fa6e243f62aca6887',
    'instances4': '36555c0ed8052f0b92d647d547b972a2',
    'two-tiers-arc': 'a4ac86b064c9d4055884bbf2ba0c6732',
    'immediate': '70084b6a6a9e5dab32df77c3b4d70ac4',
    'on-demand-synth': '06935c099031bef71584ccb90ca364db',
    'wt-lru': '210098cad3e79cfa6fc0d55d6fc19fa3',
    'pd': 'aee7f0bdb21a770cb1d05bb636f14426'
}


def digest(result) -> str:
    values = result.as_dict()
    return hashlib.md5(repr([(k, values[k]) for k in FIELDS]).encode()).hexdigest()


OLD_CLOCK = dict(model="llama3-8b", latency="constant", chunked_prefill=False, gpu_kv_bytes=96 * GiB)

CONFIGS = {
 "default": SimConfig(**OLD_CLOCK),
 "instances4": SimConfig(instances=4, max_requests=3000, **OLD_CLOCK),
 "two-tiers-arc": SimConfig(max_requests=3000, tiers=[TierLevel("dram", capacity_bytes=64*GiB, eviction="arc"), TierLevel("nvme", admission="refill-filter")], **OLD_CLOCK),
 "immediate": SimConfig(max_requests=3000, policy="immediate", load=0.9, **OLD_CLOCK),
 "on-demand-synth": SimConfig(workload="synthetic", max_requests=2000, policy="on-demand", **OLD_CLOCK),
 "wt-lru": SimConfig(max_requests=3000, policy="write-through-lru", **OLD_CLOCK),
 "pd": SimConfig(max_requests=2000, pd=PDConfig(2, 2), **OLD_CLOCK),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_result_is_unchanged(name):
    assert digest(simulate(CONFIGS[name])) == DIGESTS[name]
