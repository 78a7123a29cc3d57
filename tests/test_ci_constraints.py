""".ci/constraints.txt: the versions of the last passing CI run, one ``name==version`` a line,
covering every dependency kvmm and its test extras name (so a pinned rerun reproduces it)."""

from __future__ import annotations

import re
import subprocess
import sys

import tomllib

from tests.paths import ROOT

sys.path.insert(0, str(ROOT / ".ci"))
import version_drift  # noqa: E402


def test_constraints_pin_every_named_dependency():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    named = project["dependencies"] + [r for e in ("test", "hf", "plot", "redis", "dist", "peers") for r in extras[e]]
    pins = version_drift.pinned(str(ROOT / ".ci" / "constraints.txt"))
    for req in named:
        name = version_drift.canonical(re.split(r"[<>=!\[ ;]", req, maxsplit=1)[0])
        assert name in pins, f"{name} ({req}) has no pin in .ci/constraints.txt"
    assert pins["torch"] == "2.13.0"  # the CPU build .ci/run installs first


def test_drift_report_names_changed_versions(tmp_path):
    from importlib import metadata

    numpy_version = metadata.version("numpy")
    path = tmp_path / "c.txt"
    path.write_text(f"numpy==0.0.1\nsortedcontainers=={metadata.version('sortedcontainers')}\n")
    out = subprocess.run([sys.executable, str(ROOT / ".ci" / "version_drift.py"), str(path)],
                         capture_output=True, text=True, check=True).stdout
    assert f"numpy: 0.0.1 -> {numpy_version}" in out
    assert "sortedcontainers:" not in out.split("(the last passing run):", 1)[1].split("not in the last")[0]
