"""BlockIndex's per-key holder cap (``max_holders``, llm-d's ``podCacheSize``: 10 pods per key)
and the batch calls' validation inside their one kernel call (issue 31, items 3 and 5)."""

import numpy as np
import pytest

from kvmm.cluster import BlockIndex
from kvmm.errors import BadInputError, InvalidIdError, ShapeError
from kvmm.testing.allocator_machine import assert_same_snapshot
from kvmm.testing.models.block_index import NaiveBlockIndex


def test_a_full_key_forgets_its_oldest_holder_as_llm_d_s_pod_lru_does():
    index = BlockIndex(4, ("GPU", "CPU"), max_holders=2)
    index.stored(0, [7], "GPU")
    index.stored(1, [7], "GPU")
    index.stored(0, [7], "GPU")          # (0, GPU) is the newest again: (1, GPU) is now the oldest
    index.stored(2, [7], "CPU")          # a third holder: the oldest, (1, GPU), is forgotten
    assert index.holders(7) == [(0, "GPU"), (2, "CPU")]
    assert index.stats["holder_evictions"] == 1
    assert index.prefix_hits([7])[:, 0].tolist() == [1, 0, 0, 0]
    index.removed(0, [7], "GPU")         # a removal frees a place without pushing anyone out
    index.stored(3, [7], "GPU")
    assert index.holders(7) == [(2, "CPU"), (3, "GPU")] and index.stats["holder_evictions"] == 1
    index.cleared(2)
    assert index.holders(7) == [(3, "GPU")]
    index.check()


def test_the_cap_equals_the_model_on_a_random_stream():
    rng = np.random.default_rng(5)
    real, model = BlockIndex(6, ("GPU", "CPU"), max_holders=3), NaiveBlockIndex(6, ("GPU", "CPU"), max_holders=3)
    for _ in range(400):
        i, m, keys = int(rng.integers(6)), ("GPU", "CPU")[rng.integers(2)], rng.integers(0, 5, rng.integers(1, 4))
        if rng.random() < 0.7:
            real.stored(i, keys, m)
            model.stored(i, keys.tolist(), m)
        else:
            real.removed(i, keys, m, lenient=True)
            model.removed(i, keys.tolist(), m, lenient=True)
    real.check()
    assert real.as_dict() == model.as_dict() and real.stats["holder_evictions"] == model.stats["holder_evictions"] > 0


def test_a_bad_cap_is_refused():
    with pytest.raises(BadInputError, match="max_holders"):
        BlockIndex(2, max_holders=0)


def test_restore_refuses_a_holder_list_that_is_not_the_rows_holders():
    index = BlockIndex(3, ("GPU",), max_holders=2)
    index.stored(0, [1, 2], "GPU")
    snap = index.snapshot()
    bad = {k: v.copy() for k, v in snap.items()}
    bad["order"][bad["order"] >= 0] = 2  # names (2, GPU), which holds nothing
    before = index.snapshot()
    with pytest.raises(BadInputError, match="holder list"):
        index.restore(bad)
    assert_same_snapshot(before, index.snapshot())
    other = BlockIndex(3, ("GPU",))
    with pytest.raises(ShapeError, match=r"snapshot\['order'\]"):
        other.restore(snap)


@pytest.mark.parametrize("call", [
    lambda ix: ix.stored_many([0, 3], [0, 1, 2], [5, 6], "GPU"),            # instance out of range
    lambda ix: ix.stored_many([0, 1], [0, 2, 1], [5, 6], "GPU"),            # offsets fall
    lambda ix: ix.stored_many([0, 1], [0, 1, 2], [5, 6], ["GPU", "TPU"]),   # unknown medium
    lambda ix: ix.stored_many([0], [0, 1, 2], [5, 6], "GPU"),               # offsets and groups disagree
    lambda ix: ix.removed_many([0, 3], [0, 1, 2], [5, 6], "GPU", lenient=True),
    lambda ix: ix.removed_many(np.array([0, 1]), np.array([0, 1, 3]), np.array([5, 6]), "GPU"),
])
def test_a_batch_the_kernel_refuses_is_named_and_changes_nothing(call):
    index = BlockIndex(3, ("GPU", "CPU"), max_entries=8, max_holders=2)
    index.stored(0, [5, 6], "GPU")
    before = index.snapshot()
    with pytest.raises((InvalidIdError, BadInputError)) as err:
        call(index)
    assert "expected" in str(err.value) or "must" in str(err.value)  # the fault is named
    assert_same_snapshot(before, index.snapshot())


def test_a_batch_that_grows_the_arrays_equals_single_calls():
    a, b = BlockIndex(2, ("GPU",)), BlockIndex(2, ("GPU",))
    keys = np.arange(1000, dtype=np.int64)  # more keys than the initial 64 rows: the kernel asks to grow
    a.stored_many([0, 1], [0, 600, 1000], keys, "GPU")
    b.stored(0, keys[:600], "GPU")
    b.stored(1, keys[600:], "GPU")
    a.check()
    assert_same_snapshot(a.snapshot(), b.snapshot())
