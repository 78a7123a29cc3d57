"""KVArena (paged slot storage) and ArenaTier specifics: layout, copy_slots semantics, bad input."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvmm.errors import (
    BadInputError,
    CapacityExceededError,
    DTypeError,
    InvalidIdError,
    KvmmError,
    ShapeError,
    UnknownKeyError,
)
from kvmm.tiers import ArenaTier, KVArena


def test_layout_matches_flat_slot_numbering():
    arena = KVArena(num_blocks=2, block_size=4, item_shape=(3,), dtype=np.float32)
    assert arena.data.shape == (2, 4, 3)
    assert arena.nbytes == 2 * 4 * 3 * 4
    arena.write([6], np.array([[1.0, 2.0, 3.0]], dtype=np.float32))
    # slot 6 = block 1, offset 2
    assert arena.data[1, 2].tolist() == [1.0, 2.0, 3.0]
    assert arena.data.sum() == 6.0
    assert arena.read([6, 6]).tolist() == [[1.0, 2.0, 3.0]] * 2
    arena.check()


def test_scalar_items_and_default_dtype():
    arena = KVArena(3, 2)
    assert arena.data.shape == (3, 2) and arena.dtype == np.float16
    arena.write(np.array([5, 0], dtype=np.int32), np.array([7, 8]))
    assert arena.read([0, 5]).tolist() == [8.0, 7.0]


def test_copy_slots_is_a_simultaneous_move_when_sets_overlap():
    arena = KVArena(1, 6, (), np.int64)
    arena.write(np.arange(6), np.arange(6) * 10)
    # Shift left by one over an overlapping range: every dst gets its src's OLD value.
    arena.copy_slots([1, 2, 3, 4], [0, 1, 2, 3])
    assert arena.data[0].tolist() == [10, 20, 30, 40, 40, 50]
    # A swap works too.
    arena.copy_slots([0, 5], [5, 0])
    assert arena.data[0].tolist() == [50, 20, 30, 40, 40, 10]
    # Repeated sources are allowed (broadcast one slot into several).
    arena.copy_slots([1, 1], [2, 3])
    assert arena.data[0].tolist() == [50, 20, 20, 20, 40, 10]


@given(st.data())
def test_copy_slots_matches_a_plain_python_gather_scatter(data):
    n = data.draw(st.integers(1, 12))
    arena = KVArena(1, n, (2,), np.int32)
    arena.write(np.arange(n), np.arange(2 * n, dtype=np.int32).reshape(n, 2))
    dst = data.draw(st.lists(st.integers(0, n - 1), unique=True, max_size=n))
    src = data.draw(st.lists(st.integers(0, n - 1), min_size=len(dst), max_size=len(dst)))
    before = [row.tolist() for row in arena.data[0]]
    expected = list(before)
    for s, d in zip(src, dst):
        expected[d] = before[s]
    arena.copy_slots(np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64))
    assert [row.tolist() for row in arena.data[0]] == expected
    arena.check()


@pytest.mark.parametrize("call, error", [
    (lambda a: a.copy_slots([0, 1], [2]), ShapeError),
    (lambda a: a.copy_slots([0, 1], [2, 2]), BadInputError),
    (lambda a: a.copy_slots([0], [8]), InvalidIdError),
    (lambda a: a.copy_slots([-1], [0]), InvalidIdError),
    (lambda a: a.copy_slots([0.5], [1]), DTypeError),
    (lambda a: a.write([0, 0], np.zeros((2, 3))), BadInputError),
    (lambda a: a.write([0], np.zeros((1, 4))), ShapeError),
    (lambda a: a.write([0], np.zeros((1, 3), dtype=np.complex64)), DTypeError),
    (lambda a: a.write([9], np.zeros((1, 3))), InvalidIdError),
    (lambda a: a.read([[0]]), ShapeError),
])
def test_bad_calls_raise_and_change_nothing(call, error):
    arena = KVArena(2, 4, (3,), np.float32)
    arena.write(np.arange(8), np.arange(24, dtype=np.float32).reshape(8, 3))
    before = arena.data.copy()
    with pytest.raises(error) as info:
        call(arena)
    assert isinstance(info.value, KvmmError) and str(info.value)
    np.testing.assert_array_equal(arena.data, before)


@pytest.mark.parametrize("kwargs, error", [
    (dict(num_blocks=0, block_size=4), BadInputError),
    (dict(num_blocks=-2, block_size=4), BadInputError),
    (dict(num_blocks=2, block_size=4, item_shape=(0,)), BadInputError),
    (dict(num_blocks=2, block_size=4, dtype=object), DTypeError),
    (dict(num_blocks=2, block_size=4, dtype="not-a-dtype"), DTypeError),
    (dict(num_blocks=2.5, block_size=4), DTypeError),
    (dict(num_blocks=2, block_size=4, buffer=bytearray(3)), BadInputError),
    (dict(num_blocks=2, block_size=4, buffer=bytes(64)), BadInputError),
])
def test_bad_construction(kwargs, error):
    with pytest.raises(error):
        KVArena(**kwargs)


def test_arena_in_a_caller_buffer_shares_its_memory():
    memory = bytearray(2 * 2 * 2)
    arena = KVArena(2, 2, (), np.uint16, buffer=memory)
    arena.write([3], np.array([0x0102], dtype=np.uint16))
    assert memory[6:8] == (0x0102).to_bytes(2, "little")


def test_arena_tier_reserves_capacity_and_delegates_copy_slots():
    tier = ArenaTier(1000)
    tier.put("x", np.zeros(100, dtype=np.uint8))
    arena = tier.kv_arena(4, 8, (2,), np.float16)  # 4*8*2*2 = 128 bytes
    assert tier.reserved_bytes == 128 and tier.used_bytes == 228
    arena.write([0, 1], np.array([[1, 2], [3, 4]], dtype=np.float16))
    tier.copy_slots(arena, [0, 1], [31, 30])
    assert arena.read([30, 31]).tolist() == [[3, 4], [1, 2]]
    tier.check()
    # An arena that does not fit reserves nothing.
    with pytest.raises(CapacityExceededError):
        tier.kv_arena(100, 8, (2,), np.float16)
    assert tier.used_bytes == 228
    # Entries now see the smaller free space.
    with pytest.raises(CapacityExceededError):
        tier.put("y", np.zeros(773, dtype=np.uint8))
    tier.put("y", np.zeros(772, dtype=np.uint8))
    assert tier.used_bytes == 1000
    tier.delete("y")
    tier.release_arena(arena)
    assert tier.used_bytes == 100 and tier.reserved_bytes == 0
    with pytest.raises(UnknownKeyError):
        tier.release_arena(arena)
    with pytest.raises(UnknownKeyError):
        tier.copy_slots(KVArena(1, 1), [0], [0])
    tier.check()


def test_arena_tier_get_returns_a_private_copy():
    tier = ArenaTier(1 << 10)
    value = np.arange(4, dtype=np.int32)
    tier.put(7, value)
    value[0] = 99  # mutating the caller's array does not reach the tier
    got = tier.get(np.uint64(7))  # numpy ints name the same key
    got[1] = 99
    assert tier.get(7).tolist() == [0, 1, 2, 3]


def test_arena_tier_recycles_buffers_without_aliasing():
    tier = ArenaTier(1 << 20, spare_bytes=4096)
    a = np.arange(256, dtype=np.float32)  # 1 KiB
    tier.put("a", a)
    stored_a = tier._entries["a"]
    tier.put("a", a + 1)  # same layout: overwritten in place
    assert tier._entries["a"] is stored_a and np.array_equal(tier.get("a"), a + 1)
    copy_of_a = tier.get("a")
    tier.delete("a")
    assert tier._spare_total == 1024  # its buffer is kept for the next 1 KiB entry
    tier.put("b", np.ones((16, 8), dtype=np.float64))  # 1 KiB, other dtype and shape: reuses it
    assert tier._spare_total == 0
    assert np.shares_memory(tier._entries["b"], stored_a)
    assert np.array_equal(tier.get("b"), np.ones((16, 8))) and np.array_equal(copy_of_a, a + 1)
    for i in range(8):  # spares stay within their limit
        tier.put(("c", i), np.zeros(1024, dtype=np.uint8))
    for i in range(8):
        tier.delete(("c", i))
    assert tier._spare_total == 4096
    tier.check()
