"""The one documented place a process gets its prefix-cache secret: :func:`prefix_secret`.

Content keys are keyed hashes (SipHash-2-4-128) of token blocks under a 16-byte secret; anyone
who knows the secret can compute every key, and so predict, probe or collide with other
tenants' cached blocks.  Examples and reproductions call ``prefix_secret()`` instead of
writing a constant; see the "Security" section of docs/allocator.md.
"""

from __future__ import annotations

import os
import secrets

from kvmm.errors import BadInputError

__all__ = ["prefix_secret", "SECRET_ENV", "SECRET_FILE_ENV"]

SECRET_ENV = "KVMM_PREFIX_SECRET"  # 32 hex digits (16 bytes)
SECRET_FILE_ENV = "KVMM_PREFIX_SECRET_FILE"  # path of a file holding 32 hex digits or 16 raw bytes
_process_secret: bytes | None = None  # the random fallback, drawn once per process


def prefix_secret() -> bytes:
    """The 16-byte prefix-cache secret of this process.

    In order: ``$KVMM_PREFIX_SECRET`` (32 hex digits); else the file named by
    ``$KVMM_PREFIX_SECRET_FILE`` (32 hex digits, or exactly 16 raw bytes); else a random secret
    drawn once per process (``secrets.token_bytes``), so every allocator of the process shares
    keys but no other process (nor this one after a restart) can compute them.  Set one of the
    variables, from a secret store, when several processes or restarts must share cache hits.
    A malformed value or an unreadable file raises :class:`~kvmm.errors.BadInputError`.
    Runtime complexity: O(1).
    """
    global _process_secret
    value = os.environ.get(SECRET_ENV)
    if value is not None:
        return _parse(value.strip().encode("ascii", "replace"), f"${SECRET_ENV}")
    path = os.environ.get(SECRET_FILE_ENV)
    if path is not None:
        try:
            with open(path, "rb") as fh:
                raw = fh.read(4096)
        except OSError as err:
            raise BadInputError(f"${SECRET_FILE_ENV}={path!r} cannot be read ({err.strerror}); "
                                "expected a file holding the 16-byte secret") from None
        return raw if len(raw) == 16 else _parse(raw.strip(), f"the file ${SECRET_FILE_ENV}={path!r}")
    if _process_secret is None:
        _process_secret = secrets.token_bytes(16)
    return _process_secret


def _parse(text: bytes, where: str) -> bytes:
    try:
        secret = bytes.fromhex(text.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        secret = b""
    if len(secret) != 16:
        raise BadInputError(f"{where} must hold 32 hex digits (a 16-byte secret), got {len(text)} characters")
    return secret
