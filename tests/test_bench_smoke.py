"""Smoke-run every benchmark at tiny sizes so bench/ never rots (timing disabled), and check that
each benchmark group timed a baseline beside kvmm (bench/conftest.py reports the groups that did not)."""

import os
import subprocess
import sys

from bench.conftest import NO_BASELINE
from tests.paths import ROOT


def test_benchmarks_run_at_smoke_scale():
    env = dict(os.environ, KVMM_BENCH_SCALE="smoke", PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "bench", "-q", "-x", "--benchmark-disable", "-p", "no:cacheprovider"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout
    missing = [line for line in proc.stdout.splitlines() if line.startswith(NO_BASELINE)]
    assert not missing, "benchmark groups with no baseline in the same run:\n" + "\n".join(missing)
