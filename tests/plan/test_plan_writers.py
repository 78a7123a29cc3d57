"""kvmm.plan.writers on hand-built plans: the three files, what plan.md says, the figure's data,
and the cases with no chosen point, no point at all and no matplotlib."""

import re
import sys

import pytest

from kvmm.errors import BadInputError
from kvmm.plan import SLO, Plan
from kvmm.plan.writers import draw_frontier, plan_markdown, point_label, write_plan
from kvmm.sim.config_json import load_config
from tests.plan.plan_helpers import TiB, met_plan, missed_plan, point


def table_rows(markdown: str, header_start: str) -> list[list[str]]:
    """The body rows of the Markdown table whose header starts with ``header_start``."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def test_writes_the_three_files_and_config_replays_the_chosen_point(tmp_path):
    plan = met_plan()
    files = write_plan(plan, tmp_path / "out", command="kvmm plan --ttft-p95 2s")
    assert list(files) == ["plan.md", "frontier.png", "config.json"]
    assert all(p.parent == tmp_path / "out" and p.is_file() for p in files.values())
    assert files["frontier.png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert load_config(files["config.json"]) == plan.config == plan.chosen.config()


def test_plan_md_states_the_decision_reasons_frontier_and_errors(tmp_path):
    plan = met_plan()
    text = write_plan(plan, tmp_path, command="kvmm plan --ttft-p95 2s")["plan.md"].read_text()
    assert "`kvmm plan --ttft-p95 2s`" in text
    decision = text.split("## Decision\n", 1)[1]
    assert decision.lstrip().startswith("**chosen: dram 2 TiB/instance + layer3.5 32 TiB shared: $12/h")
    assert "p95 TTFT 1.5 s simulated" in decision
    for reason in plan.reasons:
        assert f"- {reason}" in text
    frontier = table_rows(text, "| # |")
    assert [r[0] for r in frontier] == ["1", "2", "3"]
    assert [r[-1] for r in frontier] == ["", "", "chosen"]
    assert [r[1:3] for r in frontier] == [["0", "0"], ["2 TiB", "0"], ["2 TiB", "32 TiB"]]
    assert [r[5] for r in frontier] == ["", "2.5", "1.5"]  # sim p95 only where verified
    errors = table_rows(text, "| dram/instance | layer3.5 shared | on frontier | est p95")
    # (est - sim) / sim: (1.8 - 2.5) / 2.5 and (1.2 - 1.5) / 1.5
    assert [r[-1] for r in errors] == ["-28.0 %", "-20.0 %"]
    assert [r[2] for r in errors] == ["yes", "yes"]
    assert "off the frontier" not in text
    breakdown = table_rows(text, "| tier | GiB provisioned")
    assert breakdown == [["gpu", "", "7"], ["dram", "4,096", "4"], ["layer3.5", "32,768", "1"], ["total", "", "12"]]
    assert "kvmm simulate --config config.json" in text and "![frontier](frontier.png)" in text


def test_no_configuration_meets_the_slo_is_an_answer_with_the_closest(tmp_path):
    plan = missed_plan()
    files = write_plan(plan, tmp_path)
    text = files["plan.md"].read_text()
    assert "**no configuration meets the SLO (p95 TTFT <= 1 s)**" in text
    assert "closest: dram 2 TiB/instance + layer3.5 32 TiB shared: $12/h, p95 TTFT 1.5 s simulated" in text
    assert "closest configuration (not meeting the SLO)" in text
    assert [r[-1] for r in table_rows(text, "| # |")] == ["", "closest"]
    assert load_config(files["config.json"]) == plan.closest.config()


def test_a_plan_with_no_point_writes_no_config(tmp_path):
    plan = Plan(slo=SLO(0.5), chosen=None, closest=None, config=None, frontier=[], verified=[], points_evaluated=0,
                reasons=["every combination is above the budget"])
    files = write_plan(plan, tmp_path)
    assert "config.json" not in files and not (tmp_path / "config.json").exists()
    text = files["plan.md"].read_text()
    assert "The frontier is empty" in text and "No point was simulated." in text
    assert "- every combination is above the budget" in text


def test_without_matplotlib_the_png_is_skipped_and_said(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    files = write_plan(met_plan(), tmp_path)
    assert "frontier.png" not in files and not (tmp_path / "frontier.png").exists()
    assert "frontier.png not drawn: matplotlib is not installed" in files["plan.md"].read_text()
    assert "matplotlib is not installed" in capsys.readouterr().err


def test_an_out_dir_that_is_a_file_is_one_line_bad_input(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(BadInputError, match="cannot create it") as info:
        write_plan(met_plan(), blocker / "plan")
    assert "\n" not in str(info.value)


def test_the_figure_plots_estimates_simulations_and_the_slo():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plan = met_plan()
    fig, ax = plt.subplots()
    assert draw_frontier(plan, None, ax=ax) is None
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines["frontier (estimated)"].get_xdata()) == [1.2, 1.8, 5.0]  # by est TTFT
    assert list(lines["frontier (estimated)"].get_ydata()) == [12.0, 10.0, 8.0]
    assert list(lines["simulated"].get_xdata()) == [2.5, 1.5]
    assert list(lines["chosen"].get_xdata()) == [1.5]
    slo = next(line for name, line in lines.items() if name.startswith("SLO"))
    assert list(slo.get_xdata()) == [2.0, 2.0]
    plt.close(fig)


def test_point_label_and_markdown_without_figure():
    plan = met_plan()
    assert point_label(plan.frontier[0]) == "no lower tier"
    assert point_label(plan.frontier[1]) == "dram 2 TiB/instance"
    text = plan_markdown(plan, figure=False, config_written=False)
    assert "![frontier]" not in text and "kvmm simulate --config" not in text
    assert re.search(r"analytic 0\.25 s, verify 3\.00 s", text)


def _plan_with_an_off_frontier_point() -> Plan:
    """met_plan plus a dominated verified point (dram 4 TiB: dearer than b, estimated as fast)."""
    plan = met_plan()
    b, c = plan.verified
    d = point((4 * TiB, 0), (0.45, 0.0), 1.8, 14.0, sim=1.7)
    d.on_frontier = False
    return Plan(slo=plan.slo, chosen=c, closest=None, config=c.config(), frontier=plan.frontier, verified=[b, c, d],
                points_evaluated=9, reasons=plan.reasons, timings_s=plan.timings_s)


def test_plan_md_marks_verified_points_off_the_frontier():
    text = plan_markdown(_plan_with_an_off_frontier_point())
    errors = table_rows(text, "| dram/instance | layer3.5 shared | on frontier | est p95")
    assert [r[:3] for r in errors] == [["2 TiB", "0", "yes"], ["2 TiB", "32 TiB", "yes"], ["4 TiB", "0", "no"]]
    assert errors[2][3:] == ["1.8", "1.7", "+5.9 %"]  # (1.8 - 1.7) / 1.7
    assert [r[1] for r in table_rows(text, "| # |")] == ["0", "2 TiB", "2 TiB"]  # the frontier table: frontier only
    assert "1 simulated point(s) off the frontier" in text


def test_the_figure_draws_off_frontier_points_with_their_own_markers():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    draw_frontier(_plan_with_an_off_frontier_point(), None, ax=ax)
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines["simulated"].get_xdata()) == [2.5, 1.5]  # the frontier's verified points only
    est, sim = lines["off the frontier (estimated)"], lines["off the frontier (simulated)"]
    assert (list(est.get_xdata()), list(est.get_ydata())) == ([1.8], [14.0])
    assert (list(sim.get_xdata()), list(sim.get_ydata())) == ([1.7], [14.0])
    assert est.get_marker() == sim.get_marker() == "D" != lines["simulated"].get_marker()
    assert "off the frontier (simulated)" in [t.get_text() for t in ax.get_legend().get_texts()]
    plt.close(fig)
