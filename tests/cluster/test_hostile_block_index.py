"""Issue 33, items 3 and 8: BlockIndex.restore checks a snapshot before replacing anything;
read-only and raising calls decide no key width; argument checks of the batch calls and of
vLLM event batches.  Each bad call raises a KvmmError and leaves the index as it was."""

from __future__ import annotations

import numpy as np
import pytest

from kvmm.cluster import BlockIndex
from kvmm.errors import BadInputError, DTypeError, KvmmError, ShapeError
from kvmm.testing.allocator_machine import assert_same_snapshot


def filled(num_instances=3, **kwargs):
    index = BlockIndex(num_instances, **kwargs)
    index.stored(0, [1, 2, 3], "GPU")
    index.stored(1, [1, 2], "CPU")
    return index


def refuses(index, error, match, call):
    before = index.snapshot()
    with pytest.raises(error, match=match) as info:
        call()
    assert isinstance(info.value, KvmmError)
    assert_same_snapshot(before, index.snapshot())
    index.check()


def altered(snap, **arrays):
    out = {name: arr.copy() for name, arr in snap.items()}
    out.update(arrays)
    return out


# ------------------------------------------------------------------ item 3: restore
def test_restore_round_trips_its_own_snapshot():
    index = filled(max_entries=8)
    snap = index.snapshot()
    index.stored(2, [7, 8, 9], "GPU")
    index.restore(snap)
    assert_same_snapshot(snap, index.snapshot())
    index.check()
    assert index.holders(3) == [(0, "GPU")]


def test_restore_refuses_a_snapshot_of_an_index_with_more_instances_or_media():
    wide = filled(num_instances=130)
    wide.stored(129, [1], "GPU")
    refuses(filled(), ShapeError, r"snapshot\['holders'\] must have shape", lambda: filled().restore(wide.snapshot()))
    index = filled()
    refuses(index, ShapeError, "instances, media", lambda: index.restore(wide.snapshot()))
    more_media = filled(media=("GPU", "CPU", "DISK"))
    refuses(index, ShapeError, r"media \['GPU', 'CPU'\]", lambda: index.restore(more_media.snapshot()))


def test_restore_refuses_a_partial_or_foreign_dict_before_replacing_anything():
    index = filled()
    other = filled()
    other.stored(2, [5], "GPU")
    partial = {"keys": other.snapshot()["keys"]}
    refuses(index, BadInputError, r"missing \['free_rows', 'holders'", lambda: index.restore(partial))
    refuses(index, BadInputError, "unexpected", lambda: index.restore(altered(other.snapshot(), extra=np.zeros(1))))
    refuses(index, DTypeError, "must be the dict", lambda: index.restore([1, 2]))


def test_restore_refuses_arrays_of_the_wrong_dtype():
    index = filled()
    snap = index.snapshot()
    refuses(index, DTypeError, r"snapshot\['meta'\] must be a int64 array, got float64",
            lambda: index.restore(altered(snap, meta=snap["meta"].astype(float))))
    refuses(index, DTypeError, r"snapshot\['live'\] must be a uint8",
            lambda: index.restore(altered(snap, live=snap["live"].astype(bool))))
    refuses(index, DTypeError, r"snapshot\['keys'\]", lambda: index.restore(altered(snap, keys=snap["keys"].tolist())))
    refuses(index, BadInputError, "key_width", lambda: index.restore(altered(snap, key_width=np.array([3]))))


def test_restore_refuses_inconsistent_arrays():
    index = filled(max_entries=16)
    snap = index.snapshot()
    meta = snap["meta"].copy()
    meta[0] += 1  # entry count
    table = snap["table"].copy()
    occupied = np.flatnonzero(table[0] >= 0)
    table[0, occupied[0]] = table[0, occupied[1]]  # a live row named twice, another not at all
    live = snap["live"].copy()
    live[np.flatnonzero(live == 0)[0]] = 1  # a live row without holders
    links = snap["links"].copy()
    links[:, :] = -1  # the LRU list lost
    bad_row = snap["table"].copy()
    bad_row[0, occupied[0]] = 10**6  # a row number the kernels would index with
    holders = snap["holders"].copy()
    holders[np.flatnonzero(snap["live"])[0], 0, 0] |= np.uint64(1) << np.uint64(40)  # instance 40 of 3
    for arrays, match in [({"meta": meta}, "entry count"), ({"table": table}, "table"),
                          ({"live": live}, "entry count|without holders"), ({"links": links}, "LRU list"),
                          ({"table": bad_row}, r"outside \[-1, capacity\)"), ({"holders": holders}, "beyond 3")]:
        refuses(index, BadInputError, match, lambda a=arrays: index.restore(altered(snap, **a)))


