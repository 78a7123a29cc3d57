"""Inputs read in place: the kernels' own checks of alignment, aliasing and key width.

The class tests only an input's type, dtype and dimensions before handing it to a compiled entry
point; the kernels test the rest (``_block_kernels._overlaps``, ``_misaligned``, the key width in
``admit``).  Here those helpers are compared with plain-Python readings of numpy's rules, and
inputs that fail them (misaligned, strided, read-only, keys of the wrong width) are shown to give
exactly what a fresh contiguous copy gives, or the same error with nothing changed.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit

from kvmm.allocators import BlockAllocator
from kvmm.allocators import _block_kernels as kernels
from kvmm.errors import ShapeError
from kvmm.testing.allocator_machine import assert_same_snapshot


# ----------------------------------------------------------------- plain-Python references
def span_reference(x: np.ndarray) -> tuple[int, int]:
    """The bytes ``[lo, hi)`` the elements of ``x`` occupy, from its data pointer, shape and strides."""
    if x.size == 0:
        return 0, 0
    lo = hi = x.__array_interface__["data"][0]
    for n, stride in zip(x.shape, x.strides):
        extent = (n - 1) * stride
        lo, hi = (lo + extent, hi) if extent < 0 else (lo, hi + extent)
    return lo, hi + x.itemsize


def overlaps_reference(x: np.ndarray, y: np.ndarray) -> bool:
    (a, b), (c, d) = span_reference(x), span_reference(y)
    return a < d and c < b


@njit
def _overlaps_1d(x, y):  # the kernel helpers take typed arrays: one compiled pair per test shape
    return kernels._overlaps(x, y)


@njit
def _overlaps_2d(x, y):
    return kernels._overlaps(x, y)


@njit
def _misaligned_1d(x):
    return kernels._misaligned(x)


# A view: start, stop and step into a shared buffer (negative steps included).
views = st.tuples(st.integers(0, 40), st.integers(0, 40), st.sampled_from([1, 2, 3, -1, -2]))


def _view(base: np.ndarray, spec) -> np.ndarray:
    start, stop, step = spec
    return base[start:stop:step] if step > 0 else base[stop:start:step]


@settings(max_examples=300, deadline=None)
@given(views, views)
def test_overlaps_matches_numpys_bounds_test(spec_x, spec_y):
    base = np.arange(48, dtype=np.int32)
    x, y = _view(base, spec_x), _view(base, spec_y)
    assert _overlaps_1d(x, y) == overlaps_reference(x, y) == np.may_share_memory(x, y)
    other = np.arange(8, dtype=np.int32)
    assert not _overlaps_1d(x, other) and not np.may_share_memory(x, other)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 5), st.integers(0, 3), st.sampled_from([1, -1]), st.integers(0, 9))
def test_overlaps_of_2d_views(row, col, row_step, other_row):
    base = np.arange(60, dtype=np.uint64).reshape(10, 6)
    x = base[row:row + 3:1, col:col + 2][::row_step]
    y = base[other_row:other_row + 1, :]
    assert _overlaps_2d(x, y) == overlaps_reference(x, y) == np.may_share_memory(x, y)


@pytest.mark.parametrize("offset", range(8))
@pytest.mark.parametrize("step", [1, 2, -1])
def test_misaligned_matches_numpys_aligned_flag(offset, step):
    raw = np.zeros(64, dtype=np.uint8)
    x = raw[offset:offset + 40].view(np.int32)[::step]
    assert _misaligned_1d(x) == (not x.flags.aligned)


# ----------------------------------------------------------------- the methods
def _keys(ids) -> np.ndarray:
    keys = np.zeros((len(ids), 2), dtype=np.uint64)
    keys[:, 0] = ids
    return keys


def _misaligned_copy(arr: np.ndarray) -> np.ndarray:
    """An equal array whose data starts one byte off its dtype's alignment."""
    raw = np.zeros(arr.nbytes + 1, dtype=np.uint8)
    out = raw[1:].view(arr.dtype).reshape(arr.shape)
    out[...] = arr
    assert not out.flags.aligned
    return out


