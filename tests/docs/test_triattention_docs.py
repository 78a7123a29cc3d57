"""The example in docs/triattention.md runs, and what it prints is consistent."""

import contextlib
import io
import re

from tests.paths import ROOT

DOC = ROOT / "docs" / "triattention.md"


def test_docs_example_runs():
    code = re.search(r"```python\n(.*?)```", DOC.read_text(), re.S).group(1)
    out, names = io.StringIO(), {}
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(DOC), "exec"), names)
    assert len(out.getvalue().splitlines()) == 3
    # the series tracks the measured logits, and the scorer ranks every cached key
    assert names["r"].min() > 0.9 and names["scores"].shape == (512,)
    # decode kept budget..budget+interval live tokens, never the protected prompt's 64
    live = 512 - len(names["evicted"])
    assert 128 <= live < 256 and names["policy"].keep_mask(0).shape == (1, 2, live)
    assert min(names["evicted"]) >= 64 and len(set(names["evicted"])) == len(names["evicted"])
