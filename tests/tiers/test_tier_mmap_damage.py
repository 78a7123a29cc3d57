"""MmapTier after hand damage to its folder: never an older value, never a deleted key.

Each case of issue 12 builds the same folder: segment 1 holds old values of "a" and "d";
segment 2 (the middle) a newer "a", the deletion of "d" and a new "b"; segment 3 and the tail
unrelated keys.  Damage to segment 2 must leave "a" newest-or-missing and "d" missing, keep
every key the damage did not touch, say what happened in ``recovery``, and stay that way after
another restart.  Damage whose affected keys cannot be told raises CorruptTierError.
"""

import os
import random
import shutil

import numpy as np
import pytest

from kvmm.errors import CorruptEntryError, CorruptTierError, KvmmError
from kvmm.testing.tiers import run_forked
from kvmm.tiers import MmapTier
from kvmm.tiers import _mmap_format as fmt

BIG = 3000  # bytes per value: the middle segment spans more than 4 KiB


def val(tag, n=BIG):
    return np.full(n, tag, dtype=np.uint8)


#: the newest truth: a value, or None for a deleted key
TRUTH = {"a": val(2), "d": None, "b": val(2), "k": val(1), "c": val(3), "e": val(4)}
UNTOUCHED = ["k", "c", "e"]  # their newest records are outside segment 2


def build(folder, keep_prefix_of_middle=False):
    """Write the folder described in the module docstring; returns (middle segment path,
    offset of d's tombstone, bytes of the middle segment right after the newer 'a')."""
    with MmapTier(folder, 1 << 20, gc_bytes=1 << 30) as tier:
        tier.put("a", val(1))
        tier.put("d", val(1))
        tier.put("k", val(1))
        tier._open_new_segment()
        tier.put("a", val(2))
        middle = tier._segment_path(tier._active)
        prefix = middle.read_bytes()  # an "older copy" of the middle segment
        tier.delete("d")
        tombstone = tier._tombstones["d"][1]
        tier.put("b", val(2))
        tier._open_new_segment()
        tier.put("c", val(3))
        tier._open_new_segment()
        tier.put("e", val(4))
    return middle, tombstone, prefix


def assert_never_stale(folder, *, lost_ok=("a", "b", "d")):
    """Open ``folder`` twice: no key ever reads older than TRUTH, deleted keys stay deleted,
    keys outside ``lost_ok`` are all there; returns the first open's recovery report."""
    reports = []
    for _ in range(2):
        with MmapTier(folder, 1 << 20) as tier:
            for key, truth in TRUTH.items():
                if truth is None or key in lost_ok and not tier.contains(key):
                    assert not tier.contains(key), key
                    continue
                np.testing.assert_array_equal(tier.get(key), truth)
            tier.check()
            reports.append(tier.recovery)
    assert reports[1]["damaged_segments"] == {} and reports[1]["dropped_keys"] == []  # reported once
    return reports[0]


def test_undamaged_folder_reads_back_exactly(tmp_path):
    build(tmp_path)
    report = assert_never_stale(tmp_path, lost_ok=())
    assert report["damaged_segments"] == {} and report["dropped_keys"] == [] and report["torn"] == 0


@pytest.mark.parametrize("cut", [0.25, 0.5, 0.9])
def test_truncated_middle_segment(tmp_path, cut):
    middle, tombstone, _ = build(tmp_path)
    size = middle.stat().st_size
    cut_at = int(size * cut)
    os.truncate(middle, cut_at)
    report = assert_never_stale(tmp_path)
    assert "sealed at" in report["damaged_segments"][middle.name]
    tombstone_end = tombstone + fmt.RECORD_HEADER_BYTES + len(b"'d'")
    ends = {"a": tombstone, "d": tombstone_end, "b": size}  # where each key's record ends
    assert sorted(report["dropped_keys"]) == sorted(k for k, end in ends.items() if end > cut_at)


