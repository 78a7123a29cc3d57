"""What the cluster report section's modules share: the set-up, one config builder for every
cluster run, the registry that runs every simulation of the section in one sweep, and the
summaries the tables print.

Every cluster run of the section is ``cluster_config(w, n, design, router, seed, events)``:
llama-3.1-8b on one H200 per instance, load 0.7, the rdma400 fabric, and one of four lower-tier
designs at equal total capacity (private DRAM of total / n per instance, one shared pooled-dram
level, or that level laid out as a Mooncake-like store with a segment per instance and one or
two replicas).  Its key names every choice, so a run two tables need (the N = 8 private runs of
the shared-vs-private table are rows of the router table) is simulated once.
"""

from __future__ import annotations

import os
import warnings
from concurrent.futures import ProcessPoolExecutor

from kvmm.cluster import EventStream
from kvmm.errors import RunWarning
from kvmm.report import mean_pm, spread
from kvmm.sim import ClusterConfig, PooledStore
from kvmm.sim._sweep import sweep
from kvmm.sim.config import GiB, SimConfig, TierLevel
from kvmm.sim.engine import QueueGrowthWarning
from kvmm.traces.trace import KVTrace

TiB = 1024 * GiB
MODEL = "llama-3.1-8b"
LOAD = 0.7
TOTAL_CAPACITY = 2 * TiB  # the lower-tier capacity every design gets, whatever N
ROUTER_INSTANCES = 8
#: (label, router name, router_params, seeded): the routers of the router table, each with its
#: default options (the peers' defaults); ``seeded``: it breaks ties at random (or samples), so
#: its runs take a seed
ROUTER_SETTINGS = (
    ("round-robin", "round-robin", {}, False),
    ("least-loaded", "least-loaded", {}, False),
    ("session", "session", {}, False),
    ("approx-prefix (smg)", "approx-prefix", {}, True),
    ("approx-prefix (sgl-router-2025)", "approx-prefix", {"rule": "sgl-router-2025"}, True),
    ("precise-prefix (Dynamo balance)", "precise-prefix", {}, True),
    ("precise-prefix (load-blind ablation)", "precise-prefix", {"balance": "none"}, True),
    ("kv-cost (Dynamo)", "kv-cost", {}, True),
    ("weighted (llm-d precise)", "weighted", {}, True),
    ("weighted (llm-d approximate)", "weighted", {"profile": "approximate"}, True),
)
ROUTERS = {label: (name, params, seeded) for label, name, params, seeded in ROUTER_SETTINGS}
#: the affinity router the shared-vs-private comparison runs under besides round-robin
AFFINITY = "precise-prefix (Dynamo balance)"
#: lower-tier designs: label and the Mooncake-like store's replicas (None: not a store)
DESIGNS = {"private": None, "shared": None, "store r1": 1, "store r2": 2}
#: host RAM inside the GPU-hour price: Nebius's one-H200 VM (16 vCPUs, 200 GiB RAM) at $3.50/h
#: (kvmm/sim/latency/accelerators.py, the H200's usd_per_hour source)
VM_BUNDLED_RAM_GIB = 200


