"""numba kernels of :class:`~kvmm.allocators.BlockAllocator` (the array layout is documented there).

Every kernel that changes state validates its whole input first; on bad input it changes nothing
and returns a negative code (below) that the class turns into a :class:`~kvmm.errors.KvmmError`.
:func:`entry_point` hands the class the compiled function of a kernel for one fixed signature, so
its per-request calls skip numba's dispatcher.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from kvmm._kernels import list_link_after, list_unlink, mix128, moves_into_hole

# Rows of block_fields.
REF, FREE_PREV, FREE_NEXT, KEY_PREV, KEY_NEXT, CACHED = range(6)
NUM_FIELDS = 6
# Slots of meta.
META_FREE_HEAD, META_FREE_TAIL, META_NUM_FREE, META_NUM_CACHED, META_NUM_KEYS = range(5)
META_QUERIES, META_HITS, META_EVICTIONS, META_SEED, META_TABLE_MASK = range(5, 10)
NUM_META = 10

# Kernel status codes.  A kernel that checks its input returns one int: a count >= 0 on success
# (hits, evicted blocks; 0 when there is none), else ``-(status | where << STATUS_BITS)`` with
# ``where`` the offending input's position (one int, not a tuple: less Python per call).
# ERR_COPY: an input array cannot be read in place (it shares memory with state the kernel writes,
# is misaligned, or keys are not (n, 2)); the caller validates it and retries with a copy.
OK, ERR_RANGE, ERR_DOUBLE_FREE, ERR_OUT_OF_BLOCKS, ERR_ALREADY_CACHED, ERR_NOT_HELD = range(6)
ERR_DUPLICATE, ERR_OFFSETS, ERR_COPY = range(6, 9)
STATUS_BITS = 4
STATUS_MASK = (1 << STATUS_BITS) - 1

# =================================================================== kernels
# The kernels that change a pool's state (the ones the class calls, except walk_free_queue) hold
# the GIL, unlike the usual ``nogil`` kernels: they run for about a microsecond per request, and
# releasing and retaking the GIL around each call cost ~0.1 us of it (a loop of admit + free
# kernel calls per request: 1.59 vs 1.41 us; through the methods 3-6 %).  (Holding it also makes
# each kernel call whole for other Python threads; the methods themselves are not thread-safe.)
# Kernels are compiled with ``_nrt=False``: none allocates, and without the runtime numba emits no
# atomic reference-count updates for the arrays passed to each helper call (its pruning pass
# misses most of them here); those cost ~100 ns per _prefix_hits call, more than the lookup.
# Outputs and scratch buffers come from the caller.
#
# Free queue: doubly linked list through FREE_PREV / FREE_NEXT (the shared list primitives of
# kvmm._kernels, inlined); head/tail in meta.  Kernels keep head, tail and the free count in local
# variables and store them once at the end: stores into meta inside the loop would alias the row
# views and cost about 20 ns per block.


@njit(cache=True, nogil=True)
def walk_free_queue(fields, meta):
    out = np.empty(meta[META_NUM_FREE], dtype=np.int32)
    b = meta[META_FREE_HEAD]
    i = 0
    while b != -1 and i < out.shape[0]:
        out[i] = b
        i += 1
        b = fields[FREE_NEXT, b]
    return out[:i]


# Prefix-cache hash table: linear probing over slots; the slot's key is block_keys[first block].


#: The slot hash of a key (k0, k1) under the pool's seed: the shared two-word hash of
#: kvmm._kernels (inlined into the kernels; the allocator's ``check`` calls it from Python).
slot_hash = mix128


@njit(cache=True, nogil=True, _nrt=False)
def _find_slot(block_keys, table, meta, k0, k1):
    """Slot holding key (k0, k1), or ``-(empty slot) - 1`` where it would be inserted."""
    mask = meta[META_TABLE_MASK]
    s = np.int64(slot_hash(k0, k1, meta[META_SEED]) & np.uint64(mask))
    while True:
        b = table[0, s]
        if b == -1:
            return -s - 1
        if block_keys[b, 0] == k0 and block_keys[b, 1] == k1:
            return s
        s = (s + 1) & mask


@njit(cache=True, nogil=True, _nrt=False)
def _cache_one(fields, block_keys, table, meta, b, k0, k1):
    s = _find_slot(block_keys, table, meta, k0, k1)
    block_keys[b, 0] = k0
    block_keys[b, 1] = k1
    fields[CACHED, b] = 1
    fields[KEY_NEXT, b] = -1
    if s < 0:  # new key: b starts its chain
        s = -s - 1
        table[0, s] = b
        table[1, s] = b
        fields[KEY_PREV, b] = -1
        meta[META_NUM_KEYS] += 1
    else:  # key already cached elsewhere: b joins the end of its chain (no de-duplication)
        tail = table[1, s]
        fields[KEY_NEXT, tail] = b
        fields[KEY_PREV, b] = tail
        table[1, s] = b
    meta[META_NUM_CACHED] += 1


@njit(cache=True, nogil=True, _nrt=False)
def _uncache_one(fields, block_keys, table, meta, b):
    s = _find_slot(block_keys, table, meta, block_keys[b, 0], block_keys[b, 1])
    prev = fields[KEY_PREV, b]
    nxt = fields[KEY_NEXT, b]
    if prev == -1:
        table[0, s] = nxt
    else:
        fields[KEY_NEXT, prev] = nxt
    if nxt == -1:
        table[1, s] = prev
    else:
        fields[KEY_PREV, nxt] = prev
    fields[KEY_PREV, b] = -1
    fields[KEY_NEXT, b] = -1
    fields[CACHED, b] = 0
    meta[META_NUM_CACHED] -= 1
    if table[0, s] == -1:
        # The key's last block is gone: free the slot and repair the probe run behind it.
        _delete_slot(block_keys, table, meta, s)
        meta[META_NUM_KEYS] -= 1
    block_keys[b, 0] = 0
    block_keys[b, 1] = 0


@njit(cache=True, nogil=True, _nrt=False)
def _delete_slot(block_keys, table, meta, s):
    # Backward-shift deletion keeps linear probing free of tombstones: later members of the probe
    # run whose ideal slot is not in (s, j] move back into the hole.
    mask = meta[META_TABLE_MASK]
    seed = meta[META_SEED]
    hole = s
    j = s
    while True:
        j = (j + 1) & mask
        b = table[0, j]
        if b == -1:
            break
        ideal = np.int64(slot_hash(block_keys[b, 0], block_keys[b, 1], seed) & np.uint64(mask))
        if moves_into_hole(ideal, hole, j):
            table[0, hole] = table[0, j]
            table[1, hole] = table[1, j]
            hole = j
    table[0, hole] = -1
    table[1, hole] = -1


# Operations.


@njit(cache=True, nogil=True, _nrt=False)
def _take_from_head(fields, block_keys, table, meta, n, out, out_start):
    """Move the first ``n`` free blocks to out[out_start:] with ref 1, evicting cached ones."""
    ref = fields[REF]
    prev = fields[FREE_PREV]
    nxt = fields[FREE_NEXT]
    cached = fields[CACHED]
    head = meta[META_FREE_HEAD]
    for i in range(n):
        b = head
        head = nxt[b]
        prev[b] = -1
        nxt[b] = -1
        if cached[b] == 1:
            _uncache_one(fields, block_keys, table, meta, b)
            meta[META_EVICTIONS] += 1
        ref[b] = 1
        out[out_start + i] = b
    if n > 0:
        meta[META_FREE_HEAD] = head
        if head == -1:
            meta[META_FREE_TAIL] = -1
        else:
            prev[head] = -1
        meta[META_NUM_FREE] -= n


@njit(cache=True, _nrt=False)  # holds the GIL (see the top of the module)
def allocate(fields, block_keys, table, meta, out):
    """Fill ``out`` from the free queue's head; False (nothing changed) if fewer blocks are free."""
    # Outputs are allocated by the caller: returning a new array from a kernel costs ~0.8 us.
    if out.shape[0] > meta[META_NUM_FREE]:
        return False
    _take_from_head(fields, block_keys, table, meta, out.shape[0], out, 0)
    return True


