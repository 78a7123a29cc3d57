"""The runnable examples in docs/vtoken.md run as written."""

import re

import pytest

from tests.paths import ROOT

DOC = ROOT / "docs" / "vtoken.md"
EXAMPLES = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


@pytest.mark.parametrize("code", EXAMPLES, ids=[f"example{i}" for i in range(len(EXAMPLES))])
def test_doc_example_runs(code, capsys):
    exec(compile(code, str(DOC), "exec"), {"__name__": "__doc_example__"})
    assert capsys.readouterr().out.strip()  # each example prints its result


def test_doc_has_examples():
    assert len(EXAMPLES) == 2
