"""Issue 33, the command line's hostile input (items 7, 11 and 13): each bad flag is one line on
stderr naming the flag, exit code 2, and nothing runs."""

from __future__ import annotations

import pytest

import kvmm.plan.core as core
from kvmm.cli import main


def one_line_error(capsys, command: str) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"kvmm {command}: error: "), err
    assert "\n" not in err and "usage:" not in err and "Traceback" not in err, err
    assert len(err) < 400, err  # a 5,000-digit flag is not echoed whole
    return err


# ------------------------------------------------------------------ item 7: kvmm plan --tier
@pytest.mark.parametrize("tier, message", [
    ("dram:0-4TiB:points=²", "points='²' is not a whole number in [1, 4096]"),
    ("dram:0-4TiB:points=" + "9" * 5000, "is not a whole number in [1, 4096]"),
    ("dram:0-4TiB:points=٣", "is not a whole number"),  # an Arabic-Indic digit: isdigit, and int() reads 3
    ("dram:0-" + "9" * 400 + "TiB", "is more than 2**60 bytes"),
    ("dram:0-" + "9" * 5000 + "KiB", "is more than 2**60 bytes"),
    ("dram:" + "1" * 400 + "B-2" + "0" * 400 + "B", "is more than 2**60 bytes"),
])
def test_plan_tier_parse_errors_are_one_line(tier, message, capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(core, "plan", lambda *a, **k: pytest.fail("plan() ran on bad input"))
    assert main(["plan", "--ttft-p95", "2s", "--tier", tier, "--out", str(tmp_path / "p")]) == 2
    err = one_line_error(capsys, "plan")
    assert "--tier '" in err and message in err


# ------------------------------------------------------------------ item 11: --price names
@pytest.mark.parametrize("command", [["simulate"], ["plan", "--ttft-p95", "2s"]])
def test_an_unknown_price_name_is_refused_naming_the_known_ones(command, capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(core, "plan", lambda *a, **k: pytest.fail("plan() ran on bad input"))
    assert main([*command, "--price", "gpus=5/h", "--out" if command[0] == "plan" else "--no-progress",
                 *([str(tmp_path / "p")] if command[0] == "plan" else [])]) == 2
    err = one_line_error(capsys, command[0])
    assert "--price 'gpus=5/h'" in err and "'gpus'" in err and "expected gpu or a tier: cxl, dfs, dram" in err


def test_price_names_stay_free_outside_the_cli():
    from kvmm.errors import BadInputError
    from kvmm.sim.cost import parse_prices
    from kvmm.tiers.spec import PRESETS

    assert parse_prices("my-tier=1/h").tier_usd_per_hour == {"my-tier": 1.0}  # a hand-built spec's name
    assert parse_prices("dram=1/GiBh", tier_names=PRESETS).tier_usd_per_gib_hour == {"dram": 1.0}
    with pytest.raises(BadInputError, match="names 'my-tier'"):
        parse_prices("my-tier=1/h", tier_names=PRESETS)


# ------------------------------------------------------------------ item 13: flags named, one line
@pytest.mark.parametrize("flags, message", [
    (["simulate", "--gpu-kv", "0"], "--gpu-kv '0': expected a size > 0"),
    (["simulate", "--gpu-kv", "0B"], "--gpu-kv '0B': expected a size > 0"),
    (["simulate", "--gpu-kv", "9" * 400 + "GiB"], "is more than 2**60 bytes"),
    (["simulate", "--index-max-entries", "-1"], "--index-max-entries -1: expected an integer >= 1"),
    (["simulate", "--index-max-entries", "-1", "--router", "round-robin"], "--index-max-entries -1"),
    (["simulate", "--instances", "0"], "--instances 0: expected an integer >= 1"),
    (["simulate", "--requests", "0"], "--requests 0: expected an integer >= 1"),
    (["simulate", "--instances", "2.5"], "argument --instances: invalid int value: '2.5'"),
    (["simulate", "--token-budget", "0"], "--token-budget 0"),
    (["simulate", "--high-priority-share", "2"], "--high-priority-share 2.0"),
    (["simulate", "--tier"], "argument --tier: expected one argument"),
    (["plan", "--ttft-p95", "-2s"], "--ttft-p95 '-2s': expected a duration > 0"),
    (["plan", "--ttft-p95", "2s", "--tpot-p95", "-5ms"], "--tpot-p95 '-5ms'"),
    (["plan", "--ttft-p95", "2s", "--instances", "2.5"], "argument --instances: invalid int value: '2.5'"),
    (["plan"], "the following arguments are required: --ttft-p95"),
])
def test_bad_flags_are_one_line_naming_the_flag(flags, message, capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(core, "plan", lambda *a, **k: pytest.fail("plan() ran on bad input"))
    import kvmm.sim.simulator as simulator

    monkeypatch.setattr(simulator, "simulate", lambda *a, **k: pytest.fail("simulated on bad input"))
    out = ["--out", str(tmp_path / "p")] if flags[0] == "plan" else ["--no-progress"]
    assert main([*flags, *out]) == 2
    assert message in one_line_error(capsys, flags[0])


def test_a_flag_value_that_looks_like_a_flag_of_the_command_stays_a_flag(capsys):
    assert main(["plan", "--ttft-p95", "--tier", "dram:0-1TiB"]) == 2  # the value is missing, not "--tier"
    assert "argument --ttft-p95: expected one argument" in one_line_error(capsys, "plan")


def test_pd_and_fabric_take_the_same_link_names():
    import argparse

    from kvmm.cli.simulate import add_arguments, build_configs
    from kvmm.cluster.fabric import FABRIC_PRESETS, LINK_NAMES, fabric_preset, link_by_name
    from kvmm.tiers.spec import LINK_PRESETS

    assert set(LINK_PRESETS) | set(FABRIC_PRESETS) <= set(LINK_NAMES)
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    for name in LINK_NAMES:
        link, fabric = link_by_name(name), fabric_preset(name)
        # one name, one link: the PD link is the fabric's per-instance link
        assert (link.read_bandwidth, link.latency_s) == (fabric.link_bandwidth, fabric.latency_s), name
        pd = build_configs(parser.parse_args(["--pd", f"1x1:{name}", "--staging", "timely"]))[0].pd
        assert pd.link == link
        shared = build_configs(parser.parse_args(["--shared-tier", "dram", "--instances", "2", "--fabric", name,
                                                  "--staging", "timely"]))[0].cluster
        assert shared.fabric == fabric
    assert fabric_preset("supernode") == FABRIC_PRESETS["supernode-m890"]  # the old PD spelling, an alias
    assert link_by_name("supernode-m890") == LINK_PRESETS["supernode"]


def test_progress_total_is_the_real_request_count(tmp_path, monkeypatch, capsys):
    import json

    import kvmm._progress as progress_module
    import kvmm.cli.simulate
    from kvmm.sim.config import SimConfig
    from kvmm.sim.config_json import config_to_json

    totals = []

    class Recorder(progress_module.Progress):
        def __init__(self, total, *args, **kwargs):
            totals.append(total)
            super().__init__(total, *args, **kwargs)

    monkeypatch.setattr(kvmm.cli.simulate, "Progress", Recorder)
    path = tmp_path / "config.json"
    for max_requests, expected in ((None, 12), (5, 5), (50, 12)):
        cfg = SimConfig(workload=__import__("kvmm.sim.workload", fromlist=["Workload"]).Workload(num_requests=12),
                        max_requests=max_requests, policy="timely")
        path.write_text(json.dumps(config_to_json(cfg)), encoding="utf-8")
        assert main(["simulate", "--config", str(path), "--json"]) == 0
        assert totals[-1] == expected  # was 1000 (--requests' default) for max_requests null
    capsys.readouterr()


def test_calibrate_reads_the_bundled_model_folder(tmp_path, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from kvmm.compress.pydoc_model import MODEL_DIR

    text = tmp_path / "text.txt"
    text.write_text("def add(a, b):\n    return a + b\n", encoding="utf-8")
    assert main(["calibrate", str(MODEL_DIR), str(text), "--out", str(tmp_path / "cal.npz")]) == 0
    out = capsys.readouterr().out
    assert "calibrated 4 layers x 4 heads (kv 2, head_dim 32" in out and (tmp_path / "cal.npz").is_file()
    not_a_model = tmp_path / "empty"
    not_a_model.mkdir()
    (not_a_model / "config.json").write_text("{}", encoding="utf-8")
    ids = tmp_path / "ids.txt"
    ids.write_text("1 2 3 4", encoding="utf-8")
    assert main(["calibrate", str(not_a_model), str(ids), "--token-ids", "--out", str(tmp_path / "x.npz")]) == 2
    assert "cannot load a transformers model from" in one_line_error(capsys, "calibrate")
