"""Every kvmm admission policy through kvmm.testing.AdmissionPolicyContract (a new policy: one
line), and the validation of each policy's parameters."""

import pytest

from kvmm.errors import KvmmError
from kvmm.policies import RefillFilter, SelectiveWriteThrough, StoreThreshold, WriteAll
from kvmm.testing import AdmissionPolicyContract


class KvmmAdmissionContract(AdmissionPolicyContract):
    raises_kvmm_errors = True


class TestWriteAll(KvmmAdmissionContract):
    make_policy = staticmethod(WriteAll)


class TestStoreThreshold(KvmmAdmissionContract):
    make_policy = staticmethod(lambda: StoreThreshold(k=2))


class TestSelectiveWriteThrough(KvmmAdmissionContract):
    make_policy = staticmethod(lambda: SelectiveWriteThrough(hits=2))


class TestRefillFilter(KvmmAdmissionContract):
    make_policy = staticmethod(lambda: RefillFilter(capacity_blocks=4, max_refill_blocks=2, update_every=2))


class TestRefillFilterAlwaysAny(KvmmAdmissionContract):
    make_policy = staticmethod(lambda: RefillFilter(capacity_blocks=4, adaptive=False, refill="any"))


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
