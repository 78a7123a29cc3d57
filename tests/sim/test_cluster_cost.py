"""The cost account: hand-computed figures, price overrides, parse_prices, defaults vs docs/cost.md."""

import contextlib
import dataclasses
import io
import math
import pickle
import re
import subprocess
import sys

import numpy as np
import pytest

from kvmm.errors import BadInputError, DTypeError, KvmmError
from kvmm.sim import CostAccount, Prices, cost_account, parse_prices
from kvmm.sim.models import H200_USD_PER_GPU_HOUR, MODELS, ModelSpec
from kvmm.tiers.spec import LINK_PRESETS, PRESETS, TierSpec, preset
from tests.paths import ROOT

GiB = 2**30
DOC = ROOT / "docs" / "cost.md"

# 4 GiB at $0.25 per GiB-hour; 1 GiB with a fixed $0.50 per hour
A = TierSpec("a", 4 * GiB, 1e9, 1e9, 0.0, usd_per_gib_hour=0.25)
B = TierSpec("b", 1 * GiB, 1e9, 1e9, 0.0, usd_per_hour=0.5)


def small(**kw) -> CostAccount:
    """Two hours on 3 GPUs at $2/h, tier a twice (private to 2 instances), tier b once (shared)."""
    args = dict(duration_s=7200, gpus=3, tiers=[(A, 2), (B, 1)], input_tokens=3_000_000, output_tokens=1_000_000,
                protected_byte_seconds=3 * GiB, prices=Prices(gpu_usd_per_hour=2.0))
    return cost_account(**{**args, **kw})


def test_small_case_by_hand():
    acct = small()
    assert (acct.gpu_hours, acct.gpu_usd, acct.gpu_usd_per_hour) == (6.0, 12.0, 2.0)
    assert acct.tier_names == ("a", "b") and acct.tier_counts == (2, 1)
    assert acct.tier_gib_hours == (16.0, 2.0)  # 2 x 4 GiB x 2 h; 1 x 1 GiB x 2 h
    assert acct.tier_usd == (4.0, 1.0)  # 16 x 0.25; 1 x 2 h x 0.5
    assert acct.tier_usd_per_gib_hour == (0.25, 0.0) and acct.tier_usd_per_hour == (0.0, 0.5)
    assert acct.by_tier() == {"a": (16.0, 4.0), "b": (2.0, 1.0)}
    assert acct.total_usd == 17.0
    assert acct.split == "blended" and acct.input_share == 0.75
    assert acct.usd_per_million_input_tokens == 4.25 and acct.usd_per_million_output_tokens == 4.25
    assert acct.tokens_per_usd == 4e6 / 17 and acct.tokens_per_s_per_usd == 4e6 / 17 / 3600
    assert acct.protected_gib_seconds == 3.0
    assert acct.unpriced_tiers == () and acct.unused_prices == ()


def test_split_by_gpu_time_is_an_allocation_of_the_total():
    acct = small(prefill_gpu_seconds=10.0, decode_gpu_seconds=30.0)
    assert acct.split == "gpu-time" and acct.input_share == 0.25
    assert acct.usd_per_million_input_tokens == pytest.approx(17 * 0.25 / 3)
    assert acct.usd_per_million_output_tokens == 17 * 0.75
    allocated = (acct.input_tokens * acct.usd_per_million_input_tokens
                 + acct.output_tokens * acct.usd_per_million_output_tokens) / 1e6
    assert allocated == pytest.approx(acct.total_usd)
    # both phases idle: no time to split by, so the blended rule
    assert small(prefill_gpu_seconds=0.0, decode_gpu_seconds=0.0).split == "blended"


