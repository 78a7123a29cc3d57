"""TierSpec, presets and the timing model; SimulatedTier's placeholder semantics; key rules."""

import math

import numpy as np
import pytest

from kvmm.errors import BadInputError, CapacityExceededError, DTypeError, KvmmError
from kvmm.protocols import TierBackend
from kvmm.tiers import PRESETS, ArenaTier, SimulatedTier, TierSpec, preset
from kvmm.tiers._base import decode_key, encode_key, normalize_key


def test_presets_quote_the_design_figures():
    assert PRESETS["hbm"].capacity_bytes == 141 * 10**9 and PRESETS["hbm"].read_bandwidth == 4.8e12
    assert PRESETS["layer3.5"].read_bandwidth == 120e9 and PRESETS["layer3.5"].shared
    assert PRESETS["supernode"].capacity_bytes == 256 * 10**12
    assert PRESETS["dfs"].persistent and "segment" in PRESETS["dfs"].source
    for spec in PRESETS.values():
        assert spec.source and spec.read_bandwidth > 0 and spec.latency_s >= 0
    # Ordered fastest to slowest where the media say so.
    assert PRESETS["hbm"].read_bandwidth > PRESETS["dram"].read_bandwidth > PRESETS["nvme"].read_bandwidth


def test_transfer_seconds_model():
    spec = TierSpec("t", 100, read_bandwidth=1e9, write_bandwidth=5e8, latency_s=1e-6)
    assert spec.transfer_seconds(0) == 1e-6
    assert spec.transfer_seconds(10**9) == pytest.approx(1.0 + 1e-6)
    assert spec.transfer_seconds(10**9, write=True) == pytest.approx(2.0 + 1e-6)
    tier = SimulatedTier(spec=spec)
    assert tier.capacity_bytes == 100 and tier.name == "t"
    tier.put_size("a", 60)
    assert tier.stats["write_seconds"] == pytest.approx(1e-6 + 60 / 5e8)
    tier.get("a")
    assert tier.stats["read_seconds"] == pytest.approx(1e-6 + 60 / 1e9) and tier.stats["bytes_read"] == 60


@pytest.mark.parametrize("kwargs", [
    dict(capacity_bytes=-1), dict(read_bandwidth=-1.0), dict(write_bandwidth=0.0), dict(latency_s=-1e-6),
    dict(read_bandwidth=math.nan), dict(latency_s=math.inf), dict(capacity_bytes=1.5),
])
def test_bad_specs(kwargs):
    base = dict(name="x", capacity_bytes=10, read_bandwidth=1.0, write_bandwidth=1.0, latency_s=0.0)
    with pytest.raises(BadInputError):
        TierSpec(**{**base, **kwargs})


def test_preset_lookup_and_resize():
    assert preset("nvme", 1234).capacity_bytes == 1234
    assert preset("nvme").capacity_bytes == PRESETS["nvme"].capacity_bytes
    with pytest.raises(BadInputError, match="expected one of"):
        preset("tape")
    with pytest.raises(BadInputError):
        ArenaTier(-5)
    with pytest.raises(BadInputError):
        ArenaTier(10, spec=42)
    with pytest.raises(BadInputError):
        SimulatedTier(10).transfer_seconds(-1)
    assert ArenaTier(10, spec="cxl").spec.read_bandwidth == PRESETS["cxl"].read_bandwidth


def test_every_tier_speaks_the_protocol(tmp_path):
    from kvmm.policies import LRUPolicy
    from kvmm.tiers import ManagedTier, MmapTier
    with MmapTier(tmp_path, 10) as mm:
        for tier in (ArenaTier(10), SimulatedTier(10), mm, ManagedTier(ArenaTier(10), LRUPolicy())):
            assert isinstance(tier, TierBackend)


def test_simulated_get_returns_a_zero_read_only_placeholder():
    tier = SimulatedTier(10**15, spec="layer3.5")  # a petabyte pool costs nothing
    tier.put("blk", np.ones((1000, 1000), dtype=np.float16))
    tier.put_size("raw", 10**12)
    got = tier.get("blk")
    assert got.shape == (1000, 1000) and got.dtype == np.float16 and not got.any()
    assert got.strides == (0, 0)  # no memory behind it
    with pytest.raises(ValueError):
        got[0, 0] = 1
    assert tier.get("raw").shape == (10**12,)
    assert tier.used_bytes == 2 * 10**6 + 10**12
    with pytest.raises(CapacityExceededError):
        tier.put_size("more", 10**15)
    with pytest.raises(BadInputError):
        tier.put_size("neg", -1)
    tier.check()


@pytest.mark.parametrize("key", [0, -3, 2**70, "s", b"\x00b", (1, "a", (b"x", 2)), ()])
def test_key_encoding_round_trips(key):
    assert decode_key(encode_key(key)) == key


def test_numpy_ints_name_the_same_key_and_bad_keys_are_rejected():
    assert normalize_key(np.uint64(5)) == 5 and normalize_key((np.int32(1), "a")) == (1, "a")
    for bad in (True, 1.0, None, [1], {"a": 1}, (1, 2.5), np.float32(1)):
        with pytest.raises(DTypeError):
            normalize_key(bad)
    assert issubclass(DTypeError, KvmmError)


def test_managed_simulated_tier_without_arrays():
    from kvmm.policies import LRUPolicy
    from kvmm.tiers import ManagedTier

    tier = ManagedTier(SimulatedTier(10**12, spec="layer3.5"), LRUPolicy())
    for i in range(5):
        tier.put_size(i, 3 * 10**11)
    assert sorted(tier.keys()) == [2, 3, 4] and tier.evictions == 2
    assert tier.used_bytes == 9 * 10**11
    with pytest.raises(CapacityExceededError):
        tier.put_size("x", 10**12 + 1)
    with pytest.raises(BadInputError):
        tier.put_size("x", -1)
    with pytest.raises(BadInputError, match="real bytes"):
        ManagedTier(ArenaTier(10), LRUPolicy()).put_size("x", 1)
    tier.check()
