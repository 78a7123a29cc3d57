"""Shared plumbing of every tier: spec resolution, key and value checks, transfer statistics.

Keys
----
Every tier accepts the same keys, so a policy or a simulator can move an entry between tiers
unchanged: Python ``int`` (numpy integers are normalised to ``int``, so ``np.uint64(5)`` and
``5`` are one key), ``str``, ``bytes`` (``np.str_`` / ``np.bytes_`` become ``str`` / ``bytes``),
and tuples of these (nested tuples allowed, at most ``MAX_KEY_DEPTH`` = 32 levels).  Bools,
floats and other objects raise :class:`~kvmm.errors.DTypeError`: ``True == 1`` and NaN would
make two different keys collide or never match.  File and remote tiers store the key as the
UTF-8 ``repr`` of its normalised form (``encode_key``), which ``decode_key`` reads back.

Values
------
A value is a numpy array (or anything ``np.asarray`` turns into one) of a numeric or bool dtype
(kinds ``b i u f c``); its bytes, dtype and shape are stored, and ``get`` returns an array equal
to what was put, with the same dtype and shape.
"""

from __future__ import annotations

import ast
from collections.abc import Hashable
from typing import Any

import numpy as np

from kvmm._validate import as_array, as_count
from kvmm.errors import BadInputError, DTypeError, UnknownKeyError
from kvmm.tiers.spec import TierSpec, preset

__all__ = ["TierBase", "normalize_key", "normalize_keys", "encode_key", "decode_key", "stored_key", "as_value_array",
           "resolve_spec"]

_VALUE_KINDS = "biufc"
MAX_KEY_DEPTH = 32  # nesting of tuple keys: deeper keys would overflow Python's recursion in repr/eval


class TierBase:
    """Name, capacity, timing model and transfer statistics shared by every tier.

    ``stats`` counts ``puts``, ``gets``, ``deletes``, ``bytes_written``, ``bytes_read`` and the
    modelled ``write_seconds`` / ``read_seconds`` (sum of ``transfer_seconds`` over the calls),
    so a replay can read off how much time the timing model charged.
    """

    def __init__(self, spec: TierSpec | str, capacity_bytes: int | None, name: str | None) -> None:
        self.spec = resolve_spec(spec, capacity_bytes)
        self.name = str(name) if name is not None else self.spec.name
        self.stats: dict[str, float] = {
            "puts": 0, "gets": 0, "deletes": 0,
            "bytes_written": 0, "bytes_read": 0,
            "write_seconds": 0.0, "read_seconds": 0.0,
        }

    @property
    def capacity_bytes(self) -> int:
        """Most bytes of values this tier holds at once."""
        return self.spec.capacity_bytes

    @property
    def free_bytes(self) -> int:
        return self.capacity_bytes - self.used_bytes

    def transfer_seconds(self, nbytes: int, *, write: bool = False) -> float:
        """Modelled seconds to read (or write) ``nbytes``: ``latency_s + nbytes / bandwidth``.

        Runtime complexity: O(1).
        """
        return self.spec.transfer_seconds(as_count(nbytes, "nbytes"), write=write)

    def get_many(self, keys: Any) -> list[np.ndarray]:
        """The values of several keys (a request's blocks, say), in order.

        All-or-nothing: an unknown key raises before any value is returned.  Remote tiers
        override this with one round trip.  Runtime complexity: O(total bytes).
        """
        ks = normalize_keys(keys)
        for k in ks:
            if not self.contains(k):
                raise UnknownKeyError(f"tier {self.name!r} holds no entry {k!r}")
        return [self.get(k) for k in ks]

    # -- bookkeeping used by subclasses -------------------------------------------------------
    def _count_put(self, nbytes: int) -> None:
        self.stats["puts"] += 1
        self.stats["bytes_written"] += nbytes
        self.stats["write_seconds"] += self.spec.transfer_seconds(nbytes, write=True)

    def _count_get(self, nbytes: int) -> None:
        self.stats["gets"] += 1
        self.stats["bytes_read"] += nbytes
        self.stats["read_seconds"] += self.spec.transfer_seconds(nbytes)

    def _count_delete(self) -> None:
        self.stats["deletes"] += 1

    def __len__(self) -> int:
        return len(self.keys())

    def __contains__(self, key: Hashable) -> bool:
        return self.contains(key)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(name={self.name!r}, used={self.used_bytes}, "
                f"capacity={self.capacity_bytes})")


