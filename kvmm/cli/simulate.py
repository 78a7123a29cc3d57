"""``kvmm simulate``: replay a trace through a hierarchy composed from kvmm's structures.

Spelling (each flag's bad part is named in a one-line error)::

    kvmm simulate --trace conversation --load 0.8 \\
        --tier dram:64GiB:arc:write-all --tier nvme:2TiB:lru:refill-filter \\
        --staging timely --scorer h2o --token-budget 2048

``--token-budget N`` compresses every request to N live tokens (``--scorer``, ``--repack-interval``).
``--pd PxD:LINK[:serial]``: P prefill and D decode instances joined by a link preset
(``kvmm.tiers.spec.LINK_PRESETS``); ``:serial`` sends the KV after the prefill instead of layer by
layer.  ``--tier PRESET[:SIZE[:EVICTION[:ADMISSION]]]`` (repeatable, fastest first): a tier preset
(``kvmm.tiers.PRESETS``), a size (``B``, ``KiB``..``TiB``, ``KB``..``TB``; ``-`` keeps the
preset's), an eviction order name (any of ``kvmm.policies.EVICTION_POLICIES`` but the offline ``belady``:
``lru``, ``fifo``, ``lfu``, ``arc``, ``clock``, ``s3fifo``, ``sieve``, ``2q``, ``lirs``, ``slru``, ``wtinylfu``;
see docs/eviction_orders.md) and an admission policy
name (``write-all``, ``store-threshold``, ``selective``, ``refill-filter``).  ``--staging``:
``on-demand``, ``immediate``, ``immediate-edf``, ``timely``, ``write-through-lru`` or ``all``.
``--load none`` replays the trace's own timestamps (times ``--time-scale``).

This module is imported only when ``kvmm simulate`` (or ``kvmm plan``, which shares its serving
flags) runs; the simulator itself (numba kernels) is imported when a run starts, so a bad flag or
``--help`` answers at once.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import warnings
from dataclasses import replace

from kvmm._progress import Progress
from kvmm._validate import MAX_INSTANCES, parse_bytes, short_repr
from kvmm.cluster.fabric import LINK_NAMES
from kvmm.errors import BadInputError, KvmmWarning, RunWarning
from kvmm.report import format_table
from kvmm.sim.cluster_config import ClusterConfig
from kvmm.sim.config import STAGING_NAMES as STAGING
from kvmm.sim.config import GiB, PDConfig, SimConfig, TierLevel, check_admission, check_eviction
from kvmm.sim.config_json import load_config
from kvmm.sim.cost import parse_prices
from kvmm.sim.latency.arch import ModelArch
from kvmm.sim.workload import Workload
from kvmm.tiers.spec import PRESETS, preset
from kvmm.traces.formats import load_trace


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trace", default="conversation",
                        help="bundled trace name (conversation, synthetic) or a trace file of any format kvmm reads "
                             "(Mooncake, Qwen-Bailian, LMCache, vLLM KV events, libCacheSim oracleGeneral; default conversation)")
    parser.add_argument("--format", default=None, metavar="FMT",
                        help="trace format: mooncake, bailian, lmcache, vllm, oracle (default: detected)")
    parser.add_argument("--workload-ratio", type=float, default=None, metavar="R",
                        help="instead of a trace, a seeded shared-prefix workload with prefix-cache ratio R")
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated workload (default 0)")
    parser.add_argument("--requests", type=int, default=1000, help="replay the first N requests (default 1000)")
    parser.add_argument("--load", default="0.7",
                        help="target utilisation: arrivals rescaled so offered work / capacity = LOAD (default 0.7); "
                             "'none' keeps the trace's timestamps")
    parser.add_argument("--time-scale", type=float, default=1.0, help="with --load none: multiply inter-arrival times")
    add_serving_arguments(parser)
    parser.add_argument("--tier", action="append", default=None, metavar="PRESET[:SIZE[:EVICTION[:ADMISSION]]]",
                        help="a lower tier PRESET[:SIZE[:EVICTION[:ADMISSION]]], fastest first (repeatable; default "
                             "nvme:-:lru:write-all); EVICTION: any order of kvmm.policies.EVICTION_POLICIES "
                             "but belady (lru, fifo, lfu, arc, clock, s3fifo, sieve, 2q, lirs, slru, wtinylfu)")
    parser.add_argument("--staging", "--policy", dest="staging", default="all",
                        help=f"staging policy: {', '.join(STAGING)} or all")
    parser.add_argument("--fast-tier", default="cxl:100GiB", metavar="PRESET[:SIZE]",
                        help="protected staging tier (default cxl:100GiB)")
    parser.add_argument("--no-gpu-prefix-cache", action="store_true", help="finished requests' blocks are not kept on the GPU")
    parser.add_argument("--instances", type=int, default=1,
                        help="colocated instances (default 1); without --router or --shared-tier requests are dealt "
                             "round-robin in advance, with either they are routed as they arrive (a cluster)")
    parser.add_argument("--router", default=None, metavar="NAME[:k=v,...]",
                        help="cluster routing: round-robin, least-loaded, session, approx-prefix, precise-prefix, "
                             "weighted, kv-cost, with options, e.g. kv-cost:router_temperature=0.5 or the load-blind "
                             "ablation precise-prefix:balance=none (docs/cluster_routers.md)")
    parser.add_argument("--shared-tier", action="append", default=None, metavar="PRESET[:SIZE[:EVICTION[:ADMISSION]]]",
                        help="a tier every instance shares, after the private --tier levels (repeatable; same "
                             "spelling as --tier)")
    parser.add_argument("--fabric", default=None,
                        help="the link from each instance to the shared tiers (kvmm.cluster.FABRIC_PRESETS; --pd's "
                             "link names too) or none (default rdma400; only with --shared-tier)")
    parser.add_argument("--fill", default="write-through", choices=("write-through", "write-back"),
                        help="how every --tier / --shared-tier level is filled: at prefill (write-through) or by "
                             "demotion of blocks evicted from the level above (write-back)")
    parser.add_argument("--exclusive", action="store_true", help="with --fill write-back: a block read into the GPU leaves "
                                                                 "the level (exclusive levels)")
    parser.add_argument("--index-max-entries", type=int, default=None, metavar="N",
                        help="entry budget of the cluster's global block index (default unbounded)")
    parser.add_argument("--price", default=None, metavar="NAME=AMOUNT/UNIT,...",
                        help="prices of the cost account, e.g. gpu=3.5/h,dram=0.004/GiBh,layer3.5=12/h "
                             "(units h, GiBh, GiBmo; docs/cost.md)")
    parser.add_argument("--pd", default=None, metavar="PxD:LINK[:serial]",
                        help="prefill/decode disaggregation, e.g. 2x4:rdma400 (links: nvlink, supernode, rdma200, "
                             "rdma400, cross-dc and --fabric's names; ':serial' turns layer-wise overlap off)")
    parser.add_argument("--token-budget", type=int, default=None, metavar="N",
                        help="decode-time token compression: live tokens kept per request (TokenTable + scorer)")
    parser.add_argument("--scorer", default="h2o", help="token scorer with --token-budget (h2o, scissorhands, snapkv, "
                                                        "streamingllm, random; default h2o)")
    parser.add_argument("--repack-interval", type=int, default=64, help="decode tokens between compressions (default 64)")
    parser.add_argument("--high-priority-share", type=float, default=0.0, metavar="F",
                        help="share of requests in a high-priority class that jumps the queue (default 0)")
    parser.add_argument("--recompute", action="store_true",
                        help="recompute a hit instead of waiting for its staging when that is faster (default off)")
    parser.add_argument("--jobs", type=int, default=1, help="parallel runs (process pool) when several policies run")
    parser.add_argument("--config", default=None, metavar="FILE",
                        help="replay the SimConfig in this JSON file as it is (kvmm.sim.config_json; what kvmm plan "
                             "writes as config.json); the other run-shaping flags must stay at their defaults")
    parser.add_argument("--json", action="store_true", help="print results as JSON lines")
    parser.add_argument("--no-progress", action="store_true", help="do not draw a progress bar")


def add_serving_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of what serves and its clock (``kvmm simulate`` and ``kvmm plan``): only the
    flags given override SimConfig's defaults (:func:`serving_fields`)."""
    parser.add_argument("--model", default=None,
                        help="model: a name of kvmm.sim.latency (llama-3.1-8b, llama-3.1-70b, qwen2.5-7b, qwen2.5-32b, "
                             "qwen3-30b-a3b, deepseek-v3; the old llama3-8b too; default llama-3.1-8b)")
    parser.add_argument("--model-config", default=None, metavar="PATH",
                        help="instead of --model: a Hugging Face config.json (or its folder) read by ModelArch.from_hf_config")
    parser.add_argument("--hardware", default=None, help="the GPU of every instance (kvmm.sim.latency.HARDWARE: H100, "
                                                         "H200, B200, A100-80GB, MI300X, L40S, ...; default H200)")
    parser.add_argument("--tp", type=int, default=None, help="tensor-parallel GPUs per instance (default 1)")
    parser.add_argument("--latency", default=None, metavar="roofline|constant|fitted:CSV",
                        help="the step clock: roofline (default), constant (the old rates: whole prefills unless "
                             "--chunked-prefill on), or fitted:STEPS.csv (fit_latency on measured steps; docs/latency.md)")
    parser.add_argument("--max-num-batched-tokens", type=int, default=None, metavar="N",
                        help="token budget of a scheduler step (default: vLLM's for the hardware)")
    parser.add_argument("--max-num-seqs", type=int, default=None, metavar="N",
                        help="sequences per step at most (default: vLLM's for the hardware)")
    parser.add_argument("--chunked-prefill", default=None, choices=("on", "off"),
                        help="chunked prefill (default on; off with --latency constant)")
    parser.add_argument("--long-prefill-token-threshold", type=int, default=None, metavar="N",
                        help="a prefill chunk takes at most N tokens of a step (default 0: no cap)")
    parser.add_argument("--gpu-memory-utilization", type=float, default=None, metavar="F",
                        help="share of each GPU's memory vLLM may use, for the KV pool from memory (default 0.9)")
    parser.add_argument("--kv-dtype", default=None, choices=("bf16", "fp16", "fp8"), help="KV cache dtype (default bf16)")
    parser.add_argument("--gpu-kv", default=None, metavar="SIZE",
                        help="GPU memory for the KV pool (default: from memory: gpu-memory-utilization x HBM x tp - "
                             "weights - activation reserve)")


