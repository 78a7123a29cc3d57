"""Traces convert without changing (issue 19 item 2): for every format, a trace the format can
hold comes back field by field (``load(save(t)) == t``); what it cannot hold is refused with a
TraceConversionError, and what it drops is named in one TraceConversionWarning.

"The same trace" per format (docs/traces.md, "What each format keeps"): timestamps, lengths,
block offsets, block ids, block_tokens and exactly the columns the format carries:

* mooncake: no columns, block_tokens 512;
* bailian: chat_id, parent_chat_id, turn, type; block_tokens 16;
* lmcache: request_id (strings), chunk_size; output_length 0; block_tokens = first chunk_size;
* vllm: prefix-chained requests that each store a block; input_length = blocks x block_size,
  output_length 0; new_blocks (what each request stores) and data_parallel_rank;
* oracle: one block per request, whole-second timestamps, block_tokens 1, output_length 0,
  input_length = obj_size; obj_size and next_access_vtime.
"""

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvmm.errors import TraceConversionError, TraceConversionWarning
from kvmm.testing.strategies import prefix_sharing_requests
from kvmm.traces import KVTrace, load_trace, save_trace
from kvmm.traces.oracle import next_access_vtime

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
I64 = st.integers(-(2**63), 2**63 - 1)
FIELDS = ("timestamp_ms", "input_length", "output_length", "block_offsets", "block_ids")


def _trace(requests, times, inputs, outputs, block_tokens, columns):
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in requests])]).astype(np.int64)
    ids = np.array([b for r in requests for b in r], dtype=np.int64)
    return KVTrace("t", np.array(times, dtype=np.int64), np.array(inputs, dtype=np.int64),
                   np.array(outputs, dtype=np.int64), offsets, ids, block_tokens=block_tokens, columns=columns)


@st.composite
def any_requests(draw, max_requests=8):
    n = draw(st.integers(0, max_requests))
    return [draw(st.lists(I64, max_size=6)) for _ in range(n)]


def _lengths(draw, n, hi=2**62):
    return draw(st.lists(st.integers(0, hi), min_size=n, max_size=n))


@st.composite
def mooncake_traces(draw):
    reqs = draw(any_requests())
    n = len(reqs)
    return _trace(reqs, _lengths(draw, n, 2**63 - 1), _lengths(draw, n), _lengths(draw, n), 512, {})


@st.composite
def bailian_traces(draw):
    reqs = draw(any_requests())
    n = len(reqs)
    cols = {"chat_id": np.array(_lengths(draw, n), dtype=np.int64),
            "parent_chat_id": np.array(draw(st.lists(st.integers(-1, 2**62), min_size=n, max_size=n)), dtype=np.int64),
            "turn": np.array(_lengths(draw, n, 1000), dtype=np.int64),
            # no NUL: numpy's str_ drops trailing NULs, so "\x00" would already be the empty string
            # the format refuses before the writer sees it
            "type": np.array(draw(st.lists(st.text(st.characters(exclude_characters="\x00"), min_size=1, max_size=5),
                                           min_size=n, max_size=n)), dtype=np.str_)}
    return _trace(reqs, _lengths(draw, n, 2**50), _lengths(draw, n), _lengths(draw, n), 16, cols)


@st.composite
def lmcache_traces(draw):
    reqs = draw(any_requests())
    n = len(reqs)
    chunk = draw(st.lists(st.integers(1, 4096), min_size=n, max_size=n))
    block_tokens = chunk[0] if n else 512
    cols = {"request_id": np.array(draw(st.lists(st.text(max_size=5), min_size=n, max_size=n)), dtype=np.str_),
            "chunk_size": np.array(chunk, dtype=np.int64)}
    return _trace(reqs, _lengths(draw, n, 2**50), _lengths(draw, n), [0] * n, block_tokens, cols)


@st.composite
def vllm_traces(draw):
    raw = draw(prefix_sharing_requests(max_requests=10, max_blocks=6))
    mult, shift = draw(st.integers(0, 2**63 - 1)) * 2 + 1, draw(st.integers(0, 2**64 - 1))
    seen, reqs, new = set(), [], []
    for blocks in raw:  # keep the requests that store a block (vLLM publishes nothing for the others)
        fresh = [b for b in blocks if b not in seen]
        if fresh:
            seen.update(blocks)
            reqs.append([int(np.uint64((b * mult + shift) % 2**64).view(np.int64)) for b in blocks])
            new.append(len(fresh))
    n = len(reqs)
    bt = draw(st.integers(1, 1024)) if n else 16
    cols = {"new_blocks": np.array(new, dtype=np.int64),
            "data_parallel_rank": np.array(draw(st.lists(st.integers(-1, 2**31 - 1), min_size=n, max_size=n)),
                                           dtype=np.int64)}
    return _trace(reqs, _lengths(draw, n, 2**50), [bt * len(r) for r in reqs], [0] * n, bt, cols)


