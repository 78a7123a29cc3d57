"""The scheduler: which requests run in a step, and how many prompt tokens each computes.

Two policies, both vLLM's, both in queue order with the same staging rules (below):

* **chunked prefill** (``SimConfig(chunked_prefill=True)``, the default; vLLM V1): one token
  budget per step (``max_num_batched_tokens``) shared by every sequence.  Each running decode
  takes one token first; then the requests already partly prefilled, in the order they were
  admitted; then queued requests, in queue order, while the budget lasts and fewer than
  ``max_num_seqs`` sequences run.  Each prefill takes ``min(tokens left, budget left,
  long_prefill_token_threshold)`` tokens (the threshold when > 0): a long prompt is split over
  several steps and never stalls the running batch.  A request's first token comes at the end
  of the step that computes its last prompt token.
* **whole prefills** (``chunked_prefill=False``; kvmm's scheduler before chunking, vLLM with
  chunked prefill off): queued requests are admitted while ``max_num_seqs`` has room and their
  prompts fit the step's budget of prefill tokens (decodes are not counted; the first request
  always fits, however long); each computes its whole prompt in its admitting step.

Both: a request is admitted only when the GPU pool can hold its blocks (prompt and output,
reserved at admission; no preemption is modelled).  Queued requests holding a lower-tier claim
follow the staging controller (:meth:`admission_check`): a claim is asked for only within the
first step's window of the queue (the requests whose prompts would fill one step's budget);
one that is not ready keeps its place and a batch slot but takes no budget, unless recomputing
it is faster (``recompute_fallback``).  With nothing running and nothing in flight the first
ready request runs (work conservation).
"""

from __future__ import annotations

from kvmm.sim.engine.staging import WAIT

__all__ = ["Scheduler", "StepPlan"]


class StepPlan:
    """One step: the decodes, the prefill chunks (request, new tokens, context before the
    chunk) and the requests admitted from the queue by it."""

    __slots__ = ("chunks", "admitted", "prefill_tokens", "pairs", "prefill_context")

    def __init__(self) -> None:
        self.chunks: list[tuple[int, int, int]] = []
        self.admitted: list[int] = []
        self.prefill_tokens = 0
        self.pairs = 0
        self.prefill_context = 0

    def add(self, r: int, new: int, context: int) -> None:
        self.chunks.append((r, new, context))
        self.prefill_tokens += new
        self.pairs += new * context + new * (new + 1) // 2  # causal_pairs(new, context), inlined: once per chunk
        self.prefill_context += context


class Scheduler:
    """Picks each step's work for one instance (see the module docstring).

    ``take(r)`` reserves ``r``'s GPU blocks (False when the pool cannot hold them);
    ``gpu_holds_hit(r)``: whether the GPU prefix cache now holds ``r``'s whole hit.
    Runtime complexity: O(queued requests scanned + chunks) per step.
    """

    def __init__(self, table, staging, *, budget: int, max_seqs: int, chunked: bool, threshold: int,
                 take, gpu_holds_hit, transfers_in_flight) -> None:
        self.table = table
        self.staging = staging
        self.budget = budget
        self.max_seqs = max_seqs
        self.chunked = chunked
        self.threshold = threshold if threshold > 0 else budget
        self.take = take
        self.gpu_holds_hit = gpu_holds_hit
        self.transfers_in_flight = transfers_in_flight
        self.prefilled: dict[int, int] = {}  # partly prefilled request -> prompt tokens computed so far

    def schedule(self, waiting: list[int], prefilling: list[int], n_decodes: int, now: float) -> StepPlan:
        """This step's plan; admitted requests leave ``waiting`` (and join ``prefilling`` when chunked)."""
        plan = StepPlan()
        if self.chunked:
            budget = self.budget - n_decodes
            table = self.table
            hit = table.input_len_py
            for r in prefilling:  # partial prefills first, in admission order
                if budget <= 0:
                    break
                done = self.prefilled[r]
                new = min(int(table.prefill_tokens[r]) - done, budget, self.threshold)
                plan.add(r, new, hit[r] - int(table.prefill_tokens[r]) + done)
                budget -= new
            room = self.max_seqs - n_decodes - len(prefilling)
        else:
            budget = self.budget
            room = self.max_seqs - n_decodes
        if room > 0 and waiting:
            self._admit(waiting, plan, budget, room, now)
            if self.chunked:
                prefilling.extend(plan.admitted)
        if not plan.chunks and n_decodes == 0 and not prefilling and not self.transfers_in_flight():
            self._run_first_ready(waiting, plan, now)
            if self.chunked:
                prefilling.extend(plan.admitted)
        return plan

    def _admit(self, waiting: list[int], plan: StepPlan, budget: int, room: int, now: float) -> None:
        table, staging = self.table, self.staging
        prefill_tokens = table.prefill_tokens
        window = full = budget
        kept: list[int] = []
        for i, r in enumerate(waiting):
            if room <= 0:
                kept.extend(waiting[i:])
                break
            in_window = window == full or prefill_tokens[r] <= window
            window = window - int(prefill_tokens[r]) if in_window else -1
            if staging.admission_check(r, in_window, now, self.gpu_holds_hit) == WAIT:
                room -= 1
                kept.append(r)
                continue
            if self.chunked:
                if budget <= 0:
                    kept.extend(waiting[i:])
                    break
            elif plan.admitted and prefill_tokens[r] > budget:
                kept.extend(waiting[i:])
                break
            if not self.take(r):
                kept.extend(waiting[i:])  # the GPU pool is full: wait for running requests to finish
                break
            staging.consume(r, now)
            room -= 1
            budget -= self._start(r, plan, budget)
        waiting[:] = kept

    def _run_first_ready(self, waiting: list[int], plan: StepPlan, now: float) -> None:
        """Nothing runs and nothing is in flight: stay work-conserving, run the first ready one."""
        for i, r in enumerate(waiting):
            if self.staging.ready_now(r, now) and self.take(r):
                self.staging.consume(r, now)
                waiting.pop(i)
                self._start(r, plan, self.budget)
                break

    def _start(self, r: int, plan: StepPlan, budget: int) -> int:
        """``r`` is admitted: its first chunk (its whole prompt unless chunked); returns its tokens."""
        table = self.table
        tokens = int(table.prefill_tokens[r])
        context = table.input_len_py[r] - tokens
        new = min(tokens, budget, self.threshold) if self.chunked else tokens
        plan.admitted.append(r)
        plan.add(r, new, context)
        if self.chunked:
            self.prefilled[r] = 0
        return new

    def advance(self, plan: StepPlan, prefilling: list[int]) -> list[int]:
        """The step ran: credit each chunk; returns the requests whose prompt is now done (in
        chunk order); they leave ``prefilling``."""
        if not self.chunked:
            return plan.admitted
        table = self.table
        done = []
        for r, new, _ in plan.chunks:
            d = self.prefilled[r] + new
            if d >= table.prefill_tokens[r]:
                del self.prefilled[r]
                done.append(r)
            else:
                self.prefilled[r] = d
        if done:
            finished = set(done)
            prefilling[:] = [r for r in prefilling if r not in finished]
        return done
