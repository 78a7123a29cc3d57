"""Every Python block of docs/latency.md runs, in order, in one namespace (later blocks reuse
earlier names), and a block followed by a ```text block prints exactly that text."""


from tests.docs.doc_blocks import python_blocks, run_python_blocks
from tests.paths import ROOT

DOC = ROOT / "docs" / "latency.md"


def test_the_page_has_its_sections():
    text = DOC.read_text(encoding="utf-8")
    assert text.startswith("# Step latency")
    for heading in ("## What a step is", "## The roofline", "### Where it differs from BLIS's roofline", "## Hardware",
                    "## Models", "## KV capacity", "## ConstantRate: the old model",
                    "## Fitted and `fit_latency`: calibrate with your GPU in one call", "## Your own LatencyModel",
                    "## In the simulator"):
        assert heading in text, heading
    found = python_blocks(DOC)
    assert len(found) >= 10 and sum(out is not None for _, out in found) >= 10


def test_every_python_block_runs_and_prints_what_the_page_shows():
    namespace = run_python_blocks(DOC, "latency_docs")
    assert namespace["fitted"].report.rows == 200


def test_the_page_names_every_shipped_model_and_hardware():
    from kvmm.sim.latency import HARDWARE, ModelArch

    text = DOC.read_text(encoding="utf-8")
    for name in [*ModelArch.names(), *HARDWARE]:
        assert name in text, name