@njit(cache=True, _nrt=False)  # holds the GIL (see the top of the module)
def free(fields, meta, ids, mode, offsets, buffer):
    """Free ``ids`` in order (mode 0) or each CSR segment last-first (mode 1; ``buffer`` is a
    writable buffer of ``len(ids)`` for that order, mode 0 ignores it).

    Returns 0, or a negative code (status, position in freeing order).  The whole batch is
    validated first: ids in range, then no block freed more times than it is referenced
    (decrement all; on failure undo).  Runtime complexity: O(len(ids)).
    """
    if _needs_copy(ids, fields, meta) or _needs_copy(offsets, fields, meta):
        return -ERR_COPY
    n = ids.shape[0]
    if mode == 0:
        order = ids
    else:
        if not csr_offsets_ok(offsets, n):
            return -ERR_OFFSETS
        k = 0
        for r in range(offsets.shape[0] - 1):
            for i in range(offsets[r + 1] - 1, offsets[r] - 1, -1):
                buffer[k] = ids[i]
                k += 1
        order = buffer
    ref = fields[REF]
    prev = fields[FREE_PREV]
    nxt = fields[FREE_NEXT]
    cached = fields[CACHED]
    code = _first_out_of_range(order, fields.shape[1])
    if code:
        return code
    for k in range(n):
        b = order[k]
        ref[b] -= 1
        if ref[b] < 0:
            for j in range(k + 1):
                ref[order[j]] += 1
            return _error(ERR_DOUBLE_FREE, k)
    for k in range(n):
        ref[order[k]] += 1
    head = meta[META_FREE_HEAD]
    tail = meta[META_FREE_TAIL]
    freed = 0
    last_uncached = -1  # this call's uncached blocks form a run at the head, in freeing order
    for k in range(n):
        b = order[k]
        ref[b] -= 1
        if ref[b] == 0:
            freed += 1
            if cached[b] == 1:
                head, tail = list_link_after(prev, nxt, head, tail, tail, b)
            else:
                head, tail = list_link_after(prev, nxt, head, tail, last_uncached, b)
                last_uncached = b
    meta[META_FREE_HEAD] = head
    meta[META_FREE_TAIL] = tail
    meta[META_NUM_FREE] += freed
    return OK