def parse_size(text: str, what: str) -> int:
    """``64GiB`` -> bytes; a one-line error naming ``what`` otherwise (:func:`kvmm._validate.parse_bytes`)."""
    return parse_bytes(text, what)[0]


def parse_tier(text: str):
    """``PRESET[:SIZE[:EVICTION[:ADMISSION]]]`` -> TierLevel."""
    parts = text.split(":")
    if len(parts) > 4 or not parts[0]:
        raise BadInputError(f"--tier {text!r}: expected PRESET[:SIZE[:EVICTION[:ADMISSION]]]")
    if parts[0] not in PRESETS:
        raise BadInputError(f"--tier {text!r}: unknown preset {parts[0]!r}; expected one of {sorted(PRESETS)}")
    size = None if len(parts) < 2 or parts[1] in ("", "-") else parse_size(parts[1], f"--tier {text!r}")
    eviction = parts[2] if len(parts) > 2 and parts[2] else "lru"
    admission = parts[3] if len(parts) > 3 and parts[3] else "write-all"
    for check, value, what in ((check_eviction, eviction, "eviction"), (check_admission, admission, "admission")):
        try:
            check(value)
        except BadInputError as err:
            if "unknown" not in str(err):  # a known name refused for a reason (belady): say why
                raise BadInputError(f"--tier {text!r}: {err}") from None
            raise BadInputError(f"--tier {text!r}: unknown {what} policy {value!r}") from None
    return TierLevel(parts[0], eviction=eviction, admission=admission, capacity_bytes=size)


