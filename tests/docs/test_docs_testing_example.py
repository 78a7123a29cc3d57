"""docs/testing.md runs as written: its files, copied into an empty folder outside the kvmm
package, pass with the page's command (smoke scale), and the benchmark table compares the
page's policy with LRU in the same run."""

import os
import re
import shlex
import subprocess
import sys
from importlib.metadata import entry_points

import tomllib

from tests.paths import ROOT

PAGE = (ROOT / "docs" / "testing.md").read_text(encoding="utf-8")
FILES = dict(re.findall(r"<!-- file: (\S+) -->\n```python\n(.*?)```", PAGE, re.S))
[COMMAND] = re.findall(r"<!-- command -->\n```bash\n(.*?)\n```", PAGE, re.S)


def plugin_args() -> list[str]:
    """Nothing when pip registered the plugin (entry point pytest11: kvmm), else load it by name."""
    installed = any(ep.name == "kvmm" and ep.value == "kvmm.testing.plugin" for ep in entry_points(group="pytest11"))
    return [] if installed else ["-p", "kvmm.testing.plugin"]


def test_pyproject_registers_the_plugin():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["entry-points"]["pytest11"] == {"kvmm": "kvmm.testing.plugin"}


def test_the_policy_is_twenty_lines_and_the_contract_test_three():
    assert set(FILES) == {"my_policy.py", "test_my_policy.py"}
    assert len([line for line in FILES["my_policy.py"].splitlines() if line.strip()]) <= 20
    contract = re.search(r"class TestSecondChance\(EvictionPolicyContract\):\n(?:    .*\n)+", FILES["test_my_policy.py"])
    assert len(contract.group(0).strip().splitlines()) == 3


def test_the_page_example_runs_outside_the_package(tmp_path):
    for name, text in FILES.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    argv = shlex.split(COMMAND)
    assert argv[0] == "pytest"
    # this checkout's kvmm first, whatever is installed (and whatever else PYTHONPATH holds)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    env.pop("KVMM_BENCH_SCALE", None)
    proc = subprocess.run([sys.executable, "-m", *argv, *plugin_args(), "-p", "no:cacheprovider", "-q"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-2000:]
    contract_tests = int(re.search(r"`TestSecondChance` runs (\d+) tests", PAGE).group(1))
    assert re.search(rf"\b{contract_tests + 2} passed\b", out), out[-2000:]  # + the two benchmark runs
    assert "test_against_lru[policy]" in out and "test_against_lru[lru]" in out  # pytest-benchmark timed both
    table = out[out.index("kvmm policy vs LRU (same run)"):].splitlines()
    row = next(line for line in table if "SecondChancePolicy" in line).split()
    assert row[1:4] == ["conversation,", "1000", "blocks,"] and row[4] == "smoke"
    hit_ratio, lru_hit_ratio = float(row[6]), float(row[8])
    assert 0 < hit_ratio < 1 and 0 < lru_hit_ratio < 1
