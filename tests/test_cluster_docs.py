"""Every Python block of docs/cluster.md runs, in order, in one namespace (later blocks reuse
earlier names), and a block followed by a ```text block prints exactly that text."""

import contextlib
import io
import re
import warnings
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "cluster.md"
# a python block, and the text block right after it (its printed output) when there is one
BLOCK = re.compile(r"```python\n(.*?)```\s*(?:```text\n(.*?)```)?", re.S)


def blocks() -> list[tuple[str, str | None]]:
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(DOC.read_text(encoding="utf-8"))]


def test_the_page_shows_code_and_output():
    found = blocks()
    assert len(found) >= 3
    assert sum(out is not None for _, out in found) >= 3
    text = DOC.read_text(encoding="utf-8")
    for link in ("cluster_index.md", "cluster_routers.md", "cost.md"):
        assert f"]({link}" in text and (DOC.parent / link).exists()


def test_every_python_block_runs_and_prints_what_the_page_shows():
    namespace: dict = {"__name__": "cluster_docs"}
    for i, (code, shown) in enumerate(blocks()):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a QueueGrowthWarning is not part of the output shown
            exec(compile(code, f"{DOC} block {i}", "exec"), namespace)
        if shown is not None:
            assert out.getvalue().splitlines() == shown.splitlines(), f"block {i}"


def test_the_user_router_example_is_under_20_lines():
    code = next(c for c, _ in blocks() if "def route(self, request, view)" in c)
    plug_in = [line for line in code.splitlines() if line.strip()]
    assert len(plug_in) < 20, plug_in
    assert "ROUTERS" not in code and "register" not in code  # no registration needed
