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

from kvmm.sim import ClusterConfig, GiB, PDConfig, SimConfig, TierLevel, simulate

FIELDS = ['label', 'policy', 'model', 'requests', 'duration_s', 'load', 'output_tokens_per_s', 'ttft_p50',
          'ttft_p95', 'ttft_p99', 'ttft_mean', 'tpot_p50', 'tpot_p95', 'ttft_p95_high_priority',
          'high_priority_requests', 'protected_byte_seconds', 'protected_byte_seconds_per_request',
          'peak_protected_bytes', 'fast_tier_bytes', 'claims', 'ready_in_time', 'ready_late', 'claims_cancelled',
          'claims_recomputed', 'slow_hit_token_share', 'gpu_hit_token_share', 'gpu_pool_blocks', 'gpu_lookup_hits',
          'gpu_lookup_queries', 'tier_block_hits', 'tier_blocks_offered', 'tier_evictions', 'steps', 'max_waiting',
          'max_running', 'tokens_evicted', 'kv_bytes_transferred', 'link_busy_share']

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
 "two-tiers-arc": SimConfig(max_requests=3000, tiers=[TierLevel("dram", capacity_bytes=64*GiB, eviction="arc"),
                                                      TierLevel("nvme", admission="refill-filter")], **OLD_CLOCK),
 "immediate": SimConfig(max_requests=3000, policy="immediate", load=0.9, **OLD_CLOCK),
 "on-demand-synth": SimConfig(workload="synthetic", max_requests=2000, policy="on-demand", **OLD_CLOCK),
 "wt-lru": SimConfig(max_requests=3000, policy="write-through-lru", **OLD_CLOCK),
 "pd": SimConfig(max_requests=2000, pd=PDConfig(2, 2), **OLD_CLOCK),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_result_is_unchanged(name):
    assert digest(simulate(CONFIGS[name])) == DIGESTS[name]


# ---------------------------------------------------------------------- the engine split
# Digests of the modes the first table leaves out, over the fields above plus the cluster and
# staging-wait ones, as the engine before its split into parts gave them (commit 884814d: one
# Engine class, PD's own event heap, the cluster driver in kvmm.cluster): compression, routed
# instances with write-back tiers and the block index, llm-d's weighted router, routed PD,
# advance notice with priority classes.  ``pd-routed``'s digest differs from 884814d's only in
# max_running (34; PD left it 0): every other field is 884814d's.  ``cluster-precise-writeback``
# names precise-prefix's rule of 884814d (the load-blind ablation, ties to the lowest index; its
# default balances as NVIDIA Dynamo since issue 31) and keeps 884814d's digest.
# ``cluster-weighted`` changed with llm-d's rule (issue 31): the precise prefix score is min-max
# normalised over the instances holding the first block and ties are shuffled (seeded), where
# 884814d took matched / request blocks and the lowest index (884814d's digest: eb4de0bb...).
MORE_FIELDS = ['demoted_blocks', 'instances', 'requests_per_instance', 'load_imbalance', 'queue_imbalance',
               'index_entries', 'fabric_bytes', 'staging_wait_s_mean', 'staging_wait_s_p95', 'staging_wait_s_total']

SPLIT_DIGESTS = {
    'compress': '8607d92454dc50b84d72834b91cb14f6',
    'cluster-precise-writeback': 'fe27e292b6ab39b8410d85dd1ccdda7b',
    'cluster-weighted': '77b0cd158d3f8fc2ef91b5efc240df18',
    'pd-routed': '10dbc4bca6245fd93422d2775304009f',
    'notice': 'dbd51ab2ba6cf80314cd56d41c48d22f',
}

SPLIT_CONFIGS = {
    "compress": SimConfig(max_requests=500, token_budget=2048, scorer="snapkv", **OLD_CLOCK),
    "cluster-precise-writeback": SimConfig(
        max_requests=2000, tiers=(TierLevel("dram", capacity_bytes=64 * GiB, fill="write-back"),),
        cluster=ClusterConfig(instances=4, router="precise-prefix", fabric="rdma400",
                              router_params={"balance": "none", "tie_break": "lowest"},  # the rule of 884814d
                              shared_tiers=(TierLevel("layer3.5", capacity_bytes=2 * 1024 * GiB, fill="write-back"),)),
        **OLD_CLOCK),
    "cluster-weighted": SimConfig(max_requests=2000, policy="on-demand", cluster=ClusterConfig(instances=3, router="weighted"),
                                  **OLD_CLOCK),
    "pd-routed": SimConfig(max_requests=1000, pd=PDConfig(2, 1, "rdma200", False),
                           cluster=ClusterConfig(instances=2, router="least-loaded"), **OLD_CLOCK),
    "notice": SimConfig(max_requests=1500, notice_s=2.0, policy="immediate", high_priority_share=0.2, **OLD_CLOCK),
}


@pytest.mark.parametrize("name", sorted(SPLIT_CONFIGS))
def test_result_is_what_the_engine_gave_before_its_split(name, recwarn):
    values = simulate(SPLIT_CONFIGS[name]).as_dict()
    got = hashlib.md5(repr([(k, values[k]) for k in FIELDS + MORE_FIELDS]).encode()).hexdigest()
    assert got == SPLIT_DIGESTS[name]
