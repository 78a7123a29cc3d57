"""Input checking shared by every component.

Each helper returns a *new* validated array (never a view the caller could mutate under us)
or raises a :class:`~kvmm.errors.KvmmError` subclass whose message names the argument, what it
got and what was expected.  Validation happens before any state changes, which is how every
structure keeps its "a call that raises changes nothing" promise.
"""

from __future__ import annotations

import functools
import json
import math
import re
from typing import Any

import numpy as np

from kvmm.errors import BadInputError, DTypeError, InvalidIdError, ShapeError

__all__ = ["as_array", "as_hashable", "as_key_set", "as_index_array", "as_key_array", "as_count", "as_fraction",
           "as_positive_float", "check_ids_in_range", "short_repr", "strict_json", "parse_bytes", "MAX_INT64", "MAX_UNITS",
           "MAX_INSTANCES", "MAX_JSON_DEPTH", "MAX_JSON_DIGITS"]

#: The largest count that fits int64: a larger Python int overflows every array, numba kernel and C
#: call it reaches.
MAX_INT64 = 2**63 - 1
#: The largest capacity or entry size, in size units (bytes under a tier), a structure accepts: a
#: few of them added or doubled in int64 arithmetic (queue totals, LIRS's ``2 x capacity``, a
#: capacity plus the incoming size) stay below 2**63.  2**60 bytes is 1 EiB.
MAX_UNITS = 2**60
#: The most instances a cluster structure (BlockIndex, ClusterView, a router) is built for.
MAX_INSTANCES = 2**20
#: :func:`strict_json`'s limits: objects and lists nested deeper than this (a kvmm file nests a
#: handful of levels), integers of more digits than a 64-bit value has.
MAX_JSON_DEPTH = 32
MAX_JSON_DIGITS = 20
#: the units a size flag (``--tier``, ``--gpu-kv``) takes, lower-case: binary and decimal
BYTE_UNITS = {"b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40, "pib": 1 << 50,
              "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15}


def as_index_array(x: Any, name: str, *, dtype=np.int64, ndim: int = 1) -> np.ndarray:
    """Return ``x`` as a contiguous integer array of ``dtype`` (copy), rejecting floats/bools.

    Accepts Python ints, lists of ints and integer numpy arrays of any width; values must fit
    in ``dtype``.
    """
    if dtype is np.int64 and ndim == 1:  # fast paths (hot in simulations): nothing to convert or range-check
        if type(x) is np.ndarray and x.dtype == np.int64 and x.ndim == 1:
            return x.copy()
        if type(x) is list and x:
            for v in x:  # a plain loop: several times cheaper than all() over a generator for short lists
                if type(v) is not int:
                    break
            else:
                try:
                    return np.array(x, dtype=np.int64)
                except OverflowError:
                    pass  # the general path below names the value that does not fit
    arr = as_array(x, name)
    if arr.ndim == 0 and ndim == 1:
        arr = arr.reshape(1)
    if arr.size == 0 and arr.dtype.kind not in "iu":
        arr = arr.astype(dtype)  # an empty list arrives as float64; accept it
    if arr.dtype.kind not in "iu":
        raise DTypeError(f"{name} must hold integers, got dtype {arr.dtype}; expected an integer array")
    if arr.ndim != ndim:
        raise ShapeError(f"{name} must be {ndim}-dimensional, got shape {arr.shape}")
    if arr.size:
        info = _iinfo(dtype)
        lo, hi = arr.min(), arr.max()
        if int(lo) < info.min or int(hi) > info.max:
            raise BadInputError(f"{name} has values in [{lo}, {hi}] that do not fit {np.dtype(dtype).name}")
    return np.ascontiguousarray(arr, dtype=dtype).copy()


def check_ids_in_range(ids: np.ndarray, n: int, name: str) -> None:
    """Raise :class:`InvalidIdError` unless every id is in ``[0, n)``."""
    if ids.size:
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= n:
            bad = int(ids[(ids < 0) | (ids >= n)][0])
            raise InvalidIdError(f"{name} contains id {bad}; expected ids in [0, {n})")


def as_key_array(x: Any, name: str = "keys") -> np.ndarray:
    """Return 128-bit keys as a contiguous ``(n, 2)`` uint64 array (copy).

    Accepts an ``(n, 2)`` unsigned/signed 64-bit integer array, or a 1-D integer array of ``n``
    keys (each widened to ``(key, 0)``), e.g. a trace's block ids.
    """
    arr = as_array(x, name)
    if arr.size == 0 and arr.dtype.kind not in "iu":
        arr = arr.astype(np.uint64).reshape(0, 2)
    if arr.dtype.kind not in "iu":
        raise DTypeError(f"{name} must be an integer array of 128-bit keys (n, 2) uint64, got dtype {arr.dtype}")
    if arr.ndim == 1:
        out = np.zeros((arr.shape[0], 2), dtype=np.uint64)
        out[:, 0] = arr.astype(np.uint64)
        return out
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise ShapeError(f"{name} must have shape (n, 2) (two uint64 words per key), got {arr.shape}")
    return np.ascontiguousarray(arr.astype(np.uint64, copy=True))


def as_count(x: Any, name: str, *, minimum: int = 0, maximum: int | None = None) -> int:
    """Return ``x`` as a Python int in ``[minimum, maximum]``; reject floats, bools, text and NaN.
    Where the value reaches int64 arithmetic pass a bound (:data:`MAX_INT64`, :data:`MAX_UNITS`,
    :data:`MAX_INSTANCES`)."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
        raise DTypeError(f"{name} must be an integer, got {short_repr(x)} ({type(x).__name__})")
    if int(x) < minimum:
        raise BadInputError(f"{name} must be >= {minimum}, got {short_repr(int(x))}")
    if maximum is not None and int(x) > maximum:
        raise BadInputError(f"{name} must be <= {maximum}, got {short_repr(int(x))}")
    return int(x)


def short_repr(x: Any) -> str:
    """``repr(x)`` for a message, shortened: a huge int as its size (a 5,000-digit message helps no
    one, and Python refuses to print an int of more than 4,300 digits)."""
    if isinstance(x, int) and not isinstance(x, bool) and abs(x) >= 10**30:
        return f"{'-' if x < 0 else ''}an integer of about {int(x.bit_length() * 0.30103) + 1} digits"
    text = repr(x)
    return text if len(text) <= 80 else text[:77] + "..."


def parse_bytes(text: str, what: str, *, default_unit: str = "", example: str = "64GiB") -> tuple[int, str]:
    """``"64GiB"`` -> ``(68719476736, "gib")``: a size flag's bytes and its unit (lower-case;
    ``default_unit`` when the text has none, ``"b"`` for a bare 0).  Anything else, or more than
    :data:`MAX_UNITS` bytes, is a one-line :class:`BadInputError` that starts with ``what``
    (``example`` is the size it suggests)."""
    m = re.fullmatch(r"([0-9]*\.?[0-9]+)\s*([A-Za-z]*)", text.strip())
    unit = (m.group(2) if m else "").lower() or default_unit
    if m and not m.group(2) and float(m.group(1)) == 0:
        unit = "b"  # a bare 0 needs no unit
    if not m or unit not in BYTE_UNITS:
        raise BadInputError(f"{what}: bad size {short_repr(text)}; expected a number and a unit "
                            "(B, KiB, MiB, GiB, TiB, PiB, KB, MB, GB, TB, PB)")
    nbytes = float(m.group(1)) * BYTE_UNITS[unit]  # inf for 400 digits
    if not nbytes <= MAX_UNITS:
        raise BadInputError(f"{what}: size {short_repr(text)} is more than 2**60 bytes (1 EiB); "
                            f"expected a size such as {example}")
    return int(nbytes), unit


def as_hashable(key: Any, name: str = "key") -> Any:
    """Return ``key`` if it can be a dict key; unhashable keys (lists, arrays) are a
    :class:`DTypeError`; NaN and keys nested too deeply to hash or compare a :class:`BadInputError`.
    Runtime complexity: O(size of the key)."""
    if isinstance(key, (float, np.floating)) and key != key:
        raise BadInputError(f"{name} is NaN, which never equals itself; expected a key that can be found again")
    try:
        hash(key)
    except TypeError:
        raise DTypeError(f"{name} must be hashable (an int, str, bytes or tuple), got {type(key).__name__}") from None
    except RecursionError:
        raise BadInputError(f"{name} is nested too deeply to use as a key") from None
    return key


def as_key_set(keys: Any, name: str = "protected") -> set | frozenset:
    """Return an iterable of hashable keys as a set (a given set or frozenset as is).

    A non-iterable (``5``) or text is a :class:`DTypeError`, as is an unhashable member."""
    if isinstance(keys, (set, frozenset)):
        return keys
    if isinstance(keys, (str, bytes)) or not hasattr(keys, "__iter__"):
        raise DTypeError(f"{name} must be a collection of keys (set, list, tuple), got {type(keys).__name__}")
    try:
        return set(keys)
    except TypeError:
        raise DTypeError(f"{name} must hold hashable keys, got an unhashable member") from None
    except RecursionError:
        raise BadInputError(f"{name} holds a key nested too deeply to use as a key") from None


def as_fraction(x: Any, name: str, *, include_zero: bool = False) -> float:
    """Return ``x`` as a float in ``(0, 1]`` (or ``[0, 1]``); reject NaN and out-of-range values."""
    rng = "[0, 1]" if include_zero else "(0, 1]"
    v = _as_real(x, name, f"a number in {rng}")
    lo_ok = v >= 0.0 if include_zero else v > 0.0
    if math.isnan(v) or not lo_ok or v > 1.0:
        raise BadInputError(f"{name} must be in {rng}, got {x!r}")
    return v


def as_positive_float(x: Any, name: str, *, allow_zero: bool = False) -> float:
    """Return ``x`` as a finite float ``> 0`` (or ``>= 0``)."""
    v = _as_real(x, name, "a finite number")
    if not math.isfinite(v) or v < 0.0 or (v == 0.0 and not allow_zero):
        want = ">= 0" if allow_zero else "> 0"
        raise BadInputError(f"{name} must be a finite number {want}, got {x!r}")
    return v


@functools.cache
def _iinfo(dtype) -> np.iinfo:
    """``np.iinfo(dtype)``, built once per dtype (it is rebuilt on every call otherwise)."""
    return np.iinfo(dtype)


def _as_real(x: Any, name: str, want: str) -> float:
    """``float(x)`` for a real number (Python or numpy, not bool); text and containers are refused."""
    if isinstance(x, (str, bytes, bool, np.bool_)) or (isinstance(x, np.ndarray) and x.ndim != 0):
        raise DTypeError(f"{name} must be {want}, got {short_repr(x)} ({type(x).__name__})")
    try:
        return float(x)
    except OverflowError:
        raise BadInputError(f"{name} must be {want}, got {short_repr(x)}, too large for a float") from None
    except (TypeError, ValueError):
        raise DTypeError(f"{name} must be {want}, got {short_repr(x)} ({type(x).__name__})") from None


def as_array(x: Any, name: str) -> np.ndarray:
    """``np.asarray`` that refuses what numpy would silently convert or crash on.

    A ragged sequence (numpy's ValueError) or one nested too deeply (RecursionError) is a
    :class:`ShapeError`; a list holding booleans (``[0, True]`` silently becomes ``[0, 1]``)
    is a :class:`DTypeError`.
    """
    if isinstance(x, (list, tuple)) and _holds_bool(x):
        raise DTypeError(f"{name} holds booleans; expected numbers")
    try:
        return np.asarray(x)
    except (ValueError, RecursionError):
        raise ShapeError(f"{name} is a ragged or too deeply nested sequence; expected a flat array of numbers") from None


def _holds_bool(x: list | tuple, depth: int = 2) -> bool:
    """Whether a list (or a list of lists, ``depth`` levels) holds a bool."""
    for v in x:
        if isinstance(v, (bool, np.bool_)):
            return True
        if depth > 1 and isinstance(v, (list, tuple)) and _holds_bool(v, depth - 1):
            return True
    return False


def strict_json(data: str | bytes, what: str) -> Any:
    """JSON text (``bytes`` must be UTF-8; a BOM is allowed) as Python values, stricter than
    ``json.loads``: a key twice in one object, ``NaN`` / ``Infinity``, a float beyond float
    range (``1e400``), an integer of more than :data:`MAX_JSON_DIGITS` digits, or nesting deeper
    than :data:`MAX_JSON_DEPTH` is a one-line :class:`BadInputError` that starts with ``what``
    (the file or flag), as is text that is not UTF-8 or not JSON.
    Runtime complexity: O(len(data)).
    """
    if isinstance(data, (bytes, bytearray, memoryview)):
        raw = bytes(data)
        try:
            data = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise BadInputError(f"{what}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); "
                                "expected a UTF-8 JSON file") from None
    try:
        value = json.loads(data, object_pairs_hook=_object_without_repeats, parse_int=_bounded_int,
                           parse_float=_finite_float, parse_constant=_no_constant)
    except _RefusedJson as exc:
        raise BadInputError(f"{what}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise BadInputError(f"{what}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        raise BadInputError(f"{what}: nested too deeply; expected at most {MAX_JSON_DEPTH} levels") from None
    if _json_depth(value) > MAX_JSON_DEPTH:
        raise BadInputError(f"{what}: nested more than {MAX_JSON_DEPTH} levels deep; expected a shallower document")
    return value


class _RefusedJson(ValueError):
    """Raised from inside ``json.loads``'s hooks; :func:`strict_json` turns it into its one line."""


def _object_without_repeats(pairs: list) -> dict:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set = set()
        repeated = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise _RefusedJson(f"key {short_repr(repeated)} appears twice in one object; expected each key once "
                           "(JSON readers disagree on which value wins)")
    return out


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_JSON_DIGITS:  # before int(): Python refuses more than 4,300 digits itself
        raise _RefusedJson(f"an integer of {len(text.lstrip('-'))} digits ({text[:12]}...); expected at most "
                           f"{MAX_JSON_DIGITS} digits (64 bits)")
    return int(text)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _RefusedJson(f"the number {short_repr(text)} is beyond float range; expected a finite number")
    return value


def _no_constant(name: str) -> Any:
    raise _RefusedJson(f"{name} is not a JSON number; expected a finite number")


def _json_depth(value: Any) -> int:
    """How many objects and lists deep ``value`` nests (iterative: deep input must not recurse)."""
    deepest = 0
    stack = [(value, 1)] if isinstance(value, (dict, list)) else []
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth > MAX_JSON_DEPTH:
            break
        for child in (item.values() if isinstance(item, dict) else item):
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1))
    return deepest
