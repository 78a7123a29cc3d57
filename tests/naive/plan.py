"""Plain-Python reference of the planner's analytic stage (kvmm.plan._analytic), written from its
documented model: stack distances by the textbook Mattson stack, each combination evaluated on
its own, reference by reference and request by request.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from tests.naive.stack_distance import mattson_distances

INF = math.inf


def distances(ids: list, req: list, instances: int) -> tuple[list, list]:
    """(per-instance, global) stack distances (inf for a first reference); request r runs on
    instance r mod instances."""
    def run(keys):
        return [INF if d < 0 else d for d in mattson_distances(keys)]
    glob = run(ids)
    local = [None] * len(ids)
    for i in range(instances):
        sel = [k for k, r in enumerate(req) if r % instances == i]
        for k, d in zip(sel, run([ids[k] for k in sel])):
            local[k] = d
    return local, glob


def stage1(trace, model, base, cands, instances, prices) -> dict:
    """Per combination (itertools.product order, last tier fastest): hit shares, TTFT estimate,
    hourly price.  Only private tiers when instances > 1 (every level sees its instance's stream)."""
    from kvmm.cluster.cost import cost_account
    from kvmm.sim.load import arrival_times
    from kvmm.tiers.spec import preset

    bt = int(trace.block_tokens)
    block_bytes = bt * model.kv_bytes_per_token
    offsets = [int(x) for x in trace.block_offsets]
    n = len(offsets) - 1
    ids, req, weight = [], [], []
    inp = [max(int(x), 1) for x in trace.input_length]
    out = [max(int(x), 1) for x in trace.output_length]
    for r in range(n):
        for j, k in enumerate(range(offsets[r], offsets[r + 1])):
            ids.append(int(trace.block_ids[k]))
            req.append(r)
            top = inp[r] - 1
            weight.append(min((j + 1) * bt, top) - min(j * bt, top))
    local, glob = distances(ids, req, instances)
    d = local if instances > 1 else glob
    arrival = arrival_times(trace, model, base.with_(instances=instances))
    span = float(arrival[-1] - arrival[0])
    lam = n / span / instances
    gpu = base.gpu_kv_bytes // block_bytes if base.gpu_prefix_cache else None
    dpt = model.decode_step_seconds(model.max_batch) / model.max_batch
    kvb = model.kv_bytes_per_token
    spb, lat = [], []
    for c in cands:
        s = preset(c.kind)
        spb.append(1.0 / min(s.read_bandwidth * base.stage_efficiency, base.fast_tier.write_bandwidth))
        lat.append(s.latency_s)
    rows = []
    for caps in itertools.product(*[c.capacities() for c in cands]):
        blocks = [cap // block_bytes for cap in caps]
        levels = ([gpu] if gpu is not None else []) + blocks
        first_tier = 1 if gpu is not None else 0
        served = [0] * len(cands)
        big = max(levels)
        run_blocks = [0] * len(cands)
        hit_tok = [0.0] * n
        gpu_tok = [0.0] * n
        cm = -1.0
        for k in range(len(ids)):
            if k == 0 or req[k] != req[k - 1]:
                cm = -1.0
            cm = max(cm, d[k])
            level = next((i for i, cap in enumerate(levels) if d[k] < cap), None)
            if level is not None and level >= first_tier:
                served[level - first_tier] += 1
                if cm < big:
                    run_blocks[level - first_tier] += 1
            if cm < big:
                hit_tok[req[k]] += weight[k]
            if gpu is not None and cm < gpu:
                gpu_tok[req[k]] += weight[k]
        staged = np.array([(h - g) * kvb for h, g in zip(hit_tok, gpu_tok)])
        s = np.array([(inp[r] - hit_tok[r]) / model.prefill_tokens_per_s + staged[r] / base.fast_tier.read_bandwidth
                      for r in range(n)])
        b = s + np.array(out) * dpt
        # one FCFS server per instance over the trace's own arrivals: the wait before its work starts
        free = [-INF] * instances
        wait, starts = [], []
        for r in range(n):
            start = max(float(arrival[r]), free[r % instances])
            wait.append(start - float(arrival[r]))
            starts.append(start)
            free[r % instances] = start + b[r]
        tpot = _tpot(model, lam, s, starts, out, instances)
        ew = float(np.mean(wait))
        exposed = 0.0
        total_run = sum(run_blocks)
        if total_run > 0 and np.quantile(staged, 0.95) > 0:
            mix = sum(rb * x for rb, x in zip(run_blocks, spb)) / total_run
            worst = max(x for rb, x in zip(run_blocks, lat) if rb > 0)
            rho_ch = lam * staged.mean() * mix
            stage95 = INF if rho_ch >= 1 else (worst + np.quantile(staged, 0.95) * mix) / (1 - rho_ch)
            exposed = max(0.0, stage95 - ew)
        ttft = float(np.quantile(np.array(wait) + s, 0.95)) + exposed
        pairs = [(base.fast_tier, instances)] + [(preset(c.kind).with_capacity(cap), 1 if c.shared else instances)
                                                 for c, cap in zip(cands, caps) if cap > 0]
        usd_h = cost_account(duration_s=3600.0, gpus=instances, tiers=pairs, input_tokens=0, output_tokens=0,
                             prices=prices, gpu_usd_per_hour=model.gpu_usd_per_hour).total_usd
        rows.append({"caps": caps, "hit": [x / len(ids) for x in served], "ttft": ttft, "usd_h": usd_h, "tpot": tpot})
    return {"rows": rows, "refs": len(ids)}


def pareto(cost: list, latency: list) -> list:
    """Indices not dominated: no other point at most as dear and strictly faster, or cheaper and
    as fast; among equal (cost, latency) the first; sorted by cost."""
    keep = []
    for i in range(len(cost)):
        dominated = any((cost[j] <= cost[i] and latency[j] < latency[i]) or
                        (cost[j] < cost[i] and latency[j] <= latency[i]) or
                        (cost[j] == cost[i] and latency[j] == latency[i] and j < i) for j in range(len(cost)))
        if not dominated:
            keep.append(i)
    return sorted(keep, key=lambda i: (cost[i], latency[i]))


def cummax_by_group(b: list, group: list) -> list:
    out, cur = [], None
    for k, (x, g) in enumerate(zip(b, group)):
        cur = x if k == 0 or g != group[k - 1] else max(cur, x)
        out.append(cur)
    return out


def _tpot(model, lam, s, starts, out, instances) -> float:
    """p95 over requests with >= 2 output tokens of: (out - 1) decode steps at the Little's-law
    batch plus the prefill seconds its instance starts during its decode, per token."""
    rho_p = lam * float(np.mean(s))
    if rho_p >= 1:
        return INF
    b, step = 1.0, 0.0
    for _ in range(50):
        step = model.decode_step_seconds(b) / (1 - rho_p)
        b = min(max(lam * float(np.mean(out)) * step, 1.0), model.max_batch)
    d = model.decode_step_seconds(b)
    per = []
    for r in range(len(out)):
        if out[r] < 2:
            continue
        first = starts[r] + s[r]
        span = (out[r] - 1) * step
        for _ in range(2):
            pre = sum(s[q] for q in range(r + 1, len(out)) if q % instances == r % instances and starts[q] < first + span)
            span = (out[r] - 1) * d + pre
        per.append(span / (out[r] - 1))
    return float(np.quantile(per, 0.95)) if per else 0.0
