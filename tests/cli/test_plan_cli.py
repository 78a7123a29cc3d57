"""``kvmm plan``: flag parsing, one-line errors with exit code 2, and a run on a stand-in
planner (kvmm.plan.core.plan replaced by one returning a hand-built plan) that writes the
three files, prints the decision, reports progress on stderr and passes the flags through."""

import json

import pytest

import kvmm.plan.core as core
from kvmm.cli import main
from kvmm.cli.plan import parse_budget, parse_duration
from kvmm.cli.simulate import parse_price_flag
from kvmm.errors import BadInputError
from kvmm.plan import SLO, TierCandidate
from kvmm.sim.cost import Prices
from tests.plan.plan_helpers import TiB, met_plan, missed_plan


@pytest.mark.parametrize("text, seconds", [("2s", 2.0), ("500ms", 0.5), ("0.5", 0.5), ("250us", 250e-6),
                                           ("1min", 60.0), (" 1.5 S ", 1.5), ("2e-1s", 0.2)])
def test_durations(text, seconds):
    assert parse_duration(text, "--ttft-p95") == pytest.approx(seconds, rel=1e-12)


@pytest.mark.parametrize("text", ["fast", "0s", "-1s", "2h", "", "ms", "2 s s"])
def test_bad_durations_name_the_flag(text):
    with pytest.raises(BadInputError, match=r"^--tpot-p95 .*expected a duration > 0"):
        parse_duration(text, "--tpot-p95")


def test_budget_and_prices():
    assert parse_budget(None) is None and parse_budget("120") == 120.0 and parse_budget("12.5/h") == 12.5
    for bad in ("0", "-3", "lots", "12/GiBh"):
        with pytest.raises(BadInputError, match="--budget"):
            parse_budget(bad)
    assert parse_price_flag(None) is None
    assert parse_price_flag("gpu=3.5/h,dram=0.004/GiBh") == Prices(3.5, {"dram": 0.004})
    with pytest.raises(BadInputError, match=r"^--price 'gpu=x/h': "):
        parse_price_flag("gpu=x/h")