def cluster_config(w: KVTrace, n: int = ROUTER_INSTANCES, design: str = "private", router: str = "round-robin",
                   seed: int = 0, events=None) -> tuple[tuple, SimConfig]:
    """``(key, config)`` of one cluster run: trace window ``w`` on ``n`` instances, lower tier
    ``design`` (a key of :data:`DESIGNS`), router ``router`` (a label of :data:`ROUTER_SETTINGS`;
    ``seed`` passed to the seeded ones, ignored by the others) and KV event stream ``events``
    (``None``: the exact index)."""

    name, params, seeded = ROUTERS[router]
    params = dict(params, seed=seed) if seeded else dict(params)
    if events == EventStream():
        events = None  # the exact index, bit for bit (docs/cluster.md)
    if design == "private":
        tiers, shared, store = (TierLevel("dram", capacity_bytes=TOTAL_CAPACITY // n),), (), None
    else:
        tiers, shared = (), (TierLevel("pooled-dram", capacity_bytes=TOTAL_CAPACITY),)
        store = None if DESIGNS[design] is None else PooledStore.mooncake(replicas=DESIGNS[design])
    cfg = SimConfig(workload=w, load=LOAD, model=MODEL, tiers=tiers,
                    cluster=ClusterConfig(instances=n, router=name, router_params=params, fabric="rdma400",
                                          shared_tiers=shared, store=store, events=events))
    return ("cluster", w.name, n, design, router, seed if seeded else 0, events), cfg


def design_label(n: int, design: str) -> str:
    if design == "private":
        return f"private DRAM {TOTAL_CAPACITY // n // GiB} GiB x {n}"
    if design == "shared":
        return f"shared pooled-dram {TOTAL_CAPACITY // TiB} TiB"
    return f"Mooncake-like store, {n} segments, {DESIGNS[design]} replica{'s' if DESIGNS[design] > 1 else ''}"


class Runs:
    """Every simulation of the section, registered by key and run in one sweep on a process pool
    (the plan section's way: :func:`kvmm.sim._sweep.sweep`).  A key registered twice runs once.
    Runtime complexity: the sum of the runs, divided among the pool's workers."""

    def __init__(self) -> None:
        self.configs: dict = {}
        self.results: dict = {}

    def add(self, key, config: SimConfig):
        self.configs.setdefault(key, config)
        return key

    def cluster(self, *args, **kwargs):
        """Register :func:`cluster_config` ``(*args, **kwargs)``; its key."""
        return self.add(*cluster_config(*args, **kwargs))

    def run(self, report, workers: int | None = None) -> None:
        """Run every registered config not run yet (``workers``: pool size, default one per CPU;
        1: in this process).  The tables show what the run warnings say (queues in TTFT, idle
        instances in their own column), so the warnings are silenced, in the workers too."""

        keys = [k for k in self.configs if k not in self.results]
        workers = workers or os.cpu_count() or 2
        with report.progress(len(keys), "cluster: simulations") as bar, warnings.catch_warnings():
            quiet()
            if workers <= 1:
                out = sweep([self.configs[k] for k in keys], max_workers=1, progress=bar.update)
            else:
                with ProcessPoolExecutor(max_workers=workers, initializer=quiet) as pool:
                    out = sweep([self.configs[k] for k in keys], pool, progress=bar.update)
        self.results.update(zip(keys, out))

    def __getitem__(self, key):
        return self.results[key]

    def many(self, keys) -> list:
        return [self.results[k] for k in keys]


def quiet() -> None:
    """Ignore the simulator's overload and run warnings (a pool worker's initializer)."""

    warnings.simplefilter("ignore", QueueGrowthWarning)
    warnings.simplefilter("ignore", RunWarning)


# --------------------------------------------------------------------------- summaries
def hit(r) -> float:
    """Hit ratio: share of prompt tokens found in the GPU pool or read from a lower tier."""
    return r.gpu_hit_token_share + r.slow_hit_token_share


def usd_per_k_requests(r) -> float:
    """The whole bill (GPUs and every tier) per thousand requests."""
    return 1e3 * r.total_usd / r.requests


def usd_per_m_tokens(r) -> float:
    """The whole bill per million tokens, prompt and output together."""
    return 1e6 * r.total_usd / (r.cost.input_tokens + r.cost.output_tokens)


def bundled_dram_credit(r, n: int) -> float:
    """USD of ``r``'s bill for the DRAM (private ``dram`` or the ``pooled-dram`` pool, which lives
    in the nodes' own DRAM) that fits in the RAM each node's GPU VM already bundles
    (:data:`VM_BUNDLED_RAM_GIB` per node): what would not be billed again if the KV tier used it."""
    c = r.cost
    usd = 0.0
    for name, _count, price, gib_h in zip(c.tier_names, c.tier_counts, c.tier_usd_per_gib_hour, c.tier_gib_hours):
        if name in ("dram", "pooled-dram"):
            per_node = gib_h / (c.duration_s / 3600) / n  # GiB of this tier on each node
            usd += price * n * min(per_node, VM_BUNDLED_RAM_GIB) * c.duration_s / 3600
    return usd


def bill_columns(rs) -> tuple:
    """USD / 1k requests and USD / M tokens (the whole bill), then the prefill/decode split:
    USD / M input and USD / M output tokens (mean ± std)."""
    return (mean_pm([usd_per_k_requests(r) for r in rs], ".3f"), mean_pm([usd_per_m_tokens(r) for r in rs], ".4f"),
            mean_pm([r.usd_per_million_input_tokens for r in rs], ".4f"),
            mean_pm([r.usd_per_million_output_tokens for r in rs], ".3f"))


def hit_columns(rs) -> tuple:
    """GPU hit %, hit ratio %, TTFT p50 s, TTFT p95 s (mean ± std)."""
    return (mean_pm([r.gpu_hit_token_share for r in rs], ".1f", scale=100), mean_pm([hit(r) for r in rs], ".1f", scale=100),
            mean_pm([r.ttft_p50 for r in rs], ".3f"), mean_pm([r.ttft_p95 for r in rs], ".3f"))


def mean_of(rs, metric) -> float:
    return spread([metric(r) for r in rs])[0]


def hit_points(rs) -> float:
    """The mean hit ratio of ``rs``, in percent (what the section's sentences quote)."""
    return 100 * mean_of(rs, hit)


def p95_s(rs) -> float:
    """The mean TTFT p95 of ``rs``, in seconds."""
    return mean_of(rs, lambda r: r.ttft_p95)


def window(trace: KVTrace, start: int, n: int) -> KVTrace:
    """Requests ``[start, start + n)`` of ``trace`` as a trace of their own (views; offsets rebased).
    Runtime complexity: O(n)."""
    end = min(start + n, trace.num_requests)
    a, b = int(trace.block_offsets[start]), int(trace.block_offsets[end])
    return KVTrace(f"{trace.name}[{start}:{end}]", trace.timestamp_ms[start:end], trace.input_length[start:end],
                   trace.output_length[start:end], trace.block_offsets[start:end + 1] - a, trace.block_ids[a:b],
                   trace.bad_lines, trace.block_tokens, {k: c[start:end] for k, c in trace.columns.items()},
                   trace.source_format)
