"""File-backed tier that survives a crash or a restart: :class:`MmapTier`.

Storage is a log of *segment files* in one folder (the layout, byte by byte, is in
:mod:`kvmm.tiers._mmap_format`).  Every ``put`` and ``delete`` appends one checksummed record
to the newest (*active*) segment; nothing is ever overwritten in place, so a crash in the
middle of a write can only tear the record being written.  When the active segment is full it
is *sealed*: its index (the last record of each key in it) is written next to it, and the
``MANIFEST`` is replaced atomically (temporary file, rename) to list the sealed segments with
their lengths and the new active segment.  Every segment starts with a header that names its
generation (segment number) and the folder it belongs to.

Reads use positional reads (``pread``) and verify the record's checksum, so a file shortened
or damaged under an open tier raises :class:`~kvmm.errors.CorruptEntryError` (mapping such a
file would kill the process with SIGBUS).

Recovery (``MmapTier(folder)`` on an existing folder) replays the segments the manifest lists,
in order, and reports what it found in :attr:`MmapTier.recovery`:

* the active segment is the log's tail: a record that runs past its end is a *torn write*
  (the put or delete never happened, an older value stays) and is cut off; a complete record
  whose checksum fails drops its key (an older value is not resurrected); a damaged header is
  skipped by resynchronising on the next valid record, and the key it names is dropped, when
  the damaged bytes are exactly that one record; any other damage in the tail raises
  :class:`~kvmm.errors.CorruptTierError` (which keys it changed cannot be known);
* a sealed segment that is missing, not a regular file, of another length than the manifest
  says, with a bad header or generation, or with any record that fails its checks is
  *damaged*: its records that still verify are applied, and every key whose last record in it
  (from the segment's index) was not recovered is dropped, so neither an older value nor a
  deleted key can come back.  Without a valid index the keys at risk cannot be told, and the
  open raises :class:`~kvmm.errors.CorruptTierError`.  A damaged segment is compacted away at
  the end of the open, so the damage is reported once;
* dropped keys get a tombstone, so their older records stay dead after later compactions.
  Files that are not the tier's (anything else in the folder, a folder named like a segment,
  a segment of another folder) are left alone with a warning.

Space is reclaimed in whole segments: a segment's *garbage* is the bytes of records that no
longer describe the current state.  When the total garbage passes ``gc_bytes`` (default: one
segment), the sealed segment with the most garbage is compacted: its live records are appended
to the active segment, the manifest stops listing it, then its files are removed.  A tombstone
is carried forward only while an older segment (which may still hold the deleted value) exists.

``capacity_bytes`` limits the *value bytes* of live entries (``used_bytes``), like every other
tier; headers, keys and garbage are on top of it (``disk_bytes``).  ``sync=True`` fsyncs each
write and every seal (segment, index, manifest and folder: survives power loss, slower);
without it a process crash (SIGKILL) still loses at most the record being written, because
completed writes are in the OS page cache.  One process at a time owns a folder (an ``flock``
on ``LOCK``); a second open raises :class:`~kvmm.errors.BackendUnavailableError`.
"""

from __future__ import annotations

import errno
import os
import zlib
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import numpy as np

from kvmm._validate import as_count
from kvmm.errors import (
    BackendUnavailableError,
    BadInputError,
    CapacityExceededError,
    CorruptEntryError,
    UnknownKeyError,
)
from kvmm.tiers import _mmap_format as fmt
from kvmm.tiers._base import TierBase, as_value_array, decode_key, encode_key, normalize_key
from kvmm.tiers._mmap_recovery import RecoveryMixin, new_report
from kvmm.tiers.spec import TierSpec

__all__ = ["MmapTier"]

MiB = 1 << 20
KIND_PUT = fmt.KIND_PUT
KIND_DELETE = fmt.KIND_DELETE
HEADER_BYTES = fmt.RECORD_HEADER_BYTES
_Location = fmt.Location


