"""Every kvmm eviction policy through kvmm.testing.EvictionPolicyContract: the policy alone and
paired with every kvmm tier (Redis included) through ManagedTier.  A new policy: one line."""

from kvmm.policies import (
    ARCPolicy,
    BeladyPolicy,
    ClockPolicy,
    FIFOPolicy,
    LFUPolicy,
    LIRSPolicy,
    LRUPolicy,
    S3FIFOPolicy,
    SIEVEPolicy,
    SLRUPolicy,
    TwoQPolicy,
    WTinyLFUPolicy,
)
from kvmm.testing import TIER_KINDS, EvictionPolicyContract
from kvmm.testing.redis_server import *  # noqa: F401,F403  (fixtures)


class KvmmPolicyContract(EvictionPolicyContract):
    tier_kinds = TIER_KINDS
    raises_kvmm_errors = True


class TestLRU(KvmmPolicyContract):
    make_policy = staticmethod(LRUPolicy)


class TestFIFO(KvmmPolicyContract):
    make_policy = staticmethod(FIFOPolicy)


class TestLFU(KvmmPolicyContract):
    make_policy = staticmethod(LFUPolicy)


class TestARC(KvmmPolicyContract):
    make_policy = staticmethod(ARCPolicy)


class TestARCCapacity3(KvmmPolicyContract):
    make_policy = staticmethod(lambda: ARCPolicy(capacity=3))


class TestARCGhostLimit(KvmmPolicyContract):
    make_policy = staticmethod(lambda: ARCPolicy(ghost_limit=150))


class TestClock(KvmmPolicyContract):
    make_policy = staticmethod(ClockPolicy)


class TestClock3Bit(KvmmPolicyContract):
    make_policy = staticmethod(lambda: ClockPolicy(init_freq=1, n_bit_counter=3))


class TestBeladyNoFuture(KvmmPolicyContract):
    # The contract's own events follow no trace, so Belady runs it with no future known (every
    # next use "never"): it checks the heap's victims, protection, deletes, bad calls and tier
    # pairing; following a trace is tested in tests/policies/eviction/test_order_belady.py.
    make_policy = staticmethod(BeladyPolicy)


class TestS3FIFO(KvmmPolicyContract):
    make_policy = staticmethod(S3FIFOPolicy)


class TestS3FIFOHalfSmall(KvmmPolicyContract):
    # a small queue of 500 bytes in the 1000-byte tiers: 100-byte entries go through it
    make_policy = staticmethod(lambda: S3FIFOPolicy(small_size_ratio=0.5, move_to_main_threshold=1))


class TestSIEVE(KvmmPolicyContract):
    make_policy = staticmethod(SIEVEPolicy)


class TestTwoQ(KvmmPolicyContract):
    make_policy = staticmethod(TwoQPolicy)


class TestTwoQCapacity500(KvmmPolicyContract):
    make_policy = staticmethod(lambda: TwoQPolicy(capacity=500, a_in_size_ratio=0.1))


class TestLIRS(KvmmPolicyContract):
    make_policy = staticmethod(LIRSPolicy)


class TestLIRSHirShare(KvmmPolicyContract):
    make_policy = staticmethod(lambda: LIRSPolicy(hirs_ratio=0.3))


# SLRU's segments here hold whole 100-byte entries (2 x 500, 200 + 800): with libCacheSim's
# default 4 x 250 a get's cooling evicts (as libCacheSim's does), which the contract's "each put
# into a full tier evicts one" does not expect; tests/policies/eviction/test_order_slru.py covers that path.
class TestSLRU(KvmmPolicyContract):
    make_policy = staticmethod(lambda: SLRUPolicy(n_seg=2))


class TestSLRUOneToFour(KvmmPolicyContract):
    make_policy = staticmethod(lambda: SLRUPolicy(seg_size=(1, 4)))


class TestWTinyLFU(KvmmPolicyContract):
    make_policy = staticmethod(WTinyLFUPolicy)


class TestWTinyLFUWindow20(KvmmPolicyContract):
    make_policy = staticmethod(lambda: WTinyLFUPolicy(window_size=0.2))


def test_every_registered_policy_has_a_contract_class():
    from kvmm.policies import EVICTION_POLICIES

    covered = {type(c.make_policy()) for c in KvmmPolicyContract.__subclasses__()}
    assert covered == set(EVICTION_POLICIES.values())