@njit(cache=True, _nrt=False)  # holds the GIL (see the top of the module)
def free_in_order(fields, meta, ids):
    """``free`` mode 0 (three arguments: the per-request path)."""
    return free(fields, meta, ids, 0, ids, fields[REF, :0])  # ids may be read-only: never the buffer


@njit(cache=True, _nrt=False)  # holds the GIL (see the top of the module)
def touch(fields, meta, ids):
    if _needs_copy(ids, fields, meta):
        return -ERR_COPY
    n = ids.shape[0]
    code = _first_out_of_range(ids, fields.shape[1])
    if code:
        return code
    _touch_valid(fields, meta, ids, 0, n)
    return OK


@njit(cache=True, nogil=True, _nrt=False)
def _touch_valid(fields, meta, ids, start, stop):
    ref = fields[REF]
    prev = fields[FREE_PREV]
    nxt = fields[FREE_NEXT]
    head = meta[META_FREE_HEAD]
    tail = meta[META_FREE_TAIL]
    taken = 0
    for k in range(start, stop):
        b = ids[k]
        if ref[b] == 0:
            head, tail = list_unlink(prev, nxt, head, tail, b)
            taken += 1
        ref[b] += 1
    meta[META_FREE_HEAD] = head
    meta[META_FREE_TAIL] = tail
    meta[META_NUM_FREE] -= taken


