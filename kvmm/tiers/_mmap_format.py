"""On-disk format of :class:`~kvmm.tiers.MmapTier`: records, segment headers, segment indexes
and the manifest (encoding, parsing and atomic file writes; no tier state lives here).

A tier folder holds::

    LOCK                   flock'ed by the one MmapTier that owns the folder
    MANIFEST               the live segments, their sealed lengths and the active segment
    seg-000000000001.kvlog a segment: SEGMENT_HEADER then records, appended in order
    seg-000000000001.kvidx the index of a *sealed* segment: the last record of each key in it

Segment header (36 bytes, little endian)::

    0   4   magic b"KVMS"
    4   2   format version (1)
    6   2   reserved (0)
    8   8   generation: the segment number, also in the file name
    16  16  folder id: random bytes chosen when the folder was created (also in MANIFEST)
    32  4   zlib.crc32 of bytes 0..31

Record (``RECORD_HEADER`` then key, meta, payload)::

    0   4   magic b"KVMR"
    4   1   kind   1 = put, 2 = delete (tombstone)
    5   1   reserved (0)
    6   2   meta_len      length of the dtype/shape text, e.g. b"<f2|2,8,128"
    8   4   key_len       length of the encoded key (UTF-8 repr, see kvmm.tiers._base)
    12  8   payload_len   value bytes (C order)
    20  4   body_crc      zlib.crc32 of meta + payload
    24  4   header_crc    zlib.crc32 of bytes 0..23 + key

Segment index (written once, when the segment is sealed)::

    b"KVMI" | version u16 | reserved u16 | generation u64 | folder id 16 | count u32
    then ``count`` times: offset u64 | kind u8 | key_len u32 | key
    then zlib.crc32 of everything before it (u32)

MANIFEST is JSON followed by a newline and the crc32 of the JSON as 8 hex digits::

    {"format": 1, "folder_id": "<32 hex>", "next_segment": 4, "active": 3,
     "sealed": [[1, 65536], [2, 40960]]}
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import stat
import struct
import zlib
from collections.abc import Hashable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from kvmm.errors import BackendUnavailableError
from kvmm.tiers._base import encode_key, stored_key  # (stored_key: also fmt.stored_key for the recovery)

FORMAT_VERSION = 1
RECORD_MAGIC = b"KVMR"
KIND_PUT = 1
KIND_DELETE = 2
# magic, kind, reserved, meta_len, key_len, payload_len, body_crc  (header_crc follows)
RECORD_HEADER = struct.Struct("<4sBBHIQI")
U32 = struct.Struct("<I")
RECORD_HEADER_BYTES = RECORD_HEADER.size + U32.size  # 28
SEGMENT_MAGIC = b"KVMS"
SEGMENT_HEADER = struct.Struct("<4sHHQ16s")
SEGMENT_HEADER_BYTES = SEGMENT_HEADER.size + U32.size  # 36
INDEX_MAGIC = b"KVMI"
INDEX_HEADER = struct.Struct("<4sHHQ16sI")
INDEX_ENTRY = struct.Struct("<QBI")
_MAX_SALVAGED_KEY = 1 << 20  # longer key_len fields in a damaged header are taken as garbage
MANIFEST_NAME = "MANIFEST"
LOCK_NAME = "LOCK"
SEGMENT_RE = re.compile(r"^seg-(\d{12})\.kvlog$")
INDEX_RE = re.compile(r"^seg-(\d{12})\.kvidx$")
TEMP_RE = re.compile(r"^(MANIFEST|seg-\d{12}\.kvidx)\.tmp$")  # left by a crash in write_atomic


class Location(NamedTuple):
    """Where the current record of a key lives."""

    segment: int
    offset: int  # of the record header
    record_bytes: int
    payload_offset: int
    payload_len: int
    meta: bytes
    body_crc: int


def segment_name(segment: int) -> str:
    return f"seg-{segment:012d}.kvlog"


def index_name(segment: int) -> str:
    return f"seg-{segment:012d}.kvidx"


# -- segment header -------------------------------------------------------------------------------
def pack_segment_header(generation: int, folder_id: bytes) -> bytes:
    head = SEGMENT_HEADER.pack(SEGMENT_MAGIC, FORMAT_VERSION, 0, generation, folder_id)
    return head + U32.pack(zlib.crc32(head))


def parse_segment_header(data: bytes) -> tuple[int, bytes] | None:
    """``(generation, folder id)`` of a segment header, or None when it is not a valid one."""
    if len(data) < SEGMENT_HEADER_BYTES:
        return None
    head = bytes(data[:SEGMENT_HEADER.size])
    magic, version, reserved, generation, folder_id = SEGMENT_HEADER.unpack(head)
    (crc,) = U32.unpack(data[SEGMENT_HEADER.size:SEGMENT_HEADER_BYTES])
    if magic != SEGMENT_MAGIC or version != FORMAT_VERSION or reserved or zlib.crc32(head) != crc:
        return None
    return generation, folder_id


# -- records --------------------------------------------------------------------------------------
def pack_record_header(kind: int, key_bytes: bytes, meta: bytes, payload_len: int, body_crc: int) -> bytes:
    head = RECORD_HEADER.pack(RECORD_MAGIC, kind, 0, len(meta), len(key_bytes), payload_len, body_crc)
    return head + U32.pack(zlib.crc32(key_bytes, zlib.crc32(head)))


def parse_record_header(buf: Any, offset: int, size: int):
    """``(kind, key bytes, meta_len, payload_len, body_crc)`` or None if no valid header here."""
    if offset + RECORD_HEADER_BYTES > size:
        return None
    head = bytes(buf[offset:offset + RECORD_HEADER.size])
    magic, kind, reserved, meta_len, key_len, payload_len, body_crc = RECORD_HEADER.unpack(head)
    if magic != RECORD_MAGIC or kind not in (KIND_PUT, KIND_DELETE) or reserved != 0:
        return None
    key_start = offset + RECORD_HEADER_BYTES
    if key_start + key_len > size:
        return None
    key_bytes = bytes(buf[key_start:key_start + key_len])
    (header_crc,) = U32.unpack(buf[offset + RECORD_HEADER.size:offset + RECORD_HEADER_BYTES])
    if zlib.crc32(key_bytes, zlib.crc32(head)) != header_crc:
        return None
    return kind, key_bytes, meta_len, payload_len, body_crc


def stated_record_bytes(buf: Any, offset: int, size: int) -> int | None:
    """The record length a (possibly damaged) header at ``offset`` states, None if cut off."""
    if offset + RECORD_HEADER_BYTES > size:
        return None
    _, _, _, meta_len, key_len, payload_len, _ = RECORD_HEADER.unpack(bytes(buf[offset:offset + RECORD_HEADER.size]))
    return RECORD_HEADER_BYTES + key_len + meta_len + payload_len


def is_record_prefix(buf: Any, offset: int, size: int) -> bool:
    """Could ``buf[offset:size]`` be what a crash leaves of a record: a prefix of a header,
    or a header whose key is not complete yet?  (A complete header and key that fail their
    checksum, zeros, or garbage cannot be a torn write.)"""
    rest = bytes(buf[offset:min(size, offset + RECORD_HEADER_BYTES)])
    if rest[:4] != RECORD_MAGIC[:len(rest)]:
        return False
    if len(rest) > 4 and rest[4] not in (KIND_PUT, KIND_DELETE) or len(rest) > 5 and rest[5] != 0:
        return False
    if len(rest) < RECORD_HEADER_BYTES:
        return True
    key_len = RECORD_HEADER.unpack(rest[:RECORD_HEADER.size])[4]
    return offset + RECORD_HEADER_BYTES + key_len > size


def damaged_record_keys(buf: Any, offset: int, size: int, known: Any) -> list[Hashable]:
    """The keys a record header that failed its checks may have named (possibly none).

    Only a header whose whole key lies inside the file counts (a torn write appends header and
    key before the value, so it cannot leave those complete yet failing).  Two ways to name it:
    the key bytes at the stated ``key_len`` decode to a key (the damage is elsewhere in the
    header), and any ``known`` key that makes the header checksum match when put in place of
    the stored key and its length (the damage is in the key or in ``key_len``).
    Runtime complexity: O(len(known)), only for damaged headers.
    """
    if offset + RECORD_HEADER_BYTES > size:
        return []
    head = bytes(buf[offset:offset + RECORD_HEADER.size])
    fields = list(RECORD_HEADER.unpack(head))
    key_len = fields[4]
    key_start = offset + RECORD_HEADER_BYTES
    found: list[Hashable] = []
    if 0 < key_len <= _MAX_SALVAGED_KEY and key_start + key_len <= size:
        key = stored_key(bytes(buf[key_start:key_start + key_len]))
        if key is not None:
            found.append(key)
    (header_crc,) = U32.unpack(buf[offset + RECORD_HEADER.size:offset + RECORD_HEADER_BYTES])
    for candidate in known:
        key_bytes = encode_key(candidate)
        if candidate in found or key_start + len(key_bytes) > size:
            continue
        fields[4] = len(key_bytes)
        if zlib.crc32(key_bytes, zlib.crc32(RECORD_HEADER.pack(*fields))) == header_crc:
            found.append(candidate)
    return found


def find_next_record(buf: Any, start: int, size: int) -> int | None:
    pos = start
    while True:
        pos = buf.find(RECORD_MAGIC, pos, size)
        if pos < 0:
            return None
        if parse_record_header(buf, pos, size) is not None:
            return pos
        pos += 1


def encode_meta(arr: np.ndarray) -> bytes:
    return f"{arr.dtype.str}|{','.join(str(d) for d in arr.shape)}".encode("ascii")


def decode_meta(meta: bytes) -> tuple[np.dtype, tuple[int, ...]]:
    dtype_text, shape_text = meta.decode("ascii").rsplit("|", 1)  # dtype.str may hold "|"
    shape = tuple(int(d) for d in shape_text.split(",")) if shape_text else ()
    return np.dtype(dtype_text), shape


def meta_ok(meta: bytes, payload_len: int) -> bool:
    try:
        dtype, shape = decode_meta(meta)
    except (ValueError, TypeError, UnicodeDecodeError):
        return False
    return int(np.prod(shape, dtype=np.int64)) * dtype.itemsize == payload_len


# -- segment index --------------------------------------------------------------------------------
def encode_index(generation: int, folder_id: bytes, last: dict[bytes, tuple[int, int]]) -> bytes:
    """``last`` maps an encoded key to (offset, kind) of its last record in the segment."""
    parts = [INDEX_HEADER.pack(INDEX_MAGIC, FORMAT_VERSION, 0, generation, folder_id, len(last))]
    for key_bytes, (offset, kind) in last.items():
        parts.append(INDEX_ENTRY.pack(offset, kind, len(key_bytes)))
        parts.append(key_bytes)
    body = b"".join(parts)
    return body + U32.pack(zlib.crc32(body))


def decode_index(data: bytes, generation: int, folder_id: bytes) -> dict[bytes, tuple[int, int]] | None:
    """The mapping :func:`encode_index` wrote, or None when ``data`` is not that segment's index."""
    if len(data) < INDEX_HEADER.size + U32.size or zlib.crc32(data[:-4]) != U32.unpack(data[-4:])[0]:
        return None
    magic, version, _, gen, fid, count = INDEX_HEADER.unpack_from(data, 0)
    if magic != INDEX_MAGIC or version != FORMAT_VERSION or gen != generation or fid != folder_id:
        return None
    out: dict[bytes, tuple[int, int]] = {}
    pos = INDEX_HEADER.size
    for _ in range(count):
        offset, kind, key_len = INDEX_ENTRY.unpack_from(data, pos)
        pos += INDEX_ENTRY.size
        out[data[pos:pos + key_len]] = (offset, kind)
        pos += key_len
    return out if pos == len(data) - 4 else None


