"""Prefill/decode disaggregation: prefill instances hand each request's KV to a decode instance.

What it models (``SimConfig(pd=PDConfig(P, D, link))``):

* **Prefill instances** (P): each owns a GPU pool (a :class:`~kvmm.allocators.BlockAllocator`
  with prefix caching, ``gpu_kv_bytes``) and a FCFS queue; an arrival goes to the instance with
  the fewest queued prefill tokens.  A step prefills queued requests within ``max_prefill_tokens``
  and ``max_batch`` (prefill only, no decode).  The first token comes at the end of the step
  (TTFT), as in vLLM / Dynamo disaggregated serving.  A request holds its prompt blocks until its
  KV has left; then they join the prefix cache.
* **Link**: every decode instance has one ingress link (FIFO queue, the ``link`` spec's bandwidth
  and latency).  A request's whole prompt KV (``input_length x KV bytes per token``) crosses it.
  Without overlap the copy starts after the step; with ``layerwise_overlap`` layer ``i`` is sent
  while the later layers compute, so a free link finishes ``1 / layers`` of the copy after the step.
* **Decode instances** (D): the request goes to the one with the fewest running + inbound
  requests; it joins the running batch at the first step boundary after its KV arrived and the
  pool (no prefix caching: decode-side KV is private) can hold its prompt + output blocks.  A step
  decodes one token per running request (``decode_step_seconds(batch)``); stretches without joins
  are advanced in one jump.
* Lower tiers and staging are not modelled in PD mode (``tiers`` are ignored).

TPOT = (finish - first token) / (output tokens - 1): it includes the hand-off.
"""

from __future__ import annotations

import heapq

import numpy as np

from kvmm.errors import BadInputError
from kvmm.sim.config import SimConfig
from kvmm.sim.hierarchy import Hierarchy, pool_keys
from kvmm.sim.models import ModelSpec
from kvmm.traces.mooncake import MooncakeTrace

__all__ = ["simulate_pd"]

_ARRIVE, _PREFILL_DONE, _XFER_DONE, _DECODE_STEP = range(4)


def simulate_pd(cfg: SimConfig, m: ModelSpec, trace: MooncakeTrace, arrival: np.ndarray, progress=None):
    """Run a disaggregated replay; returns a :class:`~kvmm.sim.simulator.SimResult`.

    With ``cfg.cluster`` the cluster's router picks each request's prefill instance (instead
    of the fewest queued prefill tokens), seeing each prefill instance's queue, whether it is
    prefilling and its GPU pool use, and a block index of the prefill pools when it reads one.
    """
    sim = _PD(cfg, m, trace, arrival, progress)
    end = sim.run()
    result = sim.result(end)
    if sim.router is None:
        return result
    from dataclasses import replace

    routed = sim.routed
    mean = routed.mean()
    return replace(result, policies={"router": sim.router}, requests_per_instance=tuple(routed.tolist()),
                   load_imbalance=float(routed.max() / mean) if mean > 0 else 1.0,
                   index_entries=len(sim.index) if sim.index is not None else 0)