@njit(cache=True, _nrt=False)  # holds the GIL (see the top of the module)
def cache_blocks(fields, block_keys, table, meta, ids, keys):
    if (_needs_copy_pool(ids, fields, block_keys, table, meta)
            or _needs_copy_pool(keys, fields, block_keys, table, meta)):
        return -ERR_COPY
    n = ids.shape[0]
    code = _first_out_of_range(ids, fields.shape[1])
    if code:
        return code
    for k in range(n):
        b = ids[k]
        # A block that already holds this very key is left as it is (vLLM's cache_full_blocks
        # skips blocks that came from a prefix hit); another key is an error.
        if fields[CACHED, b] == 1 and (block_keys[b, 0] != keys[k, 0] or block_keys[b, 1] != keys[k, 1]):
            return _error(ERR_ALREADY_CACHED, k)
        if fields[REF, b] <= 0:
            return _error(ERR_NOT_HELD, k)
    # Duplicates: every ref count is > 0 here; negate it to mark a block seen, then restore.
    ref = fields[REF]
    status, where = OK, 0
    for k in range(n):
        b = ids[k]
        if ref[b] < 0:
            status, where = ERR_DUPLICATE, k
            break
        ref[b] = -ref[b]
    for k in range(n):
        if ref[ids[k]] < 0:
            ref[ids[k]] = -ref[ids[k]]
    if status != OK:
        return _error(status, where)
    for k in range(n):
        if fields[CACHED, ids[k]] == 0:
            _cache_one(fields, block_keys, table, meta, ids[k], keys[k, 0], keys[k, 1])
    return OK


@njit(cache=True, nogil=True, _nrt=False)
def _prefix_hits(block_keys, table, meta, keys, start, stop, out, out_start):
    """Write the first cached block of each leading cached key into out; return the hit count."""
    h = 0
    for k in range(start, stop):
        s = _find_slot(block_keys, table, meta, keys[k, 0], keys[k, 1])
        if s < 0:
            break
        out[out_start + h] = table[0, s]
        h += 1
    return h


@njit(cache=True, _nrt=False)  # holds the GIL (see the top of the module)
def lookup(block_keys, table, meta, keys, out):
    """Hits written to ``out``, or -ERR_COPY (nothing changed)."""
    if _needs_copy(keys, meta, meta):  # the kernel writes only meta (and out, the caller's own buffer)
        return -ERR_COPY
    h = _prefix_hits(block_keys, table, meta, keys, 0, keys.shape[0], out, 0)
    meta[META_QUERIES] += keys.shape[0]
    meta[META_HITS] += h
    return h


@njit(cache=True, _nrt=False)  # holds the GIL (see the top of the module)
def lookup_many(block_keys, table, meta, offsets, keys, hit_offsets, out):
    """Total hits written to ``out``, or -ERR_COPY (nothing changed)."""
    if _needs_copy(keys, meta, meta) or _needs_copy(offsets, meta, meta):
        return -ERR_COPY
    r = offsets.shape[0] - 1
    hit_offsets[0] = 0
    for i in range(r):
        h = _prefix_hits(block_keys, table, meta, keys, offsets[i], offsets[i + 1], out, hit_offsets[i])
        hit_offsets[i + 1] = hit_offsets[i] + h
    meta[META_QUERIES] += keys.shape[0]
    meta[META_HITS] += hit_offsets[r]
    return hit_offsets[r]


@njit(cache=True, _nrt=False)  # holds the GIL (see the top of the module)
def evict(fields, block_keys, table, meta, ids):
    if _needs_copy_pool(ids, fields, block_keys, table, meta):
        return -ERR_COPY
    n = ids.shape[0]
    code = _first_out_of_range(ids, fields.shape[1])
    if code:
        return code
    count = 0
    for k in range(n):
        b = ids[k]
        if fields[CACHED, b] == 1:
            _uncache_one(fields, block_keys, table, meta, b)
            count += 1
    meta[META_EVICTIONS] += count
    return count


@njit(cache=True, nogil=True, _nrt=False)
def _admit_into(fields, block_keys, table, meta, keys, start, stop, num_extra, out, out_start):
    """Admit one request (keys[start:stop]) writing its blocks at out[out_start:]; (ok, hits)."""
    n = stop - start
    h = _prefix_hits(block_keys, table, meta, keys, start, stop, out, out_start)
    # Hits that are free (ref 0) leave the free queue when touched; count each block once
    # (a repeated key returns the same block) by marking it with ref -1 while counting.
    free_hits = 0
    for k in range(h):
        b = out[out_start + k]
        if fields[REF, b] == 0:
            fields[REF, b] = -1
            free_hits += 1
    for k in range(h):
        b = out[out_start + k]
        if fields[REF, b] == -1:
            fields[REF, b] = 0
    need = n - h + num_extra
    if need > meta[META_NUM_FREE] - free_hits:
        return False, h
    _touch_valid(fields, meta, out, out_start, out_start + h)
    _take_from_head(fields, block_keys, table, meta, need, out, out_start + h)
    for k in range(h, n):
        _cache_one(fields, block_keys, table, meta, out[out_start + k], keys[start + k, 0], keys[start + k, 1])
    meta[META_QUERIES] += n
    meta[META_HITS] += h
    return True, h


