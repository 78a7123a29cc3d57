"""Fabric specs and the shared-tier presets: documented figures, the idle-link timing, validation."""

import dataclasses
import math
import pickle

import numpy as np
import pytest

from kvmm.cluster import FABRIC_PRESETS, FabricSpec, fabric_preset
from kvmm.errors import BadInputError, DTypeError, KvmmError
from kvmm.tiers.spec import LINK_PRESETS, PRESETS, SHARED_PRESETS, TierSpec
from tests.paths import ROOT

DOC = ROOT / "docs" / "cost.md"
GB, TB = 10**9, 10**12

#: name -> (link bytes/s, latency s, aggregate bytes/s), as docs/cost.md states them
DOCUMENTED = {
    "rdma200": (25 * GB, 5e-6, 1 * TB),
    "rdma400": (50 * GB, 5e-6, 3.2 * TB),
    "ethernet100": (12.5 * GB, 10e-6, 400 * GB),
    "nvlink": (450 * GB, 2e-6, 3.6 * TB),
    "supernode-ub": (1 * TB, 2e-6, 1024 * TB),
    "supernode-m890": (350 * GB, 1e-6, 44.8 * TB),
    "cross-dc": (12.5 * GB, 20e-3, 12.5 * GB),  # the PD link as a fabric (issue 33: --pd and --fabric share names)
}


def test_presets_hold_the_documented_figures():
    assert sorted(FABRIC_PRESETS) == sorted(DOCUMENTED)
    for name, (link, latency, aggregate) in DOCUMENTED.items():
        spec = FABRIC_PRESETS[name]
        assert spec.name == name and spec.source
        assert (spec.link_bandwidth, spec.latency_s) == (link, latency), name
        assert spec.aggregate_bandwidth == pytest.approx(aggregate, rel=1e-12), name
    # the per-instance links reuse the link presets' figures
    for fabric, link in (("rdma200", "rdma200"), ("rdma400", "rdma400"), ("nvlink", "nvlink"),
                         ("supernode-m890", "supernode"), ("cross-dc", "cross-dc")):
        assert FABRIC_PRESETS[fabric].link_bandwidth == LINK_PRESETS[link].read_bandwidth
        assert FABRIC_PRESETS[fabric].latency_s == LINK_PRESETS[link].latency_s
    assert FABRIC_PRESETS["rdma400"].full_rate_links == 64.0 and FABRIC_PRESETS["nvlink"].full_rate_links == 8.0
    for name in ("ethernet100", "supernode-ub"):
        assert "assumed" in FABRIC_PRESETS[name].source


def _doc_rows(heading: str) -> dict[str, list[str]]:
    text = DOC.read_text().split(heading, 1)[1]
    text = text[text.index("| preset |"):]
    rows = {}
    for line in text.splitlines():
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        if not cells[0].startswith("---") and cells[0] != "preset":
            rows[cells[0].strip("`")] = cells
    return rows


def _bytes(text: str) -> float:
    number, unit = text.split()
    return float(number) * {"GB/s": GB, "TB/s": TB}[unit]


def test_docs_fabric_table_matches_the_presets():
    rows = _doc_rows("A `FabricSpec(")
    assert sorted(rows) == sorted(FABRIC_PRESETS)
    for name, cells in rows.items():
        spec = FABRIC_PRESETS[name]
        assert _bytes(cells[1]) == spec.link_bandwidth
        assert float(cells[2].removesuffix(" us")) * 1e-6 == pytest.approx(spec.latency_s)
        assert _bytes(cells[3]) == pytest.approx(spec.aggregate_bandwidth)


def test_docs_shared_tier_table_matches_the_presets():
    rows = _doc_rows("## The shared-tier and fabric presets")
    assert sorted(rows) == sorted(SHARED_PRESETS)
    for name, cells in rows.items():
        spec = PRESETS[name]
        assert spec.shared and float(cells[1].removesuffix(" TB")) * TB == spec.capacity_bytes
        read, write = (float(x) * GB for x in cells[2].removesuffix(" GB/s").split(" / "))
        assert (read, write) == (spec.read_bandwidth, spec.write_bandwidth)
        assert float(cells[3].removesuffix(" us")) * 1e-6 == pytest.approx(spec.latency_s)


