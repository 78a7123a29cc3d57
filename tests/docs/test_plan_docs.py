"""Every Python block of docs/plan.md runs, in order, in one namespace (later blocks reuse
earlier names), and a block followed by a ```text block prints exactly that text."""

import re

from tests.docs.doc_blocks import python_blocks, run_python_blocks
from tests.paths import ROOT

DOC = ROOT / "docs" / "plan.md"


def blocks() -> list[tuple[str, str | None]]:
    return python_blocks(DOC)


def test_the_page_has_its_sections_and_links():
    text = DOC.read_text(encoding="utf-8")
    assert text.startswith("# Plan your KV capacity")
    for heading in ("## From the command line", "## From Python: a worked example", "## Method",
                    "## Assumptions, and what the simulator adds"):
        assert heading in text
    for link in ("cost.md", "cluster.md"):
        assert f"]({link}" in text and (DOC.parent / link).exists()
    found = blocks()
    assert len(found) >= 3 and all(out is not None for _, out in found)


def test_every_python_block_runs_and_prints_what_the_page_shows():
    run_python_blocks(DOC, "plan_docs", ignore_warnings=True)  # a QueueGrowthWarning is not part of the output shown


def test_the_cli_example_names_only_flags_kvmm_plan_has():
    import argparse

    from kvmm.cli.plan import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    known = {s for a in parser._actions for s in a.option_strings}
    text = DOC.read_text(encoding="utf-8")
    example = text.split("```bash\n", 1)[1].split("```", 1)[0]
    used = set(re.findall(r"(--[a-z0-9-]+)", example.split("kvmm simulate")[0]))
    assert used and used <= known, used - known
    documented = set(re.findall(r"`(--[a-z0-9-]+)", text))
    assert documented <= known | {"--config"}, documented - known