@njit(cache=True, _nrt=False)  # holds the GIL (see the top of the module)
def admit(fields, block_keys, table, meta, keys, out):
    """Admit one request: its blocks go to ``out``, whose extra slots after ``len(keys)`` are the
    request's extra blocks.  Returns the hits, or a negative code (nothing changed)."""
    if keys.shape[1] != 2 or _needs_copy_pool(keys, fields, block_keys, table, meta):
        return -ERR_COPY
    num_extra = out.shape[0] - keys.shape[0]
    ok, h = _admit_into(fields, block_keys, table, meta, keys, 0, keys.shape[0], num_extra, out, 0)
    return h if ok else _error(ERR_OUT_OF_BLOCKS, h)


@njit(cache=True, _nrt=False)  # holds the GIL (see the top of the module)
def admit_many(fields, block_keys, table, meta, offsets, keys, num_extra, block_offsets, out, hits):
    """Admit requests in order until one does not fit; returns (admitted, blocks written), or
    (-status, 0) with nothing changed: ``-ERR_OFFSETS`` when ``offsets`` is not CSR over ``keys``,
    ``-ERR_COPY``.  An empty ``num_extra`` means no extra blocks for any request."""
    if (keys.shape[1] != 2 or _needs_copy_pool(keys, fields, block_keys, table, meta)
            or _needs_copy_pool(offsets, fields, block_keys, table, meta)):
        return -ERR_COPY, 0
    if not csr_offsets_ok(offsets, keys.shape[0]):
        return -ERR_OFFSETS, 0
    r = offsets.shape[0] - 1
    block_offsets[0] = 0
    admitted = 0
    with_extra = num_extra.shape[0] != 0
    for i in range(r):
        extra = num_extra[i] if with_extra else 0
        ok, h = _admit_into(fields, block_keys, table, meta, keys, offsets[i], offsets[i + 1], extra,
                            out, block_offsets[i])
        if not ok:
            break
        hits[i] = h
        block_offsets[i + 1] = block_offsets[i] + offsets[i + 1] - offsets[i] + extra
        admitted += 1
    return admitted, block_offsets[admitted]


@njit(cache=True, nogil=True, _nrt=False)
def csr_offsets_ok(offsets, length):
    """True if ``offsets`` starts at 0, never decreases and ends at ``length``.  O(len)."""
    n = offsets.shape[0]
    if n < 1 or offsets[0] != 0 or offsets[n - 1] != length:
        return False
    for i in range(1, n):
        if offsets[i] < offsets[i - 1]:
            return False
    return True


@njit(cache=True, nogil=True, _nrt=False)
def _error(status, where):
    return -(status | (where << STATUS_BITS))


@njit(cache=True, nogil=True, _nrt=False)
def _first_out_of_range(ids, num_blocks):
    """OK if every id is in [0, num_blocks), else the ERR_RANGE code of the first that is not."""
    for k in range(ids.shape[0]):
        if ids[k] < 0 or ids[k] >= num_blocks:
            return _error(ERR_RANGE, k)
    return OK


# Input arrays read in place.  The class checks only their type, dtype and dimensions; kernels
# check the rest in a few nanoseconds (in Python, ``flags`` and numpy's ``base`` chain cost
# ~0.1 us per argument): the alignment numba's code assumes, and that the array shares no memory
# with a state array the kernel writes (it would change under the kernel: ``free(ref_counts)``),
# compared as byte ranges, as ``np.may_share_memory`` does.


@njit(cache=True, nogil=True, _nrt=False)
def _needs_copy(x, written, also_written):
    """True if ``x`` is misaligned or overlaps ``written`` or ``also_written``."""
    return _misaligned(x) or _overlaps(x, written) or _overlaps(x, also_written)


