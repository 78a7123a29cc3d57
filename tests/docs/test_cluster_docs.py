"""Every Python block of docs/cluster.md runs, in order, in one namespace (later blocks reuse
earlier names), and a block followed by a ```text block prints exactly that text."""


from tests.docs.doc_blocks import python_blocks, run_python_blocks
from tests.paths import ROOT

DOC = ROOT / "docs" / "cluster.md"


def blocks() -> list[tuple[str, str | None]]:
    return python_blocks(DOC)


def test_the_page_shows_code_and_output():
    found = blocks()
    assert len(found) >= 3
    assert sum(out is not None for _, out in found) >= 3
    text = DOC.read_text(encoding="utf-8")
    for link in ("cluster_index.md", "cluster_routers.md", "cost.md"):
        assert f"]({link}" in text and (DOC.parent / link).exists()


def test_every_python_block_runs_and_prints_what_the_page_shows():
    run_python_blocks(DOC, "cluster_docs", ignore_warnings=True)  # a QueueGrowthWarning is not part of the output shown


def test_the_user_router_example_is_under_20_lines():
    code = next(c for c, _ in blocks() if "def route(self, request, view)" in c)
    plug_in = [line for line in code.splitlines() if line.strip()]
    assert len(plug_in) < 20, plug_in
    assert "ROUTERS" not in code and "register" not in code  # no registration needed