def parse_price_flag(text: str | None):
    """``--price NAME=AMOUNT/UNIT,...`` -> a :class:`kvmm.cluster.Prices` (``None`` when the flag
    was not given); a one-line error quoting the flag otherwise (``kvmm simulate`` and ``kvmm plan``)."""
    if text is None:
        return None

    try:
        return parse_prices(text, tier_names=PRESETS)  # every tier the flags can build is a preset
    except BadInputError as exc:
        raise BadInputError(f"--price {text!r}: {exc}") from None


def parse_pd(text: str):
    """``PxD:LINK[:serial]`` -> PDConfig."""
    m = re.fullmatch(r"(\d+)x(\d+):([\w.-]+)(:serial)?", text)
    if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1:
        raise BadInputError(f"--pd {text!r}: expected PxD:LINK[:serial] with P, D >= 1, e.g. 2x4:rdma400")
    if m.group(3) not in LINK_NAMES:
        raise BadInputError(f"--pd {text!r}: unknown link {m.group(3)!r}; expected one of {list(LINK_NAMES)} (the "
                            "names --fabric takes)")
    return PDConfig(int(m.group(1)), int(m.group(2)), m.group(3), layerwise_overlap=m.group(4) is None)


def with_fill(level, args: argparse.Namespace):
    """``level`` filled as ``--fill`` / ``--exclusive`` say."""
    if args.exclusive and args.fill != "write-back":
        raise BadInputError("--exclusive needs --fill write-back (a write-through level holds every prefilled block)")
    if args.fill == "write-through":
        return level
    return replace(level, fill="write-back", inclusive=not args.exclusive, capacity_bytes=None)


