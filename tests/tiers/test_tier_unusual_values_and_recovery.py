"""The tiers on unusual inputs: every dtype kind, 0-d and zero-byte values,
non-contiguous arrays, odd keys, and MmapTier recovery from a damaged byte anywhere in a record
(header, key or value) or a cut anywhere in it.  (Capacity exactly full, a bigger overwrite that
does not fit and copies on put/get are in kvmm.testing.TierBackendContract.)"""

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from kvmm.errors import UnknownKeyError
from kvmm.testing.tiers import run_forked
from kvmm.tiers import ArenaTier, MmapTier, SimulatedTier

KINDS = {
    "arena": lambda capacity, path: ArenaTier(capacity),
    "mmap": lambda capacity, path: MmapTier(path, capacity, segment_bytes=4096),
    "simulated": lambda capacity, path: SimulatedTier(capacity),
}

VALUES = [
    np.array(3.5),                                              # 0-d
    np.float32(2.5),                                            # numpy scalar
    np.zeros(0),                                                # zero bytes
    np.zeros((2, 0, 3), np.complex128),                         # zero bytes, 3-d
    np.array([True, False, True]),                              # bool
    np.arange(6, dtype=np.int8).reshape(2, 3),                  # int8
    np.arange(12, dtype=np.float16).reshape(3, 4)[:, ::2],      # non-contiguous float16
    np.array([1 + 2j, 3 - 4j], np.complex64),                   # complex64
    np.arange(5, dtype=">u4"),                                  # big-endian
    np.asfortranarray(np.arange(6.0).reshape(2, 3)),            # Fortran order
    np.arange(24, dtype=np.float32).reshape(2, 3, 4).transpose(2, 0, 1),
    np.array([np.nan, -np.inf, -0.0]),
    np.array([2**64 - 1], dtype=np.uint64),
    [1, 2, 3],                                                  # a list
]

KEYS = [0, -1, 2**64, -(2**70), "", "ünï\n'\"\\", b"", b"\x00\xff", (), (1,), (1, "a", b"b", (2, ("x",))),
        np.uint64(2**64 - 1)]


@pytest.fixture(params=sorted(KINDS))
def tier(request, tmp_path):
    made = KINDS[request.param](1 << 20, tmp_path / "t")
    made.kind = request.param
    yield made
    if isinstance(made, MmapTier):
        made.close()


def _same(got, want, holds_bytes):
    want = np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    if holds_bytes:
        assert got.flags.c_contiguous
        assert got.tobytes() == np.ascontiguousarray(want).tobytes()


def test_values_of_every_kind_round_trip(tier):
    holds_bytes = tier.kind != "simulated"
    for i, v in enumerate(VALUES):
        tier.put(("v", i), v)
        assert tier.nbytes_of(("v", i)) == np.asarray(v).nbytes
        _same(tier.get(("v", i)), v, holds_bytes)
    assert tier.used_bytes == sum(np.asarray(v).nbytes for v in VALUES)
    tier.check()
    if isinstance(tier, MmapTier):  # and after a restart
        path = tier.path
        tier.close()
        with MmapTier(path, 1 << 20) as again:
            for i, v in enumerate(VALUES):
                _same(again.get(("v", i)), v, True)
            again.check()


def test_every_key_kind(tier):
    for i, key in enumerate(KEYS):
        tier.put(key, np.array([i], np.uint8))
    assert tier.contains(np.int64(5)) is False and tier.contains(2**64 - 1)
    assert len(tier.keys()) == len(KEYS)
    for i, key in enumerate(KEYS):
        assert tier.contains(key)
        if tier.kind != "simulated":
            assert tier.get(key)[0] == i
    tier.check()


def test_numpy_string_keys_are_plain_keys_and_survive_a_restart(tier):
    tier.put(np.str_("a"), np.zeros(2))
    tier.put((np.bytes_(b"q"), np.int8(1)), np.zeros(1))
    assert tier.contains("a") and tier.contains((b"q", 1))
    assert sorted(map(repr, tier.keys())) == ["'a'", "(b'q', 1)"]
    assert all(type(k) in (str, tuple) for k in tier.keys())
    if isinstance(tier, MmapTier):
        path = tier.path
        tier.close()
        with MmapTier(path, 1 << 20) as again:
            assert sorted(map(repr, again.keys())) == ["'a'", "(b'q', 1)"]
            assert again.recovery["corrupt"] == 0


# --------------------------------------------------------------------------- MmapTier damage
def _write_old_then_new(folder):
    """'a' is written twice, the second record last in its segment; returns (file, record span)."""
    with MmapTier(folder, 1 << 20) as tier:
        _put_old_then_new(tier)
        loc = tier._index["a"]
        path = tier._segment_path(loc.segment)
    return path, loc.offset, loc.offset + loc.record_bytes


def test_damaged_byte_anywhere_in_a_record_never_brings_back_the_older_value(tmp_path):
    """Header, key or value: after a restart the key is gone or (never) its older value."""
    base = tmp_path / "base"
    path, start, end = _write_old_then_new(base)
    for offset in range(start, end):
        folder = tmp_path / f"flip{offset}"
        shutil.copytree(base, folder)
        target = folder / Path(path).name
        data = bytearray(target.read_bytes())
        data[offset] ^= 0x01
        target.write_bytes(bytes(data))
        with MmapTier(folder, 1 << 20) as tier:
            with pytest.raises(UnknownKeyError):
                tier.get("a")
            np.testing.assert_array_equal(tier.get("b"), np.arange(10, 20, dtype=np.uint8))
            tier.check()
        with MmapTier(folder, 1 << 20) as tier:  # and it stays dropped after another restart
            assert sorted(tier.keys()) == ["b"]


