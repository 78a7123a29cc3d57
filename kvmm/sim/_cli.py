"""``kvmm simulate``: replay a trace through the serving simulator under staging policies."""

from __future__ import annotations

import argparse
import json

POLICIES = ("on-demand", "immediate", "timely")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trace", default="conversation",
                        help="bundled trace name (conversation, synthetic) or a Mooncake JSONL path (default conversation)")
    parser.add_argument("--workload-ratio", type=float, default=None, metavar="R",
                        help="instead of a trace, a seeded shared-prefix workload with prefix-cache ratio R")
    parser.add_argument("--rate", type=float, default=3.0, help="arrivals per second of the seeded workload (default 3)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated workload (default 0)")
    parser.add_argument("--requests", type=int, default=1000, help="replay the first N requests (default 1000)")
    parser.add_argument("--time-scale", type=float, default=1.0, help="multiply inter-arrival times (default 1)")
    parser.add_argument("--model", default="llama3-8b", help="model spec name (default llama3-8b)")
    parser.add_argument("--policy", default="all", choices=POLICIES + ("all",), help="staging policy (default: all three)")
    parser.add_argument("--fast-gib", type=float, default=100.0, help="protected fast-tier capacity in GiB (default 100)")
    parser.add_argument("--fast-tier", default="cxl", help="fast-tier preset (default cxl)")
    parser.add_argument("--slow-tier", default="nvme", help="slow-tier preset (default nvme)")
    parser.add_argument("--gpu-cache-gib", type=float, default=8.0, help="GPU prefix cache in GiB (default 8)")
    parser.add_argument("--high-priority-share", type=float, default=0.0, metavar="F",
                        help="share of requests in a high-priority class that jumps the queue (default 0)")
    parser.add_argument("--no-recompute", action="store_true",
                        help="never recompute a hit instead of waiting for its staging (default: recompute when faster)")
    parser.add_argument("--jobs", type=int, default=1, help="parallel runs (process pool) when several policies run")
    parser.add_argument("--json", action="store_true", help="print results as JSON lines")
    parser.add_argument("--no-progress", action="store_true", help="do not draw a progress bar")


def run(args: argparse.Namespace) -> int:
    from kvmm._progress import Progress
    from kvmm.errors import BadInputError
    from kvmm.report import format_table
    from kvmm.sim.simulator import GiB, SimConfig, simulate
    from kvmm.sim.sweep import sweep
    from kvmm.sim.workload import Workload
    from kvmm.tiers.spec import preset

    if args.fast_gib <= 0 or args.gpu_cache_gib < 0 or args.requests < 1 or args.jobs < 1:
        raise BadInputError("--fast-gib must be > 0, --gpu-cache-gib >= 0, --requests and --jobs >= 1")
    if args.workload_ratio is not None:
        workload = Workload(num_requests=args.requests, arrival_rate=args.rate, prefix_ratio=args.workload_ratio, seed=args.seed)
    else:
        workload = args.trace
    policies = POLICIES if args.policy == "all" else (args.policy,)
    configs = [SimConfig(workload=workload, max_requests=args.requests, time_scale=args.time_scale, model=args.model,
                         policy=p, fast_tier=preset(args.fast_tier, int(args.fast_gib * GiB)),
                         slow_tier=preset(args.slow_tier), gpu_cache_bytes=int(args.gpu_cache_gib * GiB),
                         high_priority_share=args.high_priority_share, recompute_fallback=not args.no_recompute)
               for p in policies]
    if args.jobs > 1 and len(configs) > 1:
        with Progress(len(configs), "simulate (runs)", enabled=not args.no_progress) as bar:
            results = sweep(configs, max_workers=args.jobs, progress=bar.update)
    else:
        results = []
        for c in configs:
            with Progress(args.requests, f"simulate {c.policy}", enabled=not args.no_progress) as bar:
                results.append(simulate(c, progress=bar.update))
    if args.json:
        for r in results:
            print(json.dumps(r.as_dict()))
        return 0
    rows = [(r.policy, r.requests, round(r.output_tokens_per_s, 1), round(r.ttft_p50, 3), round(r.ttft_p95, 3),
             round(r.ttft_p99, 3), round(r.protected_byte_seconds_per_request / GiB, 4), round(r.peak_protected_bytes / GiB, 2),
             f"{r.ready_in_time}/{r.ready_in_time + r.ready_late}", r.claims_recomputed) for r in results]
    print(format_table(["policy", "requests", "output tok/s", "TTFT p50 s", "TTFT p95 s", "TTFT p99 s",
                        "protected GiB*s / req", "peak protected GiB", "ready in time", "recomputed"], rows))
    return 0
