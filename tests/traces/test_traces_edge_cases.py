"""Review of the Mooncake reader and the generators on files and parameters their own tests do
not use: CRLF, a last line without newline, a byte-order mark, unknown fields, huge integers,
bad UTF-8, and contexts capped by ``max_context_tokens``."""

import numpy as np
import pytest

from kvmm.errors import BadInputError, TraceFormatError
from kvmm.policies import StackDistanceTracker
from kvmm.traces import agent_trace, conversation_trace, iter_mooncake, load_mooncake

LINE_A = b'{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}'
LINE_B = b'{"timestamp": 7, "input_length": 100, "output_length": 9, "hash_ids": [1]}'


def _load(tmp_path, data, **kwargs):
    path = tmp_path / "t.jsonl"
    path.write_bytes(data)
    return load_mooncake(path, **kwargs)


def _assert_ab(trace):
    assert trace.timestamp_ms.tolist() == [0, 7] and trace.output_length.tolist() == [5, 9]
    assert trace.block_offsets.tolist() == [0, 2, 3] and trace.block_ids.tolist() == [1, 2, 1]
    assert trace.bad_lines == 0


@pytest.mark.parametrize("data", [
    LINE_A + b"\r\n" + LINE_B + b"\r\n",                     # CRLF
    LINE_A + b"\n" + LINE_B,                                 # no newline after the last line
    b"\xef\xbb\xbf" + LINE_A + b"\n" + LINE_B + b"\n",       # UTF-8 byte-order mark
    b"\r\n" + LINE_A + b"\r\n\r\n  \n" + LINE_B + b"\r\n",   # blank lines of both kinds
    LINE_A[:-1] + b', "extra": {"nested": [1, 2]}, "z": null}\n'
    + LINE_B[:-1] + b', "chat_id": "x\\u00e9"}\n',          # unknown fields
], ids=["crlf", "no-final-newline", "bom", "blank-lines", "unknown-fields"])
def test_accepted_file_variants(tmp_path, data):
    _assert_ab(_load(tmp_path, data))


def test_hash_ids_up_to_2_64_keep_their_64_bit_word(tmp_path):
    line = (b'{"timestamp": 0, "input_length": 1, "output_length": 1, '
            b'"hash_ids": [18446744073709551615, 9223372036854775808, 3]}\n')
    trace = _load(tmp_path, line + line)
    assert trace.block_ids.dtype == np.int64
    assert trace.block_ids.view(np.uint64)[:3].tolist() == [2**64 - 1, 2**63, 3]
    tracker = StackDistanceTracker()
    assert tracker.access(trace.block_ids, return_distances=True).tolist() == [-1, -1, -1, 2, 2, 2]


@pytest.mark.parametrize("line", [
    b'{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [18446744073709551616]}',
    b'{"timestamp": 99999999999999999999, "input_length": 1, "output_length": 1, "hash_ids": [1]}',
    b'{"timestamp": 0, "input_length": 9223372036854775808, "output_length": 1, "hash_ids": [1]}',
    b'{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1], "x": "\xff"}',
    b'\xef\xbb\xbf{"timestamp": 0}',
], ids=["id-2**64", "huge-timestamp", "length-2**63", "bad-utf8", "missing-fields"])
def test_out_of_range_or_undecodable_line_is_a_format_error_of_that_line(tmp_path, line):
    data = LINE_A + b"\n" + line + b"\n" + LINE_B + b"\n"
    with pytest.raises(TraceFormatError, match=r"t\.jsonl:2: "):
        _load(tmp_path, data)
    trace = _load(tmp_path, data, skip_bad=True)
    assert trace.bad_lines == 1 and trace.num_requests == 2
    stats = {}
    assert len(list(iter_mooncake(tmp_path / "t.jsonl", skip_bad=True, stats=stats))) == 2
    assert stats["bad_lines"] == 1


def test_bom_only_counts_at_the_start(tmp_path):
    with pytest.raises(TraceFormatError, match=r"t\.jsonl:2: "):
        _load(tmp_path, LINE_A + b"\n\xef\xbb\xbf" + LINE_B + b"\n")


def test_empty_file(tmp_path):
    trace = _load(tmp_path, b"")
    assert trace.num_requests == 0 and trace.block_offsets.tolist() == [0] and trace.block_ids.size == 0


@pytest.mark.parametrize("make", [
    lambda cap: agent_trace(4, tasks=8, system_prompt_tokens=512, task_tokens=(500, 6000), max_context_tokens=cap),
    lambda cap: conversation_trace(20, system_prompt_tokens=512, user_tokens=(20, 4000), max_context_tokens=cap),
])
def test_no_request_exceeds_max_context_tokens(make):
    for cap in (513, 1500, 3000):
        trace = make(cap)
        assert trace.input_length.max() <= cap
        assert np.array_equal(np.diff(trace.block_offsets), -(-trace.input_length // 512))
    with pytest.raises(BadInputError, match="must exceed system_prompt_tokens"):
        make(512)