def parse_router(text: str):
    """``NAME[:k=v,...]`` -> (name, params); values are numbers where they parse as numbers."""
    name, _, rest = text.partition(":")
    params = {}
    for part in filter(None, rest.split(",")):
        key, eq, value = part.partition("=")
        if not eq or not key:
            raise BadInputError(f"--router {text!r}: bad option {part!r}; expected NAME[:key=value,...]")
        try:
            params[key] = int(value) if re.fullmatch(r"-?\d+", value) else float(value)
        except ValueError:
            params[key] = value
    return name, params


def parse_cluster(args: argparse.Namespace):
    """A ClusterConfig when --router or --shared-tier asks for routed instances, else None."""
    if args.fabric is not None and not args.shared_tier:
        warnings.warn(f"--fabric {args.fabric} is the link to shared tiers, and there is no --shared-tier: it is not used",
                      RunWarning, stacklevel=2)
    if args.router is None and not args.shared_tier:
        if args.index_max_entries is not None:
            raise BadInputError("--index-max-entries needs a cluster (--router or --shared-tier)")
        return None
    if args.pd and args.shared_tier:
        raise BadInputError("--pd with --shared-tier: PD mode models no lower tiers")

    name, params = parse_router(args.router or "round-robin")
    shared = tuple(with_fill(parse_tier(t), args) for t in (args.shared_tier or ()))
    fabric_flag = args.fabric if args.fabric is not None else "rdma400"
    fabric = None if fabric_flag.lower() == "none" else fabric_flag
    if fabric is not None:
        if fabric not in LINK_NAMES:
            raise BadInputError(f"--fabric {fabric_flag!r}: expected one of {list(LINK_NAMES)} (the names --pd "
                                "takes) or none")
    instances = parse_pd(args.pd).prefill_instances if args.pd else args.instances  # PD: routed prefill instances
    try:
        return ClusterConfig(instances=instances, router=name, router_params=params, shared_tiers=shared,
                             fabric=fabric, index_max_entries=args.index_max_entries)
    except (BadInputError, TypeError) as exc:
        raise BadInputError(f"--router {args.router!r}: {exc}") from None


