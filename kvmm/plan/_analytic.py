"""Stage 1 of the planner: the analytic model over every capacity combination.

**Hit ratios (exact for inclusive LRU).**  One :class:`~kvmm.policies.StackDistanceTracker` pass
over the trace's block stream, in request order, gives each reference its LRU stack distance
``d``.  In the composed simulator every lower level is written through with every prefilled
block (write-all admission), so each level is an LRU cache of ``capacity // block_bytes``
blocks over the *same* stream: level ``i`` holds a block iff ``d < C_i`` (an inclusive
hierarchy: a level does not hold the next ``C_i`` blocks after the level above, it holds the
``C_i`` most recent).  So the simulator's ``tier_block_hits[i]`` is ``#{d < C_i}`` and a block
is *served* by the first level whose capacity exceeds its distance, ``#{max(C_<i) <= d < C_i}``
(the GPU prefix cache, when on, is level 0 with the pool's blocks; approximated as an LRU).  With
``instances > 1`` private levels see their instance's requests (round-robin, ``r mod N``: their
own tracker per instance) and shared levels the whole stream; a shared level's share is then what
it holds when offered (its ``tier_block_hits``), capped so the shares sum to at most 1 (a
block both hold is read from the private level, so the share it serves is smaller).  Capacities are binned on the
union of the grid's capacity points, so every count is a sum over a 1-D or 2-D histogram.

**Prefix runs.**  The engine reads hits only along the prompt's leading run of held blocks:
a run of length ``k`` is held by capacity ``C`` iff ``max(d_0..d_k) < C``; the per-request
cumulative maximum of ``d`` turns the run into the same histogram question.

**TTFT and TPOT p95 (a step replay of the engine's scheduler, on the run's clock).**  Per
request, with the run at the largest capacities: ``prefill tokens = prompt - run tokens`` (computed
after the run: its context) and ``staged bytes = (run - GPU prefix) x KV bytes per token``.  Each
instance (request ``r`` on ``r mod instances``, the trace's own arrivals rescaled to ``load`` as
the simulator rescales them) replays kvmm.sim.engine's scheduler without its caches
(:mod:`kvmm.plan._replay`), with the run's :class:`~kvmm.sim.serving.Serving`: its latency
model's coefficient array timed by the simulator's own kernels (``step_split`` for a step,
``decode_stretch`` for a decode-only stretch in closed form as the running batch's context sum
grows: ``+= prompt`` when a request joins the decode batch, ``+= batch`` per step, ``-= prompt +
output - 1`` when one finishes), and its scheduler: chunked prefill (one budget of
``max_num_batched_tokens`` per step shared by the decodes, one token each, then the partly
prefilled requests, then queued ones in arrival order; ``long_prefill_token_threshold`` caps a
chunk) or whole prefills (``chunked_prefill`` off: admitted while the prompts fit the budget, the
first always), at most ``max_num_seqs`` sequences, and the GPU pool (``serving.gpu_kv_bytes``)
holding each admitted request's prompt + output blocks (reserved at admission, freed at its last
token; shared GPU blocks of concurrent requests are counted twice).  A step takes ``staged bytes /
fast-tier read bandwidth + latency`` for the requests it admits plus the clock's step time on its
features.  A request's first token is at the end of the step that computes its last prompt
token; it then decodes one token per step.  TTFT = first token - arrival; TPOT ``(last token -
first token) / (out - 1)`` over requests with two or more output tokens, as the simulator
reports it; p95s over the requests.  A latency model without ``coefficients()`` is replayed with
a :class:`~kvmm.sim.latency.Fitted` stand-in fitted to it (:mod:`kvmm.plan._clock`).  What it
leaves out: staging waits (a claim's copy through its tier's channel: below), the ledger's
admission of claims, GPU blocks lost or shared between running requests, and a cluster's routing
other than round-robin.  Staging a hit takes the source's latency plus the staged bytes at
``stage_efficiency x`` the served levels' bandwidth mix (capped by the fast tier's write
bandwidth; shared levels through the fabric link), stretched by ``1 / (1 - rho_channel)`` for the
channel's own queue; the p95 of that beyond the mean wait before the admitting step ``E[W]``
(staging overlaps the wait) is added to TTFT.  Measured errors against the simulation: docs/plan.md
and tests/plan/test_plan_estimate.py.  Stage 2 checks the estimate in the simulator.

**SHARDS.**  Above ``SHARDS_MIN_REFS`` references, a fixed-rate spatial sample of the block keys
(hash < R) is tracked exactly; its distances stand for ``d / R`` and each sampled reference for
``1 / R`` references; SHARDS-adj puts the difference between the trace's references and the
weighted sample at distance 0 (Waldspurger et al., FAST '15).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvmm.plan._kernels import cummax_by_group
from kvmm.plan._replay import pair_statistics
from kvmm.policies import StackDistanceTracker
from kvmm.policies.mrc._stack_kernels import hash_keys
from kvmm.sim.load import arrival_times

__all__ = ["Stream", "block_stream", "GridModel", "build_model", "SHARDS_MIN_REFS", "SHARDS_RATE"]

SHARDS_MIN_REFS = 20_000_000
SHARDS_RATE = 0.05
INF = np.iinfo(np.int64).max


@dataclass
class Stream:
    """The trace's block references in request order, with what the model needs of each."""

    ids: np.ndarray  # int64 block id per reference (sampled when rate < 1)
    req: np.ndarray  # int64 request of each reference
    token_w: np.ndarray  # float64 prompt tokens a hit on this reference saves (x 1/rate)
    input_len: np.ndarray  # per request (>= 1)
    output_len: np.ndarray
    span_s: float  # arrival span of the trace as the simulator scales it
    arrival: np.ndarray  # float64 arrival second of each request (the simulator's rescaling)
    rate: float  # SHARDS sampling rate (1: exact)
    total_refs: int  # references of the whole trace (sampled or not)
    block_tokens: int
    prompt_blocks: np.ndarray  # int64 blocks of each request's prompt in the trace