# -- manifest -------------------------------------------------------------------------------------
def encode_manifest(folder_id: bytes, next_segment: int, active: int, sealed: dict[int, int]) -> bytes:
    text = json.dumps({"format": FORMAT_VERSION, "folder_id": folder_id.hex(), "next_segment": next_segment,
                       "active": active, "sealed": sorted([s, n] for s, n in sealed.items())},
                      separators=(",", ":")).encode("ascii")
    return text + b"\n" + f"{zlib.crc32(text):08x}".encode("ascii")


def decode_manifest(data: bytes) -> dict | None:
    """The manifest's fields (``folder_id`` as bytes, ``sealed`` as a dict), or None if damaged."""
    text, _, crc = data.rpartition(b"\n")
    try:
        if int(crc, 16) != zlib.crc32(text):
            return None
        doc = json.loads(text)
        out = {"folder_id": bytes.fromhex(doc["folder_id"]), "next_segment": int(doc["next_segment"]),
               "active": int(doc["active"]), "sealed": {int(s): int(n) for s, n in doc["sealed"]}}
    except (ValueError, KeyError, TypeError):
        return None
    if doc.get("format") != FORMAT_VERSION or len(out["folder_id"]) != 16:
        return None
    return out


# -- files ----------------------------------------------------------------------------------------
def write_atomic(path: Path, data: bytes, sync: bool) -> None:
    """Replace ``path`` by ``data`` so that a crash leaves the old or the new file, never a mix:
    write a temporary file, (fsync it,) rename it over ``path``, (fsync the folder)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, [data], len(data), 0)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync:
        fsync_dir(path.parent)


def read_file(path: Path) -> bytes | None:
    """The bytes of a regular file, or None when it is missing or not a regular file."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):  # a folder, link or FIFO named like ours
            return None
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return None


def write_all(fd: int, parts: list, total: int, offset: int) -> None:
    """Write ``parts`` at ``offset`` (positional: a file shortened under us leaves a hole of
    zeros that recovery detects, instead of records landing at unexpected offsets)."""
    written = os.pwritev(fd, parts, offset)
    if written == total:
        return
    rest = memoryview(b"".join(bytes(p) for p in parts))[written:]  # a short write: finish it
    while rest:
        n = os.pwrite(fd, rest, offset + written)
        written += n
        rest = rest[n:]


def lock_folder(path: Path) -> int:
    try:
        fd = os.open(path / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise BackendUnavailableError(f"cannot open the lock file of tier folder {str(path)!r}: {exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise BackendUnavailableError(
            f"tier folder {str(path)!r} is open in another MmapTier (process or object); close it first") from None
    return fd


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
