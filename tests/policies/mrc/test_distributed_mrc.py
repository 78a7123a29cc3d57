"""distributed_mrc: key-partitioned exact stack distances on a Dask LocalCluster, against the
exact single-process MRC of the bundled traces."""

import numpy as np
import pytest

from kvmm.errors import BadInputError
from kvmm.policies import StackDistanceTracker, distributed_mrc
from kvmm.policies.mrc.distributed import PartTracker, key_parts
from kvmm.testing.models.stack_distance import MASK64, mix64
from kvmm.traces import iter_trace_chunks, load_trace

distributed = pytest.importorskip("dask.distributed")


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as c:
        yield c


@pytest.fixture(scope="module")
def exact():
    out = {}
    for name in ("conversation", "synthetic"):
        tracker = StackDistanceTracker()
        tracker.access(load_trace(name).block_ids)
        out[name] = tracker.histogram()
    return out


@pytest.mark.parametrize("parts", [4, 16])
@pytest.mark.parametrize("name", ["conversation", "synthetic"])
def test_mae_against_the_exact_mrc_on_the_bundled_traces(client, exact, name, parts):
    hist = distributed_mrc(iter_trace_chunks(name, chunk_refs=32768), client, parts=parts)
    ref = exact[name]
    assert hist.total == ref.total and hist.cold == ref.cold  # every reference, every key counted once
    caps = np.unique(np.linspace(0, ref.max_capacity, 200).astype(np.int64))
    mae = float(np.abs(hist.mrc(caps) - ref.mrc(caps)).mean())
    print(f"{name} P={parts}: MAE {mae:.5f}")
    assert mae <= 0.005
    assert abs(hist.working_set(0.9) - ref.working_set(0.9)) <= 0.02 * ref.working_set(0.9)


def test_dask_gives_the_same_histogram_as_the_in_process_run(client):
    chunks = list(iter_trace_chunks("synthetic", chunk_refs=10000))
    on_dask = distributed_mrc(chunks, client, parts=8, max_inflight=1)
    local = distributed_mrc(iter(chunks), None, parts=8)
    np.testing.assert_array_equal(on_dask.counts, local.counts)
    assert (on_dask.cold, on_dask.total, on_dask.scale) == (local.cold, local.total, 8.0)


def test_one_part_is_the_exact_tracker(exact):
    hist = distributed_mrc(iter_trace_chunks("synthetic", chunk_refs=7777), None, parts=1)
    ref = exact["synthetic"]
    np.testing.assert_array_equal(hist.counts[: ref.counts.shape[0]], ref.counts)
    assert not hist.counts[ref.counts.shape[0]:].any() and hist.cold == ref.cold


def test_parts_split_keys_evenly_and_deterministically():
    keys = np.arange(-50_000, 50_000, dtype=np.int64)
    part = key_parts(keys, 16)
    assert part.min() == 0 and part.max() == 15
    counts = np.bincount(part, minlength=16)
    assert counts.min() > 0.9 * keys.size / 16 and counts.max() < 1.1 * keys.size / 16
    np.testing.assert_array_equal(part, key_parts(keys.copy(), 16))
    np.testing.assert_array_equal(key_parts(keys.view(np.uint64), 16), part)  # same 64-bit words


def test_parts_are_the_splitmix64_hash_modulo_parts():
    keys = np.array([0, 1, 2, 3, -1, 2**63 - 1, -(2**63), 123456789], dtype=np.int64)
    for parts in (1, 4, 7):
        want = [mix64(int(k) & MASK64) % parts for k in keys]
        assert key_parts(keys, parts).tolist() == want


def test_pieces_are_applied_in_sequence_order():
    in_order, shuffled = PartTracker(), PartTracker()
    pieces = [np.array([1, 2, 1]), np.array([3, 2]), np.array([1, 4])]
    for seq, piece in enumerate(pieces):
        in_order.access(seq, piece)
    assert shuffled.access(2, pieces[2]) == 0 and shuffled.access(1, pieces[1]) == 0
    with pytest.raises(BadInputError, match="waits for piece 0"):
        shuffled.histogram()
    assert shuffled.access(0, pieces[0]) == 3
    for a, b in zip(in_order.histogram(), shuffled.histogram()):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("chunks, kwargs, match", [
    ([np.zeros((2, 2), dtype=np.int64)], {}, "1-D integer key array"),
    ([[[1, 2], [3]]], {}, "ragged"),  # a ShapeError, not numpy's ValueError
    (5, {}, "iterable of key arrays"),
    ([np.array([1.5, 2.0])], {}, "1-D integer key array"),
    ([np.array([1, 2])], {"parts": 0}, "parts"),
    ([np.array([1, 2])], {"max_inflight": 0}, "max_inflight"),
])
def test_bad_input(chunks, kwargs, match):
    with pytest.raises(BadInputError, match=match):
        distributed_mrc(chunks, None, **kwargs)


def test_doctest():
    import doctest

    import kvmm.policies.mrc.distributed as module

    result = doctest.testmod(module)
    assert result.attempted >= 4 and result.failed == 0
