"""MmapTier: restart recovery, crashes mid-write (real SIGKILL and a deterministic torn write),
corrupt and truncated files, whole-segment reclaim, locking and bad input."""

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from kvmm.errors import (
    BackendUnavailableError,
    BadInputError,
    CapacityExceededError,
    CorruptEntryError,
    UnknownKeyError,
)
from kvmm.testing.tiers import run_forked, snapshot, value
from kvmm.tiers import MmapTier, mmap_tier
from tests.paths import ROOT


def segment_files(folder):
    return sorted(p for p in Path(folder).iterdir() if p.suffix == ".kvlog")


def test_restart_recovers_every_entry_and_delete(tmp_path):
    with MmapTier(tmp_path, 1 << 20, segment_bytes=1024) as tier:
        for i in range(30):
            tier.put(i % 12, np.full((i + 1, 3), i, dtype=np.float32))
        tier.delete(5)
        tier.put(("seq", 1), np.arange(4, dtype=np.int16))
        before = snapshot(tier, True)
    with MmapTier(tmp_path, 1 << 20, segment_bytes=1024) as again:
        assert snapshot(again, True) == before
        assert not again.contains(5)
        assert again.recovery["torn"] == again.recovery["corrupt"] == 0
        again.check()


def _crash_child(folder, crash_after):
    tier = MmapTier(folder, 1 << 20)
    mmap_tier._CRASH_AFTER_BYTES = crash_after
    tier.put("torn", value(5000, 9))  # writes crash_after bytes, then os._exit(86)


@pytest.mark.parametrize("crash_after", [3, 27, 40, 4000])
def test_torn_write_in_a_crashed_process_is_dropped(tmp_path, crash_after):
    with MmapTier(tmp_path, 1 << 20) as tier:
        for i in range(5):
            tier.put(i, value(300, i))
        tier.put("torn", value(100, 1))  # an older value of the key being torn
        before = snapshot(tier, True)
    assert run_forked(_crash_child, tmp_path, crash_after) == 86
    last = segment_files(tmp_path)[-1]
    assert last.stat().st_size == mmap_tier.fmt.SEGMENT_HEADER_BYTES + crash_after  # header + torn prefix
    with MmapTier(tmp_path, 1 << 20) as tier:
        assert snapshot(tier, True) == before  # the torn put never happened; the old value stays
        assert tier.recovery["torn"] == 1
        tier.check()


SIGKILL_CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    from kvmm.tiers import MmapTier
    tier = MmapTier(sys.argv[1], 1 << 34, segment_bytes=1 << 26)
    i = 0
    while True:
        tier.put(i, np.full(1 << 21, i % 251, dtype=np.uint8))  # 2 MiB entries
        print("done", i, flush=True)
        i += 1