@njit(cache=True, nogil=True, _nrt=False)
def _needs_copy_pool(x, fields, block_keys, table, meta):
    return _needs_copy(x, fields, meta) or _overlaps(x, block_keys) or _overlaps(x, table)


@njit(cache=True, nogil=True, _nrt=False)
def _misaligned(x):
    """True if an element of ``x`` is not aligned to its size (``not x.flags.aligned``)."""
    bits = np.intp(x.ctypes.data)
    for d in range(x.ndim):
        bits |= x.strides[d]
    return bits % x.itemsize != 0


@njit(cache=True, nogil=True, _nrt=False)
def _memory_span(x):
    """The byte addresses ``[lo, hi)`` that the elements of ``x`` span (any strides); (0, 0) when empty."""
    lo = np.intp(x.ctypes.data)
    hi = lo
    for d in range(x.ndim):
        if x.shape[d] == 0:
            return np.intp(0), np.intp(0)
        extent = (x.shape[d] - 1) * x.strides[d]
        if extent < 0:
            lo += extent
        else:
            hi += extent
    return lo, hi + x.itemsize


@njit(cache=True, nogil=True, _nrt=False)
def _overlaps(x, y):
    """True if the byte ranges of ``x`` and ``y`` overlap (``np.may_share_memory``)."""
    x_lo, x_hi = _memory_span(x)
    y_lo, y_hi = _memory_span(y)
    return x_lo < y_hi and y_lo < x_hi


# Entry points.  numba's dispatcher types every argument of every call (~50 ns plus ~13 ns per
# array) before it calls the compiled function; the per-request methods call that function
# directly, with arguments whose types they have checked to be exactly the signature's (type,
# dtype and dimensions: ``block_ids``, ``key_array``, ``offsets_array`` of ``_block_allocator_checks``
# and the same tests inlined in ``free``, ``admit`` and ``admit_many``; the state arrays never change type).
_F, _K, _T, _M = "int32[:, ::1]", "uint64[:, ::1]", "int32[:, ::1]", "int64[::1]"  # the state arrays
SIGNATURES = {
    "admit": f"({_F}, {_K}, {_T}, {_M}, uint64[:, :], int32[::1])",
    "admit_many": f"({_F}, {_K}, {_T}, {_M}, int64[:], uint64[:, :], int64[::1], int64[::1], int32[::1], int64[::1])",
    "allocate": f"({_F}, {_K}, {_T}, {_M}, int32[::1])",
    "free": f"({_F}, {_M}, int32[:], int64, int64[:], int32[::1])",
    "free_in_order": f"({_F}, {_M}, int32[:])",
    "lookup": f"({_K}, {_T}, {_M}, uint64[:, :], int32[::1])",
}


def entry_point(kernel, signature: str):
    """The compiled function of ``kernel`` for ``signature`` (loaded from numba's cache, or compiled).

    It skips the dispatcher: a caller must pass exactly the signature's types (an array of
    another dtype or dimension would be read as if it had them).  Under ``NUMBA_DISABLE_JIT`` the
    kernel is a plain function (no ``compile``) and is returned itself.  A signature that does not
    compile raises here, on the first call, rather than falling back to the slower dispatcher.
    """
    if not hasattr(kernel, "compile"):
        return kernel
    return kernel.compile(signature)


class EntryPoints:
    """``FAST.name(...)`` calls :func:`entry_point` of kernel ``name`` for ``SIGNATURES[name]``.

    Each attribute starts as a stub that looks the entry point up on its first call and puts it
    in its place (so ``import kvmm`` compiles or loads nothing).  Plain instance attributes, no
    ``__getattr__``: CPython's attribute cache then makes each lookup ~15 ns cheaper.
    """

    def __init__(self) -> None:
        for name in SIGNATURES:
            setattr(self, name, self._first_call(name))

    def _first_call(self, name: str):
        resolved = []

        def call(*args):  # (a caller that kept the stub itself pays one Python call more)
            if not resolved:
                resolved.append(entry_point(globals()[name], SIGNATURES[name]))
                setattr(self, name, resolved[0])
            return resolved[0](*args)
        return call


FAST = EntryPoints()