def test_restore_refuses_a_snapshot_of_another_budget():
    unbounded = filled()
    index = filled(max_entries=4)
    refuses(index, BadInputError, "capacity 64, more than this index's max_entries=4",
            lambda: index.restore(unbounded.snapshot()))
    bounded = filled(max_entries=64)
    refuses(unbounded, BadInputError, "budget", lambda: unbounded.restore(bounded.snapshot()))


# ------------------------------------------------------------------ item 8: key width, argument checks, vLLM batches
@pytest.mark.parametrize("lookup", [lambda ix: ix.prefix_hits([1, 2]), lambda ix: ix.holders(1),
                                    lambda ix: ix.prefix_hits_many([0, 1], [1]),
                                    lambda ix: ix.removed(0, [1], "GPU", lenient=True)])
def test_a_lookup_decides_no_key_width(lookup):
    index = BlockIndex(2)
    lookup(index)
    assert index.key_width is None
    index.stored(0, np.zeros((1, 2), np.uint64), "GPU")  # (n, 2) keys are still welcome
    assert index.key_width == 2 and index.holders((0, 0)) == [(0, "GPU")]


@pytest.mark.parametrize("call", [lambda ix: ix.stored_many([0], [0, 1], [1], None),
                                  lambda ix: ix.stored_many([0], [0, 2], [1], "GPU"),
                                  lambda ix: ix.removed(0, [1], "GPU"),
                                  lambda ix: ix.apply_vllm_events(0, [1.0, [["BlockRemoved", [5], None]], 0])])
def test_a_raising_call_decides_no_key_width(call):
    index = BlockIndex(2)
    refuses(index, KvmmError, ".", lambda: call(index))
    assert index.key_width is None


@pytest.mark.parametrize("media", [None, 5.0, {"GPU"}, [["GPU"]], True])
def test_batch_calls_refuse_media_that_is_not_a_medium_or_a_list(media):
    for call in ("stored_many", "removed_many"):
        index = filled()
        refuses(index, BadInputError, "medium", lambda: getattr(index, call)([0], [0, 1], [1], media))  # noqa: B023


@pytest.mark.parametrize("args, error", [((None, [0, 1], [1]), DTypeError), (([0], None, [1]), DTypeError),
                                         (([0], [0, 1], None), DTypeError), (([0.0], [0, 1], [1]), DTypeError),
                                         (("ab", [0, 1], [1]), DTypeError), (([0], [0, 1.5], [1]), DTypeError)])
def test_batch_calls_check_argument_types(args, error):
    for call in ("stored_many", "removed_many"):
        index = filled()
        refuses(index, error, "must", lambda: getattr(index, call)(*args, "GPU"))  # noqa: B023 (called at once, inside the loop)


def nested(depth):
    obj: list = []
    for _ in range(depth):
        obj = [obj]
    return obj


@pytest.mark.parametrize("batch, match", [
    ([10**400, [["BlockStored", [9], None, [1], 16]], 0], "too large"),
    ("[" + "1" * 400 + ", [], 0]", "ts"),
    ("[1e400, [], 0]", "finite"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    (nested(100_000), "nested too deeply"),
    (b"\x91" * 100_000 + b"\xc0", "nested too deeply"),
])
def test_vllm_batches_with_huge_timestamps_or_deep_nesting_are_refused(batch, match):
    index = filled()
    refuses(index, BadInputError, match, lambda: index.apply_vllm_events(0, batch))
