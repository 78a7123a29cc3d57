"""Synthetic agent / conversation traces: Mooncake shape, prefix chaining, determinism."""

import numpy as np
import pytest

from kvmm.errors import KvmmError
from kvmm.traces import MOONCAKE_BLOCK_TOKENS, MooncakeTrace, agent_trace, conversation_trace, load_mooncake

GENERATORS = {
    "agents": lambda seed: agent_trace(8, tasks=16, seed=seed),
    "conversations": lambda seed: conversation_trace(40, seed=seed),
    "agents-odd-prompt": lambda seed: agent_trace(3, tasks=5, system_prompt_tokens=700, seed=seed),
}


@pytest.fixture(params=sorted(GENERATORS))
def kind(request):
    return request.param


def check_mooncake_shape(trace):
    assert isinstance(trace, MooncakeTrace)
    n = trace.num_requests
    assert trace.block_offsets.shape == (n + 1,) and trace.block_offsets[0] == 0
    assert trace.block_offsets[-1] == trace.block_ids.size
    for arr in (trace.timestamp_ms, trace.input_length, trace.output_length, trace.block_offsets, trace.block_ids):
        assert arr.dtype == np.int64
    assert np.all(np.diff(trace.timestamp_ms) >= 0)
    blocks = np.diff(trace.block_offsets)
    assert np.array_equal(blocks, -(-trace.input_length // MOONCAKE_BLOCK_TOKENS))
    assert np.all(trace.output_length > 0)
    # ids are dense, numbered in order of first appearance
    _, first = np.unique(trace.block_ids, return_index=True)
    assert np.array_equal(trace.block_ids[np.sort(first)], np.arange(first.size))


def check_prefix_chained(trace):
    """Equal id => equal prefix: every id always follows the same predecessor at the same depth."""
    pred = {}
    for r in range(trace.num_requests):
        ids = trace.blocks_of(r).tolist()
        for i, b in enumerate(ids):
            key = (ids[i - 1] if i else None, i)
            assert pred.setdefault(b, key) == key


def test_shape_and_prefix_chaining(kind):
    trace = GENERATORS[kind](0)
    check_mooncake_shape(trace)
    check_prefix_chained(trace)


def test_same_seed_same_trace_other_seed_differs(kind):
    a, b, c = GENERATORS[kind](3), GENERATORS[kind](3), GENERATORS[kind](4)
    for field in ("timestamp_ms", "input_length", "output_length", "block_offsets", "block_ids"):
        assert np.array_equal(getattr(a, field), getattr(b, field))
    assert not np.array_equal(a.input_length, c.input_length)


def test_agent_contexts_grow_and_share_system_prompts():
    trace = agent_trace(4, tasks=4, steps=(5, 5), system_prompts=1, system_prompt_tokens=2048, seed=1)
    # all requests start with the same 4 shared prompt blocks
    assert all(trace.blocks_of(r)[:4].tolist() == [0, 1, 2, 3] for r in range(trace.num_requests))
    # each task's requests extend the previous one: previous full blocks are a prefix of the next
    by_first_own = {}
    for r in range(trace.num_requests):
        by_first_own.setdefault(int(trace.blocks_of(r)[4]), []).append(r)
    assert len(by_first_own) == 4 and all(len(v) == 5 for v in by_first_own.values())
    for reqs in by_first_own.values():
        for a, b in zip(reqs, reqs[1:]):
            full = trace.input_length[a] // MOONCAKE_BLOCK_TOKENS
            assert trace.input_length[b] > trace.input_length[a]
            assert np.array_equal(trace.blocks_of(b)[:full], trace.blocks_of(a)[:full])


def test_concurrency_means_interleaving():
    trace = agent_trace(8, tasks=8, steps=(6, 6), seed=2)
    first_own = np.array([trace.blocks_of(r)[trace.blocks_of(r).size > 8 and 8 or 0] for r in range(trace.num_requests)])
    # requests of different agents interleave in time: the agent changes between consecutive requests
    assert np.mean(first_own[1:] != first_own[:-1]) > 0.5


def test_tool_waits_vary_widely():
    # with decoding made instant the gaps between one agent's requests are its tool waits
    trace = agent_trace(1, tasks=1, steps=(40, 40), max_context_tokens=10**7, decode_tokens_per_s=1e9, seed=3)
    gaps = np.diff(trace.timestamp_ms)
    assert gaps.max() > 20 * gaps.min()  # log-normal, log-sd 1.2: spread of two orders of magnitude
    assert 1000 < np.median(gaps) < 10_000  # median near tool_wait_median_s = 4 s


def test_consumers_take_generated_and_loaded_traces_alike():
    from kvmm.policies import StackDistanceTracker

    for trace in (agent_trace(2, tasks=2, seed=0), load_mooncake("synthetic")):
        t = StackDistanceTracker()
        t.access(trace.block_ids)
        assert t.num_refs == trace.block_ids.size


@pytest.mark.parametrize("make", [
    lambda: agent_trace(0),
    lambda: agent_trace(2, steps=(5, 2)),
    lambda: agent_trace(2, steps=(0, 2)),
    lambda: agent_trace(2, tool_wait_median_s=float("nan")),
    lambda: agent_trace(2, output_tokens=(1,)),
    lambda: conversation_trace(0),
    lambda: conversation_trace(5, arrival_rate_per_s=-1.0),
    lambda: conversation_trace(5, turns=(1.5, 3)),
])
def test_bad_parameters(make):
    with pytest.raises(KvmmError):
        make()
