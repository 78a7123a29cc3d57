"""The report reads well (issue 33, items 16 and 17): conclusions are short, an empty class shows
``-``, identical columns and flat rows are explained, replay timings exclude JIT compilation, PD
says plainly where p95 TPOT gets worse, and the plots can be read (distinct MRC lines, TempoKV's
trade-off axis labelled where its points are, the router plot linear with error bars, error bars
where the text gives a spread).  Every section that simulates says what the physical clock moved.
"""

from __future__ import annotations

import io
import re
from types import SimpleNamespace

import numpy as np
import pytest

from kvmm.report import Report
from kvmm.reproduce import orders as O
from tests.reproduce.report_helpers import markdown_cells, markdown_table, run_quick_section

MAX_CELL_WORDS = 20


@pytest.fixture(scope="module")
def tempokv(tmp_path_factory):
    return run_quick_section(tmp_path_factory, "tempokv", capture_figures=True)


@pytest.fixture(scope="module")
def pd(tmp_path_factory):
    return run_quick_section(tmp_path_factory, "pd")


def _words(cell: str) -> int:
    return len(cell.split())


# --------------------------------------------------------------------------- item 16
def test_tempokv_cells_are_short(tempokv):
    md, _ = tempokv
    cells = markdown_cells(md)
    assert len(cells) > 100
    long = [c for c in cells if _words(c) >= MAX_CELL_WORDS]
    assert not long, long[:3]  # the agent tables' verdicts were 60-150-word cells
    headers, rows = markdown_table(md, "TempoKV on agent tool calls: slack knob")
    assert headers[-1] == "timely > 5 % worse on"
    vs = [r for r in rows if r[2].startswith("timely vs ")]
    assert {r[2] for r in vs} == {"timely vs on-demand", "timely vs immediate", "timely vs write-through-lru"}
    assert all(re.fullmatch(r"[+-]\d+ %|-", c) for r in vs for c in r[3:7]), vs


def test_an_empty_class_shows_a_dash_not_zero(tempokv):
    md, _ = tempokv
    headers, rows = markdown_table(md, "Immediate staging, FIFO vs earliest-deadline-first")
    col = headers.index("TTFT p95 s (high priority)")
    one_class = [r[col] for r in rows if "one class" in r[0]]
    priority = [r[col] for r in rows if "high priority" in r[0]]
    assert one_class and set(one_class) == {"-"}  # no high-priority request: no p95 (was 0.000)
    assert all(float(c) > 0 for c in priority)
    # write-through-lru makes no claim: its per-claim columns are empty, not 0
    headers, rows = markdown_table(md, "Protected byte-time and TTFT on the Mooncake conversation trace")
    wt = next(r for r in rows if r[1] == "write-through-lru")
    assert wt[headers.index("staging wait s (mean per claim)")] == "-" and wt[headers.index("ready in time / claims")] == "-"


def test_pd_says_where_p95_tpot_gets_worse(pd):
    md, _ = pd
    headers, rows = markdown_table(md, "Colocated vs disaggregated serving")
    tpot = headers.index("TPOT p95 ms")
    colocated = float(rows[0][tpot])
    worse = [r for r in rows[1:] if float(r[tpot]) > colocated]
    expected = ("p95 TPOT is worse than colocated on every link." if len(worse) == len(rows) - 1 else
                f"p95 TPOT is worse than colocated on {len(worse)} of {len(rows) - 1} set-ups")
    assert expected in md


def test_pd_verdict_sentences():
    from kvmm.reproduce.pd import _verdict

    assert _verdict(["a", "b"], ["a", "b"], 2, 1) == ("p95 TPOT is worse than colocated on every link.  "
                                                      "p95 TTFT is better on every link.")
    assert _verdict(["a"], [], 2, 1).startswith("p95 TPOT is worse than colocated on 1 of 2 set-ups (a).")


def test_identical_columns_are_explained(tmp_path):
    from kvmm.traces import load_mooncake

    keys = load_mooncake("conversation").block_ids[:40_000]
    report = Report(out=tmp_path, quick=True, progress_enabled=False, stream=io.StringIO())
    O.report_orders(report, {"conversation": keys}, section="working-set", fractions=(0.5, 1.0))
    table = next(c for c in report.chunks if c.startswith("### working-set: miss ratio"))
    assert "Identical columns: lfu = sieve hit on exactly the same references at every capacity" in table
    assert "of conversation's blocks are referenced once" in table
    groups = O.identical_groups({"a": ("x", "y"), "b": ("x", "y"), "c": ("x", "z"), "d": (None, "y"), "e": (None, "y")})
    assert groups == [["a", "b"]]  # an order that could not run somewhere is never called identical
    assert O.identical_note({"a": ("x",), "c": ("y",)}, "s") == ""


