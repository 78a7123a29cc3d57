"""File-backed tier that survives a crash or a restart: :class:`MmapTier`.

Storage is a log of *segment files* in one folder (``seg-000000000001.kvlog``, ...).  Every
``put`` and ``delete`` appends one record to the newest (active) segment; reads map segments
with ``mmap``.  Nothing is ever overwritten in place, so a crash in the middle of a write can
only tear the record being written.

Record layout (little endian; ``HEADER`` then three variable-length fields)::

    offset  size  field
    0       4     magic  b"KVMR"
    4       1     kind   1 = put, 2 = delete (tombstone)
    5       1     reserved (0)
    6       2     meta_len      length of the dtype/shape text, e.g. b"<f2|2,8,128"
    8       4     key_len       length of the encoded key (UTF-8 repr, see kvmm.tiers._base)
    12      8     payload_len   value bytes (C order)
    20      4     body_crc      zlib.crc32 of meta + payload
    24      4     header_crc    zlib.crc32 of bytes 0..23 + key
    28      ...   key, meta, payload

Example: ``put(7, np.zeros(4, np.float16))`` appends 28 + 1 (b"7") + 5 (b"<f2|4") + 8 bytes.

Recovery (``MmapTier(folder)`` on an existing folder) replays the segments in order:

* a record whose header checksum fails is skipped by searching for the next valid header
  (resynchronisation), so one damaged header loses one record, not the rest of the segment;
  the key that record names is dropped like a corrupt record's (below) whenever it can still
  be told: the key bytes decode, or a current key makes the header checksum match in place
  of the stored key and ``key_len`` (a torn write never gets here: it leaves a prefix of a
  record, and a complete header and key pass their checksum);
* a record that runs past the end of its file is a *torn write*: it is dropped and the file
  truncated before it (the put never happened; an older value of that key, if any, stays);
* a complete record whose body checksum fails is *corrupt*: its key is dropped (an older value
  is not resurrected, since it would be silently stale);
* every other record applies in order (a later put or delete of a key supersedes earlier ones).

New writes always go to a fresh segment after a reopen.  Reads verify the body checksum and
raise :class:`~kvmm.errors.CorruptEntryError` for a damaged entry (nothing is changed; delete
the key to get rid of it).

Space is reclaimed in whole segments: a segment's *garbage* is the bytes of records that no
longer describe the current state (overwritten, deleted, torn).  When the total garbage passes
``gc_bytes`` (default: one segment), the non-active segment with the most garbage is compacted:
its live records are appended to the active segment, then its file is removed.  A tombstone is
carried forward only while an older segment (which may still hold the deleted value) exists.

``capacity_bytes`` limits the *value bytes* of live entries (``used_bytes``), like every other
tier; headers, keys and garbage are on top of it (``disk_bytes``).  ``sync=True`` fsyncs after
each write (survives power loss, slower); without it a process crash (SIGKILL) still loses at
most the record being written, because completed writes are in the OS page cache.

One process at a time owns a folder (an ``flock`` on ``LOCK``); a second open raises
:class:`~kvmm.errors.BackendUnavailableError`.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import re
import struct
import zlib
from pathlib import Path
from typing import Any, Hashable, NamedTuple

import numpy as np

from kvmm._validate import as_count
from kvmm.errors import BackendUnavailableError, BadInputError, CapacityExceededError, CorruptEntryError, UnknownKeyError
from kvmm.tiers._base import TierBase, as_value_array, decode_key, encode_key, normalize_key
from kvmm.tiers.spec import TierSpec

__all__ = ["MmapTier"]

MAGIC = b"KVMR"
KIND_PUT = 1
KIND_DELETE = 2
# magic, kind, reserved, meta_len, key_len, payload_len, body_crc  (header_crc follows)
HEADER = struct.Struct("<4sBBHIQI")
HEADER_CRC = struct.Struct("<I")
HEADER_BYTES = HEADER.size + HEADER_CRC.size  # 28
SEGMENT_RE = re.compile(r"^seg-(\d{12})\.kvlog$")
MiB = 1 << 20
_MAX_SALVAGED_KEY = MiB  # longer key_len fields in a damaged header are taken as garbage


class _Location(NamedTuple):
    """Where the current record of a key lives."""

    segment: int
    offset: int  # of the record header
    record_bytes: int
    payload_offset: int
    payload_len: int
    meta: bytes
    body_crc: int


class MmapTier(TierBase):
    """A crash-safe, restart-recoverable, log-structured file tier (see the module docstring).

    Runtime complexity: ``put``/``get`` O(entry bytes) plus amortised compaction (each byte
    of garbage is reclaimed once, each live byte is copied at most once per compaction of its
    segment); ``delete``/``contains`` O(1); opening O(bytes on disk) (one checksummed scan).
    """

    def __init__(self, path: str | os.PathLike, capacity_bytes: int | None = None, *,
                 spec: TierSpec | str = "nvme", name: str | None = None,
                 segment_bytes: int = 64 * MiB, gc_bytes: int | None = None, sync: bool = False,
                 verify: bool = True) -> None:
        super().__init__(spec, capacity_bytes, name)
        self.segment_bytes = as_count(segment_bytes, "segment_bytes", minimum=HEADER_BYTES + 1)
        self.gc_bytes = self.segment_bytes if gc_bytes is None else as_count(gc_bytes, "gc_bytes")
        self.sync = bool(sync)
        self.verify = bool(verify)
        self.path = Path(path)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BadInputError(f"cannot create tier folder {str(self.path)!r}: {exc}") from None
        self._lock_fd = _lock_folder(self.path)
        self._index: dict[Hashable, _Location] = {}
        # keys whose latest record is a tombstone -> (segment, offset, record bytes)
        self._tombstones: dict[Hashable, tuple[int, int, int]] = {}
        self._segment_size: dict[int, int] = {}
        self._segment_live: dict[int, int] = {}
        self._maps: dict[int, mmap.mmap] = {}
        self._used = 0
        #: what recovery found: complete records applied, torn tails dropped, corrupt records dropped
        self.recovery = {"records": 0, "torn": 0, "corrupt": 0, "skipped_bytes": 0, "dropped_keys": []}
        self._active = -1
        self._active_fd = -1
        self._closed = False
        try:
            self._recover()
            if self._used > self.capacity_bytes:
                raise CapacityExceededError(
                    f"folder {str(self.path)!r} holds {self._used} bytes of values; capacity_bytes "
                    f"{self.capacity_bytes} is too small to open it")
            self._open_new_segment()
            for key in dict.fromkeys(self.recovery["dropped_keys"]):
                if key not in self._index:
                    self._write_tombstone(key)
        except BaseException:
            self.close()
            raise

    # -- TierBackend ----------------------------------------------------------------------------
    @property
    def used_bytes(self) -> int:
        """Value bytes of live entries."""
        return self._used

    @property
    def disk_bytes(self) -> int:
        """Bytes of all segment files (records, headers and garbage)."""
        return sum(self._segment_size.values())

    @property
    def garbage_bytes(self) -> int:
        """Bytes in segment files that no longer describe the current state."""
        return sum(self._segment_size[s] - self._segment_live[s] for s in self._segment_size)

    @property
    def segments(self) -> list[int]:
        return sorted(self._segment_size)

    def put(self, key: Hashable, data: Any) -> None:
        self._require_open()
        k = normalize_key(key)
        arr = as_value_array(data)
        old = self._index.get(k)
        after = self._used - (old.payload_len if old is not None else 0) + arr.nbytes
        if after > self.capacity_bytes:
            raise CapacityExceededError(
                f"tier {self.name!r}: storing {arr.nbytes} bytes under {k!r} needs {after} bytes in use; "
                f"capacity is {self.capacity_bytes} (in use {self._used})")
        meta = _encode_meta(arr)
        payload = arr.reshape(-1).view(np.uint8)
        location = self._append(KIND_PUT, encode_key(k), meta, payload)
        self._supersede(k)
        self._index[k] = location
        self._segment_live[location.segment] += location.record_bytes
        self._used = after
        self._count_put(arr.nbytes)
        self._maybe_compact()

    def get(self, key: Hashable) -> np.ndarray:
        self._require_open()
        k = normalize_key(key)
        loc = self._lookup(k)
        out = self._read_value(k, loc)
        self._count_get(loc.payload_len)
        return out

    def delete(self, key: Hashable) -> None:
        self._require_open()
        k = normalize_key(key)
        loc = self._lookup(k)
        self._write_tombstone(k)  # may raise (disk error): then nothing changed
        self._used -= loc.payload_len
        self._count_delete()
        self._maybe_compact()

    def contains(self, key: Hashable) -> bool:
        return normalize_key(key) in self._index

    def keys(self) -> list[Hashable]:
        return list(self._index)

    def nbytes_of(self, key: Hashable) -> int:
        return self._lookup(normalize_key(key)).payload_len

    # -- maintenance ----------------------------------------------------------------------------
    def compact(self, *, full: bool = False) -> int:
        """Compact segments now: the one with the most garbage, or (``full``) every segment
        holding garbage, sealing the active one first, so that afterwards ``garbage_bytes == 0``.
        Returns the number of segments removed."""
        self._require_open()
        removed = 0
        active = self._active
        if full and self._segment_size[active] > self._segment_live[active]:
            self._open_new_segment()  # seal the active segment so its garbage can go too
        while True:
            victim = self._compaction_victim()
            if victim is None:
                return removed
            self._compact_segment(victim)
            removed += 1
            if not full:
                return removed

    def flush(self) -> None:
        """fsync the active segment (and the folder)."""
        self._require_open()
        os.fsync(self._active_fd)
        _fsync_dir(self.path)

    def close(self) -> None:
        """Release files, maps and the folder lock (idempotent)."""
        if getattr(self, "_closed", True):
            return
        self._closed = True
        for mm in self._maps.values():
            try:
                mm.close()
            except BufferError:
                pass
        self._maps.clear()
        if self._active_fd >= 0:
            os.close(self._active_fd)
            self._active_fd = -1
        if self._lock_fd >= 0:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = -1

    def __enter__(self) -> "MmapTier":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def check(self) -> None:
        """Assert every invariant, re-reading every live record from disk (used by tests)."""
        self._require_open()
        # Segment bookkeeping matches the files on disk.
        on_disk = {int(m.group(1)): (self.path / m.group(0)).stat().st_size
                   for m in map(SEGMENT_RE.match, os.listdir(self.path)) if m}
        assert on_disk == self._segment_size, (on_disk, self._segment_size)
        # Live bytes per segment are exactly the live records and needed tombstones it holds.
        live = dict.fromkeys(self._segment_size, 0)
        for loc in self._index.values():
            live[loc.segment] += loc.record_bytes
        for segment, _, record_bytes in self._tombstones.values():
            live[segment] += record_bytes
        assert live == self._segment_live, (live, self._segment_live)
        assert all(0 <= self._segment_live[s] <= self._segment_size[s] for s in self._segment_size)
        # A key is either live or tombstoned, never both.
        assert not (self._index.keys() & self._tombstones.keys())
        # used_bytes is the sum of live payloads, within capacity.
        assert self._used == sum(loc.payload_len for loc in self._index.values())
        assert 0 <= self._used <= self.capacity_bytes
        # Every live record re-parses to its own key with a valid checksum.
        for key, loc in self._index.items():
            mm = self._map(loc.segment, loc.offset + loc.record_bytes)
            parsed = _parse_header(mm, loc.offset, len(mm))
            assert parsed is not None and parsed[0] == KIND_PUT and decode_key(parsed[1]) == key
            body = zlib.crc32(mm[loc.payload_offset:loc.payload_offset + loc.payload_len], zlib.crc32(loc.meta))
            assert body == loc.body_crc
        # The active segment is the newest.
        assert self._active == max(self._segment_size)

    # -- internals: writing ---------------------------------------------------------------------
    def _append(self, kind: int, key_bytes: bytes, meta: bytes, payload: Any) -> _Location:
        payload_len = len(payload)
        body_crc = zlib.crc32(payload, zlib.crc32(meta))
        head = HEADER.pack(MAGIC, kind, 0, len(meta), len(key_bytes), payload_len, body_crc)
        head += HEADER_CRC.pack(zlib.crc32(key_bytes, zlib.crc32(head)))
        record_bytes = HEADER_BYTES + len(key_bytes) + len(meta) + payload_len
        if self._segment_size[self._active] and self._segment_size[self._active] + record_bytes > self.segment_bytes:
            self._open_new_segment()
        segment, offset = self._active, self._segment_size[self._active]
        parts = [head, key_bytes, meta, payload]
        try:
            if _CRASH_AFTER_BYTES is not None:  # test hook: simulate a crash mid-record
                _write_prefix_and_die(self._active_fd, b"".join(bytes(p) for p in parts), _CRASH_AFTER_BYTES)
            _write_all(self._active_fd, parts, record_bytes)
            if self.sync:
                os.fsync(self._active_fd)
        except OSError as exc:
            # Undo the partial record so the file ends on a record boundary again.
            try:
                os.ftruncate(self._active_fd, offset)
            except OSError:
                pass
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise CapacityExceededError(f"tier {self.name!r}: the disk is full ({exc})") from None
            raise BackendUnavailableError(f"tier {self.name!r}: writing {str(self.path)!r} failed: {exc}") from None
        self._segment_size[segment] = offset + record_bytes
        payload_offset = offset + HEADER_BYTES + len(key_bytes) + len(meta)
        return _Location(segment, offset, record_bytes, payload_offset, payload_len, bytes(meta), body_crc)

    def _write_tombstone(self, k: Hashable) -> None:
        """Append a delete record for ``k``; it becomes the key's current record."""
        segment, offset, record_bytes = self._append(KIND_DELETE, encode_key(k), b"", b"")[:3]
        self._supersede(k)
        self._tombstones[k] = (segment, offset, record_bytes)
        self._segment_live[segment] += record_bytes

    def _supersede(self, k: Hashable) -> None:
        """The previous record of ``k`` (value or tombstone) becomes garbage."""
        old = self._index.pop(k, None)
        if old is not None:
            self._segment_live[old.segment] -= old.record_bytes
        tomb = self._tombstones.pop(k, None)
        if tomb is not None:
            self._segment_live[tomb[0]] -= tomb[2]

    def _open_new_segment(self) -> None:
        if self._active_fd >= 0:
            if self.sync:
                os.fsync(self._active_fd)
            os.close(self._active_fd)
            self._active_fd = -1
        self._active = max(self._segment_size, default=0) + 1
        path = self._segment_path(self._active)
        self._active_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._segment_size[self._active] = 0
        self._segment_live[self._active] = 0
        if self.sync:
            _fsync_dir(self.path)

    # -- internals: compaction ------------------------------------------------------------------
    def _maybe_compact(self) -> None:
        while self.garbage_bytes > self.gc_bytes:
            victim = self._compaction_victim()
            if victim is None:
                return
            self._compact_segment(victim)

    def _compaction_victim(self) -> int | None:
        best, best_garbage = None, 0
        for segment, size in sorted(self._segment_size.items()):
            garbage = size - self._segment_live[segment]
            if segment != self._active and garbage > best_garbage:
                best, best_garbage = segment, garbage
        return best

    def _compact_segment(self, victim: int) -> None:
        older_exists = any(s < victim for s in self._segment_size)
        moved = [(k, loc) for k, loc in self._index.items() if loc.segment == victim]
        for k, loc in moved:
            mm = self._map(victim, loc.offset + loc.record_bytes)
            payload = mm[loc.payload_offset:loc.payload_offset + loc.payload_len]
            if zlib.crc32(payload, zlib.crc32(loc.meta)) != loc.body_crc:
                # Damaged on disk since it was written: it cannot be moved faithfully; drop it.
                self._supersede(k)
                self._used -= loc.payload_len
                self.recovery["corrupt"] += 1
                self.recovery["dropped_keys"].append(k)
                if older_exists:
                    self._write_tombstone(k)
                continue
            new = self._append(KIND_PUT, encode_key(k), loc.meta, payload)
            self._supersede(k)
            self._index[k] = new
            self._segment_live[new.segment] += new.record_bytes
        for k in [k for k, t in self._tombstones.items() if t[0] == victim]:
            self._supersede(k)
            if older_exists:  # an older segment may still hold the deleted value
                self._write_tombstone(k)
        if self.sync:
            os.fsync(self._active_fd)
        mm = self._maps.pop(victim, None)
        if mm is not None:
            mm.close()
        os.unlink(self._segment_path(victim))
        del self._segment_size[victim], self._segment_live[victim]

    # -- internals: reading and recovery --------------------------------------------------------
    def _read_value(self, k: Hashable, loc: _Location) -> np.ndarray:
        dtype, shape = _decode_meta(loc.meta)
        if loc.payload_len == 0:
            return np.empty(shape, dtype=dtype)
        mm = self._map(loc.segment, loc.offset + loc.record_bytes)
        raw = np.frombuffer(mm, dtype=np.uint8, count=loc.payload_len, offset=loc.payload_offset)
        try:
            if self.verify and zlib.crc32(raw, zlib.crc32(loc.meta)) != loc.body_crc:
                raise CorruptEntryError(
                    f"tier {self.name!r}: entry {k!r} in {self._segment_path(loc.segment).name} at offset "
                    f"{loc.offset} fails its checksum; the file was damaged after the write (delete the key)")
            return raw.copy().view(dtype).reshape(shape)
        finally:
            del raw

    def _map(self, segment: int, need: int) -> mmap.mmap:
        mm = self._maps.get(segment)
        if mm is None or len(mm) < need:
            if mm is not None:
                mm.close()
            with open(self._segment_path(segment), "rb") as fh:
                try:
                    mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
                except ValueError:  # a file that shrank to zero bytes under us
                    raise CorruptEntryError(f"segment {segment} of {str(self.path)!r} is empty") from None
            if len(mm) < need:
                mm.close()
                raise CorruptEntryError(
                    f"segment {segment} of {str(self.path)!r} is shorter ({need} bytes needed): truncated on disk")
            self._maps[segment] = mm
        return mm

    def _recover(self) -> None:
        names = sorted((int(m.group(1)), m.group(0)) for m in map(SEGMENT_RE.match, os.listdir(self.path)) if m)
        for segment, _ in names:
            self._segment_size[segment] = (self.path / _segment_name(segment)).stat().st_size
            self._segment_live[segment] = 0
        for segment, _ in names:
            self._replay_segment(segment)
        # Segments without a live record (and whose tombstones are not needed) are reclaimed now.
        for segment in sorted(self._segment_size):
            if self._segment_live[segment] == 0:
                mm = self._maps.pop(segment, None)
                if mm is not None:
                    mm.close()
                os.unlink(self._segment_path(segment))
                del self._segment_size[segment], self._segment_live[segment]

    def _replay_segment(self, segment: int) -> None:
        size = self._segment_size[segment]
        if size == 0:
            return
        mm = self._map(segment, size)
        offset = 0
        while offset < size:
            parsed = _parse_header(mm, offset, size)
            if parsed is None:  # damaged header (or torn within the header): resynchronise
                nxt = _find_next_header(mm, offset + 1, size)
                # A torn write leaves a *prefix* of a record, so a header whose key is complete
                # but fails its checksum, or one followed by a valid record, was damaged after
                # it was written.  The key it names (when still readable) must not fall back to
                # an older value it superseded: drop it, like a damaged body.
                for key in _damaged_record_keys(mm, offset, size, self._index):
                    self._drop_key(key)
                if nxt is None:
                    self._drop_tail(segment, offset, size)
                    return
                self.recovery["skipped_bytes"] += nxt - offset
                offset = nxt
                continue
            kind, key_bytes, meta_len, payload_len, body_crc = parsed
            record_bytes = HEADER_BYTES + len(key_bytes) + meta_len + payload_len
            if offset + record_bytes > size:  # torn write: the put/delete never completed
                self._drop_tail(segment, offset, size)
                return
            try:
                key = decode_key(key_bytes)
            except (ValueError, SyntaxError, UnicodeDecodeError, MemoryError, RecursionError):
                # Not a key this library wrote: skip the record, keep everything else.
                self.recovery["corrupt"] += 1
                offset += record_bytes
                continue
            meta_start = offset + HEADER_BYTES + len(key_bytes)
            meta = bytes(mm[meta_start:meta_start + meta_len])
            payload_offset = meta_start + meta_len
            body = zlib.crc32(mm[payload_offset:payload_offset + payload_len], zlib.crc32(meta))
            if body != body_crc or (kind == KIND_PUT and not _meta_ok(meta, payload_len)):
                # Complete but damaged: drop the key (an older value would be silently stale);
                # a tombstone is written after recovery so the older value stays dead.
                self._drop_key(key)
                offset += record_bytes
                continue
            previous = self._index.get(key)
            if previous is not None:
                self._used -= previous.payload_len
            self._supersede(key)
            if kind == KIND_PUT:
                self._index[key] = _Location(segment, offset, record_bytes, payload_offset, payload_len, meta, body_crc)
                self._segment_live[segment] += record_bytes
                self._used += payload_len
                self.recovery["records"] += 1
            else:
                if any(s < segment for s in self._segment_size):
                    self._tombstones[key] = (segment, offset, record_bytes)
                    self._segment_live[segment] += record_bytes
                self.recovery["records"] += 1
            offset += record_bytes

    def _drop_key(self, key: Hashable) -> None:
        """Recovery met a damaged record of ``key``: forget every value of it (a tombstone is
        written once recovery ends, so an older record can never resurface)."""
        previous = self._index.get(key)
        if previous is not None:
            self._used -= previous.payload_len
        self._supersede(key)
        self.recovery["corrupt"] += 1
        self.recovery["dropped_keys"].append(key)

    def _drop_tail(self, segment: int, offset: int, size: int) -> None:
        """Cut a torn record (and anything unparseable after it) off the end of a segment."""
        self.recovery["torn"] += 1
        mm = self._maps.pop(segment, None)
        if mm is not None:
            mm.close()
        os.truncate(self._segment_path(segment), offset)
        self._segment_size[segment] = offset

    def _lookup(self, k: Hashable) -> _Location:
        try:
            return self._index[k]
        except KeyError:
            raise UnknownKeyError(f"tier {self.name!r} holds no entry {k!r}") from None

    def _segment_path(self, segment: int) -> Path:
        return self.path / _segment_name(segment)

    def _require_open(self) -> None:
        if self._closed:
            raise BackendUnavailableError(f"tier {self.name!r} ({str(self.path)!r}) is closed")