def build_configs(args: argparse.Namespace) -> list:
    """The SimConfigs the flags describe (one per staging policy)."""
    if args.config is not None:
        return [config_file(args)]
    check_number_flags(args)
    load = None
    if args.load.lower() != "none":
        try:
            load = float(args.load)
        except ValueError:
            load = float("nan")
        if not 0.0 < load < float("inf"):
            raise BadInputError(f"--load {args.load!r}: expected a number > 0 or 'none'")
    staging = STAGING if args.staging == "all" else (args.staging,)
    if args.staging != "all" and args.staging not in STAGING:
        raise BadInputError(f"--staging {args.staging!r}: expected one of {', '.join(STAGING)} or all")
    fast = args.fast_tier.split(":")
    if fast[0] not in PRESETS or len(fast) > 2:
        raise BadInputError(f"--fast-tier {args.fast_tier!r}: expected PRESET[:SIZE] with a preset in {sorted(PRESETS)}")
    fast_spec = preset(fast[0], parse_size(fast[1], f"--fast-tier {args.fast_tier!r}") if len(fast) > 1 else None)
    # a cluster with shared tiers keeps no private lower tier unless --tier names one (the default
    # private nvme would sit in front of the shared pool and take its hits)
    tiers = tuple(parse_tier(t) for t in (args.tier or ([] if args.shared_tier else ["nvme"])))
    tiers = tuple(with_fill(lv, args) for lv in tiers)
    cluster = parse_cluster(args)
    instances = 1 if cluster is not None else args.instances
    prices = parse_price_flag(args.price)
    pd = parse_pd(args.pd) if args.pd else None
    if pd is not None:
        staging = ("timely",)  # PD runs model no lower tier and no staging: one run
    workload = args.trace if args.format is None else load_trace(args.trace, args.format)
    if args.workload_ratio is not None:
        workload = Workload(num_requests=args.requests, prefix_ratio=args.workload_ratio, seed=args.seed)
    serving = serving_fields(args)
    return [SimConfig(workload=workload, max_requests=args.requests, load=load,
                      time_scale=args.time_scale if load is None else 1.0, instances=instances,
                      cluster=cluster, prices=prices, gpu_prefix_cache=not args.no_gpu_prefix_cache,
                      tiers=tiers, fast_tier=fast_spec, policy=p, high_priority_share=args.high_priority_share,
                      recompute_fallback=args.recompute, pd=pd, token_budget=args.token_budget, scorer=args.scorer,
                      repack_interval=args.repack_interval, **serving)
            for p in staging]


def serving_fields(args: argparse.Namespace) -> dict:
    """The SimConfig fields of what serves (model, hardware, clock, scheduler, KV pool): only the
    flags given, so SimConfig's defaults hold otherwise."""
    fields: dict = {}
    if args.model is not None and args.model_config is not None:
        raise BadInputError("give --model or --model-config, not both")
    if args.model_config is not None:
        try:
            fields["model"] = ModelArch.from_hf_config(args.model_config)
        except BadInputError as exc:
            raise BadInputError(f"--model-config {args.model_config!r}: {exc}") from None
    elif args.model is not None:
        fields["model"] = args.model
    for flag, name in (("hardware", "hardware"), ("tp", "tp"), ("max_num_batched_tokens", "max_num_batched_tokens"),
                       ("max_num_seqs", "max_num_seqs"), ("long_prefill_token_threshold", "long_prefill_token_threshold"),
                       ("gpu_memory_utilization", "gpu_memory_utilization"), ("kv_dtype", "kv_dtype")):
        if getattr(args, flag) is not None:
            fields[name] = getattr(args, flag)
    if args.chunked_prefill is not None:
        fields["chunked_prefill"] = args.chunked_prefill == "on"
    if args.latency is not None:
        name, _, table = args.latency.partition(":")
        if name not in ("roofline", "constant", "fitted") or (name == "fitted") != bool(table):
            raise BadInputError(f"--latency {args.latency!r}: expected roofline, constant or fitted:STEPS.csv")
        fields["latency"] = name
        if table:
            fields["latency_table"] = table
    if args.gpu_kv is not None:
        gpu_kv_bytes = parse_size(args.gpu_kv, f"--gpu-kv {short_repr(args.gpu_kv)}")
        if gpu_kv_bytes < 1:
            raise BadInputError(f"--gpu-kv {args.gpu_kv!r}: expected a size > 0 such as 96GiB")
        fields["gpu_kv_bytes"] = gpu_kv_bytes
    for flag, value in (("--tp", args.tp), ("--max-num-batched-tokens", args.max_num_batched_tokens),
                        ("--max-num-seqs", args.max_num_seqs)):
        if value is not None and value < 1:
            raise BadInputError(f"{flag} {value}: expected an integer >= 1")
    if args.long_prefill_token_threshold is not None and args.long_prefill_token_threshold < 0:
        raise BadInputError(f"--long-prefill-token-threshold {args.long_prefill_token_threshold}: expected an integer >= 0")
    if args.gpu_memory_utilization is not None and not 0.0 < args.gpu_memory_utilization <= 1.0:
        raise BadInputError(f"--gpu-memory-utilization {args.gpu_memory_utilization}: expected a share in (0, 1]")
    return fields


