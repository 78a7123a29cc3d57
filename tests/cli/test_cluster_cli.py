"""``kvmm simulate`` with a cluster: --router, --shared-tier, --fabric, --fill, --exclusive,
--index-max-entries and --price, and their one-line errors."""

from __future__ import annotations

import json

import pytest

from kvmm.cli import main
from tests.paths import ROOT

BASE = ["simulate", "--requests", "300", "--no-progress", "--staging", "timely"]


def run_json(capsys, args):
    assert main(BASE + args + ["--json"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")][-1]


def test_cluster_flags_build_the_cluster_they_name(capsys):
    row = run_json(capsys, ["--instances", "4", "--router", "precise-prefix:load_weight=1", "--tier", "dram:64GiB",
                            "--shared-tier", "layer3.5:2TiB:lru:write-all", "--fabric", "rdma200", "--fill", "write-back",
                            "--index-max-entries", "5000", "--price", "gpu=2/h,dram=0.01/GiBh"])
    assert row["instances"] == 4 and sum(row["requests_per_instance"]) == 300
    assert len(row["tier_block_hits"]) == 2  # the private dram level, then the shared one
    assert 0 < row["index_entries"] <= 5000
    assert row["cost"]["gpu_usd_per_hour"] == 2.0
    assert row["cost"]["tier_names"] == ["cxl", "dram", "layer3.5"]
    assert row["cost"]["tier_usd_per_gib_hour"][1] == 0.01
    # write-back: nothing is written at prefill, so the levels hold only demoted blocks
    assert row["demoted_blocks"][0] >= 0 and row["tier_blocks_offered"][0] > 0


def test_the_cluster_tables_are_printed(capsys):
    assert main(BASE + ["--instances", "2", "--router", "least-loaded"]) == 0
    out = capsys.readouterr().out
    assert "load imbalance" in out and "USD / M input tok" in out and "| timely | 2 | least-loaded |" in out


def test_without_router_or_shared_tier_instances_are_dealt_round_robin(capsys):
    row = run_json(capsys, ["--instances", "2"])
    assert row["instances"] == 2 and row["index_entries"] == 0 and row["requests_per_instance"] == [150, 150]


@pytest.mark.parametrize("args, names", [
    (["--router", "nope"], ["--router", "unknown router 'nope'"]),
    (["--router", "round-robin:load"], ["--router", "bad option 'load'"]),
    (["--router", "precise-prefix:bogus=1"], ["--router", "bogus"]),
    (["--shared-tier", "nvme", "--fabric", "warp"], ["--fabric", "warp"]),
    (["--shared-tier", "bogus"], ["--tier 'bogus'", "unknown preset"]),
    (["--exclusive"], ["--exclusive", "write-back"]),
    (["--price", "gpu=3.5"], ["--price"]),
    (["--shared-tier", "nvme", "--pd", "1x1:rdma400"], ["--pd", "no lower tiers"]),
    (["--index-max-entries", "10"], ["--index-max-entries"]),
])
def test_bad_cluster_flags_give_one_line_errors(capsys, args, names):
    assert main(BASE + args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    for name in names:
        assert name in err, err


def test_a_router_with_pd_routes_to_the_prefill_instances(capsys):
    row = run_json(capsys, ["--pd", "2x1:rdma400", "--router", "approx-prefix"])
    assert row["policy"] == "pd" and sum(row["requests_per_instance"]) == 300
    assert len(row["requests_per_instance"]) == 2


def test_the_readme_cluster_example_leaves_no_instance_idle_and_warns_of_nothing(capsys, recwarn):
    """The README's `kvmm simulate --instances 16 --router precise-prefix ...` example, exactly as
    printed there (every staging policy): every instance gets requests, and no RunWarning (an idle
    instance, a price that matches no tier) is raised or printed."""
    import re
    import shlex

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```bash\n(kvmm simulate --instances 16 --router precise-prefix .*?)```", readme, re.S).group(1)
    args = shlex.split(block.replace("\\\n", " "))[1:]
    assert "--price" in args and "layer3.5:20TiB:lru:write-all" in args
    assert main(args + ["--no-progress", "--json"]) == 0
    captured = capsys.readouterr()
    rows = [json.loads(line) for line in captured.out.splitlines() if line.startswith("{")]
    assert len(rows) == 5  # one per staging policy
    for row in rows:
        assert row["instances"] == 16 and min(row["requests_per_instance"]) > 0, row["requests_per_instance"]
        assert row["warnings"] == []
    assert "warning" not in captured.err and not [w for w in recwarn if "instances got no request" in str(w.message)]
