"""Every trace format: a fixture written by hand in the format's own layout, its round trip
through kvmm's writer and reader, format detection, and load_trace / save_trace."""

import json
from dataclasses import replace

import numpy as np
import pytest

from kvmm.errors import BadInputError, TraceFormatError
from kvmm.traces import (
    FORMATS,
    KVTrace,
    MooncakeTrace,
    conversation_turns,
    detect_format,
    iter_trace_chunks,
    load_bailian,
    load_lmcache,
    load_mooncake,
    load_trace,
    save_trace,
)
from tests.paths import ROOT

# Two conversations in the Qwen-Bailian layout: chat 10 -> 11 -> 13 and chat 12 alone.  Turn 2
# repeats turn 1's blocks (its prompt holds the previous turn) and adds its own.
BAILIAN_LINES = [
    {"chat_id": 10, "parent_chat_id": -1, "timestamp": 0.5, "input_length": 40, "output_length": 7,
     "type": "text", "turn": 1, "hash_ids": [0, 1, 2]},
    {"chat_id": 11, "parent_chat_id": 10, "timestamp": 12.25, "input_length": 70, "output_length": 9,
     "type": "search", "turn": 2, "hash_ids": [0, 1, 2, 3, 4]},
    {"chat_id": 12, "parent_chat_id": -1, "timestamp": 13.0, "input_length": 20, "output_length": 3,
     "type": "image", "turn": 1, "hash_ids": [5, 6]},
    {"chat_id": 13, "parent_chat_id": 11, "timestamp": 30.125, "input_length": 90, "output_length": 4,
     "type": "file", "turn": 3, "hash_ids": [0, 1, 2, 3, 7, 8]},
]

LMCACHE_LINES = [
    {"timestamp": 1733145600.25, "request_id": "cmpl-a", "chunk_size": 256, "seq_len": 700,
     "chunk_hashes": [-4512962519012345678, 8123456789012345678, 17]},
    {"timestamp": 1733145601.5, "request_id": 42, "chunk_size": 256, "seq_len": 300,
     "chunk_hashes": [-4512962519012345678, "0x00000000000000ff"]},
]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_bailian_fixture_keeps_conversation_structure(tmp_path):
    trace = load_bailian(_jsonl(tmp_path / "qwen_traceA_blksz_16.jsonl", BAILIAN_LINES))
    trace.check()
    assert isinstance(trace, KVTrace) and MooncakeTrace is KVTrace and trace.source_format == "bailian"
    assert trace.block_tokens == 16 and trace.num_requests == 4
    assert trace.timestamp_ms.tolist() == [500, 12250, 13000, 30125]
    assert trace.columns["chat_id"].tolist() == [10, 11, 12, 13]
    assert trace.columns["parent_chat_id"].tolist() == [-1, 10, -1, 11]
    assert trace.columns["turn"].tolist() == [1, 2, 1, 3]
    assert trace.columns["type"].tolist() == ["text", "search", "image", "file"]
    assert trace.block_offsets.tolist() == [0, 3, 8, 10, 16]
    turns = conversation_turns(trace)
    assert turns["parent"].tolist() == [-1, 0, -1, 1]
    assert turns["reused_blocks"].tolist() == [0, 3, 0, 4]
    np.testing.assert_array_equal(turns["think_time_s"], [np.nan, 11.75, np.nan, 17.875])
    with pytest.raises(BadInputError, match="chat_id and parent_chat_id"):
        conversation_turns(load_trace("synthetic"))
    with pytest.raises(BadInputError, match="needs a KVTrace, got NoneType"):
        conversation_turns(None)


def test_head_keeps_columns_and_layout(tmp_path):
    trace = load_bailian(_jsonl(tmp_path / "b.jsonl", BAILIAN_LINES))
    first = trace.head(2)
    first.check()
    assert first.name == "b[:2]" and first.block_offsets.tolist() == [0, 3, 8]
    assert first.block_ids.tolist() == [0, 1, 2, 0, 1, 2, 3, 4] and first.columns["chat_id"].tolist() == [10, 11]
    assert trace.head(10) is trace and trace.head(0).num_requests == 0
    with pytest.raises(BadInputError, match="non-negative integer"):
        trace.head(-1)


def test_lmcache_fixture_keeps_64_bit_patterns(tmp_path):
    trace = load_lmcache(_jsonl(tmp_path / "lookups.jsonl", LMCACHE_LINES))
    trace.check()
    assert trace.source_format == "lmcache" and trace.block_tokens == 256
    assert trace.input_length.tolist() == [700, 300] and trace.output_length.tolist() == [0, 0]
    assert trace.timestamp_ms.tolist() == [1733145600250, 1733145601500]
    assert trace.columns["request_id"].tolist() == ["cmpl-a", "42"]
    assert trace.block_ids.tolist() == [-4512962519012345678, 8123456789012345678, 17, -4512962519012345678, 255]