def check_number_flags(args: argparse.Namespace) -> None:
    """Each integer and share flag in its range, or a one-line error naming that flag (the
    config's own checks would name its field, ``gpu_kv_bytes``, not the flag)."""
    counts = (("--requests", args.requests, 1), ("--jobs", args.jobs, 1), ("--instances", args.instances, 1),
              ("--repack-interval", args.repack_interval, 1), ("--seed", args.seed, 0),
              ("--token-budget", args.token_budget, 1), ("--index-max-entries", args.index_max_entries, 1))
    for flag, value, low in counts:
        if value is not None and value < low:
            raise BadInputError(f"{flag} {value}: expected an integer >= {low}")
    if args.instances > MAX_INSTANCES:
        raise BadInputError(f"--instances {args.instances}: expected at most {MAX_INSTANCES}")
    if not 0.0 <= args.high_priority_share <= 1.0:
        raise BadInputError(f"--high-priority-share {args.high_priority_share}: expected a share in [0, 1]")
    if not 0.0 < args.time_scale < float("inf"):
        raise BadInputError(f"--time-scale {args.time_scale}: expected a number > 0")


#: flags that only change how results are shown (allowed beside --config)
_DISPLAY_FLAGS = ("config", "json", "no_progress", "jobs")


def config_file(args: argparse.Namespace):
    """The SimConfig of ``--config FILE``; a one-line error if another run-shaping flag was given."""
    defaults = argparse.ArgumentParser()
    add_arguments(defaults)
    given = [f"--{k.replace('_', '-')}" for k, v in vars(defaults.parse_args([])).items()
             if k not in _DISPLAY_FLAGS and getattr(args, k, v) != v]
    if given:
        raise BadInputError(f"--config replays the file as it is; drop {', '.join(given)} (or edit the file)")
    return load_config(args.config)


def run(args: argparse.Namespace) -> int:
    """``kvmm simulate``: kvmm's own warnings (RunWarning, QueueGrowthWarning) each print as one
    line on stderr (``kvmm simulate: warning: ...``), once."""
    from kvmm.sim.engine.instance import QueueGrowthWarning  # numba: loaded when a run starts (module docstring)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            return _run(args)
        finally:
            seen = set()
            for w in caught:
                line = str(w.message)
                if issubclass(w.category, (KvmmWarning, QueueGrowthWarning)) and line not in seen:
                    seen.add(line)
                    print(f"kvmm simulate: warning: {line}", file=sys.stderr)
                elif not issubclass(w.category, (KvmmWarning, QueueGrowthWarning)):
                    warnings.showwarning(w.message, w.category, w.filename, w.lineno)


