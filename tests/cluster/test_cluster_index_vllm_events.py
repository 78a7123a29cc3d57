"""BlockIndex.apply_vllm_events: vLLM KVEventBatch in every wire shape kvmm.traces reads
(positional array_like structs, named maps, msgpack bytes, JSON text, msgspec structs), media,
clears, lenient replay of a lossy stream, and strict batches that apply whole or not at all."""

import json

import msgpack
import msgspec
import numpy as np
import pytest

from kvmm.cluster import BlockIndex, decode_vllm_batch
from kvmm.errors import BadInputError, UnknownKeyError
from kvmm.testing.allocator_machine import assert_same_snapshot
from tests.traces.test_traces_vllm_events import _json_form  # what msgspec.json.encode writes

HASH_104 = bytes(24) + (104).to_bytes(8, "big")  # a 32-byte hash: its last 8 bytes are the key
BIG = 2**64 - 5  # a uint64 hash above 2**63: key -5 (its int64 view)

POSITIONAL = [1700000000.5, [["BlockStored", [101, 102, BIG], None, list(range(48)), 16, None, "GPU"],
                             ["BlockStored", [201], 101, [], 16, None, "CPU", None],
                             ["BlockRemoved", [102], "GPU"]], 0]
NAMED = {"ts": 1700000003.0, "data_parallel_rank": 1,
         "events": [{"type": "BlockStored", "block_hashes": [HASH_104], "parent_block_hash": 101, "token_ids": [],
                     "block_size": 16, "lora_id": None, "lora_name": None, "group_idx": 0},  # no medium: GPU
                    {"type": "SomeFutureEvent", "payload": 1}]}


WIRE_FORMS = {
    "decoded": lambda b: b,
    "msgpack": lambda b: msgpack.packb(b, use_bin_type=True),
    "json": lambda b: json.dumps(_json_form(b)),
}


@pytest.mark.parametrize("form", sorted(WIRE_FORMS))
def test_batches_in_every_wire_shape_feed_the_index(form):
    index = BlockIndex(2)
    wire = WIRE_FORMS[form]
    assert index.apply_vllm_events(1, wire(POSITIONAL)) == {"stored": 4, "removed": 1, "cleared": 0,
                                                             "unknown_events": 0}
    assert index.apply_vllm_events(1, wire(NAMED)) == {"stored": 1, "removed": 0, "cleared": 0, "unknown_events": 1}
    assert index.key_width == 1
    assert index.as_dict() == {101: [(1, "GPU")], -5: [(1, "GPU")], 201: [(1, "CPU")], 104: [(1, "GPU")]}
    assert index.prefix_hits([101, 104]).tolist() == [[0, 0], [2, 0]]
    index.apply_vllm_events(1, wire([1.0, [["AllBlocksCleared"]]]))
    assert len(index) == 0
    index.check()


def test_msgspec_structs_positional_and_tagged():
    class BlockStored(msgspec.Struct, tag=True, array_like=True, omit_defaults=True):
        block_hashes: list
        parent_block_hash: object
        token_ids: list
        block_size: int
        lora_id: object
        medium: object = None

    class BlockRemoved(msgspec.Struct, tag=True):  # the later map encoding
        block_hashes: list
        medium: object = None

    class KVEventBatch(msgspec.Struct, array_like=True):
        ts: float
        events: list
        data_parallel_rank: object = None

    index = BlockIndex(1, media=("GPU", "CPU"))
    index.apply_vllm_events(0, KVEventBatch(1.0, [BlockStored([7, 8], None, [], 16, None, "CPU")]))
    index.apply_vllm_events(0, KVEventBatch(2.0, [BlockRemoved([8], "CPU")]))
    assert index.as_dict() == {7: [(0, "CPU")]}


def test_wide_index_takes_hash_and_zero():
    index = BlockIndex(1, media=("GPU",), key_width=2)
    index.apply_vllm_events(0, [1.0, [["BlockStored", [BIG], None, [], 16, None, None]]])
    assert index.as_dict() == {(BIG, 0): [(0, "GPU")]}


def test_decode_lists_operations_in_order():
    ops, unknown = decode_vllm_batch(POSITIONAL)
    assert ops == [("stored", [101, 102, BIG], "GPU"), ("stored", [201], "CPU"), ("removed", [102], "GPU")]
    assert unknown == 0