def test_gpu_price_resolution_order():
    plain = dict(duration_s=3600, gpus=1, tiers=[], input_tokens=1, output_tokens=1)
    assert cost_account(**plain).gpu_usd == H200_USD_PER_GPU_HOUR == 3.5
    assert cost_account(**plain, gpu_usd_per_hour=2.0).gpu_usd == 2.0  # the model's price
    assert cost_account(**plain, gpu_usd_per_hour=2.0, prices=Prices(gpu_usd_per_hour=1.5)).gpu_usd == 1.5
    assert cost_account(**plain, prices=Prices(gpu_usd_per_hour=0.0)).gpu_usd == 0.0
    assert MODELS["llama3-8b"].gpu_usd_per_hour == MODELS["qwen2.5-32b"].gpu_usd_per_hour == 3.5


def test_price_overrides_by_tier_name_and_reports():
    prices = Prices(gpu_usd_per_hour=0.0, tier_usd_per_gib_hour={"a": 1.0, "typo": 9.0}, tier_usd_per_hour={"a": 3.0})
    free = TierSpec("free", GiB, 1e9, 1e9, 0.0)
    acct = cost_account(duration_s=3600, gpus=1, tiers=[(A, 1), (free, 5)], input_tokens=0, output_tokens=0,
                        prices=prices)
    assert acct.tier_usd == (4.0 * 1.0 + 3.0, 0.0) and acct.total_usd == 7.0
    assert acct.unused_prices == ("typo",) and acct.unpriced_tiers == ("free",)
    assert math.isnan(acct.usd_per_million_input_tokens) and math.isnan(acct.usd_per_million_output_tokens)
    assert acct.tokens_per_usd == 0.0


def test_preset_prices_are_the_defaults():
    acct = cost_account(duration_s=1800, gpus=0, tiers=[(preset("dram"), 2), (preset("layer3.5", 10 * GiB), 1)],
                        input_tokens=1, output_tokens=0)
    assert acct.tier_usd[0] == pytest.approx(2 * PRESETS["dram"].capacity_bytes / GiB * 0.5 * (0.2646 - 0.2016) / 16)
    assert acct.tier_usd[1] == pytest.approx(10 * 0.5 * PRESETS["layer3.5"].usd_per_gib_hour)
    assert acct.unpriced_tiers == ()


def test_nothing_priced_gives_nan_rates():
    acct = cost_account(duration_s=0, gpus=4, tiers=[(A, 1)], input_tokens=10, output_tokens=10)
    assert acct.total_usd == 0.0 and math.isnan(acct.tokens_per_usd) and math.isnan(acct.tokens_per_s_per_usd)
    assert acct.usd_per_million_input_tokens == 0.0


@pytest.mark.parametrize("change, error, text", [
    (dict(duration_s=-1.0), BadInputError, "duration_s"),
    (dict(duration_s=math.inf), BadInputError, "duration_s"),
    (dict(gpus=1.5), DTypeError, "gpus"),
    (dict(gpus=-1), BadInputError, "gpus"),
    (dict(input_tokens=-5), BadInputError, "input_tokens"),
    (dict(protected_byte_seconds=math.nan), BadInputError, "protected_byte_seconds"),
    (dict(tiers=[A]), DTypeError, r"tiers\[0\] must be a \(TierSpec, count\) pair"),
    (dict(tiers=[("a", 1)]), DTypeError, r"tiers\[0\]"),
    (dict(tiers=A), DTypeError, "list of"),
    (dict(tiers=[(A, -1)]), BadInputError, r"tiers\[0\] count"),
    (dict(tiers=[(A, 1), (A, 2)]), BadInputError, "second tier named 'a'"),
    (dict(prices={"gpu": 1.0}), DTypeError, "Prices"),
    (dict(prefill_gpu_seconds=1.0), BadInputError, "both prefill_gpu_seconds and decode_gpu_seconds"),
    (dict(prefill_gpu_seconds=1.0, decode_gpu_seconds=-1.0), BadInputError, "decode_gpu_seconds"),
    (dict(gpu_usd_per_hour=-2.0), BadInputError, "gpu_usd_per_hour"),
])
def test_bad_arguments(change, error, text):
    prices = Prices(gpu_usd_per_hour=2.0, tier_usd_per_gib_hour={"a": 1.0})
    before = pickle.dumps(prices)
    with pytest.raises(error, match=text):
        small(**{"prices": prices, **change})
    assert pickle.dumps(prices) == before  # a failed call changes nothing it was given