def resolve_spec(spec: TierSpec | str, capacity_bytes: int | None) -> TierSpec:
    """A :class:`TierSpec` from a spec or a preset name, resized to ``capacity_bytes`` if given."""
    if isinstance(spec, str):
        spec = preset(spec)
    elif not isinstance(spec, TierSpec):
        raise BadInputError(f"spec must be a TierSpec or a preset name, got {type(spec).__name__}")
    if capacity_bytes is not None:
        spec = spec.with_capacity(as_count(capacity_bytes, "capacity_bytes"))
    return spec


def normalize_key(key: Any, _depth: int = 0) -> Hashable:
    """The canonical form of a tier key (numpy ints -> int), or :class:`DTypeError`.

    A tuple nested more than ``MAX_KEY_DEPTH`` levels is a :class:`BadInputError`.
    Runtime complexity: O(size of the key).
    """
    if isinstance(key, (bool, np.bool_)):
        raise DTypeError(f"tier keys must be int, str, bytes or tuples of them, got bool {key!r}")
    if isinstance(key, (int, np.integer)):
        return int(key)
    if isinstance(key, str):
        return str(key)  # subclasses (np.str_) -> str: their repr would not decode back
    if isinstance(key, bytes):
        return bytes(key)  # np.bytes_ -> bytes, likewise
    if isinstance(key, tuple):
        if _depth >= MAX_KEY_DEPTH:
            raise BadInputError(f"tier keys may nest tuples at most {MAX_KEY_DEPTH} levels deep")
        return tuple(normalize_key(part, _depth + 1) for part in key)
    raise DTypeError(f"tier keys must be int, str, bytes or tuples of them, got {type(key).__name__} {key!r}")


def normalize_keys(keys: Any, name: str = "keys") -> list[Hashable]:
    """A list of normalised keys from a list, tuple or 1-D array of keys (``5`` or text is a DTypeError)."""
    if isinstance(keys, (str, bytes, int, np.integer)) or not hasattr(keys, "__iter__"):
        raise DTypeError(f"{name} must be a list of keys, got {type(keys).__name__} {keys!r}")
    return [normalize_key(k) for k in keys]


def encode_key(key: Any) -> bytes:
    """The bytes under which file and remote tiers store ``key`` (UTF-8 repr of its normal form)."""
    return repr(normalize_key(key)).encode("utf-8")


def decode_key(raw: bytes) -> Hashable:
    """Inverse of :func:`encode_key`."""
    return ast.literal_eval(raw.decode("utf-8"))


def stored_key(raw: bytes) -> Hashable | None:
    """The normal key that ``raw`` encodes (:func:`encode_key`), or None when ``raw`` is not a
    key this library wrote (damaged or foreign bytes)."""
    try:
        return normalize_key(decode_key(raw))
    except Exception:  # any bytes may be here: not UTF-8, a bad literal, too deep, not a key type, ...
        return None


def as_value_array(data: Any, name: str = "data") -> np.ndarray:
    """``data`` as a C-contiguous numeric numpy array (no copy when it already is one).

    A ragged nested list is a :class:`~kvmm.errors.ShapeError`, text or objects a :class:`DTypeError`.
    """
    arr = data if isinstance(data, np.ndarray) else as_array(data, name)
    if arr.dtype.kind not in _VALUE_KINDS:
        raise DTypeError(f"{name} must be a numeric or bool array, got dtype {arr.dtype}; "
                         f"expected one of the kinds bool/int/uint/float/complex")
    # (np.ascontiguousarray would turn a 0-d array into shape (1,))
    return arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)
