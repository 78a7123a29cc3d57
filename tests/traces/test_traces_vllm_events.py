"""vLLM KV events saved as msgpack or JSONL: both wire shapes (positional array_like structs and
named maps), prefix reconstruction through parent_block_hash, filters, bad records, and the
writer's round trip."""

import base64
import json

import msgpack
import numpy as np
import pytest

from kvmm.errors import BadInputError, TraceFormatError
from kvmm.traces import detect_format, iter_vllm_kv_events, load_trace, load_vllm_kv_events, save_trace

HASH_104 = bytes(24) + (104).to_bytes(8, "big")  # a 32-byte hash: its last 8 bytes are kept

# Positional batches (vLLM's array_like structs) then named ones (map encoding), one stream.
BATCHES = [
    [1700000000.5, [["BlockStored", [101, 102], None, list(range(32)), 16, None, "GPU"]], 0],
    [1700000001.0, [["BlockStored", [103], 102, list(range(16)), 16, None, "GPU", None],
                    ["BlockRemoved", [101], "GPU"]]],
    [1700000002.0, [["BlockStored", [201], 101, [], 16, None, "CPU"], ["AllBlocksCleared"]]],
    {"ts": 1700000003.0, "data_parallel_rank": 1,
     "events": [{"type": "BlockStored", "block_hashes": [HASH_104], "parent_block_hash": 103, "token_ids": [],
                 "block_size": 16, "lora_id": None, "medium": "GPU", "lora_name": None,
                 "extra_keys": [None], "group_idx": 0, "kv_cache_spec_kind": "full_attention"},
                {"type": "SomeFutureEvent", "payload": 1}]},
]


