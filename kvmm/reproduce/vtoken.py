"""``kvmm reproduce --only vtoken``: naive token eviction vs token table + repacking (vToken).

A decode workload is replayed once per eviction policy (H2O, random, Scissorhands).  Every
request has a prompt, then decodes one token per step; whenever it holds more than its KV token
budget, the policy evicts its lowest-scored live tokens.  Attention rows come from a seeded
synthetic generator with heavy hitters (a few tokens with large, persistent logits) and a
recency bias.  The same eviction decisions drive two token tables:

* **naive evict**: a block goes back to the pool only when every token in it is dead (what
  block-granular paged memory does with token-level eviction);
* **vToken**: the same, plus a repack (``plan`` + ``commit``) every few steps.

Reported: KV blocks retained per request (time-averaged over decode steps), the largest number
of concurrent requests that fits a fixed block budget (from the peak blocks held per request),
tokens moved per freed block against the minimum possible for the same freed blocks, and
SLA-bound decode throughput from the simulator's physical clock (:class:`RooflineDecodeCost`, the
roofline step time of llama-3.1-8b on an H200; the section's earlier additive model,
:class:`DecodeCostModel`, is kept beside it in a "what the physical clock moved" table): the
largest batch that fits both the KV memory budget and a time-per-output-token SLA, for naive
evict and for vToken, with vToken charged for its repacking (planning, commit and data copies).
The main baseline is naive evict with an attention kernel that skips dead slots (same memory,
reads only live tokens); naive evict with a kernel that reads dead slots is a second column.
vToken's planning and commit CPU time is measured :data:`REPEATS` times per repack (on copies of
the table), so each throughput ratio is reported as mean ± std over those repetitions.
"""

from __future__ import annotations

import copy
import functools
import math
import threading
import time

import numpy as np

from kvmm.allocators.block_allocator import BlockAllocator
from kvmm.allocators.token_table import TokenTable
from kvmm.compress.pydoc_model import corpus_split, heldout_ids, load_model
from kvmm.compress.scorers import H2OScorer, RandomScorer, ScissorhandsScorer, select_victims
from kvmm.errors import BackendUnavailableError
from kvmm.report import mean_pm, plain_number
from kvmm.reproduce._vtoken_cost import (  # noqa: F401
    DecodeCostModel,
    RooflineDecodeCost,
    repetitions,
    sla_comparison,
    sla_ratios,
    sla_throughput,
)
from kvmm.reproduce._vtoken_sla import GIB, KV_BUDGETS_GIB, SLA_MS, report_sla
from kvmm.reproduce._vtoken_sla import fmt_ratio as _fmt_ratio
from kvmm.reproduce._vtoken_sla import fmt_repack as _fmt_repack

__all__ = ["DecodeCostModel", "RooflineDecodeCost", "ModelAttention", "SyntheticAttention", "replay", "repetitions", "reproduce",
           "sla_comparison", "sla_ratios", "sla_throughput", "workload"]

PAPER = {"blocks_reduction": "27.2 %-72.3 %", "concurrency": "up to 2x", "throughput": "up to 1.37x"}
REPEATS = 5  # timed repetitions of every repack (plan + commit) and of the per-call overhead
#: policies whose comparison with naive evict is degenerate by construction (marked in the tables)
DEGENERATE = {"random": "degenerate by construction: random victims scatter dead slots over every block, "
                        "so naive evict can free almost nothing"}


def workload(quick: bool) -> dict:
    """Sizes of the replay (quick: a few seconds)."""
    if quick:
        return dict(requests=8, block_size=16, prompt=(96, 320), decode=(48, 96), budget=64,
                    recent=16, repack_every=8, block_budget=2048, seed=7)
    # prompt + decode <= 1,024: the bundled model's training context
    return dict(requests=32, block_size=16, prompt=(256, 640), decode=(128, 383), budget=256,
                recent=32, repack_every=8, block_budget=8192, seed=7)