@pytest.mark.parametrize("fmt", ["mooncake", "bailian", "lmcache", "oracle"])
def test_every_request_format_round_trips_the_bundled_trace(tmp_path, fmt):
    src = load_trace("synthetic")
    if fmt == "bailian":  # the format fixes 16-token blocks: relabel the Mooncake trace explicitly
        src = replace(src, block_tokens=16)
    path = save_trace(src, tmp_path / ("t.oracleGeneral.bin" if fmt == "oracle" else "t.jsonl"), fmt)
    assert detect_format(path) == fmt
    back = load_trace(path)
    back.check()
    assert back.source_format == fmt
    np.testing.assert_array_equal(back.block_ids, src.block_ids)
    if fmt == "oracle":  # one request per record; the request's arrival second on each record
        np.testing.assert_array_equal(back.timestamp_ms, np.repeat(src.timestamp_ms // 1000 * 1000,
                                                                   np.diff(src.block_offsets)))
    else:
        for name in ("timestamp_ms", "input_length", "block_offsets"):
            np.testing.assert_array_equal(getattr(back, name), getattr(src, name), err_msg=name)
    if fmt not in ("oracle", "lmcache"):  # neither the records nor the lookup log have output lengths
        np.testing.assert_array_equal(back.output_length, src.output_length)


def test_bailian_and_lmcache_fixtures_round_trip_with_their_columns(tmp_path):
    for load, rows, fmt in ((load_bailian, BAILIAN_LINES, "bailian"), (load_lmcache, LMCACHE_LINES, "lmcache")):
        first = load(_jsonl(tmp_path / f"{fmt}.jsonl", rows))
        second = load(save_trace(first, tmp_path / f"{fmt}2.jsonl", fmt))
        for name in ("timestamp_ms", "input_length", "output_length", "block_offsets", "block_ids"):
            np.testing.assert_array_equal(getattr(second, name), getattr(first, name))
        assert second.columns.keys() == first.columns.keys()
        for name, col in first.columns.items():
            assert second.columns[name].tolist() == col.tolist(), name


@pytest.mark.parametrize("fmt", FORMATS)
def test_chunks_stream_the_same_block_ids(tmp_path, fmt):
    src = load_trace("synthetic")
    src = replace(src, block_tokens=16) if fmt == "bailian" else src  # bailian fixes 16-token blocks
    path = save_trace(src, tmp_path / ("t.bin" if fmt == "oracle" else "t.dat"), fmt)
    whole = load_trace(path, fmt)
    chunks = list(iter_trace_chunks(path, fmt, chunk_refs=5000))
    assert len(chunks) >= whole.block_ids.size // 5000
    np.testing.assert_array_equal(np.concatenate(chunks), whole.block_ids)


@pytest.mark.parametrize("fmt", ["bailian", "lmcache"])
def test_bad_lines_follow_the_shared_rules(tmp_path, fmt):
    rows = BAILIAN_LINES if fmt == "bailian" else LMCACHE_LINES
    good = [json.dumps(r) for r in rows[:2]]
    broken = dict(rows[0])
    del broken["timestamp"]
    text = "\n".join([good[0], "[" * 2000, json.dumps(broken), "", good[1]]) + "\n"
    path = tmp_path / "t.jsonl"
    path.write_text(text)
    with pytest.raises(TraceFormatError, match=r"t\.jsonl:2: JSON nested too deeply"):
        load_trace(path, fmt)
    trace = load_trace(path, fmt, skip_bad=True)
    assert trace.num_requests == 2 and trace.bad_lines == 2


@pytest.mark.parametrize("line, fmt, match", [
    ({**BAILIAN_LINES[0], "parent_chat_id": -2}, "bailian", "parent_chat_id"),
    ({**BAILIAN_LINES[0], "type": 3}, "bailian", "'type'"),
    ({**BAILIAN_LINES[0], "timestamp": -1.0}, "bailian", "'timestamp'"),
    ({**BAILIAN_LINES[0], "hash_ids": [1, -1]}, "bailian", "hash_ids"),
    ({**BAILIAN_LINES[0], "hash_ids": [2**64]}, "bailian", "'hash_ids' must be a list of non-negative integers"),
    ({**BAILIAN_LINES[0], "hash_ids": [1, True]}, "bailian", "'hash_ids' must be a list of non-negative integers"),
    ({**LMCACHE_LINES[0], "chunk_size": 0}, "lmcache", "chunk_size"),
    ({**LMCACHE_LINES[0], "chunk_hashes": [2**64]}, "lmcache", "does not fit 64 bits"),
    ({**LMCACHE_LINES[0], "chunk_hashes": ["xyz"]}, "lmcache", "not a hex string"),
    ({**LMCACHE_LINES[0], "request_id": None}, "lmcache", "request_id"),
])
def test_out_of_range_fields_name_the_field(tmp_path, line, fmt, match):
    path = _jsonl(tmp_path / "t.jsonl", [line])
    with pytest.raises(TraceFormatError, match=match):
        load_trace(path, fmt)
    assert load_trace(path, fmt, skip_bad=True).bad_lines == 1


