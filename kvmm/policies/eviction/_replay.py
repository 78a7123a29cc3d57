"""``replay(order, keys, capacity, sizes=None, **params) -> hits``: one eviction order over a whole
reference stream, in numba, without a Python call per reference.

It gives the same request-by-request hits and misses as driving the order's policy class
through :class:`~kvmm.tiers.ManagedTier` (the tests check both against libCacheSim), but as one
kernel over arrays; the benchmarks time it against libCacheSim's C simulation.  Every built-in
order has one (:data:`REPLAY_ORDERS`, the names of :data:`~kvmm.policies.eviction.orders.ORDERS`).

The convention is libCacheSim's ``get``: a reference to a resident key is a hit (the order
updates its state); any other reference is a miss, and the key is inserted, making room first
as the order says; a key larger than the whole capacity is a miss and is not inserted.  With
``sizes=None`` every key has size 1, so ``capacity`` counts entries; with sizes it is in the
sizes' units (bytes), and a resident key keeps the size it was inserted with (libCacheSim's
``get`` does not resize on a hit).

Each order's kernel lives in its own module of :mod:`kvmm.policies.eviction._kernels`, named by
its row of :data:`~kvmm.policies.eviction.orders.ORDERS` and loaded on first use, so importing
this module compiles nothing.  A kernel is called as::

    kernel(keys, dense, n_unique, sizes, capacity, *params) -> np.ndarray[bool]

``keys`` the original int64 keys (orders that hash keys, e.g. W-TinyLFU's sketch, hash these, as
libCacheSim hashes object ids), ``dense`` the same keys renumbered ``0..n_unique-1`` in order of
first reference (so per-key state is a plain array), ``sizes`` int64 (all ones for entry
counts), ``capacity`` int64; ``params`` are the order's options in the order its ``PARAMS``
tuple names them.

Runtime complexity: O(n) for the renumbering, plus the order's own cost per reference.
``kvmm reproduce`` builds its miss-ratio-per-order tables on it (:mod:`kvmm.reproduce.orders`).
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

from kvmm._validate import MAX_UNITS, as_count
from kvmm.errors import BadInputError, DTypeError, ShapeError
from kvmm.policies.eviction.orders import ORDERS

__all__ = ["replay", "REPLAY_ORDERS", "dense_ids"]

_CHUNK = 1 << 18  # references renumbered per kernel call (the table grows between calls)
_MIN_TABLE = 1 << 10
_DIRECT_LIMIT = 1 << 16  # keys below this (plus 4 per reference) renumber through a direct table

#: every order ``replay`` knows
REPLAY_ORDERS: tuple[str, ...] = tuple(ORDERS)


def replay(order: str, keys: Any, capacity: int, sizes: Any = None, **params: Any) -> np.ndarray:
    """The hits mask (``bool``, one per reference) of ``order`` over ``keys`` at ``capacity``.

    ``keys``: a 1-D integer array (int64 or uint64; uint64 keys are reinterpreted as int64).
    ``capacity``: at most ``2**60`` (:data:`~kvmm._validate.MAX_UNITS`; the kernels add and double
    capacities and sizes in int64).  ``sizes``: None (entry counts) or a 1-D integer array in
    ``[0, 2**60]`` as long as ``keys``.
    ``params``: the order's options by libCacheSim's names (e.g. ``small_size_ratio`` for
    S3-FIFO); an unknown one is a :class:`BadInputError` naming those the order takes.
    Runtime complexity: O(n) plus the order's cost per reference.
    """
    kernel, names = _kernel(order)
    keys = _as_keys(keys)
    capacity = as_count(capacity, "capacity", maximum=MAX_UNITS)
    sizes = _as_sizes(sizes, keys.size)
    unknown = sorted(set(params) - {name for name, _ in names})
    if unknown:
        raise BadInputError(f"replay order {order!r} takes no option {unknown[0]!r}; "
                            f"it takes {[name for name, _ in names] or 'no options'}")
    values = tuple(params.get(name, default) for name, default in names)
    dense, n_unique = dense_ids(keys)
    return kernel(keys, dense, n_unique, sizes, np.int64(capacity), *values)


def dense_ids(keys: np.ndarray) -> tuple[np.ndarray, int]:
    """``keys`` (int64) renumbered ``0..m-1`` in order of first reference, and ``m``.

    Compact non-negative keys (block ids, object numbers: ``0 <= key < 4 * len(keys) + 65536``)
    go through a direct-address table, one array lookup per reference; any other keys through the
    shared open-addressing table (:func:`kvmm._kernels.get_or_insert_ids`, the stack-distance
    tracker's), run over chunks so the table grows with the distinct keys, not with the references.
    Runtime complexity: O(n) (expected, for the hash path).
    """
    if keys.size and 0 <= int(keys.min()) and int(keys.max()) < _DIRECT_LIMIT + 4 * keys.size:
        return _dense_ids_direct(keys, int(keys.max()))
    return _dense_ids_hashed(keys)


def _dense_ids_direct(keys: np.ndarray, max_key: int) -> tuple[np.ndarray, int]:
    # imported here on purpose: importing this module compiles and loads no kernel
    from kvmm.policies.eviction._kernels.classic import renumber_direct

    out = np.empty(keys.size, np.int64)
    n_unique = renumber_direct(keys, np.full(max_key + 1, -1, np.int64), out)
    return out, int(n_unique)


def _dense_ids_hashed(keys: np.ndarray) -> tuple[np.ndarray, int]:
    # imported here on purpose: importing this module compiles and loads no kernel
    from kvmm import _kernels as K

    words = keys.view(np.uint64)
    out = np.empty(keys.size, np.int64)
    slots = np.zeros(2 * _MIN_TABLE, np.uint64)
    id_keys = np.zeros(_MIN_TABLE, np.uint64)
    state = np.zeros(1, np.int64)
    for start in range(0, keys.size, _CHUNK):
        chunk = words[start:start + _CHUNK]
        need = int(state[0]) + chunk.size
        if 2 * need > slots.size // 2:  # keep the load <= 1/2 whatever the chunk adds
            grown = np.zeros(2 * _next_pow2(2 * need), np.uint64)
            K.rehash(slots, grown)
            slots = grown
        if need > id_keys.size:
            id_keys = np.zeros(_next_pow2(need), np.uint64)  # written only, never read back here
        K.get_or_insert_ids(chunk, slots, id_keys, state, out[start:start + chunk.size])
    return out, int(state[0])


def _kernel(order: Any) -> tuple[Any, tuple]:
    try:
        target = ORDERS[order.lower()].kernel
    except (KeyError, AttributeError):
        raise BadInputError(f"unknown replay order {order!r}; expected one of {sorted(ORDERS)}") from None
    module_name, function = target.split(":")
    module = importlib.import_module(module_name)
    return getattr(module, function), getattr(module, "PARAMS_" + function.removeprefix("replay_").upper(), ())


def _as_keys(keys: Any) -> np.ndarray:
    arr = np.asarray(keys)
    if arr.ndim != 1:
        raise ShapeError(f"keys must be 1-D, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise DTypeError(f"keys must be integers (int64 or uint64), got dtype {arr.dtype}")
    if arr.dtype == np.uint64:
        return np.ascontiguousarray(arr).view(np.int64)
    return np.ascontiguousarray(arr, dtype=np.int64)


def _as_sizes(sizes: Any, n: int) -> np.ndarray:
    if sizes is None:
        return np.ones(n, np.int64)
    arr = np.asarray(sizes)
    if arr.shape != (n,):
        raise ShapeError(f"sizes must be 1-D with one size per key ({n}), got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise DTypeError(f"sizes must be integers, got dtype {arr.dtype}")
    if arr.size and arr.min() < 0:
        raise BadInputError(f"sizes must be >= 0, got {int(arr.min())}")
    if arr.size and int(arr.max()) > MAX_UNITS:  # uint64 sizes >= 2**63 would wrap negative in int64
        raise BadInputError(f"sizes must be <= {MAX_UNITS} (2**60 size units), got {int(arr.max())}")
    return np.ascontiguousarray(arr, dtype=np.int64)


def _next_pow2(n: int) -> int:
    return 1 << max(int(n) - 1, 1).bit_length()