@pytest.mark.parametrize("batch, match", [
    (5, "not a vLLM KV event batch: expected a KV event batch"),
    ([1.0, [["BlockStored", [1.5], None, [], 16, None, "GPU"]]], "block hash must be an integer"),
    (b"\xc1", "not a msgpack KV event batch"),
    ("{oops", "not a JSON KV event batch"),
    ([1.0, [["BlockStored", [1], None, [], 16, None, "GPU"], ["BlockStored", [2], None, [], 16, None, "NVMe"]]],
     r"unknown medium 'NVMe'; expected one of \['GPU', 'CPU'\]"),
])
def test_bad_batches_change_nothing(batch, match):
    index = BlockIndex(2)
    index.stored(0, [1], "GPU")
    before = index.snapshot()
    with pytest.raises(BadInputError, match=match):
        index.apply_vllm_events(0, batch)
    assert_same_snapshot(before, index.snapshot())


@pytest.mark.parametrize("events", [
    [["BlockRemoved", [1], "GPU"], ["BlockRemoved", [9], "GPU"], ["BlockStored", [5], None, [], 16, None, "GPU"]],
    [["BlockStored", [5], None, [], 16, None, "GPU"], ["BlockRemoved", [5], "GPU"], ["BlockRemoved", [5], "GPU"]],
    [["AllBlocksCleared"], ["BlockRemoved", [1], "GPU"]],
])
def test_strict_batch_applies_whole_or_not_at_all(events):
    index = BlockIndex(2, max_entries=8)
    index.stored(0, [1, 2], "GPU")
    before = index.snapshot()
    with pytest.raises(UnknownKeyError, match="does not hold key"):
        index.apply_vllm_events(0, [1.0, events])
    assert_same_snapshot(before, index.snapshot())
    fresh = BlockIndex(2)
    with pytest.raises(UnknownKeyError):
        fresh.apply_vllm_events(0, [1.0, [["BlockRemoved", [1], "GPU"]]])
    assert fresh.key_width is None  # the failed batch decided nothing


def test_lenient_replay_of_a_lossy_stream_reports_what_the_docs_say():
    full = [
        [1.0, [["BlockStored", [1, 2, 3], None, [], 16, None, "GPU"]]],
        [2.0, [["BlockRemoved", [3], "GPU"]]],
        [3.0, [["BlockStored", [4], 2, [], 16, None, "GPU"]]],
    ]
    index = BlockIndex(1, media=("GPU",))
    index.apply_vllm_events(0, full[0], lenient=True)  # the removal of 3 is dropped
    index.apply_vllm_events(0, full[2], lenient=True)
    assert index.prefix_hits([1, 2, 3]).tolist() == [[3]]  # stale holder: over-reports
    index.apply_vllm_events(0, full[1], lenient=True)
    assert index.prefix_hits([1, 2, 3]).tolist() == [[2]]
    # reordered: a removal before its store is ignored and counted; the late store leaves a stale holder
    index.apply_vllm_events(0, [4.0, [["BlockRemoved", [7], "GPU"]]], lenient=True)
    index.apply_vllm_events(0, [5.0, [["BlockStored", [7], None, [], 16, None, "GPU"]]], lenient=True)
    assert index.stats["lenient_ignored"] == 1 and index.holders(7) == [(0, "GPU")]
    # a dropped store under-reports: the run stops at the missing block
    assert index.prefix_hits([1, 2, 5, 4]).tolist() == [[2]]
    index.apply_vllm_events(0, [6.0, [["AllBlocksCleared"]]], lenient=True)
    assert len(index) == 0 and index.stats["cleared"] == 1
    index.check()


def test_matches_the_single_calls_on_a_replayed_stream():
    rng = np.random.default_rng(3)
    via_events, via_calls = BlockIndex(4), BlockIndex(4)
    for step in range(200):
        inst = int(rng.integers(4))
        events = []
        for _ in range(int(rng.integers(1, 4))):
            hashes = rng.integers(0, 30, size=int(rng.integers(0, 4))).tolist()
            medium = ["GPU", "CPU", None][int(rng.integers(3))]
            kind = int(rng.integers(10))
            if kind < 6:
                events.append(["BlockStored", hashes, None, [], 16, None, medium])
                via_calls.stored(inst, hashes, medium or "GPU")
            elif kind < 9:
                events.append(["BlockRemoved", hashes, medium])
                via_calls.removed(inst, hashes, medium or "GPU", lenient=True)
            else:
                events.append(["AllBlocksCleared"])
                via_calls.cleared(inst)
        via_events.apply_vllm_events(inst, [float(step), events], lenient=True)
    assert via_events.as_dict() == via_calls.as_dict() and via_events.stats == via_calls.stats
    via_events.check()
