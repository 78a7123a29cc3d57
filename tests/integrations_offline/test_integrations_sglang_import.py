"""The main suite runs without SGLang: ``import kvmm`` never imports it, and importing the SGLang
adapter without it fails with an ImportError that says how to install it."""

import subprocess
import sys

from tests.paths import ROOT

PROBE = """
import sys
sys.modules["sglang"] = None  # as if SGLang were not installed: any import of it fails
import kvmm, kvmm.tiers, kvmm.policies, kvmm.integrations
assert not any(m == "sglang" or m.startswith("sglang.") for m in sys.modules if sys.modules[m] is not None)
try:
    import kvmm.integrations.sglang
except ImportError as exc:
    print(exc)
else:
    raise SystemExit("kvmm.integrations.sglang imported without SGLang")
"""


def test_kvmm_imports_without_sglang_and_the_adapter_says_how_to_install_it():
    proc = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    message = proc.stdout.strip()
    assert "sglang==0.5.23" in message and "requirements-sglang.txt" in message and "Use inside SGLang" in message