def _read_only(arr: np.ndarray) -> np.ndarray:
    out = arr.copy()
    out.flags.writeable = False
    return out


def _strided(arr: np.ndarray) -> np.ndarray:
    """An equal array that is not contiguous (every other row of a twice-as-long buffer)."""
    wide = np.zeros((2 * arr.shape[0],) + arr.shape[1:], dtype=arr.dtype)
    wide[::2] = arr
    return wide[::2]


def _observable(a: BlockAllocator):
    return a.ref_counts.tolist(), a.free_queue().tolist(), a.cached_map(), a.stats


def _scenario(a: BlockAllocator, convert):
    """A run through every method that takes arrays, each array passed through ``convert``."""
    out = []
    ids, h = a.admit(convert(_keys([1, 2, 3, 4])), 1)
    out.append((ids.tolist(), h))
    a.free(convert(ids[::-1].copy()))
    n, offsets, block_ids, hits = a.admit_many(convert(np.array([0, 2, 5], dtype=np.int64)),
                                               convert(_keys([1, 2, 7, 8, 9])))
    out.append((n, offsets.tolist(), block_ids.tolist(), hits.tolist()))
    out.append(a.lookup(convert(_keys([1, 2, 5]))).tolist())
    hit_offsets, hit_ids = a.lookup_many(convert(np.array([0, 1, 3], dtype=np.int64)), convert(_keys([7, 1, 2])))
    out.append((hit_offsets.tolist(), hit_ids.tolist()))
    a.touch(convert(block_ids[:2].copy()))
    a.free_requests(convert(offsets.copy()), convert(block_ids.copy()))
    a.free(convert(block_ids[1::-1].copy()))
    more = a.allocate(3)
    a.cache_blocks(convert(more.copy()), convert(_keys([20, 21, 22])))
    out.append(a.evict(convert(more[:2].copy())))
    a.free(convert(more.copy()))
    out.append(_observable(a))
    a.check()
    return out


@pytest.mark.parametrize("convert", [_misaligned_copy, _read_only, _strided],
                         ids=["misaligned", "read-only", "strided"])
def test_inputs_that_are_not_plain_arrays_give_what_copies_give(convert):
    assert _scenario(BlockAllocator(16, 4, secret=bytes(16)), convert) == \
        _scenario(BlockAllocator(16, 4, secret=bytes(16)), np.ascontiguousarray)


@pytest.mark.parametrize("width", [0, 1, 3])
def test_keys_of_the_wrong_width_raise_and_change_nothing(width):
    a = BlockAllocator(16, 4, secret=bytes(16))
    a.free(a.admit(_keys([1, 2]))[0][::-1])
    before = a.snapshot()
    keys = np.ones((3, width), dtype=np.uint64)
    for call in (lambda: a.admit(keys), lambda: a.admit(keys, 2),
                 lambda: a.admit_many(np.array([0, 1, 3], dtype=np.int64), keys)):
        with pytest.raises(ShapeError, match=r"\(n, 2\)"):
            call()
        after = a.snapshot()
        assert_same_snapshot(before, after)
    a.check()


def test_offsets_that_alias_the_pool_are_sent_back_for_a_copy():
    # (ids and keys that alias the pool: tests/allocators/test_block_allocator_aliasing.py)  meta is int64,
    # like offsets: the kernels that take offsets must not read them from the state they write
    a = BlockAllocator(16, 4, secret=bytes(16))
    ids = a.allocate(2)
    before = a.snapshot()
    f, bk, t, m = a.block_fields, a.block_keys, a.table, a.meta
    assert kernels.free(f, m, ids, 1, m[:2], np.empty(2, dtype=np.int32)) == -kernels.ERR_COPY
    out = np.empty(4, dtype=np.int32)
    assert kernels.admit_many(f, bk, t, m, m[:2], _keys([1, 2]), np.zeros(0, dtype=np.int64),
                              np.empty(2, dtype=np.int64), out, np.empty(1, dtype=np.int64))[0] == -kernels.ERR_COPY
    after = a.snapshot()
    assert_same_snapshot(before, after)


