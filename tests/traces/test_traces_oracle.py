"""libCacheSim's oracleGeneral format: kvmm writes the documented bytes, reads them back, and
libCacheSim's own LRU on a file kvmm wrote agrees with kvmm's MRC."""

import struct

import numpy as np
import pytest

from kvmm.errors import BadInputError, TraceFormatError
from kvmm.policies import StackDistanceTracker
from kvmm.traces import iter_oracle_general_chunks, load_oracle_general, load_trace, save_trace
from kvmm.traces.trace import KVTrace


def _tiny_trace():
    # request 0 at 1.9 s: blocks 7, 9; request 1 at 2.5 s: block 7; request 2 at 4.0 s: 2**63 + 5, 9
    return KVTrace("tiny", np.array([1900, 2500, 4000]), np.array([2, 1, 2]), np.array([1, 1, 1]),
                   np.array([0, 2, 3, 5]), np.array([7, 9, 7, 2**63 + 5, 9], dtype=np.uint64).view(np.int64))


def test_writer_emits_the_documented_records(tmp_path):
    path = save_trace(_tiny_trace(), tmp_path / "t.oracleGeneral.bin", "oracle", obj_size=3)
    expected = b"".join(struct.pack("<IQIq", *rec) for rec in [
        (1, 7, 3, 3), (1, 9, 3, 5), (2, 7, 3, -1), (4, 2**63 + 5, 3, -1), (4, 9, 3, -1)])
    assert path.read_bytes() == expected
    back = load_oracle_general(path)
    back.check()
    assert back.block_offsets.tolist() == [0, 1, 2, 3, 4, 5]
    assert back.block_ids.view(np.uint64).tolist() == [7, 9, 7, 2**63 + 5, 9]
    assert back.timestamp_ms.tolist() == [1000, 1000, 2000, 4000, 4000]
    assert back.columns["next_access_vtime"].tolist() == [3, 5, -1, -1, -1]
    assert back.columns["obj_size"].tolist() == [3] * 5 and back.input_length.tolist() == [3] * 5
    assert not list(tmp_path.glob("*.tmp"))  # written through a temporary file, renamed


def test_torn_and_malformed_records(tmp_path):
    good = struct.pack("<IQIq", 0, 1, 1, -1)
    path = tmp_path / "t.bin"
    path.write_bytes(good + struct.pack("<IQIq", 0, 2, 1, -7) + good + good[:10])
    with pytest.raises(TraceFormatError, match=r"t\.bin: record 2: next_access_vtime -7"):
        load_trace(path, "oracle")
    trace = load_trace(path, "oracle", skip_bad=True)
    assert trace.block_ids.tolist() == [1, 1] and trace.bad_lines == 2
    path.write_bytes(good + good[:10])
    with pytest.raises(TraceFormatError, match="record 2: torn record"):
        load_oracle_general(path)
    stats = {}
    assert [c.tolist() for c in iter_oracle_general_chunks(path, 1, skip_bad=True, stats=stats)] == [[1]]
    assert stats["bad_lines"] == 1
    with pytest.raises(BadInputError, match="chunk_refs"):
        next(iter_oracle_general_chunks(path, 0))
    zst = tmp_path / "t.oracleGeneral.zst"
    zst.write_bytes(b"\x28\xb5\x2f\xfd" + bytes(44))
    with pytest.raises(BadInputError, match="zstd-compressed; decompress it first"):
        load_trace(zst)


def test_writer_rejects_what_the_format_cannot_hold(tmp_path):
    trace = _tiny_trace()
    with pytest.raises(BadInputError, match="obj_size"):
        save_trace(trace, tmp_path / "t.bin", "oracle", obj_size=-1)
    trace.timestamp_ms[:] = 2**33 * 1000
    with pytest.raises(BadInputError, match="u32 seconds"):
        save_trace(trace, tmp_path / "t.bin", "oracle")
    assert not (tmp_path / "t.bin").exists()


@pytest.mark.parametrize("name", ["conversation", "synthetic"])
def test_libcachesim_lru_on_a_kvmm_written_trace_matches_kvmm_mrc(name, tmp_path):
    lcs = pytest.importorskip("libcachesim")
    trace = load_trace(name)
    path = save_trace(trace, tmp_path / f"{name}.oracleGeneral.bin", "oracle")
    tracker = StackDistanceTracker()
    tracker.access(load_trace(path).block_ids)  # what kvmm reads back from its own file
    hist = tracker.histogram()
    capacities = [1, 100, hist.working_set(0.5), hist.working_set(0.9), hist.max_capacity]
    for capacity, ours in zip(capacities, hist.mrc(capacities)):
        reader = lcs.TraceReader(str(path), lcs.TraceType.ORACLE_GENERAL_TRACE)
        theirs = lcs.LRU(cache_size=int(capacity)).process_trace(reader)[0]
        assert ours == pytest.approx(theirs, abs=1e-12), capacity