def test_prices_validate_copy_hash_and_pickle():
    rates = {"dram": 0.004}
    prices = Prices(3, rates, {"layer3.5": 12})
    rates["dram"] = 99.0
    assert prices.tier_usd_per_gib_hour == {"dram": 0.004}  # copied
    assert type(prices.gpu_usd_per_hour) is float and prices.tier_usd_per_hour == {"layer3.5": 12.0}
    again = pickle.loads(pickle.dumps(prices))
    assert again == prices and hash(again) == hash(prices) and {prices: 1}[again] == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        prices.gpu_usd_per_hour = 1.0
    for bad in (dict(gpu_usd_per_hour=-1.0), dict(gpu_usd_per_hour="3"), dict(tier_usd_per_gib_hour={"d": math.nan}),
                dict(tier_usd_per_hour={"": 1.0}), dict(tier_usd_per_hour={3: 1.0}), dict(tier_usd_per_gib_hour=[1.0])):
        with pytest.raises(KvmmError):
            Prices(**bad)


def test_parse_prices_good_spellings():
    p = parse_prices("gpu=3.5/h,dram=0.004/GiBh,layer3.5=12/h")
    assert p == Prices(3.5, {"dram": 0.004}, {"layer3.5": 12.0})
    assert parse_prices("") == parse_prices("   ") == Prices()
    p = parse_prices(" GPU=2/H , dfs = 0.145/gibmo, layer3.5=0/GiBh, layer3.5=8.5/h ")
    # names are as written ("GPU" is not the GPU: names are case-sensitive, units are not)
    assert p.gpu_usd_per_hour is None and p.tier_usd_per_hour == {"GPU": 2.0, "layer3.5": 8.5}
    assert p.tier_usd_per_gib_hour == {"dfs": 0.145 / 730, "layer3.5": 0.0}
    assert parse_prices("gpu=1e-1/h").gpu_usd_per_hour == 0.1


@pytest.mark.parametrize("text, message", [
    ("gpu=3.5", "price 'gpu=3.5' has no unit"),
    ("dram0.004/GiBh", "price 'dram0.004/GiBh' has no '='"),
    ("dram=1=2/h", "has more than one '='"),
    ("=1/h", "price '=1/h' has no name before '='"),
    ("dram=0.004/GB", "price 'dram=0.004/GB' has unknown unit 'GB'"),
    ("dram=0.004/", "has unknown unit ''"),
    ("dram=-0.004/GiBh", "has amount '-0.004'; a price must be a finite number >= 0"),
    ("dram=nan/GiBh", "has amount 'nan'"),
    ("dram=1e999/GiBh", "has amount '1e999'"),
    ("dram=cheap/GiBh", "has amount 'cheap', not a number"),
    ("gpu=3/h,dram=1/GiBh,gpu=4/h", "price 'gpu=4/h' gives the GPU price a second time"),
    ("dram=1/GiBh,dram=2/GiBmo", "price 'dram=2/GiBmo' gives 'dram' a per-GiB price a second time"),
    ("x=1/h,x=2/h", "gives 'x' a fixed hourly price a second time"),
    ("gpu=3/GiBh", "price 'gpu=3/GiBh' prices a GPU per GiB-hour; a GPU is priced per hour"),
    ("gpu=3/h,,dram=1/GiBh", "have an empty part"),
    ("gpu=3/h,", "have an empty part"),
])
def test_parse_prices_errors_name_the_bad_part(text, message):
    with pytest.raises(BadInputError) as info:
        parse_prices(text)
    assert message in str(info.value) and "\n" not in str(info.value)
    if "part" not in message:
        assert "expected NAME=AMOUNT/UNIT" in str(info.value)


def test_parse_prices_refuses_non_text():
    with pytest.raises(DTypeError, match="must be text"):
        parse_prices({"gpu": 3.5})


