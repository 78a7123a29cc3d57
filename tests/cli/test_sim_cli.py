"""`kvmm simulate`: tier / staging spelling, one-line errors, JSON, jobs, and the tempokv section."""

from __future__ import annotations

import io
import json

import pytest

from kvmm.cli import main
from kvmm.report import Report


def test_simulate_table(capsys):
    assert main(["simulate", "--requests", "40", "--no-progress"]) == 0
    out = capsys.readouterr().out
    for policy in ("on-demand", "immediate", "immediate-edf", "timely", "write-through-lru"):
        assert f"| {policy} | 40 |" in out


def test_simulate_composed_tiers_json(capsys):
    assert main(["simulate", "--requests", "60", "--load", "0.8", "--tier", "dram:8GiB:arc:write-all",
                 "--tier", "nvme:2TiB:lru:refill-filter", "--staging", "timely", "--json", "--no-progress"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert len(rows) == 1 and rows[0]["policy"] == "timely" and rows[0]["load"] == 0.8
    assert len(rows[0]["tier_block_hits"]) == 2 and rows[0]["tier_evictions"][0] > 0  # 8 GiB of DRAM filled up


def test_simulate_jobs_match_sequential(capsys):
    args = ["simulate", "--requests", "30", "--json", "--no-progress", "--staging", "all"]
    assert main(args) == 0
    seq = capsys.readouterr().out
    assert main(args + ["--jobs", "2"]) == 0
    assert capsys.readouterr().out == seq


@pytest.mark.parametrize("args, names", [
    (["--tier", "dram:64XB"], "64XB"),
    (["--tier", "floppy:1GiB"], "floppy"),
    (["--tier", "dram:1GiB:mru"], "'mru'"),
    (["--tier", "dram:1GiB:lru:write-some"], "'write-some'"),
    (["--staging", "eager"], "eager"),
    (["--load", "heavy"], "heavy"),
    (["--load", "-1"], "--load '-1'"),
    (["--load", "0"], "--load '0'"),
    (["--load", "inf"], "--load 'inf'"),
    (["--fast-tier", "cxl:lots"], "lots"),
    (["--model", "nope"], "nope"),
    (["--token-budget", "512", "--scorer", "oracle"], "oracle"),
])
def test_bad_specs_give_one_line_errors_naming_the_bad_part(capsys, args, names):
    assert main(["simulate", "--requests", "5", "--no-progress"] + args) == 2
    err = capsys.readouterr().err.strip()
    assert names in err and len(err.splitlines()) == 1


def test_reproduce_quick(tmp_path):
    from kvmm.reproduce.tempokv import reproduce

    rep = Report(out=tmp_path, quick=True, progress_enabled=False, stream=io.StringIO())
    reproduce(rep)
    text = "\n".join(rep.chunks)
    assert "Protected byte-time" in text and "immediate-edf" in text and "write-through-lru" in text
    # the staging wait is its own column; the agent part sweeps the slack knob and gives a verdict
    assert "staging wait s" in text and "agent tool calls" in text and "slack knob margin_s" in text
    # a comparison row per cell: quick runs margins 0, 1 at notice 2 s and notices 0, 2 s at margin 0
    assert text.count("| timely > 5 % worse on |") == 2 and text.count("| timely vs on-demand |") == 4
    # FIFO and EDF grants differ only on the short tier with priority classes
    assert text.count("identical runs") == 4 and text.count("| differ |") == 2
    pytest.importorskip("matplotlib")
    assert "![tempokv_tradeoff](report-quick-tempokv_tradeoff.png)" in text  # byte-time vs p95 TTFT per policy
    assert (tmp_path / "report-quick-tempokv_tradeoff.png").stat().st_size > 1000


def test_simulate_priority_and_recompute_flags(capsys):
    base = ["simulate", "--workload-ratio", "0.7", "--requests", "60", "--load", "1.1", "--staging", "immediate",
            "--fast-tier", "cxl:2GiB", "--no-gpu-prefix-cache", "--json", "--no-progress"]
    assert main(base + ["--high-priority-share", "0.5", "--recompute"]) == 0
    row = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert 0 < row["high_priority_requests"] < 60 and row["ttft_p95_high_priority"] > 0
    assert main(base + ["--high-priority-share", "0.5"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["claims_recomputed"] == 0
    assert main(base + ["--high-priority-share", "2"]) == 2


def test_simulate_with_token_compression(capsys):
    assert main(["simulate", "--requests", "40", "--staging", "timely", "--scorer", "streamingllm", "--token-budget", "1024",
                 "--json", "--no-progress"]) == 0
    row = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert row["tokens_evicted"] > 0


@pytest.mark.parametrize("fmt, name", [("bailian", "t.jsonl"), ("lmcache", "t.log"), ("vllm", "t.msgpack")])
def test_simulate_replays_every_trace_format(tmp_path, capsys, fmt, name):
    """A trace saved in another format replays by path (format detected or given) exactly like
    the same trace loaded in memory."""
    from dataclasses import replace

    from kvmm.sim import SimConfig, simulate
    from kvmm.traces import load_trace, save_trace

    trace = load_trace("conversation").head(40)
    # bailian fixes 16-token blocks: relabelled explicitly (the writer refuses 512-token blocks)
    path = save_trace(replace(trace, block_tokens=16) if fmt == "bailian" else trace, tmp_path / name, fmt)
    loaded = load_trace(path, fmt)
    assert loaded.num_requests > 0
    in_memory = simulate(SimConfig(workload=loaded, policy="timely"))
    by_path = simulate(SimConfig(workload=str(path), policy="timely"))
    assert by_path.ttft_p50 == in_memory.ttft_p50 and by_path.requests == in_memory.requests
    assert main(["simulate", "--trace", str(path), "--format", fmt, "--staging", "timely", "--json",
                 "--no-progress", "--requests", str(loaded.num_requests)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert len(rows) == 1 and rows[0]["requests"] == in_memory.requests
    assert rows[0]["ttft_p50"] == pytest.approx(in_memory.ttft_p50)


def test_simulate_rejects_an_unknown_format(capsys):
    assert main(["simulate", "--trace", "conversation", "--format", "parquet", "--no-progress"]) == 2
    assert "parquet" in capsys.readouterr().err


def test_the_cli_staging_names_are_the_simulators():
    from kvmm.cli.simulate import STAGING
    from kvmm.sim.config import STAGING_NAMES

    assert STAGING == STAGING_NAMES  # the CLI spells them out to stay light to import


@pytest.mark.parametrize("fmt", [None, "mooncake"])
def test_an_empty_trace_is_the_same_one_line_error_in_simulate_and_mrc(tmp_path, capsys, fmt):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    flags = [] if fmt is None else ["--format", fmt]
    assert main(["simulate", "--trace", str(empty), "--staging", "timely", "--no-progress", *flags]) == 2
    simulate_err = capsys.readouterr().err.strip()
    assert main(["mrc", str(empty), *flags]) == 2
    captured = capsys.readouterr()
    assert simulate_err == "kvmm simulate: error: the trace has no requests; expected at least one"
    assert captured.err.strip() == "kvmm mrc: error: the trace has no requests; expected at least one"
    assert captured.out == ""  # no table of an empty curve
