"""The CLI on every trace format: ``kvmm mrc PATH [--format F] [--dask local]`` and
``kvmm reproduce --trace PATH --format F``."""

from dataclasses import replace

import pytest

from kvmm.cli import main
from kvmm.policies import StackDistanceTracker
from kvmm.traces import FORMATS, load_trace, save_trace


@pytest.fixture(scope="module")
def synthetic():
    trace = load_trace("synthetic")
    tracker = StackDistanceTracker()
    tracker.access(trace.block_ids)
    return trace, tracker.histogram()


@pytest.mark.parametrize("fmt", FORMATS)
def test_mrc_reads_every_format_by_path(tmp_path, capsys, synthetic, fmt):
    trace, hist = synthetic
    # bailian fixes 16-token blocks: the Mooncake trace is relabelled explicitly (the ids are unchanged)
    path = save_trace(replace(trace, block_tokens=16) if fmt == "bailian" else trace, tmp_path / f"t.{fmt}", fmt)
    assert main(["mrc", str(path), "--fraction", "0.9", "--points", "3"]) == 0
    out = capsys.readouterr().out
    if fmt == "vllm":  # requests that hit every block publish no event
        back = load_trace(path)
        tracker = StackDistanceTracker()
        tracker.access(back.block_ids)
        expected = tracker.working_set(0.9)
    else:
        assert f"{trace.block_ids.size} block references, 43924 distinct blocks (exact)" in out
        expected = hist.working_set(0.9)
    assert f"working set (90 % of unlimited-cache hits): {expected} blocks" in out
    assert main(["mrc", str(path), "--format", fmt, "--points", "3"]) == 0


def test_format_override_and_errors(tmp_path, capsys, synthetic):
    path = save_trace(synthetic[0], tmp_path / "t.jsonl", "lmcache")
    assert main(["mrc", str(path), "--format", "mooncake"]) == 2
    assert "t.jsonl:1: field 'timestamp'" in capsys.readouterr().err
    assert main(["mrc", str(path), "--format", "csv"]) == 2
    assert "unknown trace format 'csv'" in capsys.readouterr().err
    assert main(["mrc", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_mrc_on_dask_local(capsys, synthetic):
    _, hist = synthetic
    assert main(["mrc", "synthetic", "--dask", "local", "--parts", "4", "--chunk-refs", "20000",
                 "--fraction", "0.9", "--points", "4"]) == 0
    out = capsys.readouterr().out
    assert "121877 block references, 43924 distinct blocks (exact per part, 4 key partitions on Dask)" in out
    assert "hit ratio of an unlimited LRU cache: 0.6396" in out
    ws = int(out.split("working set (90 % of unlimited-cache hits): ")[1].split()[0])
    assert abs(ws - hist.working_set(0.9)) <= 0.02 * hist.working_set(0.9)
    assert main(["mrc", "synthetic", "--dask", "local", "--parts", "0"]) == 2
    assert "--parts" in capsys.readouterr().err
    assert main(["mrc", "synthetic", "--dask", "no port here"]) == 2
    assert "cannot reach the Dask scheduler 'no port here'" in capsys.readouterr().err


def test_mrc_dask_counts_skipped_lines(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n[[[\n'
                    '{"timestamp": 1, "input_length": 600, "output_length": 5, "hash_ids": [1, 3]}\n')
    assert main(["mrc", str(path), "--dask", "local", "--parts", "2", "--skip-bad"]) == 0
    assert "4 block references, 3 distinct blocks, 1 bad lines skipped" in capsys.readouterr().out


def test_reproduce_allocator_section_on_a_given_trace(tmp_path, capsys):
    trace = load_trace("synthetic")
    path = save_trace(replace(trace, block_tokens=16), tmp_path / "chats.jsonl", "bailian")  # bailian: 16 tokens
    assert main(["reproduce", "--only", "allocator", "--quick", "--no-progress", "--out", str(tmp_path / "r"),
                 "--trace", str(path), "--format", "bailian"]) == 0
    out = capsys.readouterr().out
    assert "prefix-cache hit ratio vs pool size (chats, bailian)" in out
    assert "chats trace: 1,500 requests" in out and "synthetic trace" not in out
    assert main(["reproduce", "--only", "allocator", "--quick", "--no-progress", "--out", str(tmp_path / "r"),
                 "--trace", str(tmp_path / "missing.jsonl")]) == 2
    assert "neither a file nor a bundled trace name" in capsys.readouterr().err
    # --trace feeds the allocator section only: elsewhere it would be silently ignored
    assert main(["reproduce", "--only", "working-set", "--quick", "--out", str(tmp_path / "r"), "--trace", str(path)]) == 2
    assert "allocator section only" in capsys.readouterr().err
    assert main(["reproduce", "--only", "allocator", "--quick", "--out", str(tmp_path / "r"), "--format", "bailian"]) == 2
    assert "give --trace PATH too" in capsys.readouterr().err