def _run(args: argparse.Namespace) -> int:
    # numba: loaded when a run starts (module docstring)
    from kvmm.sim._sweep import sweep
    from kvmm.sim.simulator import simulate

    configs = build_configs(args)
    if args.jobs > 1 and len(configs) > 1:
        with Progress(len(configs), "simulate (runs)", enabled=not args.no_progress) as bar:
            results = sweep(configs, max_workers=args.jobs, progress=bar.update)
    else:
        results = []
        for c in configs:
            with Progress(request_total(c), f"simulate {c.policy}", enabled=not args.no_progress) as bar:
                results.append(simulate(c, progress=bar.update))
    if args.json:
        for r in results:
            print(json.dumps(r.as_dict()))
        return 0
    print(serving_line(results[0]))
    if any(r.policy == "pd" for r in results):
        print(format_table(["serving", "requests", "TTFT p50 s", "TTFT p95 s", "TPOT p50 ms", "TPOT p95 ms", "KV over links GiB",
                            "busiest link busy"],
                           [(r.label, r.requests, round(r.ttft_p50, 3), round(r.ttft_p95, 3), round(1000 * r.tpot_p50, 1),
                             round(1000 * r.tpot_p95, 1), round(r.kv_bytes_transferred / GiB, 1),
                             f"{100 * r.link_busy_share:.1f} %") for r in results]))
        return 0
    tiers = results[0].cost.tier_names[1:1 + len(results[0].tier_read_blocks)] if results[0].cost else ()
    rows = [(r.policy, r.requests, f"{r.ttft_p50:.3f}", f"{r.ttft_p95:.3f}", f"{r.tpot_p50 * 1000:.1f}",
             f"{r.tpot_mean * 1000:.1f}", f"{r.protected_byte_seconds_per_request / GiB:.4f}",
             f"{r.peak_protected_bytes / GiB:.2f}", r.ready_in_time, r.ready_late,
             f"{100 * r.gpu_hit_token_share:.2f}", f"{100 * r.slow_hit_token_share:.2f}", *r.tier_read_blocks)
            for r in results]
    print(format_table(["staging", "requests", "TTFT p50 s", "TTFT p95 s", "TPOT p50 ms", "TPOT mean ms",
                        "protected GiB*s / req", "peak protected GiB", "claims ready in time", "claims ready late",
                        "prompt tokens hit on GPU %", "prompt tokens read from lower tiers %",
                        *(f"blocks read from {t}" for t in tiers)], rows))
    print("(claims ready in time / late: lower-tier hits whose KV was staged before / after the scheduler needed it; "
          "blocks read from a tier: KV blocks the prefills read from it)")
    if results[0].instances > 1 and configs[0].cluster is not None:
        print(format_table(["staging", "instances", "router", "requests per instance (min / max)", "load imbalance",
                            "queue imbalance", "fabric GiB", "index entries"],
                           [(r.policy, r.instances, _router_name(c), f"{min(r.requests_per_instance)} / "
                             f"{max(r.requests_per_instance)}", f"{r.load_imbalance:.2f}", f"{r.queue_imbalance:.2f}",
                             f"{r.fabric_bytes / GiB:.1f}", r.index_entries) for r, c in zip(results, configs)]))
    print(format_table(["staging", "GPU-hours", "GiB-hours per tier", "total USD", "USD / M input tok",
                        "USD / M output tok", "tok/s per USD/h"],
                       [(r.policy, f"{r.gpu_hours:.3f}",
                         ", ".join(f"{n} {g:.1f}" for n, g in zip(r.cost.tier_names, r.tier_gib_hours)),
                         f"{r.total_usd:.3f}", f"{r.usd_per_million_input_tokens:.4f}",
                         f"{r.usd_per_million_output_tokens:.4f}", f"{r.tokens_per_s_per_usd:.1f}") for r in results]))
    return 0


def serving_line(result) -> str:
    """One line: what the run served with (SimResult.serving)."""
    s = result.serving or {}
    gib = s.get("gpu_kv_bytes", 0) / (1 << 30)
    pool = f"{gib:.1f} GiB KV pool" + (" (from memory)" if s.get("gpu_kv_from_memory") else "")
    return (f"serving: {s.get('model')} on {s.get('hardware') or '-'} x tp {s.get('tp')}, {s.get('latency')} clock, "
            f"{'chunked' if s.get('chunked_prefill') else 'whole'} prefill, {s.get('max_num_batched_tokens')} tokens / "
            f"{s.get('max_num_seqs')} seqs per step, {pool}")


def request_total(config) -> int:
    """How many requests a run of ``config`` finishes (its progress bar's total): the trace's
    requests, at most ``max_requests``.  Not ``--requests``: a ``--config`` with ``max_requests``
    null replays the whole trace.  The trace is parsed once per process (the simulator's cache)."""
    from kvmm.sim.simulator import resolve_trace  # numba: loaded when a run starts (module docstring)

    return resolve_trace(config.workload, config.max_requests).num_requests


def _router_name(config) -> str:
    router = config.cluster.router
    return router if isinstance(router, str) else type(router).__name__
