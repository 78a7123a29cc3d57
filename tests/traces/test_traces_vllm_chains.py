"""The vLLM KV-event reader shares prefix chains (issue 19 item 3): a chain of 20,000 one-block
events loads in linear memory, and every stream gives the requests of the documented model."""

import json
import tracemalloc

import msgpack
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvmm.traces import iter_trace_chunks, iter_vllm_kv_events, load_vllm_kv_events
from kvmm.traces.shared_prefix import SharedPrefixTrace
from kvmm.traces.vllm_events import iter_vllm_requests


def _chain_file(path, n):
    """n BlockStored batches, each one block whose parent is the previous event's block."""
    with open(path, "w") as fh:
        for i in range(n):
            event = {"type": "BlockStored", "block_hashes": [i + 1], "parent_block_hash": i if i else None,
                     "block_size": 16, "medium": "GPU"}
            fh.write(json.dumps({"ts": i / 1000, "events": [event], "data_parallel_rank": 0}) + "\n")
    return path


def test_a_20000_event_chain_loads_in_linear_memory(tmp_path):
    n = 20_000
    path = _chain_file(tmp_path / "chain.jsonl", n)
    tracemalloc.start()
    try:
        trace = load_vllm_kv_events(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= 200e6, f"peak {peak / 1e6:.1f} MB"  # the quadratic reader needed 3.0 GiB
    assert isinstance(trace, SharedPrefixTrace) and not trace.materialised
    trace.check()
    assert trace.num_requests == n and trace.node_ids.size == n
    lengths = np.diff(trace.block_offsets)
    np.testing.assert_array_equal(lengths, np.arange(1, n + 1))  # request i lists i + 1 blocks
    assert int(trace.block_offsets[-1]) == n * (n + 1) // 2
    np.testing.assert_array_equal(trace.blocks_of(n - 1), np.arange(1, n + 1))
    np.testing.assert_array_equal(trace.input_length, 16 * lengths)
    assert trace.columns["new_blocks"].tolist() == [1] * n and not trace.materialised
    head = trace.head(4)
    head.check()
    assert head.block_ids.tolist() == [1, 1, 2, 1, 2, 3, 1, 2, 3, 4] and not trace.materialised


def _reference_requests(batches, ancestors=True):
    """The documented model, written out the plain (quadratic) way: a stored block's prefix is
    the prefix its parent hash had when the block was stored (a parent never stored is a
    one-block prefix); each BlockStored event lists its parent's prefix, then its own blocks."""
    prefix_of: dict[int, list[int]] = {}
    out = []
    for batch in batches:
        for ev in batch["events"]:
            if ev["type"] != "BlockStored":
                continue
            parent = ev["parent_block_hash"]
            blocks = [] if not ancestors or parent is None else list(prefix_of.get(parent, [parent]))
            for h in ev["block_hashes"]:
                blocks.append(h)
                prefix_of[h] = list(blocks)
            out.append((blocks, len(ev["block_hashes"])))
    return out


@st.composite
def event_streams(draw):
    """Batches of BlockStored / BlockRemoved events over a small hash pool, so hashes repeat,
    parents are unknown or re-stored, and chains branch."""
    batches = []
    for b in range(draw(st.integers(0, 12))):
        events = []
        for _ in range(draw(st.integers(0, 3))):
            if draw(st.integers(0, 4)) == 0:
                events.append({"type": "BlockRemoved", "block_hashes": draw(st.lists(st.integers(0, 9), max_size=2))})
                continue
            events.append({"type": "BlockStored", "block_hashes": draw(st.lists(st.integers(0, 9), max_size=4)),
                           "parent_block_hash": draw(st.none() | st.integers(0, 11)), "block_size": 16})
        batches.append({"ts": b * 0.5, "events": events, "data_parallel_rank": 0})
    return batches


@settings(max_examples=150, deadline=None)
@given(event_streams(), st.booleans(), st.sampled_from(["jsonl", "msgpack"]))
def test_requests_follow_the_documented_model(tmp_path_factory, batches, ancestors, encoding):
    path = tmp_path_factory.mktemp("ev") / f"ev.{encoding}"
    if encoding == "jsonl":
        path.write_text("".join(json.dumps(b) + "\n" for b in batches))
    else:
        path.write_bytes(b"".join(msgpack.packb(b) for b in batches))
    expected = _reference_requests(batches, ancestors)
    trace = load_vllm_kv_events(path, ancestors=ancestors)
    trace.check()
    assert [trace.blocks_of(r).tolist() for r in range(trace.num_requests)] == [e[0] for e in expected]
    assert trace.columns["new_blocks"].tolist() == [e[1] for e in expected]
    assert not trace.materialised
    flat = [h for blocks, _ in expected for h in blocks]
    assert trace.block_ids.tolist() == flat  # the numba materialisation against the plain lists
    assert [r[2] for r in iter_vllm_requests(path, ancestors=ancestors)] == [e[0] for e in expected]
    chunks = list(iter_trace_chunks(path, "vllm", chunk_refs=3, ancestors=ancestors))
    assert (np.concatenate(chunks).tolist() if chunks else []) == flat
    assert sum(len(b[2]) for b in iter_vllm_kv_events(path)) == sum(len(b["events"]) for b in batches)


def test_a_re_stored_hash_does_not_rewrite_earlier_prefixes(tmp_path):
    """[A] then [B] after A then [A] again after X then [C] after B: C's prefix is B's as stored
    (A, B), not the walk through A's newer parent X (the quadratic reader gave X, A, B, C)."""
    batches = [{"ts": 0, "events": [{"type": "BlockStored", "block_hashes": hs, "parent_block_hash": p,
                                     "block_size": 16}]} for hs, p in (([1], None), ([2], 1), ([1], 9), ([3], 2))]
    path = tmp_path / "ev.jsonl"
    path.write_text("".join(json.dumps(b) + "\n" for b in batches))
    trace = load_vllm_kv_events(path)
    assert [trace.blocks_of(r).tolist() for r in range(4)] == [[1], [1, 2], [9, 1], [1, 2, 3]]