def block_stream(trace, serving, cfg) -> Stream:
    """The references of ``trace`` (a :class:`~kvmm.traces.KVTrace`) with their token weights, SHARDS-sampled
    when long.  ``cfg`` scales the arrivals (load / time_scale) with ``serving``'s clock
    (:func:`kvmm.sim.load.arrival_times`).  Runtime complexity: O(refs)."""
    n = trace.num_requests
    offsets = np.asarray(trace.block_offsets, dtype=np.int64)
    counts = np.diff(offsets)
    ids = np.asarray(trace.block_ids, dtype=np.int64)
    req = np.repeat(np.arange(n, dtype=np.int64), counts)
    bt = int(trace.block_tokens)
    inp = np.maximum(np.asarray(trace.input_length, dtype=np.int64), 1)
    pos = np.arange(ids.shape[0], dtype=np.int64) - offsets[req]
    # the k-th block of a hit run saves min((k+1) bt, inp - 1) - min(k bt, inp - 1) tokens:
    # the engine always computes the last prompt token
    top = inp[req] - 1
    token_w = (np.minimum((pos + 1) * bt, top) - np.minimum(pos * bt, top)).astype(np.float64)
    rate = 1.0
    total_refs = int(ids.shape[0])
    if ids.shape[0] > SHARDS_MIN_REFS:
        rate = SHARDS_RATE
        keep = _hash64(ids) < np.uint64(int(rate * 2.0**64))
        ids, req, token_w = ids[keep], req[keep], token_w[keep] / rate
    arrival = arrival_times(trace, serving, cfg)
    span = float(arrival[-1] - arrival[0]) if n > 1 else 0.0
    return Stream(ids, req, token_w, inp, np.maximum(np.asarray(trace.output_length, dtype=np.int64), 1),
                  span, np.ascontiguousarray(arrival, dtype=np.float64), rate, total_refs, bt, counts)


def stack_distances(stream: Stream, instances: int) -> tuple[np.ndarray, np.ndarray]:
    """``(per-instance distances, global distances)`` of every reference (int64, ``INF`` cold),
    scaled by ``1 / rate``.  Requests go to instance ``r mod instances``.  O(refs log refs)."""
    def run(ids: np.ndarray) -> np.ndarray:
        d = StackDistanceTracker(initial_keys=max(1024, min(ids.shape[0], 1 << 22))).access(ids, return_distances=True)
        d = d.astype(np.int64)
        if stream.rate < 1.0:
            d = np.where(d >= 0, (d / stream.rate).astype(np.int64), d)
        return np.where(d < 0, INF, d)

    global_d = run(stream.ids) if stream.ids.shape[0] else np.zeros(0, dtype=np.int64)
    if instances == 1:
        return global_d, global_d
    local = np.empty_like(global_d)
    owner = stream.req % instances
    for i in range(instances):
        sel = np.flatnonzero(owner == i)
        if sel.size:
            local[sel] = run(stream.ids[sel])
    return local, global_d


