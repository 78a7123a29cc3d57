"""Opening an :class:`~kvmm.tiers.MmapTier` folder: replay, damage detection and the recovery
report (a mixin; the rules are in the docstring of :mod:`kvmm.tiers.mmap_tier`)."""

from __future__ import annotations

import os
import warnings
import zlib
from collections.abc import Hashable
from typing import Any

from kvmm.errors import CapacityExceededError, CorruptTierError
from kvmm.tiers import _mmap_format as fmt


def new_report() -> dict[str, Any]:
    """An empty recovery report (every field is described in docs/tiers.md)."""
    return {"records": 0, "torn": 0, "corrupt": 0, "skipped_bytes": 0, "dropped_keys": [],
            "damaged_segments": {}, "removed_files": [], "foreign": []}


class RecoveryMixin:
    """``_recover`` for MmapTier: runs once, from ``__init__``, on the locked folder."""

    def _recover(self) -> None:
        self._stale_files: list = []  # crash leftovers, removed once the open cannot fail any more
        segments, indexes, foreign = self._scan_folder()
        manifest_path = self.path / fmt.MANIFEST_NAME
        raw = fmt.read_file(manifest_path)
        if raw is None and os.path.lexists(manifest_path):
            raise CorruptTierError(f"tier folder {str(self.path)!r}: {fmt.MANIFEST_NAME} is not a regular file")
        manifest = None if raw is None else fmt.decode_manifest(raw)
        if raw is not None and (manifest is None or not _manifest_consistent(manifest)):
            raise CorruptTierError(
                f"tier folder {str(self.path)!r}: {fmt.MANIFEST_NAME} is damaged (checksum or fields), so which "
                f"segments are live cannot be told; restore it from a backup or delete the folder to start empty")
        for name in foreign:
            self.recovery["foreign"].append(name)
            warnings.warn(f"tier folder {str(self.path)!r}: ignoring {name!r}, which is not a file of this tier",
                          RuntimeWarning, stacklevel=4)
        if manifest is None:
            self._start_fresh(segments, indexes)
            return
        self._replay_folder(manifest, segments, indexes)

    def _scan_folder(self) -> tuple[dict[int, Any], dict[int, Any], list[str]]:
        segments, indexes, foreign = {}, {}, []
        for name in sorted(os.listdir(self.path)):
            if name in (fmt.LOCK_NAME, fmt.MANIFEST_NAME):
                continue
            path = self.path / name
            regular = os.path.isfile(path) and not os.path.islink(path)
            segment, index = fmt.SEGMENT_RE.match(name), fmt.INDEX_RE.match(name)
            if segment and regular:
                segments[int(segment.group(1))] = path
            elif index and regular:
                indexes[int(index.group(1))] = path
            elif regular and fmt.TEMP_RE.match(name):
                self._stale_files.append(path)
            else:
                foreign.append(name)
        return segments, indexes, foreign

    def _start_fresh(self, segments: dict[int, Any], indexes: dict[int, Any]) -> None:
        """No manifest: a new folder, or a first segment created just before a crash."""
        for path in segments.values():
            size = os.path.getsize(path)
            if size > fmt.SEGMENT_HEADER_BYTES or (size == fmt.SEGMENT_HEADER_BYTES and
                                                   fmt.parse_segment_header(fmt.read_file(path) or b"") is None):
                raise CorruptTierError(
                    f"tier folder {str(self.path)!r}: {path.name} holds records but there is no "
                    f"{fmt.MANIFEST_NAME} (deleted, or the folder was written by an older kvmm); restore it "
                    f"or move the segment files away")
        for path in [*self._stale_files, *segments.values(), *indexes.values()]:
            self._remove_file(path)
        self._folder_id = os.urandom(16)
        self._next_segment = max(segments, default=0) + 1
        self._open_new_segment()

    def _replay_folder(self, manifest: dict, segments: dict[int, Any], indexes: dict[int, Any]) -> None:
        self._folder_id = manifest["folder_id"]
        self._next_segment = manifest["next_segment"]
        sealed, active = manifest["sealed"], manifest["active"]
        for segment, path in sorted(segments.items()):
            if segment in sealed or segment == active:
                continue
            self._next_segment = max(self._next_segment, segment + 1)
            head = fmt.read_file(path) or b""
            expected = fmt.pack_segment_header(segment, self._folder_id)
            # (a crash while creating a segment can leave a prefix of its header)
            ours = head[:len(expected)] == expected or (len(head) < len(expected) and expected.startswith(head))
            if ours and segment >= manifest["next_segment"] and len(head) > fmt.SEGMENT_HEADER_BYTES:
                raise CorruptTierError(
                    f"tier folder {str(self.path)!r}: {path.name} holds records newer than {fmt.MANIFEST_NAME} "
                    f"lists (the manifest is an older copy); restore the matching manifest")
            if ours:  # compacted, or created just before a crash, and no longer listed: stale
                self._stale_files.append(path)
            else:
                self.recovery["foreign"].append(path.name)
                warnings.warn(f"tier folder {str(self.path)!r}: ignoring {path.name}, a segment of another "
                              f"folder or not listed in {fmt.MANIFEST_NAME}", RuntimeWarning, stacklevel=5)
        for segment, path in indexes.items():
            if segment not in sealed:  # its segment was compacted, or sealed just before a crash
                self._stale_files.append(path)
        for segment in sorted(sealed):
            problems, applied, _ = self._replay_segment(segment, sealed[segment])
            if problems:
                self._drop_unrecovered(segment, sealed[segment], applied, problems)
        if not active:  # closed cleanly: every segment was sealed
            self._finish_recovery(None, {})
            return
        problems, _, last = self._replay_segment(active, None)
        if problems:
            self.recovery["damaged_segments"][fmt.segment_name(active)] = "; ".join(problems)
        self._finish_recovery(active, last)

    def _finish_recovery(self, tail: int | None, tail_last: dict[bytes, tuple[int, int]]) -> None:
        if self._used > self.capacity_bytes:
            raise CapacityExceededError(
                f"folder {str(self.path)!r} holds {self._used} bytes of values; capacity_bytes "
                f"{self.capacity_bytes} is too small to open it")
        for path in self._stale_files:
            self._remove_file(path)
        if tail in self._segment_size:  # the old tail is sealed as it is now, with its index
            fmt.write_atomic(self._index_path(tail), fmt.encode_index(tail, self._folder_id, tail_last), self.sync)
        self._open_new_segment()
        empty = [s for s in sorted(self._segment_size) if s != self._active and s not in self._damaged_lengths
                 and self._segment_live[s] <= min(fmt.SEGMENT_HEADER_BYTES, self._segment_size[s])]
        self._forget_segments(empty)
        # A key dropped for damage in one segment but written again in a later one lost nothing.
        self.recovery["dropped_keys"] = [k for k in self.recovery["dropped_keys"] if k not in self._index]
        self._dropped = set(self.recovery["dropped_keys"])
        for key in self.recovery["dropped_keys"]:  # keep any older record of it dead
            self._write_tombstone(key)
        for segment in sorted(self._damaged_lengths):  # copy what verified, then remove the file
            self._compact_segment(segment)

    def _replay_segment(self, segment: int, sealed_len: int | None):
        """Apply the valid records of one segment; ``sealed_len`` None means the tail.

        Returns (problems found, {offset: encoded key} of applied records, the last record of
        each key as (offset, kind)).  Runtime complexity: O(segment bytes).
        """
        tail = sealed_len is None
        name = fmt.segment_name(segment)
        data = fmt.read_file(self._segment_path(segment))
        problems: list[str] = []
        foreign_content = False
        if data is None:
            if tail:
                raise CorruptTierError(
                    f"tier folder {str(self.path)!r}: the active segment {name} is missing or not a regular "
                    f"file, so the keys it changed cannot be told; restore it or delete the folder")
            problems.append("missing or not a regular file")
            data = b""
        elif tail and len(data) < fmt.SEGMENT_HEADER_BYTES:  # created just before a crash
            self._remove_file(self._segment_path(segment))
            return problems, {}, {}
        else:
            header = fmt.parse_segment_header(data)
            if header is None:
                problems.append("bad segment header")
            elif header != (segment, self._folder_id):
                problems.append(f"its header names segment {header[0]} of folder {header[1].hex()}, not this one")
                foreign_content = True
                if tail:
                    raise CorruptTierError(f"tier folder {str(self.path)!r}: the active segment {name}: {problems[0]}")
            if not tail and len(data) != sealed_len:
                problems.append(f"{len(data)} bytes, sealed at {sealed_len}")
        self._segment_size[segment] = len(data)
        self._segment_live[segment] = min(fmt.SEGMENT_HEADER_BYTES, len(data))
        end = len(data) if tail else min(len(data), sealed_len)
        if foreign_content:
            end = 0  # another segment's records: apply none of them
        applied: dict[int, bytes] = {}
        last: dict[bytes, tuple[int, int]] = {}
        offset = fmt.SEGMENT_HEADER_BYTES
        while offset < end:
            parsed = fmt.parse_record_header(data, offset, end)
            if parsed is None:
                nxt = fmt.find_next_record(data, offset + 1, end)
                named = fmt.damaged_record_keys(data, offset, end, self._index)
                if tail:
                    self._check_tail_damage(name, data, offset, end, nxt, named)
                for key in named:
                    self._drop_key(key)
                self.recovery["corrupt"] += bool(named)
                if nxt is None:
                    if tail:  # a torn write, or the damaged last record (its key was dropped)
                        self._drop_tail(segment, offset)
                    else:
                        problems.append(f"no valid record from offset {offset} to {end}")
                    break
                problems.append(f"damaged bytes at offsets {offset}..{nxt}")
                self.recovery["skipped_bytes"] += nxt - offset
                offset = nxt
                continue
            kind, key_bytes, meta_len, payload_len, body_crc = parsed
            record_bytes = fmt.RECORD_HEADER_BYTES + len(key_bytes) + meta_len + payload_len
            if offset + record_bytes > end:  # torn write: the put/delete never completed
                if tail:
                    self._drop_tail(segment, offset)
                else:
                    problems.append(f"the record at offset {offset} runs past the end")
                break
            key = fmt.stored_key(key_bytes)
            if key is None:  # not a key this library wrote (a checksummed foreign record): skip it
                self.recovery["corrupt"] += 1
                applied[offset] = key_bytes
                offset += record_bytes
                continue
            meta_start = offset + fmt.RECORD_HEADER_BYTES + len(key_bytes)
            meta = bytes(data[meta_start:meta_start + meta_len])
            payload_offset = meta_start + meta_len
            body = zlib.crc32(memoryview(data)[payload_offset:payload_offset + payload_len], zlib.crc32(meta))
            if body != body_crc or (kind == fmt.KIND_PUT and not fmt.meta_ok(meta, payload_len)):
                # Complete but damaged: drop the key (an older value would be silently stale).
                self._drop_key(key)
                self.recovery["corrupt"] += 1
                problems.append(f"the record at offset {offset} fails its checksum")
                offset += record_bytes
                continue
            self._apply(key, kind, segment, offset, record_bytes, payload_offset, payload_len, meta, body_crc)
            applied[offset] = key_bytes
            last[key_bytes] = (offset, kind)
            offset += record_bytes
        return problems, applied, last

    def _check_tail_damage(self, name: str, data: bytes, offset: int, end: int, nxt: int | None,
                           named: list) -> None:
        """In the tail nothing else records which keys changed, so damaged bytes are accepted
        only when they are exactly one record whose key is known (its stated length reaches the
        next valid record or the end), or what a crash leaves at the end (a record prefix)."""
        stop = end if nxt is None else nxt
        if named and fmt.stated_record_bytes(data, offset, end) == stop - offset:
            return
        if nxt is None and not named and fmt.is_record_prefix(data, offset, end):
            return
        raise CorruptTierError(
            f"tier folder {str(self.path)!r}: the active segment {name} has damaged bytes at offsets "
            f"{offset}..{stop} that are no torn write and no single record with a known key, so which keys "
            f"they changed cannot be told; restore the file or delete the folder")

    def _apply(self, key: Hashable, kind: int, segment: int, offset: int, record_bytes: int,
               payload_offset: int, payload_len: int, meta: bytes, body_crc: int) -> None:
        previous = self._index.get(key)
        if previous is not None:
            self._used -= previous.payload_len
        self._supersede(key)
        self.recovery["records"] += 1
        if kind == fmt.KIND_PUT:
            self._index[key] = fmt.Location(segment, offset, record_bytes, payload_offset, payload_len, meta, body_crc)
            self._segment_live[segment] += record_bytes
            self._used += payload_len
        elif any(s < segment for s in self._segment_size):  # an older segment may hold the value
            self._tombstones[key] = (segment, offset, record_bytes)
            self._segment_live[segment] += record_bytes

    def _drop_unrecovered(self, segment: int, sealed_len: int, applied: dict[int, bytes],
                          problems: list[str]) -> None:
        """A sealed segment is damaged: drop every key whose last record in it (from its index)
        was not applied, so no older value and no deleted key can come back."""
        name = fmt.segment_name(segment)
        index = fmt.decode_index(fmt.read_file(self._index_path(segment)) or b"", segment, self._folder_id)
        if index is None:
            raise CorruptTierError(
                f"tier folder {str(self.path)!r}: segment {name} is damaged ({'; '.join(problems)}) and its "
                f"index {fmt.index_name(segment)} is missing or damaged, so the keys whose newer values or "
                f"deletions it held cannot be told; refusing to open rather than serve stale values (restore "
                f"the segment, or delete the folder to start empty)")
        for key_bytes, (offset, _) in index.items():
            if applied.get(offset) == key_bytes:
                continue
            key = fmt.stored_key(key_bytes)
            if key is not None:
                self._drop_key(key)
        self.recovery["damaged_segments"][name] = "; ".join(problems)
        self._damaged_lengths[segment] = sealed_len

    def _drop_key(self, key: Hashable) -> None:
        """Forget every value of ``key`` and list it in ``recovery["dropped_keys"]`` (the caller
        writes its tombstone, recovery once it ends, so an older record can never resurface)."""
        previous = self._index.get(key)
        if previous is not None:
            self._used -= previous.payload_len
        self._supersede(key)
        if key not in self._dropped:
            self._dropped.add(key)
            self.recovery["dropped_keys"].append(key)

    def _drop_tail(self, segment: int, offset: int) -> None:
        """Cut a torn record (and anything unparseable after it) off the end of the tail."""
        self.recovery["torn"] += 1
        os.truncate(self._segment_path(segment), offset)
        self._segment_size[segment] = offset

    def _remove_file(self, path: Any) -> None:
        os.unlink(path)
        self.recovery["removed_files"].append(path.name)


def _manifest_consistent(manifest: dict) -> bool:
    sealed, active = manifest["sealed"], manifest["active"]
    newest = max([active, *sealed])
    return (active >= 0 and manifest["next_segment"] > newest and all(s >= 1 for s in sealed)
            and (not active or all(s < active for s in sealed)) and all(n >= 0 for n in sealed.values()))