""")


def test_sigkill_mid_write_loses_at_most_the_entry_being_written(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", SIGKILL_CHILD, str(tmp_path)], stdout=subprocess.PIPE,
                            text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    done = []
    for line in proc.stdout:
        done.append(int(line.split()[1]))
        if len(done) == 6:
            break
    proc.send_signal(signal.SIGKILL)  # lands while the child is inside some later put
    proc.wait(30)
    proc.stdout.close()
    with MmapTier(tmp_path, 1 << 34) as tier:
        keys = set(tier.keys())
        assert set(done) <= keys  # every put that returned is there
        assert keys <= set(range(max(keys) + 1)) and max(keys) <= max(done) + 50
        for k in keys:
            got = tier.get(k)
            assert got.shape == (1 << 21,) and (got == k % 251).all()
        tier.check()


def _flip_byte(path, offset):
    with open(path, "r+b") as fh:
        fh.seek(offset)
        b = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([b[0] ^ 0xFF]))


def test_corrupt_payload_raises_on_get_and_recovery_drops_only_that_key(tmp_path):
    tier = MmapTier(tmp_path, 1 << 20)
    tier.put("old", value(64, 1))
    for i in range(4):
        tier.put(i, value(200, i))
    tier.put("old", value(64, 2))  # the newest value of "old" gets damaged below
    loc = tier._index["old"]
    seg = tier._segment_path(loc.segment)
    _flip_byte(seg, loc.payload_offset + 10)
    before = snapshot(tier, False)
    with pytest.raises(CorruptEntryError, match="checksum"):
        tier.get("old")
    assert snapshot(tier, False) == before  # the failed read changed nothing
    for i in range(4):
        np.testing.assert_array_equal(tier.get(i), value(200, i))
    tier.close()
    with MmapTier(tmp_path, 1 << 20) as again:
        assert again.recovery["corrupt"] == 1 and again.recovery["dropped_keys"] == ["old"]
        assert sorted(again.keys()) == [0, 1, 2, 3]  # the stale older value is not resurrected
        again.compact(full=True)
        again.check()
    with MmapTier(tmp_path, 1 << 20) as third:  # still dead after compaction + another restart
        assert not third.contains("old") and sorted(third.keys()) == [0, 1, 2, 3]


def test_damaged_header_loses_one_record_and_resynchronises(tmp_path):
    with MmapTier(tmp_path, 1 << 20) as tier:
        for i in range(5):
            tier.put(i, value(100, i))
        offset = tier._index[2].offset
    _flip_byte(segment_files(tmp_path)[0], offset + 1)  # inside the magic of record 2
    with MmapTier(tmp_path, 1 << 20) as tier:
        assert sorted(tier.keys()) == [0, 1, 3, 4]
        assert tier.recovery["skipped_bytes"] > 0
        for i in (0, 1, 3, 4):
            np.testing.assert_array_equal(tier.get(i), value(100, i))
        tier.check()


def test_truncated_tail_after_a_crash_keeps_every_complete_entry(tmp_path):
    assert run_forked(_put_five_and_die, tmp_path) == 0
    tail = segment_files(tmp_path)[-1]
    os.truncate(tail, tail.stat().st_size - 50)  # in the middle of the last record
    with MmapTier(tmp_path, 1 << 20) as tier:
        assert sorted(tier.keys()) == [0, 1, 2, 3]
        assert tier.recovery["torn"] == 1 and tier.recovery["damaged_segments"] == {}
        tier.check()


def _put_five_and_die(folder):
    tier = MmapTier(folder, 1 << 20)
    for i in range(5):
        tier.put(i, value(100, i))
    os._exit(0)  # no close: the segment stays the log's tail


def test_space_is_reclaimed_in_whole_segments(tmp_path):
    with MmapTier(tmp_path, 10_000, segment_bytes=2048) as tier:
        for round_ in range(40):
            for k in range(8):
                tier.put(k, value(500, round_ + k))
            tier.check()
            # Disk stays bounded: live records + the gc threshold + one active segment.
            assert tier.disk_bytes <= 8 * (500 + 40) + tier.gc_bytes + 2 * 2048
        assert tier.used_bytes == 4000
        seq_numbers = tier.segments
        assert min(seq_numbers) > 10  # early segments were compacted and their files removed
        assert len(segment_files(tmp_path)) == len(seq_numbers)
        tier.compact(full=True)
        assert tier.garbage_bytes == 0 and len(tier.segments) <= 3
    with MmapTier(tmp_path, 10_000) as tier:
        for k in range(8):
            np.testing.assert_array_equal(tier.get(k), value(500, 39 + k))


def test_tombstones_survive_compaction_of_either_segment(tmp_path):
    with MmapTier(tmp_path, 1 << 20, segment_bytes=600, gc_bytes=1 << 30) as tier:
        tier.put("gone", value(300))      # segment 1
        tier.put("keep", value(300))      # segment 2
        tier.delete("gone")               # tombstone in segment 2
        tier.put("filler", value(500))    # segment 3
        tier.compact()                    # segment 1 holds the most garbage (the dead "gone")
        tier.compact(full=True)
        tier.check()
    with MmapTier(tmp_path, 1 << 20) as tier:
        assert sorted(tier.keys()) == ["filler", "keep"]


def test_capacity_and_bad_input_change_nothing(tmp_path):
    tier = MmapTier(tmp_path, 1000)
    tier.put("a", value(600))
    before = snapshot(tier, True)
    files_before = {p.name: p.stat().st_size for p in segment_files(tmp_path)}
    with pytest.raises(CapacityExceededError, match="capacity is 1000"):
        tier.put("b", value(401))
    with pytest.raises(UnknownKeyError):
        tier.get("b")
    with pytest.raises(BadInputError):
        tier.put(2.0, value(1))
    with pytest.raises(BadInputError):
        tier.put("c", np.array(["text"]))
    assert snapshot(tier, True) == before
    assert {p.name: p.stat().st_size for p in segment_files(tmp_path)} == files_before
    tier.put("a", value(1000))  # an overwrite may use the bytes it frees
    tier.close()
    with pytest.raises(CapacityExceededError, match="too small"):
        MmapTier(tmp_path, 999)
    with pytest.raises(BackendUnavailableError, match="closed"):
        tier.get("a")


def test_one_owner_per_folder(tmp_path):
    first = MmapTier(tmp_path, 1000)
    with pytest.raises(BackendUnavailableError, match="open in another"):
        MmapTier(tmp_path, 1000)
    first.close()
    MmapTier(tmp_path, 1000).close()


@pytest.mark.parametrize("kwargs", [dict(segment_bytes=0), dict(segment_bytes=-5), dict(capacity_bytes=-1),
                                    dict(gc_bytes=-1)])
def test_bad_construction(tmp_path, kwargs):
    with pytest.raises(BadInputError):
        MmapTier(tmp_path, **{"capacity_bytes": 100, **kwargs})


@pytest.mark.parametrize("path", [None, 5, "a\0b"])
def test_a_path_that_is_no_path_is_bad_input(path):
    with pytest.raises(BadInputError, match="path|tier folder"):
        MmapTier(path, 100)


def test_sync_mode_and_oversized_entries(tmp_path):
    with MmapTier(tmp_path, 1 << 20, segment_bytes=100, sync=True) as tier:
        tier.put("big", value(5000))  # larger than a segment: gets one of its own
        tier.put("small", value(10))
        tier.flush()
        assert len(tier.segments) == 2
        tier.check()


def test_record_with_an_undecodable_key_is_skipped(tmp_path):
    with MmapTier(tmp_path, 1 << 20) as tier:
        tier.put("a", value(10))
        tier._append(mmap_tier.KIND_PUT, b"(((", b"|u1|3", b"xyz")  # a foreign record
        tier.put("b", value(20))
    with MmapTier(tmp_path, 1 << 20) as tier:
        assert sorted(tier.keys()) == ["a", "b"] and tier.recovery["corrupt"] == 1
        np.testing.assert_array_equal(tier.get("b"), value(20))
        tier.check()


def _compact_and_crash(folder, crash_after):
    tier = MmapTier(folder, 1 << 20, segment_bytes=750, gc_bytes=1 << 30)
    mmap_tier._CRASH_AFTER_BYTES = crash_after
    tier.compact(full=True)  # the first record copied is torn, then the process dies


@pytest.mark.parametrize("crash_after", [10, 200])
def test_crash_during_compaction_loses_nothing(tmp_path, crash_after):
    with MmapTier(tmp_path, 1 << 20, segment_bytes=750, gc_bytes=1 << 30) as tier:
        for round_ in range(3):
            for k in range(4):
                tier.put(k, value(300, round_ * 10 + k))
        tier.delete(1)
        before = snapshot(tier, True)
        assert tier.garbage_bytes > 0
    assert run_forked(_compact_and_crash, tmp_path, crash_after) == 86
    with MmapTier(tmp_path, 1 << 20) as tier:
        assert snapshot(tier, True) == before
        tier.compact(full=True)
        tier.check()
    with MmapTier(tmp_path, 1 << 20) as tier:
        assert snapshot(tier, True) == before


def _close_inherited_copy(tier):
    tier.close()  # a forked child cleaning up: must not seal or unlock the parent's tier
    os._exit(0)


def _owner_forks_a_closing_child_then_crashes(folder):
    tier = MmapTier(folder, 1 << 20)
    tier.put("a", value(100, 1))
    child_exit = run_forked(_close_inherited_copy, tier)
    try:
        MmapTier(folder, 1 << 20)
        os._exit(3)  # the child's close released the owner's lock
    except BackendUnavailableError:
        pass
    tier.put("b", value(100, 2))  # after the child's close, into the same segment
    os._exit(0 if child_exit == 0 else 4)  # crash: no close


def test_a_forked_child_closing_its_copy_does_not_disturb_the_owner(tmp_path):
    assert run_forked(_owner_forks_a_closing_child_then_crashes, tmp_path) == 0
    with MmapTier(tmp_path, 1 << 20) as again:
        assert again.recovery["damaged_segments"] == {} and again.recovery["dropped_keys"] == []
        np.testing.assert_array_equal(again.get("a"), value(100, 1))
        np.testing.assert_array_equal(again.get("b"), value(100, 2))