@dataclass
class GridModel:
    """Everything the grid kernel reads: per-type bins and histograms, per-(A, B) run statistics."""

    grids: list  # per type: sorted capacity points in blocks
    hist1: list  # per type: cumulative block counts CH[a] = #{bin <= a}
    rect: list  # per type: 2-D prefix sums P[a+1, c+1] = #{bin <= a, run bin <= c}
    pair: dict  # name -> (u0, u1) array of per-(max private bin, max shared bin) statistics
    total_refs: float  # references the histograms stand for
    gpu_bin: int  # bin of the GPU pool in type 0 (-1: no GPU prefix cache modelled)
    lam: float  # arrivals per second per instance


def build_model(stream: Stream, instances: int, grids: list, gpu_blocks: int | None, *, clock, kv_bytes_per_token: int,
                fast_read_bw: float, fast_latency: float = 0.0, pool_blocks: int, distances: tuple | None = None) -> GridModel:
    """Bin the distances on ``grids`` (type 0: the GPU and private levels; type 1: shared levels)
    and tabulate the per-request run statistics, replayed on ``clock`` (a
    :class:`kvmm.plan._clock.ReplayClock`) with a GPU pool of ``pool_blocks``.  Runtime
    complexity: O(refs log refs + u0 x u1 x replay steps) for u0, u1 grid points per type; memory
    O(requests x (u0 + u1)) (the per-request run tokens at every grid point).  ``distances``:
    :func:`stack_distances` of ``stream`` when already computed."""
    local_d, global_d = stack_distances(stream, instances) if distances is None else distances
    per_type = []
    for t, d in enumerate((local_d, global_d)):
        grid = np.asarray(grids[t], dtype=np.int64)
        b = np.searchsorted(grid, d, side="right").astype(np.int64)  # d < grid[a]  <=>  b <= a
        c = _run_bins(b, stream.req)
        u = grid.shape[0]
        w = np.full(b.shape[0], 1.0 / stream.rate)
        h1 = np.bincount(b, weights=w, minlength=u + 1)[: u + 1]
        h2 = np.zeros((u + 1, u + 1))
        np.add.at(h2, (b, c), w)
        if stream.rate < 1.0:  # SHARDS-adj: the references the sample misses count at distance 0
            h1[1] += stream.total_refs - w.sum()
            h2[1, 1] += stream.total_refs - w.sum()
        rect = np.zeros((u + 2, u + 2))
        rect[1:, 1:] = h2.cumsum(0).cumsum(1)
        # run tokens per request at each capacity bin: HT[r, a] = sum of token_w with c <= a
        n = stream.input_len.shape[0]
        ht = np.zeros((n, u + 1))
        np.add.at(ht, (stream.req, c), stream.token_w)
        ht = ht.cumsum(1)[:, :u]  # bins 0..u-1 (bin u: cold / beyond the grid, never a hit)
        per_type.append((grid, np.cumsum(h1), rect, ht))
    gpu_bin = -1
    if gpu_blocks is not None:  # the GPU pool is one of type 0's grid points
        gpu_bin = int(np.searchsorted(per_type[0][0], gpu_blocks))

    ht0 = np.minimum(per_type[0][3], (stream.input_len - 1)[:, None].astype(np.float64))
    ht1 = np.minimum(per_type[1][3], (stream.input_len - 1)[:, None].astype(np.float64))
    lam = stream.input_len.shape[0] / stream.span_s / instances if stream.span_s > 0 else 0.0
    # GPU blocks a running request holds (prompt + output, reserved at admission: kvmm.sim.engine)
    bt = stream.block_tokens
    held = np.maximum(stream.prompt_blocks, -(-(stream.input_len + stream.output_len - 1) // bt)).astype(np.float64)
    stats = pair_statistics(ht0, ht1, gpu_bin, stream.input_len.astype(np.float64),
                            stream.output_len.astype(np.float64), held, stream.arrival, int(instances), clock.coef,
                            bool(clock.chunked), int(clock.budget), int(clock.max_seqs), int(clock.threshold),
                            float(pool_blocks), float(fast_read_bw), float(fast_latency), float(kv_bytes_per_token))
    names = ("ttft95", "mean_w", "staged_mean", "staged95", "rho", "end_s", "tpot", "max_waiting")
    return GridModel([p[0] for p in per_type], [p[1] for p in per_type], [p[2] for p in per_type],
                     dict(zip(names, stats)), float(stream.total_refs), gpu_bin, lam)


def _run_bins(b: np.ndarray, req: np.ndarray) -> np.ndarray:
    """The running maximum of ``b`` within each request (references are grouped by request)."""
    return cummax_by_group(b, req)


def _hash64(x: np.ndarray) -> np.ndarray:
    """splitmix64 of int64 keys, as uint64 (the SHARDS sample filter): the trackers' own key hash."""
    out = np.empty(x.shape[0], dtype=np.uint64)
    hash_keys(x.astype(np.uint64), out)
    return out
