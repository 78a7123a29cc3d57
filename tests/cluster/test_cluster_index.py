"""BlockIndex on small hand cases: exact prefix_hits arrays (runs with a gap, several media, many
instances), the budget's eviction order, batch calls, both key kinds, and the lazy package."""

import subprocess
import sys

import numpy as np

from kvmm.cluster import BlockIndex
from kvmm.testing.models.block_index import NaiveBlockIndex
from tests.paths import ROOT


def test_runs_stop_at_the_first_key_not_held_per_instance_and_medium():
    index = BlockIndex(3, media=("GPU", "CPU", "DISK"))
    index.stored(0, [1, 2, 3, 4], "GPU")
    index.stored(0, [1, 2], "CPU")
    index.stored(1, [1, 3, 4], "GPU")  # a gap at key 2: its run is 1 long
    index.stored(1, [2, 3], "DISK")  # holds 2, 3 but not 1: run 0
    index.stored(2, [1, 2, 3, 4, 5], "DISK")
    got = index.prefix_hits([1, 2, 3, 4])
    assert got.dtype == np.int64 and got.shape == (3, 3)
    assert got.tolist() == [[4, 2, 0], [1, 0, 0], [0, 0, 4]]
    assert index.prefix_hits([2, 3]).tolist() == [[2, 1, 0], [0, 0, 2], [0, 0, 2]]
    assert index.prefix_hits([9, 1]).tolist() == [[0, 0, 0]] * 3  # the first key is held by nobody
    assert index.prefix_hits([]).tolist() == [[0, 0, 0]] * 3
    assert len(index) == index.num_entries == 5
    assert index.holders(1) == [(0, "GPU"), (0, "CPU"), (1, "GPU"), (2, "DISK")]
    assert index.holders(77) == []
    index.check()


def test_removal_and_clear_drop_holders_and_empty_entries():
    index = BlockIndex(2)
    index.stored(0, [1, 2, 3], "GPU")
    index.stored(1, [1, 2, 3], "CPU")
    index.removed(0, [2], "GPU")
    assert index.prefix_hits([1, 2, 3]).tolist() == [[1, 0], [0, 3]]
    index.cleared(1, "CPU")
    assert index.as_dict() == {1: [(0, "GPU")], 3: [(0, "GPU")]}
    index.stored(1, [3], "GPU")
    index.cleared(0)
    assert index.as_dict() == {3: [(1, "GPU")]}
    assert index.stats == {"stored": 7, "removed": 1, "lenient_ignored": 0, "budget_evictions": 0, "cleared": 2,
                           "lookups": 1, "holder_evictions": 0, "entries": 1}
    index.check()


def test_lenient_removal_ignores_and_counts_keys_not_held():
    index = BlockIndex(2)
    index.stored(0, [1, 2], "GPU")
    index.removed(0, [2, 2, 5], "GPU", lenient=True)  # the repeat and the unknown key are ignored
    index.removed(1, [1], "GPU", lenient=True)  # instance 1 never held it
    assert index.as_dict() == {1: [(0, "GPU")]}
    assert index.stats["removed"] == 1 and index.stats["lenient_ignored"] == 3
    index.check()


def test_budget_drops_the_least_recently_used_entry_for_every_holder():
    index = BlockIndex(2, max_entries=3)
    index.stored(0, [1, 2, 3], "GPU")  # last-first: 3, 2, 1 -> LRU order 3, 2, 1
    assert index.lru_order() == [3, 2, 1]
    index.stored(1, [3], "CPU")  # touches 3
    assert index.lru_order() == [2, 1, 3]
    index.stored(1, [4], "GPU")  # full: 2 goes
    assert index.lru_order() == [1, 3, 4] and index.stats["budget_evictions"] == 1
    assert index.prefix_hits([1, 2, 3]).tolist() == [[1, 0], [0, 0]]  # the run of instance 0 now stops at 2
    assert index.lru_order() == [3, 4, 1]  # the lookup touched key 1, the longest run found
    index.prefix_hits([3, 9])
    assert index.lru_order() == [4, 1, 3]
    index.stored(0, [5, 6], "GPU")  # 6 then 5: evicts 4 then 1
    assert index.lru_order() == [3, 6, 5] and index.stats["budget_evictions"] == 3
    assert index.as_dict() == {3: [(0, "GPU"), (1, "CPU")], 5: [(0, "GPU")], 6: [(0, "GPU")]}
    index.check()


