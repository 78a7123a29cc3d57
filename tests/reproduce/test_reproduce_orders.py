"""kvmm.reproduce.orders: the report's miss-ratio-vs-capacity tables of every eviction order on the
bundled Mooncake block streams: every registered order and both traces, numbers equal to
replay(...), LRU's column equal to the exact stack-distance MRC, the working set marked where the
working-set section puts it."""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
import pytest

from kvmm.policies import REPLAY_ORDERS, StackDistanceTracker, replay
from kvmm.report import Report
from kvmm.reproduce import orders as O
from kvmm.traces import load_mooncake

TRACES = ("conversation", "synthetic")


@pytest.fixture(scope="module")
def streams():
    return {name: load_mooncake(name).block_ids for name in TRACES}


@pytest.fixture(scope="module")
def reported(streams, tmp_path_factory):
    report = Report(out=tmp_path_factory.mktemp("orders"), quick=True, progress_enabled=False, stream=io.StringIO())
    results = O.report_orders(report, streams, section="working-set", fractions=O.QUICK_WS_FRACTIONS)
    return report, results


def _tables(report):
    """{trace: (headers, rows)} parsed back from the Markdown the report holds."""
    out = {}
    for chunk in report.chunks:
        m = re.match(r"### working-set: miss ratio vs capacity, every eviction order \((\w+):", chunk)
        if not m:
            continue
        lines = [line for line in chunk.splitlines() if line.startswith("|")]
        headers = [c.strip() for c in lines[0].strip("|").split("|")]
        rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]
        out[m.group(1)] = (headers, rows)
    return out


def test_every_registered_order_and_both_traces_are_in_the_tables(reported):
    report, results = reported
    tables = _tables(report)
    assert sorted(tables) == sorted(TRACES)
    expected = sorted(set(REPLAY_ORDERS) - {"belady"}) + (["belady"] if "belady" in REPLAY_ORDERS else [])
    assert O.table_orders() == expected and {"lru", "fifo", "arc", "lfu"} <= set(expected)
    for name, (headers, rows) in tables.items():
        assert headers == ["capacity (blocks)", "capacity / WS"] + expected
        assert len(rows) == len(results[name]["capacities"]) >= len(O.QUICK_WS_FRACTIONS)
    assert [p.name for p in report.figures] == ["report-quick-working_set_orders.png"]


def test_numbers_are_replay_miss_ratios(reported, streams):
    report, results = reported
    for name, (headers, rows) in _tables(report).items():
        keys = streams[name]
        for row, cap in zip(rows, results[name]["capacities"]):
            assert int(row[0].replace(",", "")) == cap
            for order, cell in zip(headers[2:], row[2:]):
                expected = 1.0 - replay(order, keys, cap).sum() / keys.size  # recomputed here
                assert results[name]["miss"][order][results[name]["capacities"].index(cap)] == expected
                assert float(cell) == round(expected, 4)


def test_lru_column_is_the_exact_stack_distance_mrc(reported, streams):
    _, results = reported
    for name in TRACES:
        tracker = StackDistanceTracker()
        tracker.access(streams[name])
        caps = results[name]["capacities"]
        assert np.array_equal(results[name]["miss"]["lru"], tracker.mrc(caps))  # bit for bit


def test_working_set_mark_is_the_sections_ws_90(reported, streams):
    report, results = reported
    for name, (_, rows) in _tables(report).items():
        tracker = StackDistanceTracker()
        tracker.access(streams[name])
        ws = tracker.working_set(0.9)  # the working-set section's "WS 90 %" column
        assert results[name]["ws"] == ws and ws in results[name]["capacities"]
        marked = [int(r[0].replace(",", "")) for r in rows if "WS 90 %" in r[1]]
        assert marked == [ws]
        # the grid: each fraction of the working set, rounded
        assert results[name]["capacities"] == sorted({max(1, round(f * ws)) for f in O.QUICK_WS_FRACTIONS} | {ws})


def test_extra_column_and_given_capacities(tmp_path):
    keys = np.array([1, 2, 1, 3, 1, 2, 4, 1, 2, 3] * 5, np.int64)
    report = Report(out=tmp_path, quick=True, progress_enabled=False, stream=io.StringIO())
    res = O.report_orders(report, {"toy": keys}, section="allocator", capacities={"toy": [1, 2]},
                          extra={"toy": {1: 0.5}}, extra_label="mine")
    assert res["toy"]["capacities"] == sorted({1, 2, res["toy"]["ws"]})
    table = next(c for c in report.chunks if c.startswith("### allocator: miss ratio"))
    assert "| mine |" in table and "| 0.5 |" in table and "| - |" in table  # blank where absent


def test_the_working_set_section_adds_the_tables_with_its_own_ws(tmp_path):
    # the whole section, quick: its Mooncake table's "WS 90 %" is the capacity marked in ours
    from kvmm.reproduce import efficientagent

    buf = io.StringIO()
    report = Report(out=Path(tmp_path), quick=True, progress_enabled=False, stream=buf)
    efficientagent.reproduce(report)
    text = "\n".join(report.chunks)
    ws_table = next(c for c in report.chunks if c.startswith("### Mooncake traces: working set"))
    for name in TRACES:
        row = next(line for line in ws_table.splitlines() if line.startswith(f"| {name} |"))
        ws = int(row.strip("|").split("|")[4].strip().replace(",", ""))
        ours = _tables(report)[name][1]
        assert [r[0] for r in ours if "WS 90 %" in r[1]] == [f"{ws:,}"]
    assert "every eviction order (conversation" in text and "every eviction order (synthetic" in text
