"""Plain-Python reference of the planner's analytic stage (kvmm.plan._analytic), written from its
documented model: stack distances by the textbook Mattson stack, each combination evaluated on
its own, reference by reference and request by request.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from kvmm.sim.cost import cost_account
from kvmm.sim.load import arrival_times
from kvmm.sim.serving import resolve_serving
from kvmm.testing.models.stack_distance import mattson_distances
from kvmm.tiers.spec import preset

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


def stage1(trace, base, cands, instances, prices) -> dict:
    """Per combination (itertools.product order, last tier fastest): hit shares, TTFT estimate,
    hourly price, on the run's serving setup (kvmm.sim.serving.resolve_serving: its latency
    model, scheduler limits, GPU pool and GPU price).  Only private tiers when instances > 1
    (every level sees its instance's stream)."""

    cfg = base.with_(instances=instances)
    serving = resolve_serving(cfg)
    sched = {"chunked": serving.chunked_prefill, "budget": serving.max_num_batched_tokens,
             "max_seqs": serving.max_num_seqs, "threshold": serving.long_prefill_token_threshold}
    bt = int(trace.block_tokens)
    block_bytes = bt * serving.kv_bytes_per_token
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
    arrival = arrival_times(trace, serving, cfg)
    span = float(arrival[-1] - arrival[0])
    lam = n / span / instances
    gpu = serving.gpu_kv_bytes // block_bytes if base.gpu_prefix_cache else None
    kvb = serving.kv_bytes_per_token
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
        pre = [inp[r] - hit_tok[r] for r in range(n)]
        held = [max(offsets[r + 1] - offsets[r], -(-(inp[r] + out[r] - 1) // bt)) for r in range(n)]
        start, first, finish = replay(arrival, inp, pre, staged, out, held, instances, serving.latency, sched,
                                      serving.gpu_kv_bytes // block_bytes, base.fast_tier)
        wait = [start[r] - float(arrival[r]) for r in range(n)]
        per = [(finish[r] - first[r]) / (out[r] - 1) for r in range(n) if out[r] >= 2]
        tpot = float(np.quantile(per, 0.95)) if per else 0.0
        ew = float(np.mean(wait))
        exposed = 0.0
        total_run = sum(run_blocks)
        if total_run > 0 and np.quantile(staged, 0.95) > 0:
            mix = sum(rb * x for rb, x in zip(run_blocks, spb)) / total_run
            worst = max(x for rb, x in zip(run_blocks, lat) if rb > 0)
            rho_ch = lam * staged.mean() * mix
            stage95 = INF if rho_ch >= 1 else (worst + np.quantile(staged, 0.95) * mix) / (1 - rho_ch)
            exposed = max(0.0, stage95 - ew)
        ttft = float(np.quantile([first[r] - float(arrival[r]) for r in range(n)], 0.95)) + exposed
        pairs = [(base.fast_tier, instances)] + [(preset(c.kind).with_capacity(cap), 1 if c.shared else instances)
                                                 for c, cap in zip(cands, caps) if cap > 0]
        usd_h = cost_account(duration_s=3600.0, gpus=instances * serving.tp, tiers=pairs, input_tokens=0,
                             output_tokens=0, prices=prices, gpu_usd_per_hour=serving.gpu_usd_per_hour).total_usd
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


def replay(arrival, inp, pre, staged, out, held, instances, latency, sched, pool, fast) -> tuple[list, list, list]:
    """The documented step replay (kvmm/plan/_replay.py, docs/plan.md), one step at a time with
    every sequence's own context: per instance (request r on r mod instances), in arrival order.

    ``latency``: a LatencyModel (its ``step_seconds`` times each step from the step's arrays);
    ``sched``: ``chunked``, ``budget`` (max_num_batched_tokens), ``max_seqs``, ``threshold``
    (long_prefill_token_threshold, 0: none); ``pool``: GPU blocks; ``fast``: the fast tier spec.

    Chunked: each running decode takes one token of the step's budget; then the partly prefilled
    requests in admission order, then queued ones in arrival order while tokens are left, fewer
    than max_seqs sequences run and the pool holds their ``held`` blocks (the first always fits
    when nothing holds blocks); a prefill takes min(tokens left to compute, tokens left in the
    step, threshold).  Whole prefills: queued requests are admitted while fewer than max_seqs run,
    their prompts fit the budget (the first always) and the pool holds them (the first always
    when nothing runs).  A step lasts staged bytes of the requests it admits / fast read bandwidth
    + fast latency (when any) + step_seconds(chunks' new tokens, chunks' contexts, the running
    decodes' contexts).  Each running request decodes one token per step (its context grows by
    one); a request whose prompt is done gets its first token at the end of the step and joins
    the decodes with context = its prompt; it is done after out - 1 decode steps and frees its
    blocks.  Nothing running or admissible: wait for the next arrival.  Returns per request the
    admitting step's start, the first token and the last token times."""
    n = len(pre)
    start, first, finish = [None] * n, [None] * n, [None] * n
    cap = sched["threshold"] if sched["threshold"] > 0 else sched["budget"]
    for k in range(instances):
        mine = [r for r in range(n) if r % instances == k]
        now, queue, nxt = 0.0, [], 0
        running = {}  # decoding request -> [tokens still to come, context]
        partial = []  # [request, tokens computed] in admission order (chunked)
        while nxt < len(mine) or queue or running or partial:
            while nxt < len(mine) and arrival[mine[nxt]] <= now:
                queue.append(mine[nxt])
                nxt += 1
            used = sum(held[r] for r in running) + sum(held[r] for r, _ in partial)
            chunks, admitted = [], []  # chunks: (request, new tokens, context)
            if sched["chunked"]:
                left = sched["budget"] - len(running)
                for r, done in partial:
                    if left <= 0:
                        break
                    new = min(pre[r] - done, left, cap)
                    chunks.append((r, new, inp[r] - pre[r] + done))
                    left -= new
                room = sched["max_seqs"] - len(running) - len(partial)
                while queue and room > 0 and left > 0:
                    r = queue[0]
                    if used + held[r] > pool and (running or partial):
                        break
                    queue.pop(0)
                    used += held[r]
                    new = min(pre[r], left, cap)
                    chunks.append((r, new, inp[r] - pre[r]))
                    partial.append([r, 0])
                    admitted.append(r)
                    left -= new
                    room -= 1
            else:
                left = sched["budget"]
                while queue and len(running) + len(admitted) < sched["max_seqs"]:
                    r = queue[0]
                    if admitted and pre[r] > left:
                        break
                    if used + held[r] > pool and (running or admitted):
                        break
                    admitted.append(queue.pop(0))
                    chunks.append((r, pre[r], inp[r] - pre[r]))
                    used += held[r]
                    left -= pre[r]
            if not chunks and not running:
                now = max(now, float(arrival[mine[nxt]]))
                continue
            dt = 0.0
            load = sum(staged[r] for r in admitted)
            if load > 0:
                dt += load / fast.read_bandwidth + fast.latency_s
            dt += latency.step_seconds([int(c[1]) for c in chunks], [int(c[2]) for c in chunks],
                                       [int(v[1]) for v in running.values()])
            for r in admitted:
                start[r] = now
            now += dt
            for r in list(running):
                running[r][0] -= 1
                running[r][1] += 1
                if running[r][0] == 0:
                    finish[r] = now
                    del running[r]
            done_now = []
            for r, new, _ in chunks:
                if sched["chunked"]:
                    entry = next(e for e in partial if e[0] == r)
                    entry[1] += new
                    if entry[1] < pre[r]:
                        continue
                    partial.remove(entry)
                done_now.append(r)
            for r in done_now:
                first[r] = now
                if out[r] <= 1:
                    finish[r] = now
                else:
                    running[r] = [out[r] - 1, inp[r]]
    return start, first, finish


def pareto3(cost: list, ttft: list, tpot: list) -> list:
    """Indices no other point matches or beats on cost, TTFT and TPOT at once (of identical
    points the first), ascending."""
    keep = []
    for i in range(len(cost)):
        beaten = any(cost[j] <= cost[i] and ttft[j] <= ttft[i] and tpot[j] <= tpot[i]
                     and ((cost[j], ttft[j], tpot[j]) != (cost[i], ttft[i], tpot[i]) or j < i) for j in range(len(cost)))
        if not beaten:
            keep.append(i)
    return keep
