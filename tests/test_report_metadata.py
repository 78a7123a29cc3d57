"""The report: metadata first, own file names for partial runs, stale PNGs removed, no axis offsets."""

import io

import pytest

import kvmm
from kvmm.report import Report
from tests.paths import ROOT


def _report(tmp_path, **kw):
    return Report(out=tmp_path, progress_enabled=False, stream=io.StringIO(), **kw)


def test_metadata_and_file_names(tmp_path):
    full = _report(tmp_path, flags=[])
    full.sections.append("a")
    full.heading("A")
    text = full.write().read_text()
    assert full.write().name == "report.md"
    head = text.split("## A")[0]
    assert f"| kvmm version | {kvmm.__version__} |" in head and "| git commit |" in head and "| date | 20" in head
    assert "| command | kvmm reproduce |" in head and "| run | full |" in head and "| sections | a |" in head
    quick = _report(tmp_path, quick=True, flags=["--quick"])
    assert quick.write().name == "report-quick.md"
    assert "| run | quick (smaller workloads) |" in (tmp_path / "report-quick.md").read_text()
    only = _report(tmp_path, quick=True, only=["vtoken", "allocator"], flags=["--quick", "--only vtoken"])
    assert only.write().name == "report-quick-only-allocator+vtoken.md"
    md = (tmp_path / "report-quick-only-allocator+vtoken.md").read_text()
    assert "partial (only vtoken, allocator)" in md and "| command | kvmm reproduce --quick --only vtoken |" in md
    assert (tmp_path / "report.md").read_text() == text  # partial runs left the full report alone


def test_stale_pngs_of_the_same_report_are_removed_and_others_kept(tmp_path):
    pytest.importorskip("matplotlib")
    for name in ("old_plot.png", "report-quick-old.png", "report-only-x-kept.png", "users_own.png"):
        (tmp_path / name).write_bytes(b"x")
    # earlier runs of the full and the quick report drew old_plot / report-quick-old
    (tmp_path / "report.md").write_text("![old_plot](old_plot.png)\n![plot](plot.png)\n")
    (tmp_path / "report-quick.md").write_text("![old](report-quick-old.png)\n")
    quick = _report(tmp_path, quick=True)
    quick.figure("new", lambda ax: ax.plot([1, 2], [3, 4]))
    quick.write()
    names = sorted(p.name for p in tmp_path.glob("*.png") if p.name != "users_own.png")
    assert names == ["old_plot.png", "report-only-x-kept.png", "report-quick-new.png"]
    full = _report(tmp_path)
    full.figure("plot", lambda ax: ax.plot([1, 2], [3, 4]))
    full.write()
    names = sorted(p.name for p in tmp_path.glob("*.png") if p.name != "users_own.png")
    assert names == ["plot.png", "report-only-x-kept.png", "report-quick-new.png"]
    assert "![plot](plot.png)" in (tmp_path / "report.md").read_text()
    assert (tmp_path / "users_own.png").read_bytes() == b"x"  # not a report's: never removed (--out .)


def test_plots_have_no_axis_offset(tmp_path):
    pytest.importorskip("matplotlib")
    seen = {}

    def draw(ax):
        ax.plot([100000.0, 100000.5], [1000.001, 1000.002])
        ax.figure.canvas.draw()
        seen["offset"] = ax.yaxis.get_major_formatter().get_offset() + ax.xaxis.get_major_formatter().get_offset()

    _report(tmp_path).figure("f", draw)
    assert seen["offset"] == ""


def test_spread_is_the_sample_standard_deviation_and_mean_pm_formats_it():
    from kvmm.report import mean_pm, spread

    assert spread([1.0, 2.0, 3.0]) == (2.0, 1.0)  # ddof=1: sqrt(((1-2)^2 + 0 + (3-2)^2) / 2)
    assert spread([5.0]) == (5.0, 0.0)
    assert mean_pm([1.0, 2.0, 3.0], ".2f", unit="x") == "2.00x ± 1.00"
    assert mean_pm([0.001, 0.003], scale=1e3) == "2.000 ± 1.414"