#: Test hook: when set to an int, the next record write stops after that many bytes and the
#: process exits immediately (``os._exit``), as a crash would.  Only tests set it, in a child.
_CRASH_AFTER_BYTES: int | None = None


def _segment_name(segment: int) -> str:
    return f"seg-{segment:012d}.kvlog"


def _parse_header(mm: Any, offset: int, size: int):
    """``(kind, key bytes, meta_len, payload_len, body_crc)`` or None if no valid header here."""
    if offset + HEADER_BYTES > size:
        return None
    head = mm[offset:offset + HEADER.size]
    magic, kind, reserved, meta_len, key_len, payload_len, body_crc = HEADER.unpack(head)
    if magic != MAGIC or kind not in (KIND_PUT, KIND_DELETE) or reserved != 0:
        return None
    key_start = offset + HEADER_BYTES
    if key_start + key_len > size:
        return None
    key_bytes = bytes(mm[key_start:key_start + key_len])
    (header_crc,) = HEADER_CRC.unpack(mm[offset + HEADER.size:offset + HEADER_BYTES])
    if zlib.crc32(key_bytes, zlib.crc32(head)) != header_crc:
        return None
    return kind, key_bytes, meta_len, payload_len, body_crc


def _damaged_record_keys(mm: Any, offset: int, size: int, known: Any) -> list[Hashable]:
    """The keys a record header that failed its checks may have named (possibly none).

    Only a header whose whole key lies inside the file counts (a torn write appends header and
    key before the value, so it cannot leave those complete yet failing).  Two ways to name it:
    the key bytes at the stated ``key_len`` decode to a key (the damage is elsewhere in the
    header), and any ``known`` key that makes the header checksum match when put in place of
    the stored key and its length (the damage is in the key or in ``key_len``).
    Runtime complexity: O(len(known)), only for damaged headers.
    """
    if offset + HEADER_BYTES > size:
        return []
    head = bytes(mm[offset:offset + HEADER.size])
    fields = list(HEADER.unpack(head))
    key_len = fields[4]
    key_start = offset + HEADER_BYTES
    found: list[Hashable] = []
    if 0 < key_len <= _MAX_SALVAGED_KEY and key_start + key_len <= size:
        try:
            key = normalize_key(decode_key(bytes(mm[key_start:key_start + key_len])))
            hash(key)
            found.append(key)
        except Exception:  # any bytes may be here: not a key this library wrote
            pass
    (header_crc,) = HEADER_CRC.unpack(mm[offset + HEADER.size:offset + HEADER_BYTES])
    for candidate in known:
        key_bytes = encode_key(candidate)
        if candidate in found or key_start + len(key_bytes) > size:
            continue
        fields[4] = len(key_bytes)
        if zlib.crc32(key_bytes, zlib.crc32(HEADER.pack(*fields))) == header_crc:
            found.append(candidate)
    return found


