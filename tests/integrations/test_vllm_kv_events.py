"""Real vLLM KV events, serialised as vLLM's ZmqEventPublisher does (msgspec msgpack, one
payload per batch, appended to a file) and as JSONL (msgspec JSON, one batch a line), read back
with kvmm.traces.load_vllm_kv_events (vLLM venv only)."""

from __future__ import annotations

import msgspec
import pytest
from vllm.distributed.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KVEventBatch

from kvmm.traces import load_vllm_kv_events


def stored(hashes, parent):
    return BlockStored(block_hashes=hashes, parent_block_hash=parent, token_ids=list(range(16 * len(hashes))),
                       block_size=16, lora_id=None, medium="GPU", lora_name=None)


def batches(h):
    """Three batches: a root prefix [h0, h1]; h2 extending it (and h0's eviction); [h3, h4]
    extending h2; then a cache reset and a new root h5."""
    return [
        KVEventBatch(ts=1.0, events=[stored([h[0], h[1]], None)]),
        KVEventBatch(ts=2.5, events=[stored([h[2]], h[1]), BlockRemoved(block_hashes=[h[0]], medium="GPU")],
                     data_parallel_rank=0),
        KVEventBatch(ts=4.0, events=[stored([h[3], h[4]], h[2]), AllBlocksCleared(), stored([h[5]], None)]),
    ]


def write_both(tmp_path, events):
    encoder = msgspec.msgpack.Encoder()  # what ZmqEventPublisher uses for each payload
    packed = tmp_path / "events.msgpack"
    packed.write_bytes(b"".join(encoder.encode(batch) for batch in events))
    jsonl = tmp_path / "events.jsonl"
    jsonl.write_bytes(b"".join(msgspec.json.encode(batch) + b"\n" for batch in events))
    return packed, jsonl


@pytest.mark.parametrize("kind", ["int", "bytes"])
def test_vllm_events_read_back_as_requests(tmp_path, kind):
    if kind == "int":  # VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES: 64-bit integers
        hashes = [11, 12, 13, 14, 15, 2**64 - 7]
        words = hashes
    else:  # raw hash bytes; the reader keeps the last 8, big-endian
        hashes = [bytes([i]) * 24 + (1000 + i).to_bytes(8, "big") for i in range(6)]
        words = [1000 + i for i in range(6)]
    expected = [words[0:2], words[0:3], words[0:5], words[5:6]]
    traces = [load_vllm_kv_events(path) for path in write_both(tmp_path, batches(hashes))]
    for trace in traces:
        trace.check()
        assert trace.num_requests == 4
        assert [[int(b) for b in trace.blocks_of(i).view("uint64")] for i in range(4)] == expected
        assert trace.timestamp_ms.tolist() == [1000, 2500, 4000, 4000]
        assert trace.columns["new_blocks"].tolist() == [2, 1, 2, 1]
    # Without ancestors each request is just the blocks its event stored.
    own = load_vllm_kv_events(tmp_path / "events.msgpack", ancestors=False)
    assert [len(own.blocks_of(i)) for i in range(4)] == [2, 1, 2, 1]


def test_removed_and_cleared_blocks_are_counted(tmp_path):
    packed, jsonl = write_both(tmp_path, batches(list(range(1, 7))))
    for path in (packed, jsonl):
        stats = {}
        load_vllm_kv_events(path, stats=stats)
        assert (stats["stored_events"], stats["removed_blocks"], stats["cleared"]) == (4, 1, 1)
