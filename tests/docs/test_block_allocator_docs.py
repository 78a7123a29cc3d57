"""The runnable example in docs/allocator.md runs and its assertions hold."""

import re

from tests.paths import ROOT


def test_docs_example_runs():
    text = (ROOT / "docs" / "allocator.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "docs/allocator.md has no python example"
    namespace: dict = {}
    exec(compile(blocks[0], "docs/allocator.md", "exec"), namespace)  # noqa: S102 - our own docs
    assert namespace["pool"].stats == {"queries": 12, "hits": 4, "evictions": 0, "cached_blocks": 8,
                                       "cached_keys": 8}