def test_plain_number_never_writes_scientific_notation():
    from kvmm.report import format_table, plain_number

    assert plain_number(14540.0) == "14,540"  # was 1.454e+04
    assert plain_number(3e-4) == "0.0003"  # was 3.000e-04
    assert plain_number(1.234e-7) == "0.0000001234"
    assert plain_number(0.5) == "0.5" and plain_number(0.1234) == "0.1234" and plain_number(12.345678) == "12.35"
    assert plain_number(999.96) == "1,000" and plain_number(-2500.4) == "-2,500" and plain_number(0.0) == "0"
    assert [plain_number(v) for v in (float("nan"), float("inf"), -float("inf"))] == ["nan", "inf", "-inf"]
    rows = [[v] for v in (1e-12, 3e-4, 0.01, 7.0, 14540.0, 2.5e5, 1e15)]
    assert "e" not in format_table(["v"], rows).replace("| v |", "")
    import numpy as np

    assert format_table(["n"], [[15355484], [np.int64(1024)], [7], [True]]).splitlines()[2:] == \
        ["| 15,355,484 |", "| 1,024 |", "| 7 |", "| True |"]


def test_reproduce_sources_format_no_number_in_scientific_notation():
    # every table cell and sentence goes through plain_number / fixed decimals: no ':g', ':.3e',
    # ':.4g' format spec is left in the report or a section (a ':g' of 1e-5 prints 1e-05)
    import re

    spec = re.compile(r"\{[^{}:]+:[<>^=+\- #0-9,._]*[eEgG]\}")  # a format spec of type e / g
    sources = [ROOT / "kvmm" / "report.py", *sorted((ROOT / "kvmm" / "reproduce").glob("*.py"))]
    offenders = [f"{p.name}:{i}" for p in sources for i, line in enumerate(p.read_text().splitlines(), 1)
                 if spec.search(line)]
    assert offenders == []




def _git(*args, cwd):
    import subprocess

    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def test_checkout_commit_reads_head_and_marks_tracked_changes(tmp_path):
    import shutil

    from kvmm._git import checkout_commit

    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    assert checkout_commit(tmp_path) is None  # not a checkout
    _git("init", "-q", cwd=tmp_path)
    (tmp_path / "f").write_text("1")
    _git("add", "f", cwd=tmp_path)
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x", cwd=tmp_path)
    head = _git("rev-parse", "HEAD", cwd=tmp_path)
    assert checkout_commit(tmp_path) == head
    (tmp_path / "untracked").write_text("u")
    assert checkout_commit(tmp_path) == head  # untracked files do not make it dirty
    (tmp_path / "f").write_text("2")
    assert checkout_commit(tmp_path) == head + "+dirty"


def test_a_built_copy_outside_the_checkout_reports_the_commit_it_was_built_from(tmp_path):
    # what `pip install .` (non-editable) gives: the package without the checkout's .git
    import os
    import subprocess
    import sys

    from kvmm._git import checkout_commit

    expected = checkout_commit(ROOT)
    if expected is None:
        pytest.skip("the tests do not run from a git checkout")
    lib = tmp_path / "lib"
    subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(lib)], cwd=ROOT,
                   capture_output=True, text=True, check=True)
    assert not (ROOT / "kvmm" / "_build_info.py").exists()  # written into the build only
    env = {**os.environ, "PYTHONPATH": str(lib)}
    code = "import kvmm, kvmm.report as r; print(kvmm.__file__); print(r.git_commit())"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == [str(lib / "kvmm" / "__init__.py"), expected]


def test_the_section_registry_moved_to_kvmm_reproduce_and_the_old_names_warn():
    import kvmm.report
    import kvmm.reproduce

    for name in ("SECTIONS", "TRACE_SECTION", "run_sections"):
        with pytest.warns(DeprecationWarning, match=f"kvmm.report.{name} moved to kvmm.reproduce.{name}"):
            assert getattr(kvmm.report, name) is getattr(kvmm.reproduce, name)
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        kvmm.report.not_a_name  # noqa: B018