@pytest.mark.parametrize("flags, message", [
    (["--ttft-p95", "soon"], "--ttft-p95 'soon': expected a duration"),
    (["--ttft-p95", "2s", "--tpot-p95", "0ms"], "--tpot-p95 '0ms'"),
    (["--ttft-p95", "2s", "--tier", "dram:4TiB-0"], "--tier 'dram:4TiB-0'"),
    (["--ttft-p95", "2s", "--tier", "ram:0-4TiB"], "--tier 'ram:0-4TiB'"),
    (["--ttft-p95", "2s", "--tier", "dram:0-1TiB", "--tier", "dram:0-2TiB"], "dram given twice"),
    (["--ttft-p95", "2s", "--price", "dram=1/week"], "--price 'dram=1/week'"),
    (["--ttft-p95", "2s", "--budget", "cheap"], "--budget 'cheap'"),
    (["--ttft-p95", "2s", "--instances", "0"], "--instances 0"),
    (["--ttft-p95", "2s", "--verify", "0"], "--verify 0"),
    (["--ttft-p95", "2s", "--requests", "0"], "--requests 0"),
    (["--ttft-p95", "2s", "--load", "-1"], "--load -1"),
    (["--ttft-p95", "2s", "--model", "gpt-9"], "gpt-9"),
    (["--ttft-p95", "2s", "--jobs", "0"], "--jobs 0"),
])
def test_bad_input_is_one_line_and_exit_code_2(flags, message, capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(core, "plan", lambda *a, **k: pytest.fail("plan() ran on bad input"))
    assert main(["plan", *flags, "--out", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kvmm plan: error: ") and message in err and "\n" not in err


def stand_in(result, calls):
    def fake_plan(trace, **kwargs):
        calls.append((trace, kwargs))
        kwargs["progress"]("analytic", 0, 2)
        kwargs["progress"]("analytic", 2, 2)
        kwargs["progress"]("verify", 1, 3)
        kwargs["progress"]("verify", 3, 3)
        return result
    return fake_plan


def test_a_run_passes_the_flags_writes_the_files_and_prints_the_decision(capsys, monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(core, "plan", stand_in(met_plan(), calls))
    out = tmp_path / "plan"
    code = main(["plan", "--trace", "conversation", "--ttft-p95", "2s", "--tpot-p95", "80ms", "--tier", "dram:0-4TiB",
                 "--tier", "layer3.5:0-64TiB:shared:points=8", "--instances", "8", "--price", "gpu=3.5/h",
                 "--budget", "200", "--verify", "4", "--jobs", "1", "--out", str(out)])
    assert code == 0
    (trace, kwargs), = calls
    assert trace == "conversation"
    assert kwargs["slo"] == SLO(2.0, 0.08)
    assert kwargs["tiers"] == [TierCandidate("dram", 0, 4 * TiB), TierCandidate("layer3.5", 0, 64 * TiB, points=8,
                                                                                   shared=True)]
    assert kwargs["prices"] == Prices(3.5) and kwargs["instances"] == 8 and kwargs["budget"] == 200.0
    assert kwargs["verify"] == 4
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "frontier.png", "plan.md"]
    assert "--tier layer3.5:0-64TiB:shared:points=8" in (out / "plan.md").read_text()  # the command is quoted
    captured = capsys.readouterr()
    assert captured.out.startswith("chosen: dram 2 TiB/instance + layer3.5 32 TiB shared: $12/h")
    assert "  - the cheapest verified point meeting the SLO in simulation" in captured.out
    assert "plan: analytic" in captured.err and "plan: verify" in captured.err  # progress on stderr only
    assert "plan:" not in captured.out.replace("kvmm plan", "")


def test_no_progress_and_json(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(core, "plan", stand_in(missed_plan(), []))
    assert main(["plan", "--ttft-p95", "1s", "--json", "--no-progress", "--jobs", "1", "--out", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    data = json.loads(captured.out)
    assert data["chosen"] is None and data["closest"]["capacities"] == [2 * TiB, 32 * TiB]
    assert data["slo"] == {"ttft_p95_s": 1.0, "tpot_p95_s": None}
    assert [e["sim_ttft_p95_s"] for e in data["errors"]] == [2.5, 1.5]
    assert [p["est_ttft_p95_s"] for p in data["frontier"]] == [1.8, 1.2]
    assert set(data["files"]) == {"plan.md", "frontier.png", "config.json"}


def test_default_tiers_are_the_issues_example(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(core, "plan", stand_in(met_plan(), calls))
    assert main(["plan", "--ttft-p95", "2s", "--no-progress", "--jobs", "1", "--out", str(tmp_path)]) == 0
    assert [(t.kind, t.max_bytes, t.shared) for t in calls[0][1]["tiers"]] == [
        ("dram", 4 * TiB, False), ("layer3.5", 64 * TiB, True), ("nvme", 16 * TiB, False)]


def test_the_base_config_carries_requests_load_and_model(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(core, "plan", stand_in(met_plan(), calls))
    assert main(["plan", "--ttft-p95", "2s", "--requests", "300", "--load", "0.5", "--model", "qwen2.5-32b",
                 "--no-progress", "--jobs", "1", "--out", str(tmp_path)]) == 0
    base = calls[0][1]["base"]
    assert (base.workload, base.max_requests, base.load, base.model) == ("conversation", 300, 0.5, "qwen2.5-32b")


def test_plan_is_a_subcommand(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "plan" in capsys.readouterr().out


def test_end_to_end_on_a_slice_of_the_conversation_trace(capsys, tmp_path):
    """The real planner on the first 120 requests: the three files, and config.json is what
    ``kvmm simulate --config`` replays (the same SimConfig as the plan's chosen or closest point)."""
    from kvmm.sim.config_json import load_config

    out = tmp_path / "plan"
    assert main(["plan", "--requests", "120", "--ttft-p95", "30s", "--tier", "dram:0-1TiB:points=3",
                 "--tier", "layer3.5:0-8TiB:shared:points=3", "--instances", "2", "--verify", "2", "--jobs", "1",
                 "--no-progress", "--json", "--out", str(out)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "frontier.png", "plan.md"]
    assert data["points_evaluated"] == 9 and len(data["verified"]) >= 1
    point = data["chosen"] or data["closest"]
    config = load_config(out / "config.json")
    shared = config.cluster.shared_tiers if config.cluster is not None else ()
    instances = config.cluster.instances if config.cluster is not None else config.instances
    assert config.max_requests == 120 and instances == 2
    assert [lv.capacity_bytes for lv in config.tiers] == [c for c in point["capacities"][:1] if c]
    assert [lv.capacity_bytes for lv in shared] == [c for c in point["capacities"][1:] if c]
    if data["chosen"] is not None:  # the chosen point met the SLO in its own simulation
        assert data["chosen"]["sim_ttft_p95_s"] <= 30.0


@pytest.mark.parametrize("flags, message", [
    (["--trace", "/nonexistent/trace.jsonl"], "is neither a file nor a bundled trace name"),
    (["--tier", "hbm:0-1TiB"], "no price for tier 'hbm'"),
    (["--requests", "50", "--tier", "dram:0-1TiB:points=2", "--budget", "1"], "no capacity combination costs at most"),
])
def test_the_planners_own_bad_input_is_one_line_and_exit_code_2(flags, message, capsys, tmp_path):
    assert main(["plan", "--ttft-p95", "2s", "--no-progress", "--jobs", "1", *flags, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kvmm plan: error: ") and message in err and "\n" not in err
