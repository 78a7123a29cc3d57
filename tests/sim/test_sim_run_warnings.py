"""A run never quietly contradicts what its config asked (issue 33, items 10 and 12): idle
instances, unused prices, a fabric with no shared tier and a router with nothing to choose are
warned about on stderr and in ``SimResult.warnings``; a cluster with shared tiers keeps no
private tier the user did not name; ``kvmm simulate``'s table has one value per cell."""

from __future__ import annotations

import re

import pytest

from kvmm.cli import main
from kvmm.errors import RunWarning
from kvmm.sim import ClusterConfig, GiB, Prices, SimConfig, TierLevel, simulate


class Everything:
    """A router that sends every request to instance 0."""

    def route(self, request, view) -> int:
        return 0


BASE = dict(workload="conversation", max_requests=120, tiers=())


def test_idle_instances_are_named():
    with pytest.warns(RunWarning, match=r"3 of 4 instances got no request \(1, 2, 3\)"):
        res = simulate(SimConfig(cluster=ClusterConfig(instances=4, router=Everything()), **BASE))
    assert res.requests_per_instance == (120, 0, 0, 0)
    assert len(res.warnings) == 1 and "Everything" in res.warnings[0]


def test_a_price_that_matches_no_tier_is_named():
    with pytest.warns(RunWarning, match="price for dram matches no tier of this run"):
        res = simulate(SimConfig(prices=Prices(tier_usd_per_gib_hour={"dram": 0.004}), **BASE))
    assert res.warnings == (res.warnings[0],) and "its tiers: cxl" in res.warnings[0]


def test_a_router_with_one_instance_has_nothing_to_choose():
    with pytest.warns(RunWarning, match="routes among 1 instance"):
        simulate(SimConfig(cluster=ClusterConfig(instances=1, router="least-loaded"), **BASE))


def test_a_run_as_asked_has_no_warning():
    res = simulate(SimConfig(cluster=ClusterConfig(instances=2, router="round-robin"), **BASE))
    assert res.warnings == () and res.requests_per_instance == (60, 60)


def test_the_cli_warns_of_a_fabric_without_a_shared_tier_in_one_line(capsys):
    assert main(["simulate", "--requests", "60", "--staging", "timely", "--no-progress", "--json",
                 "--fabric", "rdma200"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["kvmm simulate: warning: --fabric rdma200 is the link to shared tiers, and there is no "
                   "--shared-tier: it is not used"]


def test_shared_tiers_without_tier_keep_no_private_tier(capsys):
    import json

    assert main(["simulate", "--requests", "60", "--staging", "timely", "--no-progress", "--json", "--instances", "2",
                 "--shared-tier", "layer3.5:1TiB"]) == 0
    row = json.loads(capsys.readouterr().out.splitlines()[0])
    assert len(row["tier_block_hits"]) == 1  # the shared level only: no default private nvme in front of it
    assert main(["simulate", "--requests", "60", "--staging", "timely", "--no-progress", "--json", "--instances", "2",
                 "--shared-tier", "layer3.5:1TiB", "--tier", "dram:8GiB"]) == 0
    row = json.loads(capsys.readouterr().out.splitlines()[0])
    assert len(row["tier_block_hits"]) == 2


def test_the_table_has_one_value_per_cell_and_small_shares_keep_their_digits(capsys):
    assert main(["simulate", "--requests", "300", "--staging", "timely", "--no-progress"]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("| staging | requests"))
    row = next(line for line in out.splitlines() if line.startswith("| timely |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    names = [c.strip() for c in header.strip("|").split("|")]
    assert len(cells) == len(names) and not any("/" in c for c in cells)
    shares = {n: cells[names.index(n)] for n in ("prompt tokens hit on GPU %", "prompt tokens read from lower tiers %")}
    assert all(re.fullmatch(r"\d+\.\d\d", v) for v in shares.values())  # two decimals, never a bare 0
    reads = cells[names.index("blocks read from nvme")]
    res = simulate(SimConfig(workload="conversation", max_requests=300, policy="timely"))
    assert int(reads) == res.tier_read_blocks[0] > 0


def test_blocks_read_per_tier_add_up_to_the_claimed_hits():
    res = simulate(SimConfig(workload="conversation", max_requests=400, policy="timely",
                             tiers=(TierLevel("dram", capacity_bytes=64 * GiB), TierLevel("nvme"))))
    assert len(res.tier_read_blocks) == 2 and sum(res.tier_read_blocks) > 0
    # a tier holds at least what prefills read from it (they were offered to it first)
    assert all(read <= hits for read, hits in zip(res.tier_read_blocks, res.tier_block_hits))