def _json_form(obj):
    """What msgspec.json.encode writes: bytes become base64 strings."""
    if isinstance(obj, bytes):
        return base64.b64encode(obj).decode()
    if isinstance(obj, dict):
        return {k: _json_form(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_json_form(v) for v in obj]
    return obj


@pytest.fixture(params=["msgpack", "jsonl"])
def events_file(request, tmp_path):
    if request.param == "msgpack":
        path = tmp_path / "events.msgpack"
        path.write_bytes(b"".join(msgpack.packb(b, use_bin_type=True) for b in BATCHES))
    else:
        path = tmp_path / "events.jsonl"
        path.write_text("".join(json.dumps(_json_form(b)) + "\n" for b in BATCHES))
    return path


def _requests(trace):
    return [trace.blocks_of(r).tolist() for r in range(trace.num_requests)]


def test_stored_events_become_requests_with_their_cached_prefix(events_file):
    assert detect_format(events_file) == "vllm"
    stats = {}
    trace = load_vllm_kv_events(events_file, stats=stats)
    trace.check()
    assert trace.source_format == "vllm" and trace.block_tokens == 16
    assert _requests(trace) == [[101, 102], [101, 102, 103], [101, 201], [101, 102, 103, 104]]
    assert trace.columns["new_blocks"].tolist() == [2, 1, 1, 1]
    assert trace.columns["data_parallel_rank"].tolist() == [0, -1, -1, 1]
    assert trace.timestamp_ms.tolist() == [1700000000500, 1700000001000, 1700000002000, 1700000003000]
    assert trace.input_length.tolist() == [32, 48, 32, 64] and trace.output_length.tolist() == [0, 0, 0, 0]
    assert stats == {"bad_lines": 0, "unknown_events": 1, "stored_events": 4, "removed_blocks": 1, "cleared": 1}
    assert load_trace(events_file).block_ids.tolist() == trace.block_ids.tolist()


def test_filters_and_stores_only(events_file):
    assert _requests(load_vllm_kv_events(events_file, medium="GPU")) == [[101, 102], [101, 102, 103],
                                                                         [101, 102, 103, 104]]
    assert _requests(load_vllm_kv_events(events_file, ancestors=False)) == [[101, 102], [103], [201], [104]]
    assert _requests(load_vllm_kv_events(events_file, group_idx=1)) == []


def test_batches_decode_to_normalised_events(events_file):
    batches = list(iter_vllm_kv_events(events_file))
    assert [b[0] for b in batches] == [1700000000.5, 1700000001.0, 1700000002.0, 1700000003.0]
    assert batches[1][2] == [("BlockStored", [103], 102, 16, "GPU", None), ("BlockRemoved", [101], "GPU", None)]
    assert batches[3][2] == [("BlockStored", [104], 103, 16, "GPU", 0)]


def test_truncated_and_undecodable_msgpack(tmp_path):
    data = b"".join(msgpack.packb(b, use_bin_type=True) for b in BATCHES)
    torn = tmp_path / "torn.msgpack"
    torn.write_bytes(data[:-3])
    with pytest.raises(TraceFormatError, match=r"torn\.msgpack: msgpack object 4: truncated"):
        load_vllm_kv_events(torn)
    trace = load_vllm_kv_events(torn, skip_bad=True)
    assert trace.num_requests == 3 and trace.bad_lines == 1
    garbage = tmp_path / "garbage.msgpack"
    garbage.write_bytes(msgpack.packb(BATCHES[0]) + b"\xc1" + msgpack.packb(BATCHES[1]))
    with pytest.raises(TraceFormatError, match="msgpack object 2: undecodable"):
        load_vllm_kv_events(garbage)
    assert load_vllm_kv_events(garbage, skip_bad=True).bad_lines == 1


@pytest.mark.parametrize("bad, match", [
    (5, "expected a KV event batch"),
    ([1.0, 7], "events must be a list"),
    ([-1.0, []], "ts must be"),
    ([1.0, [], "x"], "data_parallel_rank"),
    ([1.0, [["BlockStored", [1], None, [], 0, None, "GPU"]]], "block_size"),
    ([1.0, [["BlockStored", [1.5], None, [], 16, None, "GPU"]]], "block hash must be an integer"),
    ([1.0, [["BlockRemoved", "nope", "GPU"]]], "block_hashes must be a list"),
    ([1.0, [[7]]], "tagged KV event"),
    ({"ts": 1.0, "events": [{"type": {"a": 1}, "block_hashes": []}]}, "event type must be a string"),
    ({"ts": 1.0, "events": [{"type": "BlockStored", "block_hashes": ["!!"], "block_size": 16}]}, "not base64"),
])
def test_malformed_batches_are_bad_records(tmp_path, bad, match):
    path = tmp_path / "bad.msgpack"
    path.write_bytes(msgpack.packb(BATCHES[0]) + msgpack.packb(bad) + msgpack.packb(BATCHES[1]))
    with pytest.raises(TraceFormatError, match="msgpack object 2: .*" + match):
        load_vllm_kv_events(path, encoding="msgpack")
    trace = load_vllm_kv_events(path, encoding="msgpack", skip_bad=True)
    assert trace.bad_lines == 1 and _requests(trace) == [[101, 102], [101, 102, 103]]
    jpath = tmp_path / "bad.jsonl"
    jpath.write_text(json.dumps(BATCHES[0]) + "\n" + json.dumps(_json_form(bad)) + "\n")
    with pytest.raises(TraceFormatError, match=r"bad\.jsonl:2: .*" + match):
        load_vllm_kv_events(jpath)


@pytest.mark.parametrize("encoding", ["msgpack", "jsonl"])
def test_writer_round_trips_every_request_that_stores_a_block(tmp_path, encoding):
    src = load_trace("synthetic")
    path = save_trace(src, tmp_path / f"ev.{encoding}", "vllm", encoding=encoding, block_size=512)
    back = load_vllm_kv_events(path)
    seen, kept, new = set(), [], []
    for r in range(src.num_requests):
        blocks = src.blocks_of(r).tolist()
        fresh = [b for b in blocks if b not in seen]
        if fresh:
            kept.append(r)
            new.append(len(fresh))
        seen.update(blocks)
    assert 0 < len(kept) < src.num_requests  # some requests are all hits: vLLM publishes nothing for them
    assert back.num_requests == len(kept) and back.columns["new_blocks"].tolist() == new
    np.testing.assert_array_equal(back.block_ids, np.concatenate([src.blocks_of(r) for r in kept]))
    np.testing.assert_array_equal(back.timestamp_ms, src.timestamp_ms[kept])
    np.testing.assert_array_equal(back.input_length, 512 * np.diff(src.block_offsets)[kept])


def test_bad_arguments(tmp_path, events_file):
    with pytest.raises(BadInputError, match="encoding must be"):
        load_vllm_kv_events(events_file, encoding="xml")
    with pytest.raises(BadInputError, match="encoding must be"):
        save_trace(load_trace("synthetic"), tmp_path / "x", "vllm", encoding="xml")
    with pytest.raises(BadInputError, match="block_size"):
        save_trace(load_trace("synthetic"), tmp_path / "x", "vllm", block_size=0)
    with pytest.raises(BadInputError, match="medium"):
        save_trace(load_trace("synthetic"), tmp_path / "x", "vllm", medium=None)
    assert not (tmp_path / "x").exists()
    with pytest.raises(BadInputError, match="is a directory"):
        load_vllm_kv_events(tmp_path)
    with pytest.raises(BadInputError, match="must be a str or os.PathLike"):
        load_vllm_kv_events(None)


def _vllm_structs(array_like):
    """vLLM's event structs as declared in vllm/distributed/kv_events.py (array_like=True before
    vLLM PR #42892, map encoding after), for msgspec to encode exactly as vLLM's publisher does."""
    from typing import Any

    import msgspec

    class EventBatch(msgspec.Struct, array_like=array_like, omit_defaults=True, gc=False):
        ts: float
        events: list[Any]
        data_parallel_rank: int | None = None

    class KVCacheEvent(msgspec.Struct, array_like=array_like, omit_defaults=True, gc=False, tag=True):
        pass

    class BlockStored(KVCacheEvent):
        block_hashes: list[bytes | int]
        parent_block_hash: bytes | int | None
        token_ids: list[int]
        block_size: int
        lora_id: int | None
        medium: str | None
        lora_name: str | None
        extra_keys: list[tuple[Any, ...] | None] | None = None
        group_idx: int | None = None
        kv_cache_spec_kind: str | None = None
        kv_cache_spec_sliding_window: int | None = None

    class BlockRemoved(KVCacheEvent):
        block_hashes: list[bytes | int]
        medium: str | None
        group_idx: int | None = None

    class AllBlocksCleared(KVCacheEvent):
        pass

    class KVEventBatch(EventBatch):
        events: list[BlockStored | BlockRemoved | AllBlocksCleared]

    return KVEventBatch, BlockStored, BlockRemoved, AllBlocksCleared


@pytest.mark.parametrize("array_like", [True, False], ids=["positional", "map"])
def test_msgspec_encoded_batches_in_both_shapes_and_encodings(tmp_path, array_like):
    import msgspec

    Batch, Stored, Removed, Cleared = _vllm_structs(array_like)
    batches = [
        Batch(ts=1.5, data_parallel_rank=0, events=[
            Stored(block_hashes=[2**64 - 1, 5], parent_block_hash=None, token_ids=list(range(32)), block_size=16,
                   lora_id=None, medium="GPU", lora_name=None, extra_keys=[None, None], group_idx=0,
                   kv_cache_spec_kind="full_attention")]),
        Batch(ts=2.0, events=[
            Stored(block_hashes=[b"\x01" * 32], parent_block_hash=5, token_ids=[], block_size=16, lora_id=None,
                   medium="GPU", lora_name=None),
            Removed(block_hashes=[2**64 - 1], medium="GPU"), Cleared()]),
    ]
    encoder = msgspec.msgpack.Encoder()
    packed = tmp_path / "ev.msgpack"
    packed.write_bytes(b"".join(encoder.encode(b) for b in batches))
    lines = tmp_path / "ev.jsonl"
    lines.write_bytes(b"".join(msgspec.json.encode(b) + b"\n" for b in batches))
    for path in (packed, lines):
        stats = {}
        trace = load_vllm_kv_events(path, stats=stats)
        assert [trace.blocks_of(r).view(np.uint64).tolist() for r in range(2)] == [
            [2**64 - 1, 5], [2**64 - 1, 5, int.from_bytes(b"\x01" * 8, "big")]]
        assert trace.columns["data_parallel_rank"].tolist() == [0, -1]
        assert (stats["removed_blocks"], stats["cleared"], stats["bad_lines"]) == (1, 1, 0)


@pytest.mark.parametrize("encoding", ["msgpack", "jsonl"])
def test_kvmm_written_events_decode_with_vllm_structs(tmp_path, encoding):
    import msgspec

    Batch, *_ = _vllm_structs(False)
    path = save_trace(load_trace("synthetic"), tmp_path / f"ev.{encoding}", "vllm", encoding=encoding)
    if encoding == "jsonl":
        decoded = [msgspec.json.decode(line, type=Batch) for line in path.read_bytes().splitlines()]
    else:
        data, decoded, start = path.read_bytes(), [], 0
        unpacker = msgpack.Unpacker(raw=False)
        unpacker.feed(data)
        for _ in unpacker:  # cut the stream into the payloads as written, then decode each
            decoded.append(msgspec.msgpack.decode(data[start:unpacker.tell()], type=Batch))
            start = unpacker.tell()
    back = load_vllm_kv_events(path)
    assert len(decoded) == back.num_requests
    assert [len(b.events[0].block_hashes) for b in decoded] == back.columns["new_blocks"].tolist()