def test_budget_order_matches_the_reference_on_a_fixed_stream():
    real, model = BlockIndex(3, max_entries=4), NaiveBlockIndex(3, max_entries=4)
    rng = np.random.default_rng(7)
    for step in range(300):
        inst, keys, medium = int(rng.integers(3)), rng.integers(0, 9, size=int(rng.integers(0, 5))).tolist(), "GPU"
        if step % 3 == 2:
            assert real.prefix_hits(keys).tolist() == model.prefix_hits(keys)
        elif step % 3 == 1:
            real.removed(inst, keys, medium, lenient=True)
            model.removed(inst, keys, medium, lenient=True)
        else:
            real.stored(inst, keys, medium)
            model.stored(inst, keys, medium)
        assert real.lru_order() == model.lru_order()
    assert real.as_dict() == model.as_dict() and real.stats == {**model.stats, "entries": len(model)}
    real.check()


def test_batch_calls_equal_single_calls_in_order():
    one, many = BlockIndex(4), BlockIndex(4)
    groups = [(0, [1, 2, 3], "GPU"), (2, [1, 2], "CPU"), (0, [4], "GPU"), (3, [], "CPU"), (1, [1], "GPU")]
    for inst, keys, medium in groups:
        one.stored(inst, keys, medium)
    offsets = np.cumsum([0] + [len(g[1]) for g in groups])
    flat = [k for g in groups for k in g[1]]
    many.stored_many([g[0] for g in groups], offsets, flat, [g[2] for g in groups])
    assert many.snapshot().keys() == one.snapshot().keys()
    for name, arr in one.snapshot().items():
        assert np.array_equal(arr, many.snapshot()[name]), name
    many.removed_many([0, 2], [0, 2, 3], [3, 1, 2], ["GPU", "CPU"])
    one.removed(0, [3, 1], "GPU")
    one.removed(2, [2], "CPU")
    assert many.as_dict() == one.as_dict()
    reqs = [[1, 2, 3, 4], [], [2], [1, 9]]
    got = many.prefix_hits_many(np.cumsum([0] + [len(r) for r in reqs]), [k for r in reqs for k in r])
    assert got.shape == (4, 4, 2)
    assert [g.tolist() for g in got] == [one.prefix_hits(r).tolist() for r in reqs]
    many.check()


def test_wide_keys_and_many_instances():
    index = BlockIndex(200, media=("GPU",), key_width=2)
    keys = np.array([[1, 2**63 + 1], [1, 2], [3, 0]], dtype=np.uint64)
    for inst in (0, 63, 64, 130, 199):
        index.stored(inst, keys[: 1 + inst % 3], "GPU")
    got = index.prefix_hits(keys)
    want = np.zeros((200, 1), dtype=np.int64)
    want[[0, 63, 64, 130, 199], 0] = [1, 1, 2, 2, 2]
    assert np.array_equal(got, want)
    assert index.holders([1, 2]) == [(64, "GPU"), (130, "GPU"), (199, "GPU")]
    assert set(index.as_dict()) == {(1, 2**63 + 1), (1, 2)}
    index.cleared(64)
    assert index.prefix_hits(keys)[64, 0] == 0
    index.check()


def test_uint64_ids_are_their_int64_view_and_the_first_call_decides_the_width():
    index = BlockIndex(1, media=("GPU",))
    assert index.key_width is None
    index.stored(0, [], "GPU")  # no key: still undecided
    assert index.key_width is None
    index.stored(0, np.array([2**64 - 1, 5], dtype=np.uint64), "GPU")
    assert index.key_width == 1
    assert index.prefix_hits([-1, 5]).tolist() == [[2]]
    assert index.holders(-1) == [(0, "GPU")]


def test_growth_keeps_every_entry_and_lru_order():
    index = BlockIndex(2, max_entries=1000)
    ids = np.arange(700, dtype=np.int64)
    index.stored(1, ids, "CPU")
    assert len(index) == 700 and index.capacity >= 700
    assert index.lru_order() == ids[::-1].tolist()
    assert BlockIndex(1, media=("GPU",)).lru_order() == []
    assert index.prefix_hits(ids).tolist() == [[0, 0], [0, 700]]
    index.check()


def test_import_kvmm_cluster_loads_no_numba():
    code = "import sys, kvmm.cluster; print('numba' in sys.modules, 'BlockIndex' in dir(kvmm.cluster))"
    root = ROOT
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "True"]