# ----------------------------------------------------------------- entry points
def test_entry_point_is_the_compiled_function_or_the_kernel_itself():
    compiled = kernels.entry_point(kernels.free_in_order, kernels.SIGNATURES["free_in_order"])
    jit = hasattr(kernels.free_in_order, "compile")  # (not under NUMBA_DISABLE_JIT)
    assert (compiled is not kernels.free_in_order) == jit and callable(compiled)
    a = BlockAllocator(8, 4, secret=bytes(16))
    ids = a.allocate(3)
    assert compiled(a.block_fields, a.meta, ids[::-1]) == 0 and a.num_free == 8  # freed through it

    def plain(x):  # what numba hands out under NUMBA_DISABLE_JIT: a function without .compile
        return x

    assert kernels.entry_point(plain, "(int64,)") is plain


@pytest.mark.parametrize("name", sorted(kernels.SIGNATURES))
def test_every_signature_compiles_to_an_entry_point(name):
    kernel = getattr(kernels, name)
    if not hasattr(kernel, "compile"):
        pytest.skip("NUMBA_DISABLE_JIT: kernels are plain functions, nothing compiles")
    assert kernels.entry_point(kernel, kernels.SIGNATURES[name]) is not kernel


def test_a_signature_that_does_not_compile_raises():
    # (not a silent fallback to the dispatcher, which would only be slower)
    if not hasattr(kernels.free_in_order, "compile"):
        pytest.skip("NUMBA_DISABLE_JIT: kernels are plain functions, nothing compiles")
    with pytest.raises(TypeError):
        kernels.entry_point(kernels.free_in_order, "(float64,)")


_SCENARIO = """
import numpy as np
from kvmm.allocators import BlockAllocator
a = BlockAllocator(8, 4, secret=bytes(16))
keys = np.array([[1, 2], [3, 4]], dtype=np.uint64)
ids, h = a.admit(keys)
a.free(ids[::-1])
ids2, h2 = a.admit(keys, 1)
n, offs, blocks, hits = a.admit_many(np.array([0, 1, 2]), np.array([[1, 2], [9, 9]], dtype=np.uint64))
a.free_requests(offs, blocks)
a.check()
print(h, h2, ids2.tolist(), n, hits.tolist(), a.lookup(keys).tolist(), a.free_queue().tolist())
"""


def test_allocator_runs_with_numba_disable_jit():
    """Under NUMBA_DISABLE_JIT the entry points are the plain kernels: same results as compiled."""
    import contextlib
    import io
    import os
    import subprocess
    import sys

    env = dict(os.environ, NUMBA_DISABLE_JIT="1", PYTHONWARNINGS="ignore")
    check = "\nfrom kvmm.allocators import _block_kernels as k\nassert k.FAST.admit is k.admit\n"
    plain = subprocess.run([sys.executable, "-c", _SCENARIO + check], env=env, capture_output=True, text=True,
                           check=True).stdout
    compiled = io.StringIO()
    with contextlib.redirect_stdout(compiled):
        exec(_SCENARIO, {})  # noqa: S102 - the same calls, compiled, in this process
    assert plain == compiled.getvalue() and plain.startswith("0 2 ")


def test_fast_stubs_resolve_once_and_a_kept_stub_still_works():
    fast = kernels.EntryPoints()
    stub = fast.free_in_order
    a = BlockAllocator(8, 4, secret=bytes(16))
    ids = a.allocate(2)
    assert stub(a.block_fields, a.meta, ids[:1]) == 0  # first call: looks the entry point up
    assert fast.free_in_order is not stub  # the attribute is now the compiled function
    assert stub(a.block_fields, a.meta, ids[1:]) == 0 and a.num_free == 8  # the kept stub forwards
    with pytest.raises(AttributeError):
        fast.no_such_kernel  # noqa: B018
