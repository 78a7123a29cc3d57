"""TokenTable against its plain-Python model, rule by rule (kvmm.testing.TokenTableMachine)."""

from kvmm.testing import TokenTableMachine

TestTokenTableMachine = TokenTableMachine.TestCase
