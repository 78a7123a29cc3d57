"""prefix_secret(): the one documented source of the prefix-cache secret (docs/allocator.md, Security)."""

from __future__ import annotations

import numpy as np
import pytest

import kvmm.allocators._secret as secret_module
from kvmm.allocators import BlockAllocator, prefix_secret
from kvmm.errors import BadInputError
from tests.paths import ROOT

TEST_SECRET = bytes(range(16))  # fixed, for tests only


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    monkeypatch.delenv("KVMM_PREFIX_SECRET", raising=False)
    monkeypatch.delenv("KVMM_PREFIX_SECRET_FILE", raising=False)


def test_environment_variable_in_hex(monkeypatch):
    monkeypatch.setenv("KVMM_PREFIX_SECRET", TEST_SECRET.hex())
    assert prefix_secret() == TEST_SECRET
    # two allocators (two processes, or one after a restart) with the shared secret agree on keys
    a, b = BlockAllocator(8, 4, secret=prefix_secret()), BlockAllocator(8, 4, secret=prefix_secret())
    assert np.array_equal(a.hash_blocks(np.arange(8)), b.hash_blocks(np.arange(8)))


def test_file_in_hex_or_raw_bytes(monkeypatch, tmp_path):
    hex_file, raw_file = tmp_path / "hex", tmp_path / "raw"
    hex_file.write_text(TEST_SECRET.hex().upper() + "\n")
    raw_file.write_bytes(TEST_SECRET)
    for path in (hex_file, raw_file):
        monkeypatch.setenv("KVMM_PREFIX_SECRET_FILE", str(path))
        assert prefix_secret() == TEST_SECRET
    monkeypatch.setenv("KVMM_PREFIX_SECRET", bytes(16).hex())  # the variable wins over the file
    assert prefix_secret() == bytes(16)


@pytest.mark.parametrize("value", ["", "abc", "zz" * 16, "00" * 15, "00" * 17])
def test_malformed_secret_is_refused(monkeypatch, value):
    monkeypatch.setenv("KVMM_PREFIX_SECRET", value)
    with pytest.raises(BadInputError, match="32 hex digits"):
        prefix_secret()


def test_missing_file_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("KVMM_PREFIX_SECRET_FILE", str(tmp_path / "missing"))
    with pytest.raises(BadInputError, match="cannot be read"):
        prefix_secret()


def test_default_is_random_per_process_and_stable_within_it(monkeypatch):
    monkeypatch.setattr(secret_module, "_process_secret", None)
    first = prefix_secret()
    assert prefix_secret() == first and len(first) == 16
    monkeypatch.setattr(secret_module, "_process_secret", None)  # a new process draws a new one
    assert prefix_secret() != first


def test_examples_do_not_pass_a_constant_secret():

    root = ROOT
    files = [root / "README.md", *sorted((root / "docs").glob("*.md")), *sorted((root / "kvmm" / "reproduce").glob("*.py"))]
    offenders = [str(p.relative_to(root)) for p in files if "secret=bytes(" in p.read_text()]
    assert offenders == []