def test_replay_timing_excludes_jit_compilation(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(O, "warm_up", lambda: calls.append("warm-up"))
    timed = O.order_miss_ratios

    def order_miss_ratios(*args, **kwargs):
        calls.append("timed")
        return timed(*args, **kwargs)

    monkeypatch.setattr(O, "order_miss_ratios", order_miss_ratios)
    report = Report(out=tmp_path, quick=True, progress_enabled=False, stream=io.StringIO())
    O.report_orders(report, {"toy": np.array([1, 2, 1, 3, 1, 2, 4] * 9, np.int64)}, section="allocator", capacities={"toy": [2]})
    assert calls == ["warm-up", "timed"]  # the kernels are compiled before the clock starts
    assert "(kernels compiled before timing)" in report.chunks[0]


def test_flat_rows_are_explained():
    from kvmm.reproduce.efficientagent import flat_rows_note

    fractions = [0.25, 0.5, 1.0, 2.0]
    res = {}
    for i, f in enumerate(fractions):
        res[(f, "write-all")] = SimpleNamespace(recomputed_tokens=1000 - 100 * i, written_blocks=500)
        res[(f, "selective write-through")] = SimpleNamespace(recomputed_tokens=900 if i == 0 else 800, written_blocks=40)
        res[(f, "never")] = SimpleNamespace(recomputed_tokens=1000, written_blocks=0)
    note = flat_rows_note(res, fractions, ["write-all", "selective write-through", "never"], ws=100)
    assert "write-all recomputes" not in note  # changes up to the largest host: not flat
    assert "selective write-through recomputes the same tokens from 0.5 x WS on: it writes only 40 blocks" in note
    assert "write-all 500 at that size" in note
    assert "never recomputes the same tokens from 0.25 x WS on: it writes nothing" in note


# --------------------------------------------------------------------------- item 17
def _lines(ax):
    return [ln for ln in ax.get_lines() if not ln.get_label().startswith(("_", "WS 90"))]


def test_mrc_plot_lines_have_distinct_colours_and_styles(tmp_path, monkeypatch):
    plt = pytest.importorskip("matplotlib.pyplot")
    from matplotlib.colors import to_hex

    figures = []
    monkeypatch.setattr(plt, "close", lambda fig=None: figures.append(fig))
    keys = np.random.default_rng(3).zipf(1.3, 5000).astype(np.int64)
    report = Report(out=tmp_path, quick=True, progress_enabled=False, stream=io.StringIO())
    O.report_orders(report, {"a": keys, "b": keys[::-1].copy()}, section="working-set", fractions=(0.5, 1.0))
    (fig,) = figures
    assert len(fig.axes) == 2
    for ax in fig.axes:
        lines = _lines(ax)
        assert [ln.get_label() for ln in lines] == O.table_orders()
        pairs = [(to_hex(ln.get_color()), ln.get_linestyle()) for ln in lines]
        assert len(set(pairs)) == len(pairs), pairs
        assert len({c for c, _ in pairs}) == len(pairs)  # every order its own colour, too
    plt.close("all")


def test_tempokv_tradeoff_axes_are_labelled_where_the_points_are(tempokv):
    _, report = tempokv
    fig = report.captured_figures["report-quick-only-tempokv-tempokv_tradeoff.png"]
    for ax in fig.axes:
        ys = np.concatenate([ln.get_ydata() for ln in _lines(ax)]).astype(float)
        lo, hi = ax.get_ylim()
        labelled = [t.get_position()[1] for t in ax.get_yticklabels() if t.get_text() and lo <= t.get_position()[1] <= hi]
        assert len(labelled) >= 3, labelled
        assert lo <= ys.min() and ys.max() <= hi
        if ax.get_yscale() == "linear":  # the zoomed panel: the points fill the axis
            assert (ys.max() - ys.min()) >= 0.3 * (hi - lo) or ys.max() == ys.min()
        else:  # the log panel: no decade without a label (1-2-5 steps)
            decades = np.log10(labelled)
            assert np.max(np.diff(sorted(decades))) < 1.0


def test_router_plot_is_linear_with_error_bars(tmp_path):
    plt = pytest.importorskip("matplotlib.pyplot")
    from kvmm.reproduce.cluster import draw_routers

    routers = {"round-robin": [(16.5, 3.0), (1.16, 0.15)], "least-loaded": [(7.2, 0.6), (1.14, 0.12)],
               "precise-prefix (load-blind ablation)": [(75.3, 115.1), (1.34, 0.34)],
               "weighted (llm-d precise)": [(4.8, 0.7), (1.12, 0.12)]}
    fig, axes = plt.subplots(1, 2)
    draw_routers(axes, routers)
    for ax in axes:
        assert ax.get_yscale() == "linear"
        caps = [c for c in ax.containers if type(c).__name__ == "ErrorbarContainer"]
        assert caps and len(caps[0].lines[2][0].get_segments()) == len(routers)  # one error bar per router
    # the outlier is cut so the others stay readable, and its value is written on it
    assert axes[0].get_ylim()[1] < 75.3 and any("75.3" in t.get_text() for t in axes[0].texts)
    plt.close(fig)


def test_error_bars_where_the_text_gives_a_spread(tmp_path_factory):
    md, report = run_quick_section(tmp_path_factory, "cluster", capture_figures=True)
    assert "± " in markdown_table(md, "Shared pool vs private tiers")[1][0][-1]  # the table gives a spread
    fig = report.captured_figures["report-quick-only-cluster-cluster-shared-vs-private.png"]
    (ax,) = fig.axes
    bars = [c for c in ax.containers if type(c).__name__ == "ErrorbarContainer"]
    # private and shared, each under round-robin and under the affinity router
    assert len(bars) == 4 and ax.get_yscale() == "linear"
    assert sorted(t.get_text() for t in ax.get_legend().get_texts()) == [
        "private, precise-prefix (Dynamo)", "private, round-robin", "shared, precise-prefix (Dynamo)", "shared, round-robin"]
    fig = report.captured_figures["report-quick-only-cluster-cluster-routers.png"]
    headers, rows = markdown_table(md, "Routers at N = 8")
    for ax in fig.axes:  # the router table gives a spread per router: one error bar per router in each panel
        bars = [c for c in ax.containers if type(c).__name__ == "ErrorbarContainer"]
        assert len(bars) == 1 and len(bars[0].lines[2][0].get_segments()) == len(rows)
    # short cells in every cluster table (labels, numbers, mean ± std), the sentences in the notes
    long = [c for c in markdown_cells(md.split("## Cluster", 1)[1]) if _words(c) >= MAX_CELL_WORDS]
    assert not long, long[:3]
    # every simulating section says what the physical clock moved
    headers, rows = markdown_table(md, "Cluster: what the physical clock moved")
    assert headers == ["setting", "metric", "old clock", "physical clock", "change"]
    assert any(r[0] == "ParaStor" and r[1].startswith("ceiling") for r in rows)
    assert all("±" in r[2] and "±" in r[3] for r in rows if r[0] != "ParaStor"), rows


def test_tempokv_and_pd_say_what_the_physical_clock_moved(tempokv, pd):
    for md, title in ((tempokv[0], "TempoKV: what the physical clock moved"), (pd[0], "PD: what the physical clock moved")):
        headers, rows = markdown_table(md, title)
        assert headers == ["setting", "metric", "old clock", "physical clock", "change"] and rows
        assert "Old clock:" in md and "Clock (physical, docs/latency.md): Roofline step times" in md
        assert "rates assumed" not in md  # the old wording of the constant-rate clock


def test_section_timings_say_they_include_jit_compilation(tmp_path, monkeypatch):
    import sys
    import types

    import kvmm.reproduce as R

    module = types.ModuleType("kvmm_test_fake_section")
    module.reproduce = lambda report: report.text("nothing")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(R, "SECTIONS", [("fake", module.__name__)])
    stream = io.StringIO()
    report = Report(out=tmp_path, quick=True, progress_enabled=False, stream=stream)
    assert R.run_sections(report) == ["fake"]
    assert re.search(r"\(fake: \d+\.\ds wall, JIT compilation included\)", stream.getvalue())