def test_detection_and_format_override(tmp_path):
    bailian = _jsonl(tmp_path / "a.jsonl", BAILIAN_LINES)
    lmcache = _jsonl(tmp_path / "b.jsonl", LMCACHE_LINES)
    assert detect_format(bailian) == "bailian" and detect_format(lmcache) == "lmcache"
    assert detect_format("synthetic") == "mooncake"
    assert load_trace(bailian, "Qwen-Bailian").source_format == "bailian"  # aliases, any case
    with pytest.raises(TraceFormatError, match=r"b\.jsonl:1: field 'timestamp' must be an integer"):
        load_trace(lmcache, "mooncake")  # the override wins over detection
    with pytest.raises(BadInputError, match="unknown trace format 'csv'"):
        load_trace(bailian, "csv")
    odd = tmp_path / "odd.dat"
    odd.write_bytes(b"\x00" * 25)
    with pytest.raises(BadInputError, match="cannot tell the format"):
        load_trace(odd)
    other = _jsonl(tmp_path / "c.jsonl", [{"foo": 1}])
    with pytest.raises(BadInputError, match=r"fields: \['foo'\]"):
        detect_format(other)


def test_save_trace_rejects_bad_arguments(tmp_path):
    trace = load_trace("synthetic")
    with pytest.raises(BadInputError, match="the mooncake writer takes no option 'medium'"):
        save_trace(trace, tmp_path / "x.jsonl", "mooncake", medium="GPU")
    with pytest.raises(BadInputError, match="the mooncake reader takes no option 'medium'; its options are skip_bad"):
        load_trace("synthetic", medium="GPU")
    with pytest.raises(BadInputError, match="the bailian reader takes no option 'x'"):
        next(iter_trace_chunks("synthetic", "bailian", x=1))
    save_trace(trace, tmp_path / "t.oracleGeneral", "oracle")
    with pytest.raises(BadInputError, match="the oracle reader takes no option 'medium'"):
        iter_trace_chunks(tmp_path / "t.oracleGeneral", medium="GPU")
    with pytest.raises(BadInputError, match="must be a KVTrace"):
        save_trace("synthetic", tmp_path / "x.jsonl", "mooncake")
    with pytest.raises(BadInputError, match="file path"):
        save_trace(trace, tmp_path, "mooncake")
    with pytest.raises(BadInputError, match="unknown trace format"):
        save_trace(trace, tmp_path / "x.jsonl", "parquet")
    for fmt in FORMATS:  # a missing folder: not a bare FileNotFoundError, nothing written
        with pytest.raises(BadInputError, match="does not exist"):
            save_trace(trace, tmp_path / "no-such-folder" / "x", fmt)
    assert not (tmp_path / "no-such-folder").exists()
    broken = trace.head(3)
    broken.block_offsets = broken.block_offsets[::-1].copy()
    with pytest.raises(BadInputError, match="not a consistent KVTrace"):
        save_trace(broken, tmp_path / "x.jsonl", "mooncake")


def test_mooncake_writer_matches_the_bundled_file_line_for_line(tmp_path):
    src = load_mooncake("conversation")
    path = save_trace(src, tmp_path / "c.jsonl", "mooncake")
    from kvmm.traces import bundled_trace_path

    with open(bundled_trace_path("conversation")) as a, open(path) as b:
        for line_a, line_b in zip(a, b):
            assert json.loads(line_a) == json.loads(line_b)


def test_docs_example_runs(tmp_path, monkeypatch, capsys):

    text = (ROOT / "docs" / "traces.md").read_text()
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    from kvmm.errors import TraceConversionWarning

    with pytest.warns(TraceConversionWarning, match="request boundaries are not kept"):  # the oracle write
        exec(compile(code, "docs/traces.md", "exec"), {})
    out = capsys.readouterr().out
    assert "3993 requests, 121877 block references" in out and "lmcache 512 ['0' '1' '2']" in out
    assert "refused: trace 'synthetic' has 512-token blocks but the bailian format fixes 16-token blocks" in out


def test_writers_replace_files_atomically(tmp_path):
    from kvmm.traces.trace import atomic_file

    path = tmp_path / "t.jsonl"
    path.write_text("old\n")
    with pytest.raises(RuntimeError, match="disk gone"):
        with atomic_file(path) as fh:
            fh.write(b"half a line")
            raise RuntimeError("disk gone")
    assert path.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]
    head = load_trace("synthetic").head(5)  # five requests that each store new blocks
    for fmt in FORMATS:
        save_trace(replace(head, block_tokens=16) if fmt == "bailian" else head, path, fmt)
        np.testing.assert_array_equal(load_trace(path, fmt).block_ids, head.block_ids)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]