class MmapTier(RecoveryMixin, TierBase):
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
        self.segment_bytes = as_count(segment_bytes, "segment_bytes",
                                      minimum=fmt.SEGMENT_HEADER_BYTES + HEADER_BYTES + 1)
        self.gc_bytes = self.segment_bytes if gc_bytes is None else as_count(gc_bytes, "gc_bytes")
        self.sync = bool(sync)
        self.verify = bool(verify)
        if not isinstance(path, (str, os.PathLike)):
            raise BadInputError(f"path must be a folder path (str or os.PathLike), got {type(path).__name__}")
        self.path = Path(path)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except (OSError, ValueError) as exc:  # ValueError: an embedded NUL byte
            raise BadInputError(f"cannot create tier folder {str(self.path)!r}: {exc}") from None
        self._closed, self._opened = True, False
        self._owner_pid = os.getpid()
        self._lock_fd = fmt.lock_folder(self.path)
        self._closed = False
        self._index: dict[Hashable, _Location] = {}
        # keys whose latest record is a tombstone -> (segment, offset, record bytes)
        self._tombstones: dict[Hashable, tuple[int, int, int]] = {}
        self._segment_size: dict[int, int] = {}
        self._segment_live: dict[int, int] = {}  # the segment header counts as live
        self._read_fds: dict[int, int] = {}
        # encoded key -> (offset, kind) of its last record in the active segment (its index)
        self._active_last: dict[bytes, tuple[int, int]] = {}
        self._folder_id = b""
        self._next_segment = 1
        self._used = 0
        self._damaged_lengths: dict[int, int] = {}  # damaged sealed segment -> length the manifest says
        self._dropped: set = set()  # keys in recovery["dropped_keys"]
        #: what the last open found and did (see docs/tiers.md, "Recovery report")
        self.recovery = new_report()
        self._active = -1
        self._active_fd = -1
        try:
            self._recover()  # RecoveryMixin: replays the folder, opens a fresh active segment
        except BaseException:
            self.close()
            raise
        self._opened = True

    # -- TierBackend ----------------------------------------------------------------------------
    @property
    def used_bytes(self) -> int:
        """Value bytes of live entries."""
        return self._used

    @property
    def disk_bytes(self) -> int:
        """Bytes of all segment files (segment headers, records and garbage)."""
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
        meta = fmt.encode_meta(arr)
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
        fmt.fsync_dir(self.path)

    def close(self) -> None:
        """Seal the active segment (so a later open can tell if it was cut short), then
        release files and the folder lock (idempotent)."""
        if getattr(self, "_closed", True):
            return
        self._closed = True
        try:
            # (a forked child closing its inherited copy must not seal the parent's segment)
            if self._opened and self._active_fd >= 0 and os.getpid() == self._owner_pid:
                if self.sync:
                    os.fsync(self._active_fd)
                index = fmt.encode_index(self._active, self._folder_id, self._active_last)
                fmt.write_atomic(self._index_path(self._active), index, self.sync)
                self._write_manifest(closing=True)
        finally:
            for fd in self._read_fds.values():
                os.close(fd)
            self._read_fds.clear()
            if self._active_fd >= 0:
                os.close(self._active_fd)
                self._active_fd = -1
            if self._lock_fd >= 0:
                os.close(self._lock_fd)  # releases the flock
                self._lock_fd = -1

    def __enter__(self) -> MmapTier:
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
        on_disk = {s: os.stat(self._segment_path(s)).st_size for s in self._segment_size}
        assert on_disk == self._segment_size, (on_disk, self._segment_size)
        # The manifest lists exactly the sealed segments with their lengths, and the active one.
        manifest = fmt.decode_manifest(fmt.read_file(self.path / fmt.MANIFEST_NAME) or b"")
        assert manifest is not None and manifest["active"] == self._active
        assert manifest["sealed"] == {s: n for s, n in self._segment_size.items() if s != self._active}
        assert manifest["next_segment"] > max(self._segment_size)
        # Live bytes per segment are its header plus exactly the live records and needed
        # tombstones it holds.
        live = dict.fromkeys(self._segment_size, fmt.SEGMENT_HEADER_BYTES)
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
            record = os.pread(self._read_fd(loc.segment), loc.record_bytes, loc.offset)
            parsed = fmt.parse_record_header(record, 0, len(record))
            assert parsed is not None and parsed[0] == KIND_PUT and decode_key(parsed[1]) == key
            start = loc.payload_offset - loc.offset
            assert zlib.crc32(record[start:start + loc.payload_len], zlib.crc32(loc.meta)) == loc.body_crc
        # The active segment is the newest.
        assert self._active == max(self._segment_size)

    # -- internals: writing ---------------------------------------------------------------------
    def _append(self, kind: int, key_bytes: bytes, meta: bytes, payload: Any) -> _Location:
        payload_len = len(payload)
        body_crc = zlib.crc32(payload, zlib.crc32(meta))
        head = fmt.pack_record_header(kind, key_bytes, meta, payload_len, body_crc)
        record_bytes = HEADER_BYTES + len(key_bytes) + len(meta) + payload_len
        size = self._segment_size[self._active]
        if size > fmt.SEGMENT_HEADER_BYTES and size + record_bytes > self.segment_bytes:
            self._open_new_segment()
        segment, offset = self._active, self._segment_size[self._active]
        parts = [head, key_bytes, meta, payload]
        try:
            if _CRASH_AFTER_BYTES is not None:  # test hook: simulate a crash mid-record
                _write_prefix_and_die(self._active_fd, b"".join(bytes(p) for p in parts), _CRASH_AFTER_BYTES,
                                      offset)
            fmt.write_all(self._active_fd, parts, record_bytes, offset)
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
        self._active_last[key_bytes] = (offset, kind)
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
        """Seal the active segment (fsync, write its index) and start a new one; the manifest
        is replaced last, so a crash in between leaves the previous manifest, which still
        describes the folder (a new segment with no record is then removed as a leftover)."""
        old = self._active
        if self._active_fd >= 0:
            if self.sync:
                os.fsync(self._active_fd)
            os.close(self._active_fd)
            self._active_fd = -1
            index = fmt.encode_index(old, self._folder_id, self._active_last)
            fmt.write_atomic(self._index_path(old), index, self.sync)
        self._active_last = {}
        segment = self._next_segment
        while os.path.lexists(self._segment_path(segment)):  # a foreign entry holds the name
            segment += 1
        self._next_segment = segment + 1
        fd = os.open(self._segment_path(segment), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            fmt.write_all(fd, [fmt.pack_segment_header(segment, self._folder_id)], fmt.SEGMENT_HEADER_BYTES, 0)
            if self.sync:
                os.fsync(fd)
        except OSError:
            os.close(fd)
            raise
        self._active, self._active_fd = segment, fd
        self._segment_size[segment] = self._segment_live[segment] = fmt.SEGMENT_HEADER_BYTES
        self._write_manifest()

    def _write_manifest(self, closing: bool = False) -> None:
        """List the sealed segments and the active one (``closing``: every segment is sealed
        and there is no active one)."""
        active = 0 if closing else self._active
        # A damaged segment keeps the length it was sealed at until it is compacted away, so a
        # crash before then finds the same damage again.
        sealed = {s: self._damaged_lengths.get(s, n) for s, n in self._segment_size.items() if s != active}
        data = fmt.encode_manifest(self._folder_id, self._next_segment, active, sealed)
        fmt.write_atomic(self.path / fmt.MANIFEST_NAME, data, self.sync)

    def _forget_segments(self, segments: list[int]) -> None:
        """Stop listing ``segments`` in the manifest, then remove their files (in that order, so
        a crash in between leaves only stale files, which the next open removes)."""
        if not segments:
            return
        for segment in segments:
            del self._segment_size[segment], self._segment_live[segment]
            self._damaged_lengths.pop(segment, None)
            fd = self._read_fds.pop(segment, None)
            if fd is not None:
                os.close(fd)
        self._write_manifest()
        for segment in segments:
            for path in (self._segment_path(segment), self._index_path(segment)):
                if os.path.isfile(path) and not os.path.islink(path):
                    os.unlink(path)

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
            payload = self._read_payload(loc)
            if payload is None or zlib.crc32(payload, zlib.crc32(loc.meta)) != loc.body_crc:
                # Damaged on disk since it was written: it cannot be moved faithfully; drop it.
                self._drop_key(k)
                self.recovery["corrupt"] += 1
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
        self._forget_segments([victim])

    # -- internals: reading ---------------------------------------------------------------------
    def _read_value(self, k: Hashable, loc: _Location) -> np.ndarray:
        dtype, shape = fmt.decode_meta(loc.meta)
        if loc.payload_len == 0:
            return np.empty(shape, dtype=dtype)
        raw = self._read_payload(loc)
        if raw is None:
            raise CorruptEntryError(
                f"tier {self.name!r}: entry {k!r} lies past the end of {self._segment_path(loc.segment).name}: "
                f"the file was truncated on disk (delete the key)")
        if self.verify and zlib.crc32(raw, zlib.crc32(loc.meta)) != loc.body_crc:
            raise CorruptEntryError(
                f"tier {self.name!r}: entry {k!r} in {self._segment_path(loc.segment).name} at offset "
                f"{loc.offset} fails its checksum; the file was damaged after the write (delete the key)")
        return raw.view(dtype).reshape(shape)

    def _read_payload(self, loc: _Location) -> np.ndarray | None:
        """The value bytes of ``loc`` read through the file, or None if the file is too short."""
        out = np.empty(loc.payload_len, dtype=np.uint8)
        if loc.payload_len and os.preadv(self._read_fd(loc.segment), [out], loc.payload_offset) != loc.payload_len:
            return None
        return out

    def _read_fd(self, segment: int) -> int:
        fd = self._read_fds.get(segment)
        if fd is None:
            try:
                fd = os.open(self._segment_path(segment), os.O_RDONLY)
            except OSError as exc:
                raise CorruptEntryError(f"segment {segment} of {str(self.path)!r} cannot be read: {exc}") from None
            self._read_fds[segment] = fd
        return fd

    def _lookup(self, k: Hashable) -> _Location:
        try:
            return self._index[k]
        except KeyError:
            raise UnknownKeyError(f"tier {self.name!r} holds no entry {k!r}") from None

    def _segment_path(self, segment: int) -> Path:
        return self.path / fmt.segment_name(segment)

    def _index_path(self, segment: int) -> Path:
        return self.path / fmt.index_name(segment)

    def _require_open(self) -> None:
        if self._closed:
            raise BackendUnavailableError(f"tier {self.name!r} ({str(self.path)!r}) is closed")


#: Test hook: when set to an int, the next record write stops after that many bytes and the
#: process exits immediately (``os._exit``), as a crash would.  Only tests set it, in a child.
_CRASH_AFTER_BYTES: int | None = None


def _write_prefix_and_die(fd: int, record: bytes, nbytes: int, offset: int) -> None:
    os.pwrite(fd, record[:nbytes], offset)
    os._exit(86)
