"""Smoke-run every benchmark at tiny sizes so bench/ never rots (timing disabled)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_benchmarks_run_at_smoke_scale():
    env = dict(os.environ, KVMM_BENCH_SCALE="smoke", PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "bench", "-q", "-x", "--benchmark-disable", "-p", "no:cacheprovider"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )
    if proc.returncode == 5:
        pytest.skip("bench/ holds no benchmarks yet")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout
