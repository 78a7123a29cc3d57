"""``import kvmm.allocators`` is light: its names load their modules (and numba) on first use."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from tests.paths import ROOT


def test_import_kvmm_allocators_loads_no_numba():
    code = "import sys, kvmm.allocators\nprint('numba' in sys.modules, 'kvmm.allocators.block_allocator' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_first_use_of_a_name_loads_it():
    code = "import sys\nfrom kvmm.allocators import BlockAllocator\nprint('numba' in sys.modules, BlockAllocator.__name__)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "BlockAllocator"]


def test_every_public_name_of_kvmm_allocators_is_its_module_s():
    pkg = importlib.import_module("kvmm.allocators")
    assert pkg.__all__ == ["BlockAllocator", "CommitResult", "RepackPlan", "TokenTable", "prefix_secret"]
    for name in pkg.__all__:
        assert getattr(pkg, name) is getattr(importlib.import_module(pkg._LAZY[name]), name)
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        pkg.Nope  # noqa: B018
