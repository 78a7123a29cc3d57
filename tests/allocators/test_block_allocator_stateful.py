"""BlockAllocator against its plain-Python model, rule by rule (kvmm.testing.BlockAllocatorMachine)."""

from kvmm.testing import BlockAllocatorMachine

TestAllocatorMachine = BlockAllocatorMachine.TestCase
