"""``kvmm mrc`` and the "working-set" report section (quick mode)."""

import re

import pytest

from kvmm.cli import main
from kvmm.policies import StackDistanceTracker
from kvmm.traces import load_mooncake
from tests.paths import ROOT


def test_mrc_on_bundled_trace_prints_working_set(capsys):
    assert main(["mrc", "synthetic", "--fraction", "0.9", "--points", "5"]) == 0
    out = capsys.readouterr().out
    tracker = StackDistanceTracker()
    tracker.access(load_mooncake("synthetic").block_ids)
    assert f"working set (90 % of unlimited-cache hits): {tracker.working_set(0.9)} blocks" in out
    assert "capacity (blocks)" in out and "0.6396" in out  # unlimited-cache hit ratio of the README


def test_mrc_sampled_and_file_path(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n'
                    '{"timestamp": 1, "input_length": 600, "output_length": 5, "hash_ids": [1, 3]}\n')
    assert main(["mrc", str(path), "--sample-rate", "1.0"]) == 0
    assert "4 block references" in capsys.readouterr().out
    assert main(["mrc", str(path), "--fixed-size", "2"]) == 0


def test_mrc_stratify_rate_option(capsys):
    assert main(["mrc", "synthetic", "--sample-rate", "0.05", "--points", "3"]) == 0
    assert "SHARDS fixed rate 0.05, stratified (counting rate 0.25)" in capsys.readouterr().out
    assert main(["mrc", "synthetic", "--sample-rate", "0.05", "--stratify-rate", "0.2", "--points", "3"]) == 0
    assert "stratified (counting rate 0.2)" in capsys.readouterr().out
    assert main(["mrc", "synthetic", "--sample-rate", "0.05", "--stratify-rate", "none", "--points", "3"]) == 0
    out = capsys.readouterr().out
    assert "(SHARDS fixed rate 0.05)" in out and "stratified" not in out
    for bad in ("0.01", "lots"):
        assert main(["mrc", "synthetic", "--sample-rate", "0.05", "--stratify-rate", bad]) == 2
        assert "stratify" in capsys.readouterr().err
    for other in ([], ["--fixed-size", "64"]):  # it would be silently ignored without --sample-rate
        assert main(["mrc", "synthetic", "--stratify-rate", "0.5", *other]) == 2
        assert "--stratify-rate needs --sample-rate" in capsys.readouterr().err


def test_mrc_errors_are_clear(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\nnot json\n')
    assert main(["mrc", str(bad)]) == 2
    assert "bad.jsonl:2" in capsys.readouterr().err
    assert main(["mrc", str(bad), "--skip-bad"]) == 0
    assert "1 bad lines skipped" in capsys.readouterr().out
    assert main(["mrc", "synthetic", "--sample-rate", "0"]) == 2
    assert "rate must be in (0, 1]" in capsys.readouterr().err
    assert main(["mrc", str(tmp_path / "missing.jsonl")]) == 2
    assert "neither a file nor a bundled trace name" in capsys.readouterr().err
    assert main(["mrc", "synthetic", "--fraction", "nan"]) == 2
    assert main(["mrc", "synthetic", "--png", str(tmp_path)]) == 2  # a folder, not a traceback from savefig
    assert "is a folder" in capsys.readouterr().err
    (tmp_path / "file").write_text("x")
    assert main(["mrc", "synthetic", "--png", str(tmp_path / "file" / "mrc.png")]) == 2
    assert "cannot create its folder" in capsys.readouterr().err


def test_reproduce_section_quick(tmp_path, capsys):
    assert main(["reproduce", "--only", "working-set", "--quick", "--no-progress", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "EfficientAgent figures: paper vs kvmm simulation" in out
    assert "93 %" in out and "4.3x" in out
    # every end-to-end figure says what it includes: tool waits added, GPU-only time labelled as such
    assert re.search(r"end-to-end time cut, \+ [0-9.]+ h of tool waits", out) and "tool waits excluded" in out
    md = (tmp_path / "report-quick-only-working-set.md").read_text()  # a partial run never writes report.md
    assert "Mooncake traces: working set" in md and not (tmp_path / "report.md").exists()
    pytest.importorskip("matplotlib")
    assert (tmp_path / "report-quick-only-working-set-working_set_mrc.png").stat().st_size > 1000


def test_docs_example_runs(capsys):

    text = (ROOT / "docs" / "working_set.md").read_text()
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(code, "docs/working_set.md", "exec"), {})
    out = capsys.readouterr().out
    assert "working set:" in out and "blocks written for request 0: 14 of 14" in out


def test_stack_distance_doctest():
    import doctest

    import kvmm.policies.mrc.stack_distance as module

    result = doctest.testmod(module)
    assert result.attempted >= 5 and result.failed == 0


def test_tool_wait_model_is_the_generators_expected_wait():
    import math

    from kvmm.reproduce.efficientagent import tool_wait_seconds

    assert tool_wait_seconds(10) == pytest.approx(10 * 4.0 * math.exp(1.2 ** 2 / 2))
    assert tool_wait_seconds(0) == 0.0


def test_mrc_png_title_is_wrapped_inside_the_figure():
    # a long trace path and the SHARDS mode once ran the title off both edges of the PNG
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from kvmm.cli.mrc import mrc_figure

    title = ("MRC of /home/user/some/long/path/to/a/folder/of/traces/conversation_trace_2025.jsonl "
             "(SHARDS fixed rate 0.01, stratified (counting rate 0.001))")
    fig = mrc_figure(plt, np.arange(1, 100), np.linspace(1.0, 0.0, 99), title)
    fig.canvas.draw()
    box = fig.axes[0].title.get_window_extent(fig.canvas.get_renderer())
    plt.close(fig)
    assert 0 <= box.x0 and box.x1 <= fig.bbox.width and box.y1 <= fig.bbox.height
    assert fig.axes[0].get_title().count("\n") >= 1
