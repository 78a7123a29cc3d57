"""The runnable example in docs/tempokv.md runs (it is copied into README.md)."""

import re

from tests.paths import ROOT

DOC = ROOT / "docs" / "tempokv.md"


def test_docs_example_runs(capsys):
    code = re.search(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S).group(1)
    exec(compile(code, str(DOC), "exec"), {})
    out = capsys.readouterr().out
    assert "held 1.20 GiB*s" in out and "'ready_in_time': 1" in out
