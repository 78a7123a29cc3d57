"""The ``cluster`` report section (kvmm/reproduce/cluster.py) runs in quick mode and writes its tables.

Checks the tables' rows and columns exist and that every number in them is finite; the paper's
figures are not asserted (the section measures them).
"""

from __future__ import annotations

import math
import re

import pytest

from kvmm.reproduce import SECTIONS
from tests.report_helpers import markdown_table, run_quick_section


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory):
    return run_quick_section(tmp_path_factory, "cluster")


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?|nan|inf", re.IGNORECASE)


def _numbers(cell: str) -> list[float]:
    return [float(x) for x in _NUMBER.findall(cell)]


def _assert_finite_fixed(rows, columns):
    for row in rows:
        for c in columns:
            values = _numbers(row[c])
            assert values, f"no number in cell {row[c]!r} of row {row[0]!r}"
            assert all(math.isfinite(v) for v in values), row
            assert "e+" not in row[c] and "e-" not in row[c], f"scientific notation in {row[c]!r}"


def test_section_is_registered():
    assert ("cluster", "kvmm.reproduce.cluster") in SECTIONS


def test_shared_vs_privatemarkdown_table(quick_report):
    md, _ = quick_report
    headers, rows = markdown_table(md, "Shared pool vs private tiers")
    for h in ("instances", "lower tier", "hit ratio %", "TTFT p50 s", "TTFT p95 s", "USD / M input tok", "USD / M output tok"):
        assert h in headers
    assert sorted({int(r[0]) for r in rows}) == [4, 8, 16]
    assert len(rows) == 6 and sum("shared" in r[1] for r in rows) == 3 and sum("private" in r[1] for r in rows) == 3
    _assert_finite_fixed(rows, range(2, len(headers)))


def test_router_table_has_all_six_routers_and_a_load_aware_setting(quick_report):
    md, _ = quick_report
    headers, rows = markdown_table(md, "Routers at N = 8")
    for h in ("hit ratio %", "TTFT p50 s", "TTFT p95 s", "requests max/mean", "queue max/mean"):
        assert h in headers
    names = [r[0] for r in rows]
    for router in ("round-robin", "least-loaded", "session", "approx-prefix", "weighted"):
        assert router in names
    assert "precise-prefix (load_weight 0)" in names and any(n.startswith("precise-prefix (load_weight") and
                                                              not n.endswith(" 0)") for n in names)
    _assert_finite_fixed(rows, range(1, len(headers)))
    imbalance = headers.index("requests max/mean")
    assert all(_numbers(r[imbalance])[0] >= 1.0 for r in rows)  # max / mean is never below 1


def test_fillmarkdown_table(quick_report):
    md, _ = quick_report
    headers, rows = markdown_table(md, "Write-through vs write-back")
    assert "DRAM demoted blocks" in headers and "pool demoted blocks" in headers and "pool block hits" in headers
    assert [r[0].split(",")[0] for r in rows] == ["DRAM write-through", "DRAM write-back inclusive",
                                                  "DRAM write-back inclusive", "DRAM write-back exclusive"]
    _assert_finite_fixed(rows, range(1, len(headers)))
    demoted = headers.index("DRAM demoted blocks")
    assert _numbers(rows[0][demoted])[0] == 0.0  # write-through demotes nothing


def test_parastormarkdown_table(quick_report):
    md, _ = quick_report
    headers, rows = markdown_table(md, "ParaStor / Mooncake claim")
    assert [r[0].split(" ")[0] for r in rows] == ["no", "DFS", "DRAM"]
    assert "vs no offload" in headers and "vs DRAM pool" in headers
    _assert_finite_fixed(rows, range(1, len(headers)))
    vs_none = headers.index("vs no offload")
    assert _numbers(rows[0][vs_none])[:2] == [1.0, 0.0]  # the baseline against itself
    assert "16x" in md and "80 %" in md  # the claim is stated next to what kvmm measures


def test_figures_are_written_when_matplotlib_is_installed(quick_report):
    pytest.importorskip("matplotlib")
    md, report = quick_report
    names = sorted(p.name for p in report.figures)
    assert names == ["report-quick-only-cluster-cluster-routers.png", "report-quick-only-cluster-cluster-shared-vs-private.png"]
    assert all(p.is_file() and p.stat().st_size > 0 for p in report.figures)
    assert all(f"]({n})" in md for n in names)
