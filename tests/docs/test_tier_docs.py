"""The example in docs/tiers.md runs and prints what its comments say."""

import contextlib
import io
import re

from tests.paths import ROOT

DOC = ROOT / "docs" / "tiers.md"


def test_docs_example_runs_and_matches_its_comments():
    code = re.search(r"```python\n(.*?)```", DOC.read_text(), re.S).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(DOC), "exec"), {})
    printed = out.getvalue().splitlines()
    expected = [m.group(1).strip() for m in re.finditer(r"print\(.*\)\s+# (.*)", code)]
    assert printed == expected
