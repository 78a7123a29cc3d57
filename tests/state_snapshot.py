"""A structure's whole state as comparable plain values, to assert that a call that raised changed nothing."""

from __future__ import annotations

import struct
from collections.abc import Mapping

import numpy as np
import pytest

from kvmm.errors import KvmmError

_SKIP = (type(lambda: 0), type(len), type)


def state_of(obj, _depth: int = 0, _seen=None):
    """Every attribute of ``obj``, recursively (arrays as dtype, shape and bytes; dicts as
    ordered item lists; sets as frozensets; floats by their bits, so NaN equals NaN).

    Locks, functions and classes are skipped; objects are followed 6 levels deep.
    """
    seen = set() if _seen is None else _seen
    if isinstance(obj, np.ndarray):
        return ("array", obj.dtype.str, obj.shape, obj.tobytes())
    if isinstance(obj, (np.generic,)):
        return ("scalar", obj.dtype.str, obj.tobytes())
    if isinstance(obj, float):
        return ("float", struct.pack("<d", obj))
    if obj is None or isinstance(obj, (bool, int, str, bytes, complex)):
        return obj
    if _depth > 6 or id(obj) in seen or isinstance(obj, _SKIP) or "lock" in type(obj).__name__.lower():
        return ("ref", type(obj).__name__)
    seen = seen | {id(obj)}
    rec = lambda x: state_of(x, _depth + 1, seen)  # noqa: E731
    if isinstance(obj, Mapping):
        return ("map", [(rec(k), rec(v)) for k, v in obj.items()])
    if isinstance(obj, (list, tuple)):
        return (type(obj).__name__, [rec(v) for v in obj])
    if isinstance(obj, (set, frozenset)):
        return ("set", frozenset(obj))
    if hasattr(obj, "__dict__") or hasattr(obj, "__slots__"):
        attrs = dict(vars(obj)) if hasattr(obj, "__dict__") else {}
        for name in getattr(type(obj), "__slots__", ()):
            if hasattr(obj, name):
                attrs[name] = getattr(obj, name)
        return (type(obj).__name__, [(k, rec(v)) for k, v in sorted(attrs.items())])
    if hasattr(obj, "__iter__") and iter(obj) is not obj:  # deque, SortedList, ... (not itertools.count)
        return (type(obj).__name__, [rec(v) for v in obj])
    return ("repr", repr(obj))


def raises_unchanged(obj, exc, fn, *args, match=None, **kw):
    """``fn(*args, **kw)`` raises ``exc`` (a KvmmError; its message matching ``match`` when given)
    and ``obj``'s attributes are exactly as before."""
    before = state_of(obj)
    with pytest.raises(exc, match=match) as info:
        fn(*args, **kw)
    assert isinstance(info.value, KvmmError)
    assert state_of(obj) == before
