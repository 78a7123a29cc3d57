"""`kvmm simulate` and the `tempokv` report section."""

from __future__ import annotations

import io
import json

from kvmm.cli import main
from kvmm.report import Report


def test_simulate_table(capsys):
    assert main(["simulate", "--requests", "40", "--time-scale", "2", "--no-progress"]) == 0
    out = capsys.readouterr().out
    for policy in ("on-demand", "immediate", "timely"):
        assert f"| {policy} | 40 |" in out


def test_simulate_json_workload(capsys):
    assert main(["simulate", "--workload-ratio", "0.5", "--requests", "30", "--policy", "timely", "--json",
                 "--no-progress"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert len(rows) == 1 and rows[0]["policy"] == "timely" and rows[0]["requests"] == 30


def test_simulate_jobs_match_sequential(capsys):
    args = ["simulate", "--requests", "30", "--json", "--no-progress", "--policy", "all"]
    assert main(args) == 0
    seq = capsys.readouterr().out
    assert main(args + ["--jobs", "2"]) == 0
    assert capsys.readouterr().out == seq


def test_simulate_bad_input(capsys):
    assert main(["simulate", "--fast-gib", "-5", "--no-progress"]) == 2
    assert "fast-gib" in capsys.readouterr().err
    assert main(["simulate", "--model", "nope", "--requests", "5", "--no-progress"]) == 2
    assert main(["simulate", "--trace", "/no/such/file.jsonl", "--no-progress"]) == 2


def test_reproduce_quick(tmp_path):
    from kvmm.reproduce.tempokv import reproduce

    rep = Report(out=tmp_path, quick=True, progress_enabled=False, stream=io.StringIO())
    reproduce(rep)
    text = "\n".join(rep.chunks)
    assert "Protected byte-time per request" in text and "63-91 %" in text
    assert "capacity sweep" in text
    # six model x ratio cells, each with a measured reduction
    assert text.count("llama3-8b |") >= 3 and text.count("qwen2.5-32b |") == 3


def test_simulate_priority_and_recompute_flags(capsys):
    base = ["simulate", "--workload-ratio", "0.7", "--requests", "60", "--rate", "4", "--policy", "immediate",
            "--fast-gib", "2", "--json", "--no-progress"]
    assert main(base + ["--high-priority-share", "0.5"]) == 0
    row = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert 0 < row["high_priority_requests"] < 60 and row["ttft_p95_high_priority"] > 0
    assert main(base + ["--high-priority-share", "0.5", "--no-recompute"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["claims_recomputed"] == 0
    assert main(base + ["--high-priority-share", "2"]) == 2
