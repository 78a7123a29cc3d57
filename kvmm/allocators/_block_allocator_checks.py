"""Argument checks of :class:`~kvmm.allocators.block_allocator.BlockAllocator`.

The allocator's calls are on the per-request path: an argument that already has the kernel's
type, dtype and dimensions is passed through as it is, and only the rest is validated (or
copied) here.  These checks and the error messages of the kernels' status codes live apart
from the allocator's operations, which call them first.

Input arrays are read in place when their type, dtype and dimensions are the kernel's; the
kernels test the rest (alignment, aliasing with the state they write, ids in range, CSR
offsets; key width where admit reads them).  When a kernel cannot read one in place it
returns -ERR_COPY and the method retries with ``copy_block_ids`` / ``copy_key_array`` (which raise
the clear error for bad input, or return a fresh copy).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from kvmm._validate import as_array, as_count, as_index_array, as_key_array
from kvmm.allocators import _block_kernels as kernels
from kvmm.allocators._block_kernels import (
    ERR_ALREADY_CACHED,
    ERR_DOUBLE_FREE,
    ERR_DUPLICATE,
    ERR_NOT_HELD,
    ERR_RANGE,
    REF,
    STATUS_BITS,
    STATUS_MASK,
)
from kvmm.errors import BadInputError, DoubleFreeError, InvalidIdError

if TYPE_CHECKING:
    from kvmm.allocators.block_allocator import BlockAllocator

_INT32 = np.dtype(np.int32)
_UINT64 = np.dtype(np.uint64)
_INT64 = np.dtype(np.int64)


def block_ids(allocator: BlockAllocator, x, name: str) -> np.ndarray:
    # Any stride is fine (``ids[::-1]``, a request's blocks last-first, is the common case).
    if type(x) is np.ndarray and (x.dtype is _INT32 or x.dtype == np.int32) and x.ndim == 1:
        return x
    return copy_block_ids(allocator, x, name)


def copy_block_ids(allocator: BlockAllocator, x, name: str) -> np.ndarray:
    if type(x) is np.ndarray and x.dtype == np.int32 and x.ndim == 1:
        return x.copy()  # its range is checked by the kernel
    arr = as_index_array(x, name, dtype=np.int64)
    if arr.size and (arr.min() < 0 or arr.max() >= allocator.num_blocks):
        bad = int(arr[(arr < 0) | (arr >= allocator.num_blocks)][0])
        raise InvalidIdError(f"{name} contains block id {bad}; expected ids in [0, {allocator.num_blocks})")
    return arr.astype(np.int32)


def one_block_id(allocator: BlockAllocator, x, name: str) -> int:
    b = as_count(x, name)
    if b >= allocator.num_blocks:
        raise InvalidIdError(f"{name} is {b}; expected a block id in [0, {allocator.num_blocks})")
    return b


def key_array(x, name: str) -> np.ndarray:
    """Keys for kernels that do not test their width (tested here); they test the alignment."""
    if type(x) is np.ndarray and (x.dtype is _UINT64 or x.dtype == np.uint64) and x.ndim == 2 and x.shape[1] == 2:
        return x
    return copy_key_array(x, name)


def copy_key_array(x, name: str) -> np.ndarray:
    """A validated ``(n, 2)`` uint64 copy of ``x`` (raises for bad keys)."""
    arr = python_keys(x, name)
    if arr.dtype.kind == "i" and arr.size and arr.min() < 0:
        raise BadInputError(f"{name} has negative words ({int(arr.min())}); expected uint64 key words >= 0")
    return as_key_array(arr, name)


def count_array(x, name: str) -> np.ndarray:
    arr = as_index_array(x, name, dtype=np.int64)
    if arr.size and arr.min() < 0:
        raise BadInputError(f"{name} must be >= 0, got {int(arr.min())}")
    return arr


def csr_offsets(x, length: int, name: str) -> np.ndarray:
    """Offsets for kernels that do not test their alignment (the CSR shape is tested here)."""
    arr = offsets_array(x, name)
    if not arr.flags.aligned:
        arr = arr.copy()
    if not kernels.csr_offsets_ok(arr, length):
        raise_offsets(arr, length, name)
    return arr


def offsets_array(x, name: str) -> np.ndarray:
    """``x`` as an int64 array, no copy when it already is one (the CSR shape is checked by the
    caller, in the kernel that reads it, or by :func:`csr_offsets`)."""
    if type(x) is np.ndarray and (x.dtype is _INT64 or x.dtype == np.int64) and x.ndim == 1:
        return x
    return as_index_array(x, name, dtype=np.int64)


def raise_offsets(arr: np.ndarray, length: int, name: str) -> None:
    raise BadInputError(f"{name} must be non-decreasing CSR offsets from 0 to {length} "
                        f"(len = requests + 1), got {arr[:8]}{'...' if arr.size > 8 else ''}")


def raise_ids(allocator: BlockAllocator, code: int, ids: np.ndarray, name: str) -> None:
    status, where = -code & STATUS_MASK, -code >> STATUS_BITS
    b = int(ids[where]) if 0 <= where < ids.shape[0] else -1
    if status == ERR_RANGE:
        raise InvalidIdError(f"{name}[{where}] is block id {b}; expected ids in [0, {allocator.num_blocks})")
    if status == ERR_DOUBLE_FREE:
        raise DoubleFreeError(f"{name}[{where}] frees block {b} more times than it is referenced "
                              f"(ref count {int(allocator.block_fields[REF, b])}); expected each block at most "
                              f"ref-count times; nothing was freed")
    if status == ERR_ALREADY_CACHED:
        raise BadInputError(f"{name}[{where}]: block {b} already holds another cached key; expected blocks "
                            f"without one, or holding this key (evict it first)")
    if status == ERR_NOT_HELD:
        raise BadInputError(f"{name}[{where}]: block {b} has ref count 0; expected blocks in use "
                            f"(allocate or touch them before caching)")
    if status == ERR_DUPLICATE:
        raise BadInputError(f"{name}[{where}]: block {b} appears twice; expected distinct blocks")
    raise AssertionError(f"unknown kernel status {status}")  # pragma: no cover


def as_count_0d(x, name: str) -> int:
    """:func:`as_count`, also accepting a 0-d integer array (what ``arr.sum()`` or ``arr[i, ...]`` gives)."""
    if isinstance(x, np.ndarray) and x.ndim == 0:
        x = x[()]
    return as_count(x, name)


def as_salt(salt) -> int:
    value = as_count(salt, "salt")
    if value >= 2**64:
        raise BadInputError(f"salt must be in [0, 2**64), got {salt}")
    return value


def python_keys(x, name: str) -> np.ndarray:
    """``np.asarray(x)``, except that nested lists of Python ints >= 2**63 become uint64, not float
    (ragged lists: ShapeError)."""
    arr = as_array(x, name)
    if arr.dtype.kind in "fO" and arr.size and not isinstance(x, np.ndarray):
        flat = np.asarray(x, dtype=object).ravel()
        if all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in flat):
            if any(v < 0 or v >= 2**64 for v in flat):
                raise BadInputError(f"{name} words must be in [0, 2**64), got {x!r:.60}")
            return np.asarray(x, dtype=object).astype(np.uint64)
    return arr
