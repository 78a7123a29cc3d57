"""The one layout of a stored value of the adapters that keep KV bytes in a kvmm tier (LMCache's
storage plugin, SGLang's HiCache storage): an 8-byte magic naming the adapter, the header's length
(4 bytes, little-endian), a JSON header, then the tensor's bytes. Engine-independent: imports no
engine; each adapter owns its magic and its header's fields.
"""

from __future__ import annotations

import numpy as np


def header_prefix(magic: bytes, header: bytes) -> np.ndarray:
    """Read-only uint8 array of ``magic``, the header length and ``header``.
    Runtime complexity: O(len(header))."""
    prefix = np.frombuffer(magic + len(header).to_bytes(4, "little") + header, np.uint8)
    prefix.flags.writeable = False
    return prefix


def join(prefix: np.ndarray, data: np.ndarray) -> np.ndarray:
    """One new uint8 array: ``prefix`` (from :func:`header_prefix`) then ``data``.
    Runtime complexity: O(len(prefix) + len(data))."""
    out = np.empty(prefix.size + data.size, dtype=np.uint8)
    out[:prefix.size] = prefix
    out[prefix.size:] = data
    return out


def split(raw: np.ndarray, magic: bytes, what: str) -> tuple[bytes, np.ndarray]:
    """(header bytes, payload view) of a value :func:`join` wrote with ``magic``; ``ValueError``
    ("no kvmm {what} header") when it does not start with ``magic``.
    Runtime complexity: O(len(header)); the payload is a view, not a copy."""
    buf = raw.view(np.uint8).reshape(-1)
    if bytes(buf[:len(magic)]) != magic:
        raise ValueError(f"no kvmm {what} header")
    start = len(magic) + 4
    n = int.from_bytes(bytes(buf[len(magic):start]), "little")
    return bytes(buf[start:start + n]), buf[start + n:]
