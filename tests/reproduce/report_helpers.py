"""Helpers of the report-section tests: run one section in quick mode, read its Markdown tables."""

from __future__ import annotations

import io

from kvmm.report import Report
from kvmm.reproduce import run_sections


def run_quick_section(tmp_path_factory, name: str, *, capture_figures: bool = False):
    """Run report section ``name`` alone in quick mode; its Markdown text and the Report.

    ``capture_figures``: keep every matplotlib figure the section draws open (it is saved as
    usual) in ``report.captured_figures``, ``{png file name: Figure}``, so a test can read the
    plot back (skipped without matplotlib)."""
    import pytest

    out = tmp_path_factory.mktemp("repro-" + name)
    report = Report(out=out, quick=True, progress_enabled=False, stream=io.StringIO(), only=[name])
    if capture_figures:
        plt = pytest.importorskip("matplotlib.pyplot")
        figures: list = []
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(plt, "close", lambda fig=None: figures.append(fig))
            assert run_sections(report, only=[name]) == [name]
        report.captured_figures = {p.name: fig for p, fig in zip(report.figures, figures)}
    else:
        assert run_sections(report, only=[name]) == [name]
    path = report.write()
    return path.read_text(encoding="utf-8"), report


def markdown_cells(md: str) -> list[str]:
    """Every cell of every Markdown table in ``md`` (header and separator rows left out)."""
    cells, previous = [], ""
    for line in md.splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            if previous.startswith("|"):  # a body row (the first row of a table is its header)
                cells += [c.strip() for c in line.strip("|").split("|")]
        previous = line if line.strip() else ""
    return cells


def markdown_table(md: str, title_start: str) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the Markdown table whose ``###`` title starts with ``title_start``."""
    block = md.split("### " + title_start, 1)
    assert len(block) == 2, f"no table titled {title_start!r}"
    lines = []
    for ln in block[1].splitlines()[1:]:
        if ln.startswith("|"):
            lines.append(ln)
        elif lines:  # the table ended
            break
    headers = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines[2:]]
    return headers, rows
