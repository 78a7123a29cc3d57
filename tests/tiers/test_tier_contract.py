"""Every kvmm tier through kvmm.testing.TierBackendContract (dict-model state machine included).

MmapTier's machine also closes and reopens the folder (a restart) and compacts at random
points; the model must survive both unchanged.
"""

import shutil
import tempfile
import uuid

import pytest
from hypothesis.stateful import rule

from kvmm.testing import TierBackendContract, TierMachine
from kvmm.testing.redis_server import *  # noqa: F401,F403  (fixtures)
from kvmm.tiers import ArenaTier, MmapTier, RedisTier, SimulatedTier


class TestArenaTier(TierBackendContract):
    make_tier = staticmethod(ArenaTier)


class TestSimulatedTier(TierBackendContract):
    holds_bytes = False
    make_tier = staticmethod(SimulatedTier)


class MmapMachine(TierMachine):
    @rule()
    def restart(self):
        self.tier.close()
        self.tier = MmapTier(self.tier.path, self.capacity, segment_bytes=256, gc_bytes=300)
        assert self.tier.recovery["torn"] == 0 and self.tier.recovery["corrupt"] == 0

    @rule()
    def compact_everything(self):
        self.tier.compact(full=True)
        assert self.tier.garbage_bytes == 0


class TestMmapTier(TierBackendContract):
    machine_class = MmapMachine

    def make_tier(self, capacity_bytes):
        return MmapTier(tempfile.mkdtemp(prefix="kvmm-mmap-"), capacity_bytes, segment_bytes=256, gc_bytes=300)

    def close_tier(self, tier):
        tier.close()
        shutil.rmtree(tier.path, ignore_errors=True)


class TestRedisTier(TierBackendContract):
    @pytest.fixture(autouse=True)
    def _server(self, redis_url):
        self.url = redis_url

    def make_tier(self, capacity_bytes):
        return RedisTier(capacity_bytes, url=self.url, prefix=f"kvmm-sm-{uuid.uuid4().hex[:10]}")
