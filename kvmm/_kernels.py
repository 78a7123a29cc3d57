"""numba primitives shared by the kernels of the allocators, the cluster index and the policies:
cache prefetch and bit counts, 64-bit hash mixing, one open-addressing hash table, and intrusive
doubly linked lists.  The lowest layer (it imports numba only), so any kernel module imports it.

Every primitive is a module-level ``@njit(cache=True, nogil=True)`` function with
``inline="always"`` (or an LLVM intrinsic): numba inlines it into the caller's IR, so a caller
compiled without the runtime (``_nrt=False``, the allocator) keeps that property.  Measured
against the code each caller had before: the allocator's benchmarks unchanged, the cluster
index's too, its budgeted LRU list faster (touches 2.7x, stores 1.2x: the list ends stay in
registers); the stack-distance kernels and the replay's renumbering use the table and the mixing
they had (moved here, the same code).  The replay kernels keep lists of their own: in their
runtime-managed loops numba keeps the reference counting of the arrays each inlined call is
passed, and these list primitives made the LRU replay 1.2-3x slower (see
:mod:`kvmm.policies.eviction._kernels`).

* :func:`prefetch`, :func:`popcount`, :func:`trailing_zeros`: one instruction each.
* :func:`fmix64`: the splitmix64 / MurmurHash3 finaliser, a bijection of uint64 that mixes every
  input bit into every output bit; :func:`mix64` hashes one word (``fmix64(key + golden)``: the
  stack-distance tracker's table and SHARDS's sampling hash), :func:`mix128` two words and a seed
  (the allocator's prefix-cache keys and the cluster index's block keys).
* Open addressing with linear probing: :func:`find_slot` over a table of ``(key, tag)`` uint64
  pairs (tag 0: empty; the stack-distance tracker, the admission counters and ``replay``'s
  renumbering), with :func:`get_or_insert_ids`, :func:`lookup_ids` and :func:`rehash`; and
  :func:`moves_into_hole`, the test of backward-shift deletion that tables of other layouts (the
  allocator's, the index's) use to delete without tombstones.
* Intrusive doubly linked lists over ``prev`` / ``next`` arrays indexed by element, ``-1`` for
  none, head and tail kept by the caller: :func:`list_unlink`, :func:`list_link_after`,
  :func:`list_push_tail`.  Each returns the new ``(head, tail)``.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["prefetch", "popcount", "trailing_zeros", "GOLDEN", "fmix64", "mix64", "mix128", "find_slot",
           "get_or_insert_ids", "lookup_ids", "rehash", "moves_into_hole", "list_unlink", "list_link_after",
           "list_push_tail"]

#: 2**64 / golden ratio: splitmix64's increment (and the multiplier of a second key word)
GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


# --------------------------------------------------------------------------- CPU intrinsics
@intrinsic
def prefetch(typingctx, arr, index):
    """Hint the CPU to load ``arr[index]`` into cache (``llvm.prefetch``: read, high locality).

    Only a hint: it never faults, so a stale or out-of-range index is harmless.
    """
    sig = types.void(arr, index)

    def codegen(context, builder, signature, args):
        array_type = signature.args[0]
        array = context.make_array(array_type)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, array_type, array, [args[1]], wraparound=False,
                                       boundscheck=False)
        byte_ptr = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fn_type = ir.FunctionType(ir.VoidType(), [byte_ptr, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fn_type, "llvm.prefetch.p0")
        builder.call(fn, [builder.bitcast(ptr, byte_ptr), ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def popcount(typingctx, word):
    """Number of set bits of a uint64 (``llvm.ctpop.i64``, one instruction on x86-64/arm64)."""
    sig = types.int64(types.uint64)

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i64, [i64]), "llvm.ctpop.i64")
        return builder.call(fn, [args[0]])

    return sig, codegen


@intrinsic
def trailing_zeros(typingctx, word):
    """Index of the lowest set bit of a non-zero uint64 (``llvm.cttz.i64``, one instruction)."""
    sig = types.int64(types.uint64)

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i64, [i64, ir.IntType(1)]),
                                            "llvm.cttz.i64")
        return builder.call(fn, [args[0], ir.Constant(ir.IntType(1), 1)])  # 1: zero input never happens

    return sig, codegen


# --------------------------------------------------------------------------- hash mixing
@njit(cache=True, nogil=True, inline="always")
def fmix64(z):
    """The splitmix64 / MurmurHash3 64-bit finaliser of uint64 ``z``: a bijection, every input bit
    reaching every output bit."""
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


@njit(cache=True, nogil=True, inline="always")
def mix64(key):
    """splitmix64 of one uint64 word: a bijective, well-mixed 64-bit hash (slots and sampling)."""
    return fmix64(key + GOLDEN)


@njit(cache=True, nogil=True, inline="always")
def mix128(k0, k1, seed):
    """A 64-bit hash of the two-word key ``(k0, k1)`` under ``seed``: the finaliser over
    ``k0 ^ k1 * golden ^ seed``.  Keys from outside (trace ids 0, 1, 2, ...) are far from uniform,
    SipHash keys already are; both come out well mixed."""
    return fmix64(np.uint64(k0) ^ (np.uint64(k1) * GOLDEN) ^ np.uint64(seed))


# --------------------------------------------------------------------------- open addressing
# A table of ``(key, tag)`` uint64 pairs, ``slots[2 * s]`` the key and ``slots[2 * s + 1]`` its
# dense id + 1 (0: an empty slot), a power-of-two number of slots, linear probing from
# ``mix64(key) & mask``; the owner keeps the load <= 1/2 (it grows the table with rehash).
@njit(cache=True, nogil=True, inline="always")
def find_slot(slots, mask, key, h):
    """Slot holding ``key``, or the empty slot where it would go (linear probing from ``h``)."""
    s = np.int64(h & mask)
    while True:
        if slots[2 * s + 1] == 0 or slots[2 * s] == key:
            return s
        s = (s + 1) & np.int64(mask)


@njit(cache=True, nogil=True)
def rehash(old_slots, new_slots):
    """Move every entry of ``old_slots`` into the (larger, empty) ``new_slots``."""
    mask = np.uint64(new_slots.shape[0] // 2 - 1)
    for s in range(old_slots.shape[0] // 2):
        tag = old_slots[2 * s + 1]
        if tag != 0:
            key = old_slots[2 * s]
            t = find_slot(new_slots, mask, key, mix64(key))
            new_slots[2 * t] = key
            new_slots[2 * t + 1] = tag


@njit(cache=True, nogil=True)
def lookup_ids(keys, slots, out):
    """Dense id of every key (-1 when unknown).  Read-only."""
    mask = np.uint64(slots.shape[0] // 2 - 1)
    for i in range(keys.shape[0]):
        key = keys[i]
        s = find_slot(slots, mask, key, mix64(key))
        out[i] = np.int64(slots[2 * s + 1]) - 1


@njit(cache=True, nogil=True)
def get_or_insert_ids(keys, slots, id_keys, state, out):
    """Dense id of every key, inserting unknown keys (ids ``state[0]``, ``state[0]+1``, ...).

    The caller guarantees room: ``2 * (state[0] + len(keys)) <= table size`` and
    ``state[0] + len(keys) <= len(id_keys)``.  Used by the admission policies' per-key counters
    and by ``replay``'s renumbering of keys that are not small integers.
    """
    mask = np.uint64(slots.shape[0] // 2 - 1)
    n_ids = state[0]
    for i in range(keys.shape[0]):
        key = keys[i]
        s = find_slot(slots, mask, key, mix64(key))
        tag = slots[2 * s + 1]
        if tag == 0:
            tag = np.uint64(n_ids + 1)
            slots[2 * s] = key
            slots[2 * s + 1] = tag
            id_keys[n_ids] = key
            n_ids += 1
        out[i] = np.int64(tag) - 1
    state[0] = n_ids


@njit(cache=True, nogil=True, inline="always")
def moves_into_hole(ideal, hole, j):
    """Backward-shift deletion in a linear-probing table (no tombstones): after the slot ``hole``
    is emptied, the entry at a later slot ``j`` of the same probe run moves into the hole unless
    its ideal slot lies cyclically in ``(hole, j]``."""
    if j > hole:
        return ideal <= hole or ideal > j
    return j < hole and ideal <= hole and ideal > j


# --------------------------------------------------------------------------- intrusive lists
@njit(cache=True, nogil=True, inline="always")
def list_unlink(prev, nxt, head, tail, b):
    """Remove ``b`` from the list; returns the new ``(head, tail)``."""
    p = prev[b]
    n = nxt[b]
    if p == -1:
        head = n
    else:
        nxt[p] = n
    if n == -1:
        tail = p
    else:
        prev[n] = p
    prev[b] = -1
    nxt[b] = -1
    return head, tail


@njit(cache=True, nogil=True, inline="always")
def list_link_after(prev, nxt, head, tail, after, b):
    """Link ``b`` after element ``after`` (``after == -1``: at the head); returns ``(head, tail)``."""
    if after == -1:
        n = head
        head = b
    else:
        n = nxt[after]
        nxt[after] = b
    prev[b] = after
    nxt[b] = n
    if n == -1:
        tail = b
    else:
        prev[n] = b
    return head, tail


@njit(cache=True, nogil=True, inline="always")
def list_push_tail(prev, nxt, head, tail, b):
    """Link ``b`` at the tail; returns ``(head, tail)``."""
    prev[b] = tail
    nxt[b] = -1
    if tail == -1:
        head = b
    else:
        nxt[tail] = b
    return head, b
