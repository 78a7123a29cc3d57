"""Mutated trace files through every reader: each failure is a KvmmError (never a built-in
error), with or without skip_bad, and whatever loads passes KVTrace.check()."""

import json

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvmm.errors import KvmmError
from kvmm.traces import FORMATS, iter_trace_chunks, load_trace

SEEDS = [
    b'{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1, 18446744073709551615]}\n',
    json.dumps({"chat_id": 1, "parent_chat_id": -1, "timestamp": 1.0, "input_length": 1, "output_length": 1,
                "type": "text", "turn": 1, "hash_ids": [1]}).encode() + b"\n",
    json.dumps({"timestamp": 1.0, "request_id": "a", "chunk_size": 256, "seq_len": 3,
                "chunk_hashes": [1, -2, "ff"]}).encode() + b"\n",
    msgpack.packb([1.0, [["BlockStored", [1, 2], None, [], 16, None, "GPU"], ["BlockRemoved", [1], "GPU"]], 0]),
    msgpack.packb({"ts": 1.0, "events": [{"type": "BlockStored", "block_hashes": [b"x" * 32],
                                          "parent_block_hash": None, "block_size": 16}]}),
    bytes(24) + b"\x01" * 24,
]
BYTES = st.sampled_from(list(b'{}[]":,0123456789-.eE\n\r \xff\x00\xc1\x91\x92\x81\x82\xc4\xcbabtnulrsfyp'))
EDIT = st.tuples(st.sampled_from(["insert", "delete", "replace"]), st.integers(0, 400), BYTES)


@settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.sampled_from(SEEDS), copies=st.integers(1, 3), edits=st.lists(EDIT, max_size=6))
def test_mutated_files_raise_only_kvmm_errors(tmp_path, seed, copies, edits):
    data = bytearray(seed * copies)
    for op, pos, byte in edits:
        pos = min(pos, len(data))
        if op == "insert":
            data[pos:pos] = bytes([byte])
        elif data:
            pos = min(pos, len(data) - 1)
            if op == "delete":
                del data[pos]
            else:
                data[pos] = byte
    path = tmp_path / "fuzz.dat"
    path.write_bytes(bytes(data))
    for fmt in (None, *FORMATS):
        for skip_bad in (False, True):
            try:
                load_trace(path, fmt, skip_bad=skip_bad).check()
                for chunk in iter_trace_chunks(path, fmt, chunk_refs=2, skip_bad=skip_bad):
                    assert chunk.ndim == 1
            except KvmmError:
                if skip_bad and fmt is not None:
                    # with skip_bad a format's reader only fails on the file, never on a record
                    pytest.fail(f"{fmt} with skip_bad raised on {bytes(data)[:80]!r}")
