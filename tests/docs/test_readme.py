"""Every Python example in README.md runs as written (they are the users' first contact)."""

import re

import pytest

from tests.paths import ROOT

README = ROOT / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def test_readme_has_one_example_per_component():
    assert len(BLOCKS) >= 6


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": f"readme_example_{index}"}
    exec(compile(BLOCKS[index], f"README.md example {index}", "exec"), namespace)
    assert capsys.readouterr().out  # each example prints what it shows
