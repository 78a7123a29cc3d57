"""The runnable example in docs/compose.md runs and plugs its own policy into the simulator."""

import re

from tests.paths import ROOT

DOC = ROOT / "docs" / "compose.md"


def test_compose_docs_example_runs(capsys):
    code = re.search(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S).group(1)
    namespace: dict = {}
    exec(compile(code, str(DOC), "exec"), namespace)
    out = capsys.readouterr().out
    assert "TTFT p95" in out
    hits, offered = namespace["result"].tier_block_hits, namespace["result"].tier_blocks_offered
    assert len(hits) == 2 and 0 < hits[1] <= offered[1]
    assert namespace["result"].tier_evictions[0] > 0  # the 32 GiB DRAM tier filled up and evicted
