"""Chunked-prefill scheduling (vLLM V1): a hand-worked example pinned step by step, the same
example with whole prefills, and a 32K prompt that no longer stalls a running decode batch."""

from __future__ import annotations

import numpy as np
import pytest

from kvmm.sim import SimConfig, simulate
from kvmm.sim.models import ModelSpec
from tests.sim.sim_helpers import run_engine, trace

# 1000 prefill tokens/s; a decode step takes 0.01 s whatever the batch (no lower tiers, no cache)
TOY = ModelSpec("toy", prefill_tokens_per_s=1000.0, decode_tokens_per_s=100.0, decode_batch_cost=0.0,
                kv_bytes_per_token=1000, max_batch=8, max_prefill_tokens=1000)
# r0 at 0 s: 1500-token prompt, 3 output tokens; r1 at 0.2 s: 800 tokens, 2 output tokens
TWO = trace([(0, 1500, 3, [0, 1, 2]), (200, 800, 2, [10, 11])])


class StepLog:
    """A LatencyModel that times steps as TOY does and records each call.  Before the run the
    instance asks for one prefill of a whole budget (the staging ledger's first guess of the
    prefill rate); the clock asks about a step that mixes prefill and decode twice more, with
    each part alone (its prefill/decode split, for the cost account): ``steps`` leaves those
    calls out."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.calls: list[tuple[list, list, list]] = []

    def step_seconds(self, prefill_new, prefill_context, decode_context) -> float:
        self.calls.append((list(prefill_new), list(prefill_context), list(decode_context)))
        return float(np.sum(prefill_new)) / 1000.0 + (0.01 if len(decode_context) else 0.0)

    @property
    def steps(self) -> list[tuple[list, list, list]]:
        assert self.calls[0] == ([self.budget], [0], [])  # the rate guess
        out, i = [], 1
        while i < len(self.calls):
            step = self.calls[i]
            out.append(step)
            mixed = step[0] and step[2]
            if mixed:
                assert self.calls[i + 1] == (step[0], step[1], []) and self.calls[i + 2] == ([], [], step[2])
            i += 3 if mixed else 1
        return out


def config(**kw) -> SimConfig:
    kw.setdefault("model", TOY)
    return SimConfig(workload=TWO, load=None, tiers=(), gpu_prefix_cache=False, gpu_kv_bytes=10**9,
                     max_num_batched_tokens=1000, max_num_seqs=8, **kw)


def test_chunked_prefill_hand_worked_example():
    """Budget 1000 tokens a step, decodes first, then partial prefills, then the queue:

    ====  =====  ==============================================  ======
    step  start  work                                            time
    ====  =====  ==============================================  ======
    1     0.00   r0 chunk 1000 (context 0)                       1.00
    2     1.00   r0 chunk 500 (context 1000) + r1 chunk 500 (0)  1.00  r0's first token at 2.00
    3     2.00   r0 decode (context 1500) + r1 chunk 300 (500)   0.31  r1's first token at 2.31
    4     2.31   r0, r1 decode: both finish                      0.01  at 2.32
    ====  =====  ==============================================  ======
    """
    res, eng = run_engine(config(chunked_prefill=True))
    table = eng.table
    assert table.first_token.tolist() == pytest.approx([2.0, 2.31])
    assert table.finish.tolist() == pytest.approx([2.32, 2.32])
    assert res.steps == 4
    assert res.ttft_p50 == pytest.approx(((2.0 - 0.0) + (2.31 - 0.2)) / 2)


def test_the_step_log_of_the_hand_worked_example():
    log = StepLog(1000)
    simulate(config(latency=log, chunked_prefill=True))
    assert log.steps[:4] == [([1000], [0], []),
                             ([500, 500], [1000, 0], []),
                             ([300], [500], [1500]),
                             ([], [], [1501, 800])]


def test_whole_prefills_on_the_same_trace():
    """Without chunking: r0's whole 1500-token prompt runs in one step (the first request always
    fits), r1 waits for it, then prefills beside r0's first decode.

    step 1  0.00  r0 1500 tokens          1.50  r0's first token at 1.50
    step 2  1.50  r1 800 + r0's decode    0.81  r1's first token at 2.31
    step 3  2.31  both decode, finish     0.01  at 2.32
    """
    res, eng = run_engine(config(chunked_prefill=False))
    assert eng.table.first_token.tolist() == pytest.approx([1.5, 2.31])
    assert eng.table.finish.tolist() == pytest.approx([2.32, 2.32])
    assert res.steps == 3


def test_a_32k_prompt_no_longer_stalls_the_running_decodes():
    """Eight requests decode 400 tokens each; a 32K prompt arrives at 1 s.  With whole prefills
    one step computes all of it while the batch waits (its time is the whole prefill); chunked,
    no step of the running batch is longer than one budget of prefill plus a decode."""
    rows = [(0, 512, 400, [100 + i]) for i in range(8)] + [(1000, 32_768, 2, list(range(64)))]
    worst = {}
    for chunked in (False, True):
        log = StepLog(2048)
        simulate(SimConfig(workload=trace(rows), load=None, tiers=(), gpu_prefix_cache=False, gpu_kv_bytes=10**10,
                           model=TOY, latency=log, chunked_prefill=chunked, max_num_batched_tokens=2048,
                           max_num_seqs=16))
        with_decodes = [np.sum(p) / 1000.0 + 0.01 for p, _, d in log.steps if len(d) >= 8]
        worst[chunked] = max(with_decodes)
        assert sum(sum(p) for p, _, _ in log.steps) == 8 * 512 + 32_768  # every prompt token computed once
    assert worst[False] == pytest.approx(32.768 + 0.01)
    assert worst[True] <= (2048 - 8) / 1000.0 + 0.01 + 1e-9
