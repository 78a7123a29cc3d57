"""SimConfig <-> JSON (kvmm.sim.config_json): an exact round trip over generated configs
(tiers, cluster with shared tiers and a fabric, prices, PD, models, workloads), one-line errors,
and `kvmm simulate --config FILE` replaying a file to the result of simulating the config."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvmm.cli import main
from kvmm.cluster import EventStream
from kvmm.cluster.fabric import FABRIC_PRESETS, FabricSpec
from kvmm.errors import BadInputError
from kvmm.sim.cluster_config import ClusterConfig, PooledStore
from kvmm.sim.config import ADMISSION_NAMES, GiB, PDConfig, SimConfig, TierLevel
from kvmm.sim.config_json import config_from_json, config_to_json, load_config, save_config
from kvmm.sim.cost import Prices
from kvmm.sim.models import MODELS
from kvmm.sim.workload import Workload
from kvmm.tiers.spec import LINK_PRESETS, PRESETS, TierSpec

finite = st.floats(min_value=1e-3, max_value=1e12, allow_nan=False, allow_infinity=False)
sizes = st.integers(min_value=0, max_value=1 << 50)
hand_spec = st.builds(TierSpec, name=st.text("abcxyz.-", min_size=1, max_size=8), capacity_bytes=sizes,
                      read_bandwidth=finite, write_bandwidth=finite, latency_s=finite, persistent=st.booleans(),
                      shared=st.booleans(), source=st.text(max_size=20), usd_per_gib_hour=finite,
                      usd_per_hour=finite, price_source=st.text(max_size=10))
spec = st.one_of(st.builds(lambda n, c: PRESETS[n].with_capacity(c), st.sampled_from(sorted(PRESETS)), sizes), hand_spec)


@st.composite
def levels(draw):
    fill = draw(st.sampled_from(["write-through", "write-back"]))
    return TierLevel(draw(spec), eviction=draw(st.sampled_from(["lru", "fifo", "lfu", "arc"])),
                     admission=draw(st.sampled_from(ADMISSION_NAMES)), fill=fill,
                     inclusive=True if fill == "write-through" else draw(st.booleans()))


prices = st.none() | st.builds(Prices, gpu_usd_per_hour=st.none() | finite,
                               tier_usd_per_gib_hour=st.dictionaries(st.sampled_from(sorted(PRESETS)), finite, max_size=3),
                               tier_usd_per_hour=st.dictionaries(st.sampled_from(sorted(PRESETS)), finite, max_size=3))
fabric = st.none() | st.sampled_from(sorted(FABRIC_PRESETS)) | st.builds(
    lambda link, extra: FabricSpec("custom", link, 1e-6, link * extra), finite, st.floats(1.0, 64.0))
model = st.sampled_from(sorted(MODELS)) | st.builds(lambda n, r: MODELS[n].with_(prefill_tokens_per_s=r),
                                                     st.sampled_from(sorted(MODELS)), finite)
workload = st.sampled_from(["conversation", "synthetic"]) | st.builds(
    Workload, num_requests=st.integers(1, 50), prefix_ratio=st.floats(0, 1), seed=st.integers(0, 9))


@st.composite
def configs(draw):
    kw = dict(workload=draw(workload), model=draw(model), tiers=tuple(draw(st.lists(levels(), max_size=3))),
              fast_tier=draw(spec), prices=draw(prices), max_requests=draw(st.none() | st.integers(1, 10**6)),
              gpu_kv_bytes=draw(st.integers(1, 1 << 40)), gpu_prefix_cache=draw(st.booleans()),
              policy=draw(st.sampled_from(["on-demand", "immediate", "immediate-edf", "timely", "write-through-lru"])),
              label=draw(st.text(max_size=12)), high_priority_share=draw(st.floats(0, 1)))
    kind = draw(st.sampled_from(["single", "cluster", "pd", "cluster+pd"]))
    if kind in ("pd", "cluster+pd"):
        link = draw(st.sampled_from(sorted(LINK_PRESETS)) | st.builds(
            lambda bw: TierSpec("link", 0, bw, bw, 1e-6), finite))
        kw["pd"] = PDConfig(draw(st.integers(1, 4)), draw(st.integers(1, 4)), link, draw(st.booleans()))
    if kind in ("cluster", "cluster+pd"):
        n = kw["pd"].prefill_instances if "pd" in kw else draw(st.integers(1, 16))
        shared = () if "pd" in kw else tuple(draw(st.lists(levels(), max_size=2)))
        router, params = draw(st.sampled_from([("round-robin", {}), ("precise-prefix", {"load_weight": 4.0}),
                                                ("least-loaded", {})]))
        events = st.none() | st.builds(EventStream, delay_s=st.floats(0, 5), batch_interval_s=st.floats(0, 1),
                                       drop_rate=st.floats(0, 0.9), seed=st.integers(0, 9),
                                       speculative_ttl_s=st.none() | st.floats(0.1, 5))
        store = st.none() if not shared else st.none() | st.builds(
            PooledStore, segments=st.none() | st.integers(1, n), replicas=st.integers(1, 3),
            watermark=st.floats(0.5, 1.0), evict_fraction=st.floats(0, 0.4))
        kw["cluster"] = ClusterConfig(instances=n, router=router, router_params=params, shared_tiers=shared,
                                      fabric=draw(fabric), index_max_entries=draw(st.none() | st.integers(1, 1000)),
                                      index_max_holders=draw(st.none() | st.integers(1, 16)), events=draw(events),
                                      store=draw(store))
    elif kind == "single":
        kw["instances"] = draw(st.integers(1, 8))
    return SimConfig(**kw)


@settings(max_examples=150, deadline=None)
@given(configs())
def test_round_trip_is_exact_through_json_text(cfg):
    text = json.dumps(config_to_json(cfg))
    back = config_from_json(json.loads(text))
    assert back == cfg
    assert json.dumps(config_to_json(back)) == text


def test_presets_are_written_by_name_and_hand_specs_field_by_field():
    cfg = SimConfig(tiers=[TierLevel("dram", capacity_bytes=64 * GiB)],
                    cluster=ClusterConfig(instances=2, shared_tiers=[TierLevel("layer3.5", capacity_bytes=GiB)]),
                    fast_tier=TierSpec("mine", 10, 1.0, 2.0, 0.5))
    data = config_to_json(cfg)
    assert data["tiers"][0]["spec"] == {"preset": "dram", "capacity_bytes": 64 * GiB}
    assert data["cluster"]["fabric"] == "rdma400" and data["model"] == "llama-3.1-8b"
    assert data["fast_tier"]["name"] == "mine" and data["fast_tier"]["write_bandwidth"] == 2.0


def test_an_inline_trace_round_trips_array_for_array():
    from kvmm.sim.simulator import resolve_trace

    trace = resolve_trace("conversation", 30)
    back = config_from_json(json.loads(json.dumps(config_to_json(SimConfig(workload=trace))))).workload
    for name in ("timestamp_ms", "input_length", "output_length", "block_offsets", "block_ids"):
        assert np.array_equal(getattr(back, name), getattr(trace, name)) and getattr(back, name).dtype == np.int64
    assert (back.name, back.block_tokens, back.source_format) == (trace.name, trace.block_tokens, trace.source_format)


def test_a_hand_written_subset_keeps_the_other_defaults():
    cfg = config_from_json({"load": 0.9, "tiers": [{"spec": {"preset": "dram", "capacity_bytes": GiB}}]})
    assert cfg == SimConfig(load=0.9, tiers=[TierLevel("dram", capacity_bytes=GiB)])


@pytest.mark.parametrize("data, names", [
    ({"lod": 0.9}, "'lod'"),
    ({"tiers": [{"spec": {"preset": "dram"}, "evicton": "lru"}]}, "tiers[0]: unknown key 'evicton'"),
    ({"cluster": {"instances": 2, "fabric": "token-ring"}}, "cluster.fabric: unknown preset 'token-ring'"),
    ({"workload": {"trace": "a", "path": "b"}}, "exactly one"),
    ({"format": "something else"}, "format"),
])
def test_bad_json_names_the_bad_part(data, names):
    with pytest.raises(BadInputError, match=None) as info:
        config_from_json(data)
    assert names in str(info.value) and "\n" not in str(info.value)


def test_an_object_policy_has_no_json_form_and_the_error_names_the_field():
    class Mine:
        def admit(self, request):
            return request

    with pytest.raises(BadInputError, match=r"tiers\[0\]\.admission is a Mine object"):
        config_to_json(SimConfig(tiers=[TierLevel("nvme", admission=Mine())]))


def test_simulate_config_replays_the_file_to_the_configs_result(tmp_path, capsys):
    from kvmm.sim.simulator import simulate

    cfg = SimConfig(workload="conversation", max_requests=40, load=0.8, policy="timely",
                    tiers=[TierLevel("dram", capacity_bytes=8 * GiB)],
                    cluster=ClusterConfig(instances=2, shared_tiers=[TierLevel("layer3.5", capacity_bytes=64 * GiB)]),
                    prices=Prices(gpu_usd_per_hour=2.0))
    path = save_config(cfg, tmp_path / "config.json")
    assert load_config(path) == cfg
    assert main(["simulate", "--config", str(path), "--json", "--no-progress"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert lines == [json.dumps(simulate(cfg).as_dict())]


def test_simulate_config_refuses_other_run_flags_and_bad_files(tmp_path, capsys):
    path = save_config(SimConfig(max_requests=5), tmp_path / "c.json")
    assert main(["simulate", "--config", str(path), "--tier", "dram", "--load", "0.5"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--tier" in err and "--load" in err and len(err.splitlines()) == 1
    (tmp_path / "bad.json").write_text("{not json", encoding="utf-8")
    for bad in (tmp_path / "bad.json", tmp_path / "missing.json"):
        assert main(["simulate", "--config", str(bad)]) == 2
        err = capsys.readouterr().err.strip()
        assert str(bad) in err and len(err.splitlines()) == 1