def test_damaged_header_in_the_middle_drops_its_key_and_keeps_the_rest(tmp_path):
    with MmapTier(tmp_path, 1 << 20, segment_bytes=300) as tier:
        for i in range(6):
            tier.put(i, np.full(40, i, np.uint8))
        tier.put(2, np.full(40, 99, np.uint8))  # supersedes an older value of key 2
        for i in range(6, 9):
            tier.put(i, np.full(40, i, np.uint8))
        loc = tier._index[2]
        path = tier._segment_path(loc.segment)
    for field_offset in (0, 9, 12, 20, 28):  # magic, key_len, payload_len, body_crc, key
        data = bytearray(path.read_bytes())
        data[loc.offset + field_offset] ^= 0x10
        path.write_bytes(bytes(data))
        with MmapTier(tmp_path, 1 << 20, segment_bytes=300) as tier:
            assert 2 not in tier.keys()
            assert sorted(tier.keys()) == [0, 1, 3, 4, 5, 6, 7, 8]
            for i in (0, 1, 3, 4, 5, 6, 7, 8):
                np.testing.assert_array_equal(tier.get(i), np.full(40, i, np.uint8))
            tier.put(2, np.full(40, 2, np.uint8))  # restore for the next round
            tier.check()
            loc = tier._index[2]
            path = tier._segment_path(loc.segment)


def test_damaged_tombstone_header_keeps_the_key_deleted(tmp_path):
    with MmapTier(tmp_path, 1 << 20) as tier:
        tier.put("a", np.arange(10, dtype=np.uint8))
        tier.put("b", np.arange(10, dtype=np.uint8))
        tier.delete("a")
        segment, offset, _ = tier._tombstones["a"]
        path = tier._segment_path(segment)
    data = bytearray(path.read_bytes())
    data[offset + 2] ^= 0x01  # the tombstone's magic
    path.write_bytes(bytes(data))
    with MmapTier(tmp_path, 1 << 20) as tier:
        assert sorted(tier.keys()) == ["b"]
        tier.check()


def _write_old_then_new_and_crash(folder):
    """Like _write_old_then_new, in a child that dies without closing the tier (a crash)."""
    assert run_forked(_crash_after_writing, folder) == 0
    probe = Path(f"{folder}-probe")  # opening seals the tail: find the record in a copy
    shutil.copytree(folder, probe)
    with MmapTier(probe, 1 << 20) as tier:
        loc = tier._index["a"]
        name = tier._segment_path(loc.segment).name
    shutil.rmtree(probe)
    return Path(folder) / name, loc.offset, loc.offset + loc.record_bytes


def _put_old_then_new(tier):
    tier.put("a", np.arange(10, dtype=np.uint8))
    tier.put("b", np.arange(10, 20, dtype=np.uint8))
    tier.put("a", np.arange(100, 120, dtype=np.uint8))


def _crash_after_writing(folder):
    tier = MmapTier(folder, 1 << 20)  # kept referenced: a collected tier would close (seal its tail)
    _put_old_then_new(tier)
    os._exit(0)  # no close: the segment is still the log's tail, as after a crash


def test_cut_anywhere_in_the_last_record_keeps_the_older_value(tmp_path):
    """A truncated tail after a crash is a torn write: the put never happened.  (After a clean
    close the tail is sealed with its length, and a cut drops the key instead:
    tests/tiers/test_tier_mmap_damage.py.)"""
    base = tmp_path / "base"
    path, start, end = _write_old_then_new_and_crash(base)
    for cut in range(start + 1, end):
        folder = tmp_path / f"cut{cut}"
        shutil.copytree(base, folder)
        target = folder / Path(path).name
        target.write_bytes(target.read_bytes()[:cut])
        with MmapTier(folder, 1 << 20) as tier:
            np.testing.assert_array_equal(tier.get("a"), np.arange(10, dtype=np.uint8))
            assert tier.recovery["torn"] == 1 and tier.recovery["corrupt"] == 0
            tier.check()


def test_reopen_after_many_puts_deletes_and_compactions(tmp_path):
    rng = np.random.default_rng(7)
    model = {}
    tier = MmapTier(tmp_path, 1 << 16, segment_bytes=512, gc_bytes=256)
    for step in range(1500):
        op, key = rng.random(), int(rng.integers(0, 40))
        if op < 0.6:
            value = np.full(int(rng.integers(0, 120)), step % 251, np.uint8)
            tier.put(key, value)
            model[key] = value
        elif op < 0.85 and key in model:
            tier.delete(key)
            del model[key]
        elif op < 0.9:
            tier.compact(full=bool(rng.integers(0, 2)))
        elif op < 0.93:
            tier.close()
            tier = MmapTier(tmp_path, 1 << 16, segment_bytes=512, gc_bytes=256)
    tier.check()
    tier.close()
    with MmapTier(tmp_path, 1 << 16) as again:
        assert sorted(again.keys()) == sorted(model)
        for key, value in model.items():
            np.testing.assert_array_equal(again.get(key), value)
        assert again.recovery["torn"] == again.recovery["corrupt"] == 0
        again.check()