def test_shared_tier_presets():
    assert SHARED_PRESETS == ("layer3.5", "dfs", "supernode", "pooled-dram", "pooled-nvme")
    assert PRESETS["layer3.5"].read_bandwidth == 120 * GB and "ContextCube" in PRESETS["layer3.5"].source
    assert PRESETS["supernode"].capacity_bytes == 256 * TB and "950DT" in PRESETS["supernode"].source
    assert "ParaStor" in PRESETS["dfs"].source and "Mooncake" in PRESETS["dfs"].source
    # the pools: 16 nodes at 400 Gb/s (DRAM) or one NVMe drive each (14 / 10 GB/s)
    assert PRESETS["pooled-dram"].read_bandwidth == 16 * 50 * GB and PRESETS["pooled-dram"].capacity_bytes == 32 * TB
    assert (PRESETS["pooled-nvme"].read_bandwidth, PRESETS["pooled-nvme"].write_bandwidth) == (16 * 14 * GB, 16 * 10 * GB)
    assert PRESETS["pooled-nvme"].persistent and not PRESETS["pooled-dram"].persistent
    for name in ("pooled-dram", "pooled-nvme"):
        assert "MeshFusion" in PRESETS[name].source and "assumed" in PRESETS[name].source


def test_transfer_seconds_on_an_idle_link():
    fabric = FabricSpec("toy", link_bandwidth=1000.0, latency_s=0.5, aggregate_bandwidth=4000.0)
    assert fabric.transfer_seconds(0) == 0.5
    assert fabric.transfer_seconds(250) == 0.75
    assert fabric.transfer_seconds(np.int64(2000)) == 2.5
    assert FABRIC_PRESETS["rdma400"].transfer_seconds(50 * GB) == pytest.approx(1.0 + 5e-6)
    for bad in (-1, math.nan, math.inf):
        with pytest.raises(BadInputError, match="nbytes"):
            fabric.transfer_seconds(bad)
    for bad in (True, "10"):
        with pytest.raises(DTypeError, match="nbytes"):
            fabric.transfer_seconds(bad)


def test_as_link_is_a_link_shaped_tier_spec():
    link = FABRIC_PRESETS["rdma200"].as_link()
    assert isinstance(link, TierSpec) and link.capacity_bytes == 0
    assert (link.read_bandwidth, link.write_bandwidth, link.latency_s) == (25 * GB, 25 * GB, 5e-6)
    assert link.transfer_seconds(10**6) == FABRIC_PRESETS["rdma200"].transfer_seconds(10**6)


@pytest.mark.parametrize("change, text", [
    (dict(link_bandwidth=0.0), "link_bandwidth"),
    (dict(link_bandwidth=-1.0), "link_bandwidth"),
    (dict(link_bandwidth=math.nan), "link_bandwidth"),
    (dict(latency_s=-1e-6), "latency_s"),
    (dict(latency_s=math.inf), "latency_s"),
    (dict(aggregate_bandwidth=0.0), "aggregate_bandwidth"),
    (dict(aggregate_bandwidth=500.0), r"aggregate_bandwidth \(500 B/s\) must be >= link_bandwidth \(1000 B/s\)"),
    (dict(link_bandwidth="fast"), "link_bandwidth"),
    (dict(name=""), "non-empty"),
    (dict(name=3), "non-empty"),
])
def test_bad_fabric_specs(change, text):
    base = dict(name="f", link_bandwidth=1000.0, latency_s=0.0, aggregate_bandwidth=1000.0)
    with pytest.raises(KvmmError, match=text):
        FabricSpec(**{**base, **change})


def test_frozen_picklable_and_floats():
    fabric = FabricSpec("f", 10, 0, 20)
    assert type(fabric.link_bandwidth) is float and type(fabric.latency_s) is float
    assert pickle.loads(pickle.dumps(FABRIC_PRESETS["supernode-ub"])) == FABRIC_PRESETS["supernode-ub"]
    assert hash(fabric) == hash(FabricSpec("f", 10.0, 0.0, 20.0))
    with pytest.raises(dataclasses.FrozenInstanceError):
        fabric.link_bandwidth = 1.0


def test_fabric_preset_lookup():
    assert fabric_preset("rdma400") is FABRIC_PRESETS["rdma400"]
    custom = FabricSpec("mine", 1.0, 0.0, 1.0)
    assert fabric_preset(custom) is custom
    with pytest.raises(BadInputError, match=r"unknown fabric preset 'infiniband'; expected one of \['cross-dc', 'ethernet100'"):
        fabric_preset("infiniband")
    with pytest.raises(BadInputError, match="unknown fabric preset"):
        fabric_preset(["rdma400"])