def test_deleted_middle_segment(tmp_path):
    middle, _, _ = build(tmp_path)
    middle.unlink()
    report = assert_never_stale(tmp_path)
    assert report["damaged_segments"] == {middle.name: "missing or not a regular file"}
    assert sorted(report["dropped_keys"]) == ["a", "b", "d"]


def test_garbage_over_the_middle_segment(tmp_path):
    middle, _, _ = build(tmp_path)
    middle.write_bytes(np.random.default_rng(1).integers(0, 256, middle.stat().st_size, np.uint8).tobytes())
    report = assert_never_stale(tmp_path)
    assert sorted(report["dropped_keys"]) == ["a", "b", "d"]


def test_zeroed_4k_over_a_tombstone(tmp_path):
    middle, tombstone, _ = build(tmp_path)
    data = bytearray(middle.read_bytes())
    start = tombstone - 2000
    data[start:start + 4096] = bytes(4096)  # the end of "a", the tombstone, the start of "b"
    middle.write_bytes(bytes(data))
    report = assert_never_stale(tmp_path)
    assert "d" in report["dropped_keys"] and "b" in report["dropped_keys"]


def test_older_copy_of_the_middle_segment_restored(tmp_path):
    middle, _, prefix = build(tmp_path)
    middle.write_bytes(prefix)  # the copy taken before "d" was deleted and "b" written
    report = assert_never_stale(tmp_path)
    assert sorted(report["dropped_keys"]) == ["b", "d"]  # "a" is in the copy: kept
    with MmapTier(tmp_path, 1 << 20) as tier:
        np.testing.assert_array_equal(tier.get("a"), val(2))


def test_segment_of_another_folder_in_its_place(tmp_path):
    middle, _, _ = build(tmp_path / "one")
    other, _, _ = build(tmp_path / "two")  # same names and layout, another folder id
    shutil.copyfile(other, middle)
    report = assert_never_stale(tmp_path / "one")
    assert "of folder" in report["damaged_segments"][middle.name]


def test_damage_with_its_index_missing_refuses_to_open_and_changes_nothing(tmp_path):
    middle, _, _ = build(tmp_path)
    os.truncate(middle, 100)
    (tmp_path / fmt.index_name(int(middle.name[4:16]))).unlink()
    (tmp_path / "MANIFEST.tmp").write_bytes(b"left by a crash")  # removed only by an open that succeeds
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(CorruptTierError, match="index .* is missing or damaged"):
        MmapTier(tmp_path, 1 << 20)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_damaged_manifest_refuses_to_open(tmp_path):
    build(tmp_path)
    manifest = tmp_path / "MANIFEST"
    manifest.write_bytes(manifest.read_bytes().replace(b'"active"', b'"actxve"'))
    with pytest.raises(CorruptTierError, match="MANIFEST is damaged"):
        MmapTier(tmp_path, 1 << 20)


def test_segments_without_a_manifest_refuse_to_open(tmp_path):
    build(tmp_path)
    (tmp_path / "MANIFEST").unlink()
    with pytest.raises(CorruptTierError, match="no MANIFEST"):
        MmapTier(tmp_path, 1 << 20)


def test_an_older_manifest_refuses_to_open(tmp_path):
    folder = tmp_path / "f"
    with MmapTier(folder, 1 << 20) as tier:
        tier.put("a", val(1))
    old_manifest = (folder / "MANIFEST").read_bytes()
    with MmapTier(folder, 1 << 20) as tier:
        tier.put("a", val(2))
    (folder / "MANIFEST").write_bytes(old_manifest)
    with pytest.raises(CorruptTierError, match="newer than MANIFEST"):
        MmapTier(folder, 1 << 20)


def _crash_with_tail(folder, damage_tail):
    tier = MmapTier(folder, 1 << 20, gc_bytes=1 << 30)
    tier.put("a", val(1))
    tier._open_new_segment()
    tier.put("a", val(2, 1000))
    tier.put("x", val(5, 4000))
    tier.put("z", val(6, 1000))
    if damage_tail:
        damage_tail(tier)
    os._exit(0)  # no close: the segment stays the log's tail


def _run_child(folder, damage_tail=None):
    assert run_forked(_crash_with_tail, folder, damage_tail) == 0