def _find_next_header(mm: Any, start: int, size: int) -> int | None:
    pos = start
    while True:
        pos = mm.find(MAGIC, pos, size)
        if pos < 0:
            return None
        if _parse_header(mm, pos, size) is not None:
            return pos
        pos += 1


def _encode_meta(arr: np.ndarray) -> bytes:
    return f"{arr.dtype.str}|{','.join(str(d) for d in arr.shape)}".encode("ascii")


def _decode_meta(meta: bytes) -> tuple[np.dtype, tuple[int, ...]]:
    dtype_text, shape_text = meta.decode("ascii").rsplit("|", 1)  # dtype.str may hold "|"
    shape = tuple(int(d) for d in shape_text.split(",")) if shape_text else ()
    return np.dtype(dtype_text), shape


def _meta_ok(meta: bytes, payload_len: int) -> bool:
    try:
        dtype, shape = _decode_meta(meta)
    except (ValueError, TypeError, UnicodeDecodeError):
        return False
    return int(np.prod(shape, dtype=np.int64)) * dtype.itemsize == payload_len


def _write_all(fd: int, parts: list, total: int) -> None:
    written = os.writev(fd, parts)
    if written == total:
        return
    # A short write (rare on regular files): finish the rest piece by piece.
    rest = memoryview(b"".join(bytes(p) for p in parts))[written:]
    while rest:
        n = os.write(fd, rest)
        rest = rest[n:]


def _write_prefix_and_die(fd: int, record: bytes, nbytes: int) -> None:
    os.write(fd, record[:nbytes])
    os._exit(86)


def _lock_folder(path: Path) -> int:
    fd = os.open(path / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise BackendUnavailableError(
            f"tier folder {str(path)!r} is open in another MmapTier (process or object); close it first") from None
    return fd


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
