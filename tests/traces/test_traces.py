"""The Mooncake reader and the bundled traces."""

import numpy as np
import pytest

from kvmm.errors import BadInputError, TraceFormatError
from kvmm.traces import bundled_trace_path, iter_mooncake, load_mooncake

# (requests, block refs, unique blocks, time span s) from shared/data/mooncake/README.md
BUNDLED = {"conversation": (12031, 288500, 182790, 3537), "synthetic": (3993, 121877, 43924, 1022)}


@pytest.mark.parametrize("name", sorted(BUNDLED))
def test_bundled_traces_match_their_published_summary(name):
    tr = load_mooncake(name)
    requests, refs, unique, span = BUNDLED[name]
    assert tr.num_requests == requests
    assert tr.block_ids.shape == (refs,)
    assert np.unique(tr.block_ids).size == unique
    assert round((tr.timestamp_ms.max() - tr.timestamp_ms.min()) / 1000) == span
    lengths = np.diff(tr.block_offsets)
    assert np.array_equal(lengths, -(-tr.input_length // 512))
    assert tr.bad_lines == 0


def test_malformed_line_names_file_and_line(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0]}\n'
                 '\n'
                 '{"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": [0, "x"]}\n'
                 'not json\n')
    with pytest.raises(TraceFormatError, match=r"t\.jsonl:3: field 'hash_ids'"):
        list(iter_mooncake(p))
    stats = {}
    assert len(list(iter_mooncake(p, skip_bad=True, stats=stats))) == 1
    assert stats["bad_lines"] == 2
    tr = load_mooncake(p, skip_bad=True)
    assert tr.num_requests == 1 and tr.bad_lines == 2
    assert next(tr.records()).hash_ids == (0,)


def test_unknown_bundled_name():
    with pytest.raises(BadInputError, match="expected one of"):
        bundled_trace_path("agent")


def test_missing_file_is_bad_input(tmp_path):
    with pytest.raises(BadInputError, match="neither a file nor a bundled trace name"):
        load_mooncake(tmp_path / "missing.jsonl")
    with pytest.raises(BadInputError, match="neither a file"):
        load_mooncake("agent")  # not a bundled name, not a file


# Regressions of issue 12: each of these raised a built-in error instead of a KvmmError.
GOOD_LINE = '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0]}\n'


def test_deeply_nested_line_is_a_format_error_of_its_line(tmp_path):
    p = tmp_path / "deep.jsonl"
    p.write_text(GOOD_LINE + "[" * 2000 + "\n" + "{" * 5000 + "\n" + GOOD_LINE)
    with pytest.raises(TraceFormatError, match=r"deep\.jsonl:2: JSON nested too deeply"):
        load_mooncake(p)
    stats = {}
    assert len(list(iter_mooncake(p, skip_bad=True, stats=stats))) == 2
    assert stats["bad_lines"] == 2
    assert load_mooncake(p, skip_bad=True).bad_lines == 2


def test_iter_mooncake_checks_its_path_at_the_call(tmp_path):
    with pytest.raises(BadInputError, match="does not exist"):
        iter_mooncake(tmp_path / "missing.jsonl")  # raises before any iteration
    with pytest.raises(BadInputError, match="is a directory"):
        iter_mooncake(tmp_path)
    with pytest.raises(BadInputError, match="must be a str or os.PathLike, got NoneType"):
        iter_mooncake(None)


@pytest.mark.parametrize("bad", [None, 5, 1.5, b"\xff", ["conversation"]])
def test_load_mooncake_of_a_non_path_is_bad_input(bad):
    with pytest.raises(BadInputError, match="must be a str or os.PathLike"):
        load_mooncake(bad)
    from kvmm.traces import load_trace

    with pytest.raises(BadInputError):
        load_trace(bad)


def test_directory_and_nul_paths_are_bad_input(tmp_path):
    with pytest.raises(BadInputError, match="is a directory"):
        load_mooncake(tmp_path)
    with pytest.raises(BadInputError, match="not usable|neither a file"):
        load_mooncake("bad\0name.jsonl")
