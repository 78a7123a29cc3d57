"""One contract suite over every admission policy: add a policy with one line in POLICIES."""

import copy

import numpy as np
import pytest

from kvmm.errors import DTypeError, KvmmError, ShapeError
from kvmm.policies import AdmissionRequest, RefillFilter, SelectiveWriteThrough, StoreThreshold, WriteAll
from kvmm.protocols import AdmissionPolicy

POLICIES = {
    "write-all": lambda: WriteAll(),
    "store-threshold": lambda: StoreThreshold(k=2),
    "selective-write-through": lambda: SelectiveWriteThrough(hits=2),
    "refill-filter": lambda: RefillFilter(capacity_blocks=4, max_refill_blocks=2, update_every=2),
    "refill-filter-always-any": lambda: RefillFilter(capacity_blocks=4, adaptive=False, refill="any"),
}


@pytest.fixture(params=sorted(POLICIES))
def policy(request):
    return POLICIES[request.param]()


def requests(seed, n=40):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        size = int(rng.integers(0, 12))
        keys = rng.integers(0, 30, size=size).astype(np.int64)
        yield AdmissionRequest(keys, rng.random(size) < 0.4, rng.random(size) < 0.5)


def state_of(policy):
    return copy.deepcopy({k: v for k, v in vars(policy).items()})


def same_state(a, b):
    assert a.keys() == b.keys()
    for k in a:
        if hasattr(a[k], "snapshot"):
            sa, sb = a[k].snapshot(), b[k].snapshot()
            assert all(np.array_equal(sa[n], sb[n]) for n in sa)
        elif hasattr(a[k], "__dict__"):
            same_state(vars(a[k]), vars(b[k]))
        else:
            assert np.array_equal(a[k], b[k]), k


def test_speaks_the_protocol(policy):
    assert isinstance(policy, AdmissionPolicy)


def test_returns_a_mask_that_never_rewrites_cached_blocks(policy):
    for req in requests(0):
        mask = policy.admit(req)
        assert mask.dtype == np.bool_ and mask.shape == req.keys.shape
        assert not np.any(mask & req.cached)


def test_deterministic(policy):
    twin = copy.deepcopy(policy)
    for req in requests(1):
        assert np.array_equal(policy.admit(req), twin.admit(req))


def test_accepts_uint64_keys_and_plain_objects(policy):
    class View:
        keys = np.array([2**64 - 1, 3], dtype=np.uint64)
        cached = np.array([False, True])

    mask = policy.admit(View())
    assert mask.shape == (2,) and not mask[1]


@pytest.mark.parametrize("bad, error", [
    (AdmissionRequest(np.array([1.0, 2.0]), np.array([False, False])), DTypeError),
    (AdmissionRequest(np.array([1, 2]), np.array([0, 1])), DTypeError),
    (AdmissionRequest(np.array([1, 2]), np.array([False])), ShapeError),
    (AdmissionRequest(np.array([1, 2]), np.array([False, True]), np.array([1, 0])), DTypeError),
    (object(), DTypeError),
])
def test_bad_requests_raise_and_change_nothing(policy, bad, error):
    for req in requests(2, 10):
        policy.admit(req)
    before = state_of(policy)
    with pytest.raises(error):
        policy.admit(bad)
    same_state(before, state_of(policy))


@pytest.mark.parametrize("make, words", [
    (lambda: StoreThreshold(k=0), "k"),
    (lambda: StoreThreshold(k=1.5), "k"),
    (lambda: SelectiveWriteThrough(hits=0), "hits"),
    (lambda: RefillFilter(capacity_blocks=-1), "capacity_blocks"),
    (lambda: RefillFilter(capacity_blocks=10, fraction=0.0), "fraction"),
    (lambda: RefillFilter(capacity_blocks=10, fraction=float("nan")), "fraction"),
    (lambda: RefillFilter(capacity_blocks=10, max_refill_blocks=-1), "max_refill_blocks"),
    (lambda: RefillFilter(capacity_blocks=10, refill="most"), "refill"),
    (lambda: RefillFilter(capacity_blocks=10, adaptive="yes"), "adaptive"),
    (lambda: RefillFilter(capacity_blocks=10, update_every=0), "update_every"),
])
def test_parameters_validated(make, words):
    with pytest.raises(KvmmError, match=words):
        make()