def test_price_fields_on_specs_validate_and_keep_old_field_order():
    # the fields the simulator reads keep their places (results stay bit-identical)
    assert [f.name for f in dataclasses.fields(TierSpec)] == [
        "name", "capacity_bytes", "read_bandwidth", "write_bandwidth", "latency_s", "persistent", "shared", "source",
        "usd_per_gib_hour", "usd_per_hour", "price_source"]
    assert [f.name for f in dataclasses.fields(ModelSpec)][-2:] == ["layers", "gpu_usd_per_hour"]
    spec = TierSpec("t", 10, 1.0, 1.0, 0.0, usd_per_gib_hour=1, usd_per_hour=np.float32(2))
    assert type(spec.usd_per_gib_hour) is float and spec.usd_per_hour == 2.0
    assert spec.with_capacity(20).usd_per_gib_hour == 1.0 and pickle.loads(pickle.dumps(spec)) == spec
    for bad in (dict(usd_per_gib_hour=-0.1), dict(usd_per_gib_hour=math.inf), dict(usd_per_hour=math.nan),
                dict(usd_per_hour="5")):
        with pytest.raises(KvmmError):
            TierSpec("t", 10, 1.0, 1.0, 0.0, **bad)
    with pytest.raises(BadInputError, match="gpu_usd_per_hour"):
        MODELS["llama3-8b"].with_(gpu_usd_per_hour=-1.0)
    assert MODELS["llama3-8b"].with_(gpu_usd_per_hour=2).gpu_usd_per_hour == 2.0


def _doc_table(heading: str) -> dict[str, list[str]]:
    """Rows of the first table after ``heading`` in docs/cost.md: first cell (backticks stripped) -> cells."""
    text = DOC.read_text().split(heading, 1)[1]
    rows = {}
    for line in text.splitlines():
        if rows and not line.startswith("|"):
            break
        if line.startswith("|") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0].strip("`")] = cells
    return rows


def test_documented_defaults_match_the_specs():
    rows = _doc_table("## Default prices and their sources")
    for name, spec in PRESETS.items():
        assert float(rows[name][1]) == pytest.approx(spec.usd_per_gib_hour, rel=1e-5), name
        assert spec.usd_per_hour == 0.0 and spec.price_source, name
    assert rows["GPU (`H200_USD_PER_GPU_HOUR`)"][1] == f"{H200_USD_PER_GPU_HOUR:g} per GPU-hour"
    assert all(s.usd_per_hour == 0.0 and "assumed" in s.price_source for s in LINK_PRESETS.values())
    # no list price published: marked so in the spec and in the table
    for name in ("cxl", "layer3.5", "supernode"):
        assert "assumed" in PRESETS[name].price_source and "assumed" in rows[name][2]
    assert "Nebius" in rows["GPU (`H200_USD_PER_GPU_HOUR`)"][2] and "FSx for Lustre" in rows["dfs"][2]


def test_docs_example_runs_and_matches_its_comments():
    code = re.search(r"```python\n(.*?)```", DOC.read_text(), re.S).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(DOC), "exec"), {})
    expected = [m.group(1).strip() for m in re.finditer(r"print\(.*\)\s+# (.*)", code)]
    assert out.getvalue().splitlines() == expected


def test_import_kvmm_cluster_is_light_and_every_name_loads():
    # kvmm.cluster's fabric presets, routers, view and event stream, and the cost account and the
    # cluster config (in kvmm.sim since they moved there), are plain Python (the block index and
    # the simulator load numba; they are not imported here)
    code = ("import sys, kvmm.cluster as c, kvmm.sim as s\n"
            "names = [getattr(c, n) for n in c.__all__ if c._LAZY[n].rsplit('.', 1)[1] in "
            "('fabric', 'routers', 'view', 'event_stream')]\n"
            "names += [s.Prices, s.parse_prices, s.cost_account, s.CostAccount, s.ClusterConfig, s.PooledStore]\n"
            "print(len(names), sorted(m for m in ('numba', 'dask', 'hypothesis') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    count, loaded = out.strip().split(" ", 1)
    assert int(count) >= 20 and loaded == "[]"  # the module names above still select kvmm.cluster's names
