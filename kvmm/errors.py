"""One exception family for the whole toolkit.

Every error kvmm raises on bad input or an impossible request is a :class:`KvmmError`.
Each subclass also derives from the closest built-in exception (``ValueError``,
``IndexError``, ``LookupError``, ``RuntimeError``, ``OSError``) so code that already catches
those keeps working.  Messages say what was wrong *and* what was expected.

A call that raises one of these leaves the structure it was called on exactly as it was
before the call (every component tests this with a full snapshot of its arrays).
"""

from __future__ import annotations

__all__ = [
    "KvmmError",
    "BadInputError",
    "ShapeError",
    "DTypeError",
    "InvalidIdError",
    "OutOfBlocksError",
    "DoubleFreeError",
    "CapacityExceededError",
    "UnknownKeyError",
    "UnknownSequenceError",
    "StalePlanError",
    "LedgerStateError",
    "TraceFormatError",
    "TraceConversionError",
    "KvmmWarning",
    "RunWarning",
    "TraceConversionWarning",
    "CorruptEntryError",
    "CorruptTierError",
    "BackendUnavailableError",
    "CalibrationError",
]


class KvmmError(Exception):
    """Base class of every error raised by kvmm."""


class BadInputError(KvmmError, ValueError):
    """An argument has the wrong value: negative count, NaN, fraction out of range, ..."""


class ShapeError(BadInputError):
    """An array argument has the wrong number of dimensions or the wrong shape."""


class DTypeError(BadInputError, TypeError):
    """An array argument has the wrong dtype (floats where integer ids are expected, ...)."""


class InvalidIdError(KvmmError, IndexError):
    """A block, slot, token or position id is outside its valid range."""


class OutOfBlocksError(KvmmError, RuntimeError):
    """More blocks were asked for than the pool has free."""


class DoubleFreeError(KvmmError, RuntimeError):
    """A block (or claim, or commitment) was released that is not held."""


class CapacityExceededError(KvmmError, RuntimeError):
    """A tier, ledger or table would go over its capacity."""


class UnknownKeyError(KvmmError, LookupError):
    """A key (content key, claim id, tier entry) is not present."""

    def __str__(self) -> str:  # LookupError/KeyError quote their argument; keep it readable
        return str(self.args[0]) if self.args else ""


class UnknownSequenceError(UnknownKeyError):
    """A sequence id is not registered."""


class StalePlanError(KvmmError, RuntimeError):
    """A repack plan belongs to another table or was already committed."""


class LedgerStateError(KvmmError, RuntimeError):
    """A ledger operation is not valid in the claim's current state (consume before ready, ...)."""


class TraceFormatError(BadInputError):
    """A trace file has a malformed record; the message names the file and the line."""


class TraceConversionError(BadInputError):
    """A trace holds something the format it is written in cannot record (a block size the
    format fixes, a timestamp it cannot represent, ...): writing it would change the trace."""


class KvmmWarning(UserWarning):
    """Base class of the warnings kvmm emits."""


class RunWarning(KvmmWarning):
    """A simulation ran, but not quite as its config reads: an instance got no request, a price
    matched no tier, a router had nothing to choose.  ``SimResult.warnings`` keeps the same lines."""


class TraceConversionWarning(KvmmWarning):
    """A trace was written in a format that does not carry all of it; the message says what
    the reloaded trace loses or has changed (see docs/traces.md, "What each format keeps")."""


class CorruptEntryError(KvmmError, OSError):
    """A stored entry (file segment, remote value) failed its integrity check."""


class CorruptTierError(CorruptEntryError):
    """A tier's storage is damaged so that some entries' current values cannot be told apart
    from older ones (a file tier refuses to open rather than serve stale data)."""


class BackendUnavailableError(KvmmError, ConnectionError):
    """A remote backend (Redis server, ...) cannot be reached."""


class CalibrationError(BadInputError):
    """A calibration file or object does not match the model shape or format version."""