def _zero_middle_of_tail(tier):
    path = tier._segment_path(tier._active)
    loc = tier._index["x"]
    data = bytearray(path.read_bytes())
    data[loc.offset - 200:loc.offset + 3896] = bytes(4096)  # names no key; records follow
    path.write_bytes(bytes(data))


def test_unexplained_damage_in_the_tail_refuses_to_open(tmp_path):
    _run_child(tmp_path, _zero_middle_of_tail)
    with pytest.raises(CorruptTierError, match="no single record with a known key"):
        MmapTier(tmp_path, 1 << 20)


def test_deleted_tail_refuses_to_open(tmp_path):
    _run_child(tmp_path)
    sorted(tmp_path.glob("*.kvlog"))[-1].unlink()
    with pytest.raises(CorruptTierError, match="active segment .* is missing"):
        MmapTier(tmp_path, 1 << 20)


def test_tail_cut_after_a_clean_close_drops_the_key_instead_of_the_older_value(tmp_path):
    with MmapTier(tmp_path, 1 << 20) as tier:
        tier.put("a", val(1))
        tier._open_new_segment()
        tier.put("a", val(2))
        tail = tier._segment_path(tier._active)
    os.truncate(tail, tail.stat().st_size - 10)
    with MmapTier(tmp_path, 1 << 20) as tier:
        assert not tier.contains("a") and tier.recovery["dropped_keys"] == ["a"]


def _truncate_under_open_tier(folder):
    """Runs in a child: SIGBUS would kill it (exit code -7); a CorruptEntryError is expected."""
    tier = MmapTier(folder, 1 << 20, gc_bytes=1 << 30)
    tier.put("t", val(8))  # in the active segment
    os.truncate(tier._segment_path(tier._index["k"].segment), 100)
    os.truncate(tier._segment_path(tier._active), 50)
    for key in ("k", "t"):
        try:
            tier.get(key)
            os._exit(3)
        except CorruptEntryError as exc:
            if "truncated" not in str(exc):
                os._exit(4)
    np.testing.assert_array_equal(tier.get("c"), val(3))
    tier.put("new", val(7))  # written at its own offset: the cut leaves a hole before it
    tier.close()
    os._exit(0)


def test_truncating_segments_under_an_open_tier_raises_instead_of_sigbus(tmp_path):
    build(tmp_path)
    assert run_forked(_truncate_under_open_tier, tmp_path) == 0
    with MmapTier(tmp_path, 1 << 20) as tier:  # the truncated segments are damaged: no stale value
        assert not tier.contains("k") and not tier.contains("d") and not tier.contains("t")
        assert {"k", "t"} <= set(tier.recovery["dropped_keys"])
        np.testing.assert_array_equal(tier.get("c"), val(3))
        np.testing.assert_array_equal(tier.get("new"), val(7))
        assert all(np.array_equal(tier.get(k), TRUTH[k]) for k in tier.keys() if k in TRUTH)
        tier.check()


def test_foreign_files_and_a_folder_named_like_a_segment_are_ignored_with_a_warning(tmp_path):
    build(tmp_path)
    manifest = fmt.decode_manifest((tmp_path / "MANIFEST").read_bytes())
    nxt = manifest["next_segment"]
    (tmp_path / fmt.segment_name(nxt)).mkdir()  # would be the next segment's name
    (tmp_path / fmt.index_name(nxt + 5)).mkdir()
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.warns(RuntimeWarning, match="ignoring") as caught:
        tier = MmapTier(tmp_path, 1 << 20)
    assert len(caught) == 3
    assert sorted(tier.recovery["foreign"]) == sorted([fmt.segment_name(nxt), fmt.index_name(nxt + 5), "notes.txt"])
    assert tier._active != nxt  # the name is taken: the new segment got the next free one
    tier.put("f", val(9))
    np.testing.assert_array_equal(tier.get("a"), val(2))
    tier.check()
    tier.close()
    with pytest.warns(RuntimeWarning):
        with MmapTier(tmp_path, 1 << 20) as again:
            np.testing.assert_array_equal(again.get("f"), val(9))
    assert (tmp_path / "notes.txt").read_text() == "hello"


