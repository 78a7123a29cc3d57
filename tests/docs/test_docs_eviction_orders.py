"""Every Python block of docs/eviction_orders.md runs, in order, in one namespace, and a block
followed by a ```text block prints exactly that text; the table names every registered order
with its options and defaults."""

import dataclasses
import re

from tests.docs.doc_blocks import python_blocks, run_python_blocks
from tests.paths import ROOT

DOC = ROOT / "docs" / "eviction_orders.md"


def test_every_python_block_runs_and_prints_what_the_page_shows():
    found = python_blocks(DOC)
    assert len(found) >= 3 and all(out is not None for _, out in found)  # every example shows its output
    run_python_blocks(DOC, "eviction_orders_docs")


def table_rows() -> dict[str, tuple[str, str]]:
    """name -> (class cell, options cell) of the orders table."""
    rows = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and re.fullmatch(r"`[a-z0-9]+`", cells[0]):
            rows[cells[0].strip("`")] = (cells[1], cells[2])
    return rows


def test_the_table_names_every_order_its_class_and_every_option_with_its_default():
    from kvmm.policies import EVICTION_POLICIES, REPLAY_ORDERS

    rows = table_rows()
    assert set(rows) == set(EVICTION_POLICIES) == set(REPLAY_ORDERS)
    for name, factory in EVICTION_POLICIES.items():
        cls_cell, options_cell = rows[name]
        assert cls_cell == f"`{factory.__name__}`", name
        options = [f for f in dataclasses.fields(factory) if f.init]
        if not options:
            assert options_cell == "none", name
        for f in options:
            assert f"`{f.name}={f.default!r}`" in options_cell.replace("'", '"').replace('"', "'"), (name, f.name)


def test_the_page_is_linked_and_links_resolve():
    root = DOC.parents[1]
    assert "(docs/eviction_orders.md)" in (root / "README.md").read_text(encoding="utf-8")
    assert "(eviction_orders.md)" in (root / "docs" / "tiers.md").read_text(encoding="utf-8")
    for link in re.findall(r"\]\(([a-z_]+\.md)", DOC.read_text(encoding="utf-8")):
        assert (DOC.parent / link).exists(), link