def policies(w: dict) -> list[tuple[str, object]]:
    return [
        ("H2O", lambda: H2OScorer(recent_window=w["recent"])),
        ("random", lambda: RandomScorer(seed=w["seed"], recent_window=w["recent"])),
        ("Scissorhands", lambda: ScissorhandsScorer(history_window=8, recent_window=w["recent"])),
    ]


class SyntheticAttention:
    """Seeded attention rows with heavy hitters and a recency bias.

    Each token gets an importance when it is created: 5 % are heavy hitters (logit ~ N(4, 0.5)),
    the rest N(0, 1).  A query at step ``t`` attends to live token ``j`` (position ``p_j``) with
    logit ``importance_j + 2 exp(-(t - p_j) / 24) + N(0, 0.5)``; rows are softmax-normalised.
    """

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.importance: dict[int, np.ndarray] = {}

    def add_tokens(self, seq: int, n: int) -> None:
        heavy = self.rng.random(n) < 0.05
        imp = np.where(heavy, self.rng.normal(4.0, 0.5, n), self.rng.normal(0.0, 1.0, n))
        old = self.importance.get(seq, np.zeros(0))
        self.importance[seq] = np.concatenate([old, imp])

    def rows(self, seq: int, live_positions: np.ndarray, now: int, queries: int = 1) -> np.ndarray:
        """``(1, queries, live)`` attention of the last ``queries`` positions up to ``now``."""
        imp = self.importance[seq][live_positions]
        out = np.empty((1, queries, live_positions.size))
        for q in range(queries):
            t = now - (queries - 1 - q)
            logits = imp + 2.0 * np.exp(-np.maximum(t - live_positions, 0) / 24.0) \
                + self.rng.normal(0.0, 0.5, live_positions.size)
            logits[live_positions > t] = -np.inf  # causal
            e = np.exp(logits - logits.max())
            out[0, q] = e / e.sum()
        return out


class ModelAttention:
    """Attention rows of the bundled pydoc-llama model on held-out text (needs the ``hf`` extra).

    Request ``seq`` is the held-out text from byte ``offsets[seq]``; its ``(T, T)`` attention is
    the model's causal softmax attention averaged over layers and heads, computed once in one
    forward pass over the request's whole length.  A row over the live tokens is that row
    restricted to them and renormalised (what softmax over the kept keys gives).
    """

    def __init__(self, lengths, seed: int) -> None:
        from kvmm.compress import hf  # the optional hf extra (torch, transformers): callers catch its absence

        model = load_model()
        span = len(corpus_split()[1])
        rng = np.random.default_rng(seed)
        self.matrices = []
        for length in lengths:
            ids = heldout_ids(int(length), int(rng.integers(0, span)))
            logits = hf.attention_logits(model, ids)
            causal = np.tril(np.ones((length, length), dtype=bool))
            mean = np.zeros((length, length))
            for layer in logits:
                z = np.where(causal[None], layer, -np.inf)
                z = np.exp(z - z.max(axis=-1, keepdims=True))
                mean += (z / z.sum(axis=-1, keepdims=True)).mean(axis=0)
            self.matrices.append((mean / len(logits)).astype(np.float32))

    def add_tokens(self, seq: int, n: int) -> None:
        """Nothing to do: the whole request was run through the model up front."""

    def rows(self, seq: int, live_positions: np.ndarray, now: int, queries: int = 1) -> np.ndarray:
        """``(1, queries, live)`` attention of the last ``queries`` positions up to ``now``."""
        matrix = self.matrices[seq]
        t = np.arange(now - queries + 1, now + 1)
        out = matrix[np.ix_(t, live_positions)].astype(np.float64)[None]
        return out / out.sum(axis=-1, keepdims=True)


