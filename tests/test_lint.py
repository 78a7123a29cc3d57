"""ruff passes on the whole tree (pyproject.toml, [tool.ruff]; .ci/run runs it before the suite),
and fails on what it is configured to catch."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import ROOT

pytest.importorskip("ruff")


def ruff(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", *args], cwd=cwd, capture_output=True,
                          text=True)


def test_ruff_passes_on_the_tree():
    result = ruff(".")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]


@pytest.mark.parametrize("source, rule", [
    ("import os\n", "F401"),                                  # pyflakes: unused import
    ("import sys\nimport os\n\nprint(os, sys)\n", "I001"),    # isort: unsorted imports
    ("from typing import Sequence\n\nx: Sequence = ()\n", "UP035"),  # pyupgrade: collections.abc
    ("def f(x=[]):\n    return x\n", "B006"),                # bugbear: mutable default
    ("x = '" + "a" * 140 + "'\n", "E501"),                    # pycodestyle: longer than 130
])
def test_ruff_fails_on_a_planted_finding(tmp_path, source, rule):
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "kvmm").mkdir()
    (tmp_path / "kvmm" / "planted.py").write_text(source, encoding="utf-8")
    result = ruff(".", cwd=tmp_path)
    assert result.returncode == 1 and rule in result.stdout, result.stdout