@st.composite
def oracle_traces(draw):
    n = draw(st.integers(0, 12))
    ids = draw(st.lists(st.integers(0, 5) | I64, min_size=n, max_size=n))
    sizes = np.array(draw(st.lists(st.integers(0, 2**32 - 1), min_size=n, max_size=n)), dtype=np.int64)
    trace = _trace([[i] for i in ids], [1000 * s for s in _lengths(draw, n, 2**32 - 1)], sizes, [0] * n, 1,
                   {"obj_size": sizes})
    trace.columns["next_access_vtime"] = next_access_vtime(trace.block_ids)
    return trace


STRATEGIES = {"mooncake": mooncake_traces(), "bailian": bailian_traces(), "lmcache": lmcache_traces(),
              "vllm": vllm_traces(), "oracle": oracle_traces()}


@pytest.mark.parametrize("fmt, options", [(f, {}) for f in STRATEGIES if f != "vllm"]
                         + [("vllm", {"encoding": "jsonl"}), ("vllm", {"encoding": "msgpack"})])
def test_every_format_gives_back_the_trace_it_can_hold(tmp_path, fmt, options):

    @SETTINGS
    @given(STRATEGIES[fmt])
    def round_trip(trace):
        trace.check()
        path = tmp_path / "t.bin"
        with warnings.catch_warnings():
            warnings.simplefilter("error", TraceConversionWarning)  # nothing this format holds is changed
            save_trace(trace, path, fmt, **options)
        back = load_trace(path, fmt)
        back.check()
        for name in FIELDS:
            np.testing.assert_array_equal(getattr(back, name), getattr(trace, name), err_msg=name)
        assert back.block_tokens == trace.block_tokens and back.source_format == fmt
        assert sorted(back.columns) == sorted(trace.columns)
        for name, col in trace.columns.items():
            assert back.columns[name].tolist() == col.tolist(), name

    round_trip()


def test_the_reported_conversion_is_refused(tmp_path):
    """save_trace(load_trace("conversation"), "chats.jsonl", "bailian") reloaded with 16-token
    blocks instead of 512, silently; now it is refused and nothing is written."""
    path = tmp_path / "chats.jsonl"
    with pytest.raises(TraceConversionError, match="512-token blocks but the bailian format fixes 16-token blocks"):
        save_trace(load_trace("conversation"), path, "bailian")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("fmt, change, match", [
    ("mooncake", {"block_tokens": 16}, "mooncake format fixes 512-token blocks"),
    ("mooncake", {"timestamp_ms": -1}, "timestamp_ms -1"),
    ("bailian", {"timestamp_ms": 2**51}, "float seconds exactly"),
    ("bailian", {"columns": {"chat_id": np.array([-3, 0])}}, "column 'chat_id' must hold integers >= 0"),
    ("bailian", {"columns": {"type": np.array(["", "x"])}}, "non-empty strings"),
    ("lmcache", {"columns": {"chunk_size": np.array([256, 256])}}, "first chunk_size is 256"),
    ("lmcache", {"input_length": -5}, "input_length -5"),
    ("vllm", {"ids": [[1, 2], [3, 2]]}, "not prefix-chained: block 2"),
    ("vllm", {"ids": [[1, 1]]}, "not prefix-chained"),
    ("oracle", {"timestamp_ms": 2**33 * 1000}, "u32 seconds"),
])
def test_writers_refuse_what_the_format_cannot_hold(tmp_path, fmt, change, match):
    ids = change.get("ids", [[1, 2], [1, 3]])
    trace = _trace(ids, [0] * len(ids), [32] * len(ids), [0] * len(ids), 16 if fmt == "bailian" else 512, {})
    for name, value in change.items():
        if name == "columns":
            trace.columns = value
        elif name == "block_tokens":
            trace.block_tokens = value
        elif name != "ids":
            getattr(trace, name)[0] = value
    with pytest.raises(TraceConversionError, match=match):
        save_trace(trace, tmp_path / "t", fmt)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("fmt, match", [
    ("mooncake", "columns extra are not written"),
    ("lmcache", "output_length is not carried"),
    ("vllm", "1 of 3 requests store no new block"),
    ("oracle", "3 requests become 6 one-block requests; timestamps keep whole seconds only"),
])
def test_writers_say_what_they_change(tmp_path, fmt, match):
    trace = _trace([[1, 2], [1, 2], [1, 3]], [0, 1500, 3000], [1024, 1024, 1024], [5, 5, 5], 512,
                   {"extra": np.arange(3)})
    with pytest.warns(TraceConversionWarning, match=match) as record:
        save_trace(trace, tmp_path / "t", fmt)
    assert len(record) == 1 and record[0].filename == __file__  # one warning, pointing at the caller
    assert load_trace(tmp_path / "t", fmt).block_ids.size > 0
