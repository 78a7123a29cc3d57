"""Shared by the tests of docs pages with worked examples: a page's Python blocks, each with the
```text block right after it (its printed output) when there is one, and a runner that executes
them in order in one namespace (later blocks reuse earlier names)."""

from __future__ import annotations

import contextlib
import io
import re
import warnings
from pathlib import Path

# a python block, and the text block right after it (its printed output) when there is one
BLOCK = re.compile(r"```python\n(.*?)```\s*(?:```text\n(.*?)```)?", re.S)


def python_blocks(doc: Path) -> list[tuple[str, str | None]]:
    """``(code, shown output or None)`` for every Python block of ``doc``, in order."""
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(doc.read_text(encoding="utf-8"))]


def run_python_blocks(doc: Path, name: str, *, ignore_warnings: bool = False) -> dict:
    """Run every Python block of ``doc`` in order in one namespace (``__name__`` = ``name``); a
    block followed by a ```text block must print exactly that text.  ``ignore_warnings``: warnings
    are not part of the output shown.  Returns the namespace."""
    namespace: dict = {"__name__": name}
    for i, (code, shown) in enumerate(python_blocks(doc)):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), warnings.catch_warnings():
            if ignore_warnings:
                warnings.simplefilter("ignore")
            exec(compile(code, f"{doc} block {i}", "exec"), namespace)
        if shown is not None:
            assert out.getvalue().splitlines() == shown.splitlines(), f"block {i}"
    return namespace
