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