def attention_source(w: dict, prompt, decode):
    """The model's attention when the ``hf`` extra is installed, else the synthetic rows; and its label."""
    if w.get("attention", "model") == "model":
        try:
            return ModelAttention(np.asarray(prompt) + np.asarray(decode) + 1, w["seed"] + 1), \
                "real: the bundled pydoc-llama model's attention on held-out text (mean over layers and heads)"
        except (ImportError, BackendUnavailableError) as exc:  # the hf extra is missing
            reason = f" (the hf extra is not installed: {exc})"
    else:
        reason = ""
    return SyntheticAttention(w["seed"] + 1), "synthetic: seeded heavy hitters + recency bias" + reason


def replay(make_scorer, w: dict, progress=None) -> dict:
    """Replay the workload with one policy; return per-table block statistics and repack costs."""
    rng = np.random.default_rng(w["seed"])
    n = w["requests"]
    bs = w["block_size"]
    prompt = rng.integers(w["prompt"][0], w["prompt"][1] + 1, size=n)
    decode = rng.integers(w["decode"][0], w["decode"][1] + 1, size=n)
    num_blocks = int(((prompt + decode) // bs + 2).sum())
    call_overhead_s = _warm_up(bs)  # loads the numba kernels before anything is timed
    tables = {"naive": TokenTable(BlockAllocator(num_blocks, bs)), "vtoken": TokenTable(BlockAllocator(num_blocks, bs))}
    scorer = make_scorer()
    attention, attention_label = _cached_attention(w, prompt, decode)
    seqs = list(range(n))
    for t in tables.values():
        for s in seqs:
            t.add_sequence(s)
    # prefill: the prompt's own attention (its last 8 queries) scores the prompt, then evict to budget
    for t in tables.values():
        t.append(seqs, prompt)
    for s in seqs:
        attention.add_tokens(s, int(prompt[s]))
        pos = np.arange(prompt[s])
        scorer.observe(s, attention=attention.rows(s, pos, int(prompt[s]) - 1, queries=8))
    # read_steps: sum over request-steps of the slots a paged kernel reads (context_lengths)
    # steps: request-steps; plan_s / commit_s: wall time of vToken's repacks (not of the frees of
    # empty blocks both tables do every step); commit_moves: moves applied per repack (one copy each)
    stats = {k: {"block_steps": 0, "steps": 0, "peak_total": 0, "read_steps": 0} for k in tables}
    stats["vtoken"].update(moves=0, min_moves=0, freed=0, dropped=0, plan_s=np.zeros(REPEATS),
                           commit_s=np.zeros(REPEATS), commit_moves=[])
    stats["live_steps"] = 0
    stats["call_overhead_s"] = call_overhead_s
    stats["attention"] = attention_label
    stats["table_steps"] = 0
    stats["full"] = {"block_steps": 0, "steps": 0, "peak_total": 0}
    active = list(seqs)
    step = 0
    evict_rows = []
    while active:
        stats["table_steps"] += 1
        # evict to budget (same decisions for both tables)
        evict_rows.clear()
        for s in active:
            victims = select_victims(scorer.scores(s), w["budget"])
            if victims.size:
                logical = np.flatnonzero(tables["vtoken"].live_mask(s))[victims]
                evict_rows.append((s, victims, logical))
        if evict_rows:
            ids = [s for s, _, _ in evict_rows]
            counts = [v.size for _, v, _ in evict_rows]
            flat = np.concatenate([p for _, _, p in evict_rows])
            for t in tables.values():
                t.evict_many(ids, counts, flat)
            for s, victims, _ in evict_rows:
                scorer.on_evict(s, victims)
        # block-granular memory: blocks whose tokens are all dead go back (no move needed)
        tables["naive"].commit(tables["naive"].plan(budget=0))
        if step % w["repack_every"] == 0:
            st = stats["vtoken"]
            for rep in range(1, REPEATS):  # timing repetitions on copies; the last one is the real repack
                _, plan_s, commit_s = _timed_repack(_copy_table(tables["vtoken"]), w.get("move_budget"))
                st["plan_s"][rep] += plan_s
                st["commit_s"][rep] += commit_s
            (plan, result), plan_s, commit_s = _timed_repack(tables["vtoken"], w.get("move_budget"))
            st["plan_s"][0] += plan_s
            st["commit_s"][0] += commit_s
            st["moves"] += result.applied
            st["min_moves"] += plan.min_moves
            st["freed"] += result.num_freed
            st["dropped"] += result.dropped.size
            st["commit_moves"].append(result.applied)
        else:
            tables["vtoken"].commit(tables["vtoken"].plan(budget=0))
        for name, t in tables.items():
            held = t.block_counts(active)
            stats[name]["block_steps"] += int(held.sum())
            stats[name]["steps"] += len(active)
            stats[name]["peak_total"] = max(stats[name]["peak_total"], t.total_blocks)
            stats[name]["read_steps"] += int(t.context_lengths(active).sum())
        stats["live_steps"] += int(tables["vtoken"].live_counts(active).sum())
        full = -(-(prompt[active] + step) // bs)
        stats["full"]["block_steps"] += int(full.sum())
        stats["full"]["steps"] += len(active)
        stats["full"]["peak_total"] = max(stats["full"]["peak_total"], int(full.sum()))
        # finish requests, then decode one token for the rest
        done = [s for s in active if step >= decode[s]]
        for s in done:
            for t in tables.values():
                t.free_sequence(s)
            scorer.forget(s)
            active.remove(s)
        if not active:
            break
        for t in tables.values():
            t.append(active, np.ones(len(active), dtype=np.int64))
        for s in active:
            attention.add_tokens(s, 1)
            live_pos = tables["vtoken"].positions(s)
            scorer.observe(s, attention=attention.rows(s, live_pos, int(live_pos[-1])))
        step += 1
        if progress is not None:
            progress.update(1)
    for t in tables.values():
        t.check()
    stats["requests"] = n
    return stats


def _timed_repack(table, move_budget):
    """``((plan, result), plan seconds, commit seconds)`` of one repack of ``table``."""
    t0 = time.perf_counter()
    plan = table.plan(move_budget)
    t1 = time.perf_counter()
    result = table.commit(plan)
    return (plan, result), t1 - t0, time.perf_counter() - t1


def _copy_table(table: TokenTable) -> TokenTable:
    """An independent copy of a token table and its allocator (a fresh lock for the copy)."""
    return copy.deepcopy(table, {id(table.lock): threading.Lock()})


_ATTENTION_CACHE: dict = {}


def _cached_attention(w: dict, prompt, decode):
    """One attention source per workload and request lengths (the model runs once per report)."""
    key = (w.get("attention", "model"), w["seed"], tuple(int(x) for x in prompt), tuple(int(x) for x in decode))
    if key not in _ATTENTION_CACHE:
        _ATTENTION_CACHE.clear()  # keep one workload's matrices only
        _ATTENTION_CACHE[key] = attention_source(w, prompt, decode)
    source, label = _ATTENTION_CACHE[key]
    if isinstance(source, SyntheticAttention):  # stateful: a fresh generator per replay
        source = SyntheticAttention(w["seed"] + 1)
    return source, label


def reproduce(report) -> None:
    w = workload(report.quick)
    model = RooflineDecodeCost()
    report.heading("vToken: token table with background repacking")
    pols = policies(w)
    sweep = [32, 64, 128] if report.quick else [128, 256, 512, 768]
    schedules = [(8, None), (32, None), (1, 64), (1, 16)]
    runs: dict[tuple[str, int], dict] = {}
    schedule_runs = []
    n_runs = len(pols) + sum(b != w["budget"] for b in sweep) + len(schedules) - 1
    with report.progress(n_runs * (w["decode"][1] + 1), "vtoken replay") as bar:
        for name, make in pols:
            runs[(name, w["budget"])] = replay(make, w, bar)
        for budget in sweep:
            if ("H2O", budget) not in runs:
                wb = dict(w, budget=budget)
                runs[("H2O", budget)] = replay(policies(wb)[0][1], wb, bar)
        for every, moves in schedules:
            if (every, moves) == (w["repack_every"], None):  # the H2O run above
                schedule_runs.append((every, moves, runs[("H2O", w["budget"])]))
                continue
            ws = dict(w, repack_every=every, move_budget=moves)
            schedule_runs.append((every, moves, replay(policies(ws)[0][1], ws, bar)))
    report.text(
        f"Decode replay: {w['requests']} requests, prompts {w['prompt'][0]}-{w['prompt'][1]} tokens, "
        f"{w['decode'][0]}-{w['decode'][1]} decode steps, KV token budget {w['budget']} per request "
        f"(recent window {w['recent']}), block size {w['block_size']}; vToken repacks every "
        f"{w['repack_every']} steps (full plan). Attention rows: {runs[('H2O', w['budget'])]['attention']}; "
        "a row over the live tokens is the full-cache row renormalised over them (eviction's effect on later "
        "hidden states is not modelled). Concurrency: requests of this mix that fit a budget of "
        f"{w['block_budget']} blocks, from the peak blocks held per request.")
    rows = []
    move_rows = []
    for name, _ in pols:
        st = runs[(name, w["budget"])]
        naive, vt, full = (_per_request(st, k) for k in ("naive", "vtoken", "full"))
        per_req_peak = {k: st[k]["peak_total"] / st["requests"] for k in ("naive", "vtoken")}
        conc = {k: int(w["block_budget"] // per_req_peak[k]) for k in per_req_peak}
        rows.append((_label(name), round(full, 1), round(naive, 1), round(vt, 1),
                     f"{100 * (1 - vt / naive):.1f} %", PAPER["blocks_reduction"],
                     conc["naive"], conc["vtoken"], f"{conc['vtoken'] / max(conc['naive'], 1):.2f}x",
                     PAPER["concurrency"]))
        v = st["vtoken"]
        per_repack_ms = 1e3 * (v["plan_s"] + v["commit_s"]) / max(1, len(v["commit_moves"]))
        move_rows.append((_label(name), v["freed"], v["moves"], v["min_moves"],
                          round(v["moves"] / max(v["freed"], 1), 2), round(v["min_moves"] / max(v["freed"], 1), 2),
                          v["dropped"], mean_pm(per_repack_ms)))
    sweep_rows = []
    for budget in sweep:
        st = runs[("H2O", budget)]
        naive, vt, full = (_per_request(st, k) for k in ("naive", "vtoken", "full"))
        sweep_rows.append((budget, round(full, 1), round(naive, 1), round(vt, 1), f"{100 * (1 - vt / naive):.1f} %",
                           f"{(st['naive']['peak_total'] / st['vtoken']['peak_total']):.2f}x"))
    ref_budget, ref_sla = KV_BUDGETS_GIB[0] * GIB, SLA_MS[1] / 1e3
    schedule_rows = []
    for every, moves, st in schedule_runs:
        naive, vt = _per_request(st, "naive"), _per_request(st, "vtoken")
        v = st["vtoken"]
        cmp = sla_ratios(st, w["block_size"], model, ref_budget, ref_sla)
        schedule_rows.append((f"every {every} step{'s' if every > 1 else ''}", "none" if moves is None else moves,
                              round(naive, 1), round(vt, 1), f"{100 * (1 - vt / naive):.1f} %", v["moves"],
                              round(v["moves"] / max(v["freed"], 1), 2), _fmt_repack(cmp["runs"]),
                              _fmt_ratio(cmp["ratio"])))
    report.table(
        "KV blocks retained per request and feasible concurrency (naive evict vs vToken)",
        ["policy", "no eviction", "naive evict", "vToken", "fewer blocks", "paper", "max conc. naive",
         "max conc. vToken", "ratio", "paper ratio"],
        rows,
        note="Blocks retained: time-average over decode steps of blocks held per active request. "
             "'no eviction' keeps every token. Not tuned to the paper, which measures vLLM with larger real "
             "models and its own budgets. " + " ".join(f"{name}: {why}." for name, why in DEGENERATE.items()))
    report.figure("vtoken_blocks", lambda ax: _draw_blocks(ax, pols, runs, w["budget"]))
    report.table(
        "Repacking cost (vToken)",
        ["policy", "blocks freed by repack", "tokens moved", "minimum moves", "moves / block", "minimum / block",
         "moves dropped", f"plan+commit ms per repack (mean ± std, {REPEATS} timings)"],
        move_rows,
        note="Minimum: the live tokens of the freed blocks, the fewest moves any repack freeing the same "
             "blocks needs; the rest densify the partial last block so an unmodified paged kernel reads "
             "exactly the live tokens. No moves are dropped here since plans commit at once (no concurrency).")
    report.table(
        "H2O: effect of the KV token budget",
        ["budget (tokens)", "no eviction", "naive evict", "vToken", "fewer blocks", "concurrency ratio"],
        sweep_rows,
        note="The gain shrinks as the budget approaches the context length (fewer evictions, fewer "
             "sparse blocks) and grows as the budget tightens.")
    report.table(
        "H2O: repack schedule (how often plan() runs, and its move budget)",
        ["repack", "move budget", "naive evict", "vToken", "fewer blocks", "tokens moved", "moves / block",
         "repack cost: us/step + us/request-step",
         f"SLA throughput ratio vs naive, kernel skips dead slots ({KV_BUDGETS_GIB[0]} GiB, {plain_number(SLA_MS[1])} ms)"],
        schedule_rows,
        note="The move budget caps moves per plan for the whole table (all requests). Incremental "
             "repacking with a modest per-step budget keeps most of the gain, since the planner takes the "
             "cheapest blocks first; too small a budget cannot keep up with the backlog that evicting the "
             "prompts creates. Repacking less often moves fewer tokens: some tokens die before they are moved. "
             "Repack cost and throughput ratio: as in the SLA tables below.")
    report_sla(report, w, model, DecodeCostModel(), runs, label=_label, notes=DEGENERATE, paper=PAPER["throughput"],
               repeats=REPEATS)


def _label(policy: str) -> str:
    return f"{policy} (degenerate, see note)" if policy in DEGENERATE else policy


def _draw_blocks(ax, pols, runs: dict, budget: int) -> None:
    """Bars: blocks held per request by policy (no eviction / naive evict / vToken)."""
    names = [name for name, _ in pols]
    x = np.arange(len(names))
    for i, (kind, label) in enumerate((("full", "no eviction"), ("naive", "naive evict"), ("vtoken", "vToken"))):
        ax.bar(x + (i - 1) * 0.27, [_per_request(runs[(n, budget)], kind) for n in names], 0.27, label=label)
    ax.set_xticks(x, names)
    ax.set_ylabel("KV blocks held per request (time average)")
    ax.set_title(f"Blocks retained at a {budget}-token budget")
    ax.legend(loc="upper right")


def _per_request(st: dict, name: str) -> float:
    """Blocks held per active request, time-averaged over decode steps."""
    return st[name]["block_steps"] / st[name]["steps"]


@functools.cache
def _warm_up(block_size: int) -> np.ndarray:
    """Run every TokenTable kernel once on a tiny table (loads numba's cache before timing).

    Returns the fixed cost of one ``plan`` + ``commit`` call, :data:`REPEATS` times (each the
    fastest of 20 on the tiny table): Python and dispatch overhead that does not grow with the
    batch.  Measured once per process, so every replay of a report is charged the same.
    """
    table = TokenTable(BlockAllocator(4, block_size))
    table.add_sequence(0)
    table.append([0], [block_size + 1])
    table.evict(0, [0])
    table.commit(table.plan())
    table.context_lengths([0])
    out = np.full(REPEATS, math.inf)
    for rep in range(REPEATS):
        for _ in range(20):
            t0 = time.perf_counter()
            table.commit(table.plan(budget=0))
            out[rep] = min(out[rep], time.perf_counter() - t0)
    out.flags.writeable = False  # shared by every replay (lru_cache)
    return out
