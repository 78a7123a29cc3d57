"""The "triattention" report section runs with numpy only (torch blocked) and reports sane numbers."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = r"""
import sys, io
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('torch', 'transformers'):
            raise ImportError('blocked for this test: ' + name)
sys.meta_path.insert(0, Block())
from pathlib import Path
from kvmm.report import Report
from kvmm.reproduce import triattention as _reproduce
buf = io.StringIO()
report = Report(out=Path(sys.argv[1]), quick=True, progress_enabled=False, stream=buf)
_reproduce.reproduce(report)
assert 'torch' not in sys.modules
print(buf.getvalue())
"""


def test_section_runs_without_torch_and_triattention_beats_random(tmp_path):
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "Attention-mass recall" in out and "Pearson(logit_curve" in out
    rows = [line.split() for line in out.splitlines() if line.split()[:1] in (["low"], ["medium"], ["high"])]
    recall_rows = [r for r in rows if len(r) == 10]
    assert len(recall_rows) == 6
    for r in recall_rows:
        values = [float(v) for v in r[3:]]
        assert all(0.0 <= v <= 1.0 for v in values)
        tri, rand, oracle = values[0], values[5], values[6]
        assert tri > rand and tri <= oracle + 1e-9
        assert max(values[:6]) <= oracle + 1e-9  # nobody beats the oracle
    pearson_rows = [r for r in rows if len(r) == 5]
    assert len(pearson_rows) == 3 and all(-1 <= float(r[1]) <= 1 for r in pearson_rows)


def test_section_takes_captured_qk_from_the_environment(tmp_path):
    import os

    import numpy as np

    rng = np.random.default_rng(0)
    q = rng.normal(size=(240, 4, 16)) + rng.normal(size=(1, 4, 16))
    k = rng.normal(size=(240, 2, 16)) + rng.normal(size=(1, 2, 16))
    path = tmp_path / "qk.npz"
    np.savez(path, q=q, k=k, theta=10000.0, layout="interleaved")
    env = dict(os.environ, KVMM_TRIATTENTION_QK=str(path), PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "out")], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"Captured q/k from {path}"))
    rows = [line.split() for line in lines[start + 3:start + 5]]
    assert [r[0] for r in rows] == ["10x", "4x"]
    for r in rows:
        values = [float(v) for v in r[1:]]
        assert len(values) == 7 and all(0 <= v <= values[-1] + 1e-9 for v in values)
    assert "Pearson median" in lines[start + 5]