def test_every_refusal_is_a_kvmm_error():
    assert issubclass(CorruptTierError, CorruptEntryError) and issubclass(CorruptTierError, KvmmError)


def _random_damage(rng, folder, target=None, modes=("truncate", "zero", "garbage", "delete", "flip")):
    """One random hand-damage to ``target`` (default: a random file of the folder); returns
    what was done."""
    if target is None:
        files = sorted(p for p in folder.iterdir() if p.name != "LOCK")
        target = files[rng.randrange(len(files))]
    size = target.stat().st_size
    how = rng.choice(list(modes))
    if how == "delete":
        target.unlink()
    elif how == "truncate":
        os.truncate(target, rng.randrange(size) if size else 0)
    elif size:
        data = bytearray(target.read_bytes())
        start = rng.randrange(fmt.SEGMENT_HEADER_BYTES if target.suffix == ".kvlog" else 0, size)
        length = 1 if how == "flip" else rng.randrange(1, 4097)
        for i in range(start, min(size, start + length)):
            data[i] = data[i] ^ 0x40 if how == "flip" else (0 if how == "zero" else rng.randrange(256))
        target.write_bytes(bytes(data))
    return f"{how} {target.name}"


def _random_workload(folder, seed, close):
    """60 seeded puts/deletes over 12 keys in 4 KiB segments; returns the newest values and
    the tier (still open unless ``close``)."""
    rng = np.random.default_rng(seed)
    newest = {}
    tier = MmapTier(folder, 1 << 22, segment_bytes=4096, gc_bytes=1 << 30)
    for step in range(60):
        key = int(rng.integers(0, 12))
        if rng.random() < 0.25 and key in newest:
            tier.delete(key)
            del newest[key]
        else:
            newest[key] = np.full(int(rng.integers(1, 400)), seed * 1000 + step, np.uint32)
            tier.put(key, newest[key])
    if close:
        tier.close()
    return newest, tier


def _crashed_workload(folder, seed):
    _, tier = _random_workload(folder, seed, close=False)  # (held: a collected tier would close)
    os._exit(0)  # no close: the last segment stays the log's tail


def _open_and_compare(folder, newest, what):
    """Open a damaged folder: it refuses (returns False) or shows no stale value."""
    try:
        tier = MmapTier(folder, 1 << 22, segment_bytes=4096)
    except CorruptTierError:
        return False
    with tier:
        for key in range(12):
            if key not in newest:
                assert not tier.contains(key), (what, key)
            elif tier.contains(key):
                np.testing.assert_array_equal(tier.get(key), newest[key], err_msg=what)
        tier.check()
    return True


def test_random_damage_never_brings_back_an_older_value_or_a_deleted_key(tmp_path):
    pick = random.Random(5)
    opened = [_open_and_compare(tmp_path / f"t{trial}", newest, _random_damage(pick, tmp_path / f"t{trial}"))
              for trial in range(40) for newest, _ in [_random_workload(tmp_path / f"t{trial}", trial, close=True)]]
    assert 0 < opened.count(False) < 40  # both outcomes happen: some damage is recoverable, some is not


def test_random_damage_to_the_tail_of_a_crashed_tier_never_brings_back_an_older_value(tmp_path):
    """No close: the tail's length is on record nowhere, so only its records can tell; damage
    that is no torn write and no single known record must be refused."""
    pick = random.Random(9)
    opened = []
    for trial in range(30):
        folder = tmp_path / f"t{trial}"
        assert run_forked(_crashed_workload, folder, trial) == 0
        newest, _ = _random_workload(tmp_path / "replay", trial, close=True)  # the same seeded workload
        shutil.rmtree(tmp_path / "replay")
        tail = sorted(folder.glob("*.kvlog"))[-1]
        opened.append(_open_and_compare(folder, newest, _random_damage(pick, folder, tail, ("zero", "garbage", "flip"))))
    assert 0 < opened.count(False) < 30