class _PD:
    def __init__(self, cfg, m, trace, arrival, progress) -> None:
        pd = cfg.pd
        self.cfg, self.m, self.trace, self.arrival, self.progress = cfg, m, trace, arrival, progress
        n = trace.num_requests
        self.n = n
        self.input_len = np.maximum(trace.input_length, 1)
        self.output_len = np.maximum(trace.output_length, 1)
        self.offsets = trace.block_offsets
        self.keys = pool_keys(trace.block_ids)
        self.bt = bt = int(trace.block_tokens)
        self.block_bytes = bt * m.kv_bytes_per_token
        self.router = self.view = self.index = None
        feeds = [None] * pd.prefill_instances
        key_space = None
        if cfg.cluster is not None:  # routed prefill instances (kvmm.cluster)
            from kvmm.cluster.sim import cluster_routing, sessions_of

            # the index tracks the prefill instances' GPUs only
            self.router, self.view, self.index, feeds = cluster_routing(cfg, pd.prefill_instances, ("GPU",))
            key_space = np.unique(trace.block_ids.astype(np.int64)) if self.index is not None else None

            self.session = sessions_of(trace).tolist()
        self.prefill = [Hierarchy(cfg, self.block_bytes, block_tokens=bt, with_tiers=False, events=feeds[i],
                                  key_space=key_space) for i in range(pd.prefill_instances)]
        self.decode = [Hierarchy(cfg, self.block_bytes, block_tokens=bt, with_tiers=False, prefix_cache=False)
                       for _ in range(pd.decode_instances)]
        prompt_blocks = np.diff(self.offsets)
        self.decode_blocks = -(-(self.input_len + self.output_len - 1) // bt)
        if n and (int(prompt_blocks.max()) > self.prefill[0].num_blocks or int(self.decode_blocks.max()) > self.decode[0].num_blocks):
            raise BadInputError(f"a request needs more than the {self.prefill[0].num_blocks} blocks of a GPU pool "
                                f"(gpu_kv_bytes={cfg.gpu_kv_bytes}); expected a larger gpu_kv_bytes")
        self.link = pd.link
        self.overlap = pd.layerwise_overlap
        self.events: list = []
        self.seq = 0
        self.p_queue = [[] for _ in self.prefill]
        self.p_tokens = np.zeros(len(self.prefill))  # queued prefill tokens (routing)
        self.p_busy = [False] * len(self.prefill)
        self.p_held: dict[int, tuple[int, np.ndarray]] = {}
        self.d_inbox = [[] for _ in self.decode]  # requests whose KV arrived, waiting to join
        self.d_inbound = [[] for _ in self.decode]  # heap of pending transfer completion times
        self.d_running = [[] for _ in self.decode]
        self.d_busy = [False] * len(self.decode)
        self.d_load = np.zeros(len(self.decode), dtype=np.int64)
        self.d_held: dict[int, np.ndarray] = {}
        self.link_free = np.zeros(len(self.decode))
        self.link_busy = np.zeros(len(self.decode))
        self.target = np.zeros(n, dtype=np.int64)
        self.first_token = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.remaining = np.zeros(n, dtype=np.int64)
        self.gpu_hit_tokens = 0
        self.bytes_sent = 0
        self.steps = 0
        self.done = 0
        self.max_waiting = 0
        self.routed = np.zeros(len(self.prefill), dtype=np.int64)

    def push(self, t: float, kind: int, a: int) -> None:
        heapq.heappush(self.events, (t, self.seq, kind, a))
        self.seq += 1

    def run(self) -> float:
        for r in range(self.n):
            self.push(float(self.arrival[r]), _ARRIVE, r)
        now = 0.0
        while self.events:
            now, _, kind, a = heapq.heappop(self.events)
            if kind == _ARRIVE:
                p = self._route(a, now) if self.router is not None else int(np.argmin(self.p_tokens))
                self.p_queue[p].append(a)
                self.p_tokens[p] += int(self.input_len[a])
                self.max_waiting = max(self.max_waiting, len(self.p_queue[p]))
                if not self.p_busy[p]:
                    self._start_prefill(p, now)
            elif kind == _PREFILL_DONE:
                self.p_busy[a] = False
                self._start_prefill(a, now)
            elif kind == _XFER_DONE:
                p, ids = self.p_held.pop(a)
                self.prefill[p].release(ids)
                d = int(self.target[a])
                heapq.heappop(self.d_inbound[d])
                self.d_inbox[d].append(a)
                if not self.d_busy[d]:
                    self._decode_step(d, now)
                if not self.p_busy[p]:
                    self._start_prefill(p, now)
            else:
                self._decode_step(a, now)
        if self.done != self.n:
            raise RuntimeError("PD simulator stalled")  # pragma: no cover
        return now

    def _route(self, r: int, now: float) -> int:
        """The cluster router's prefill instance for ``r`` (the view: each prefill instance's
        queue, whether it is prefilling, its pool use)."""
        from kvmm.cluster.routers import checked_route
        from kvmm.cluster.view import RouteRequest

        view = self.view
        for p, hier in enumerate(self.prefill):
            view.queue_lengths[p] = len(self.p_queue[p])
            view.running[p] = int(self.p_busy[p])
            view.kv_utilisation[p] = hier.pool.usage
        view.now = now
        o0, o1 = int(self.offsets[r]), int(self.offsets[r + 1])
        request = RouteRequest(index=r, arrival_s=now, block_ids=self.keys[o0:o1, 0].view(np.int64),
                               input_length=int(self.input_len[r]), output_length=int(self.output_len[r]),
                               session=self.session[r])
        p = checked_route(self.router, request, view)
        self.routed[p] += 1
        return p

    # ------------------------------------------------------------------ prefill side
    def _start_prefill(self, p: int, now: float) -> None:
        m, queue, hier = self.m, self.p_queue[p], self.prefill[p]
        batch, tokens = [], 0
        while queue and len(batch) < m.max_batch:
            r = queue[0]
            o0, o1 = self.offsets[r], self.offsets[r + 1]
            inp = int(self.input_len[r])
            if batch and tokens + inp > m.max_prefill_tokens:
                break
            got = hier.take(self.keys[o0:o1], 0)
            if got is None:
                break  # the pool holds KV still waiting for its link: retry when a transfer ends
            queue.pop(0)
            self.p_tokens[p] -= inp
            hit = min(got[1] * self.bt, inp - 1)
            self.gpu_hit_tokens += hit
            tokens += inp - hit
            batch.append((r, got[0]))
        if not batch:
            return
        end = now + tokens / m.prefill_tokens_per_s
        self.steps += 1
        self.p_busy[p] = True
        self.push(end, _PREFILL_DONE, p)
        for r, ids in batch:
            self.first_token[r] = end
            if self.output_len[r] <= 1:
                self.finish[r] = end
                self.done += 1
                hier.release(ids)
                if self.progress is not None:
                    self.progress(1)
                continue
            d = int(np.argmin(self.d_load))
            self.d_load[d] += 1
            self.target[r] = d
            nbytes = int(self.input_len[r]) * self.m.kv_bytes_per_token
            copy_s = nbytes / self.link.read_bandwidth
            if self.overlap:
                done = max(max(self.link_free[d], now) + copy_s, end + copy_s / self.m.layers)
            else:
                done = max(self.link_free[d], end) + copy_s
            self.link_free[d] = done
            self.link_busy[d] += copy_s
            self.bytes_sent += nbytes
            self.p_held[r] = (p, ids)
            heapq.heappush(self.d_inbound[d], done + self.link.latency_s)
            self.push(done + self.link.latency_s, _XFER_DONE, r)

    # ------------------------------------------------------------------ decode side
    def _decode_step(self, d: int, now: float) -> None:
        """A decode step boundary on instance ``d``: finish, join, then run the next stretch."""
        running, hier = self.d_running[d], self.decode[d]
        inbox = self.d_inbox[d]
        while inbox and len(running) < self.m.max_batch:
            r = inbox[0]
            got = hier.take(np.zeros((0, 2), dtype=np.uint64), int(self.decode_blocks[r]))
            if got is None:
                break
            inbox.pop(0)
            self.d_held[r] = got[0]
            self.remaining[r] = self.output_len[r] - 1
            running.append(r)
        if not running:
            self.d_busy[d] = False
            return
        run = np.asarray(running, dtype=np.int64)
        step_s = self.m.decode_step_seconds(len(running))
        k = int(self.remaining[run].min())
        if self.d_inbound[d] or inbox:
            nxt = self.d_inbound[d][0] if self.d_inbound[d] else now
            k = max(1, min(k, int(np.ceil((nxt - now) / step_s - 1e-12))))
        end = now + k * step_s
        self.steps += k
        self.remaining[run] -= k
        fin = self.remaining[run] <= 0
        for r in run[fin].tolist():
            self.finish[r] = end
            self.done += 1
            self.d_load[d] -= 1
            hier.release(self.d_held.pop(r))
        if fin.any() and self.progress is not None:
            self.progress(int(fin.sum()))
        running[:] = run[~fin].tolist()
        self.d_busy[d] = True
        self.push(end, _DECODE_STEP, d)

    # ------------------------------------------------------------------ metrics
    def result(self, end: float):
        from kvmm.sim.simulator import SimResult, latency_metrics

        cfg, m = self.cfg, self.m
        span = end - float(self.arrival.min())
        stats = [h.pool.stats for h in self.prefill]
        pd = cfg.pd
        return SimResult(
            label=cfg.label or f"{m.name}/pd {pd.prefill_instances}x{pd.decode_instances} {self.link.name}",
            policy="pd", model=m.name, requests=self.n,
            **latency_metrics(cfg, self.arrival, self.first_token, self.finish, self.output_len, span),
            ttft_p95_high_priority=0.0, high_priority_requests=0, protected_byte_seconds=0.0,
            protected_byte_seconds_per_request=0.0, peak_protected_bytes=0, fast_tier_bytes=0, claims=0,
            ready_in_time=0, ready_late=0, claims_cancelled=0, claims_recomputed=0, slow_hit_token_share=0.0,
            gpu_hit_token_share=self.gpu_hit_tokens / float(self.input_len.sum()),
            gpu_pool_blocks=int(self.prefill[0].num_blocks),
            gpu_lookup_hits=sum(int(s["hits"]) for s in stats), gpu_lookup_queries=sum(int(s["queries"]) for s in stats),
            tier_block_hits=(), tier_blocks_offered=(), tier_evictions=(), steps=self.steps, max_waiting=self.max_waiting,
            kv_bytes_transferred=int(self.bytes_sent), instances=pd.instances,
            link_busy_share=float(self.link_busy.max()) / span if span > 0 else 0.0)
