"""The tests and benchmarks trees keep their shape (issue 32): ``tests/<package>/...`` mirrors
kvmm, the runnable-docs tests are in ``tests/docs/``, the reference models are in
``kvmm/testing/models/`` only, and ``bench/`` imports nothing from ``tests/``."""

from __future__ import annotations

import ast

import pytest

from tests.paths import ROOT

TESTS = ROOT / "tests"

#: test files that stay at tests/ top level: project-wide checks and tests of kvmm's top-level modules
TOP_LEVEL_TESTS = {
    # project-wide
    "test_layers.py",  # the import layers of every module
    "test_public_face.py",  # what `import kvmm` shows, the lazy packages
    "test_lint.py",  # ruff over the tree
    "test_ci_constraints.py",  # .ci/constraints.txt
    "test_bench_smoke.py",  # bench/ at smoke size
    "test_tree_layout.py",  # this file
    "test_bad_input_regressions.py",  # issue 12's bad-input list, across packages
    # kvmm's top-level modules
    "test_foundation.py",  # errors, protocols, _validate, the CLI entry and the report skeleton
    "test_hostile_bounds.py",  # kvmm._validate's numeric bounds
    "test_kernels_primitives.py",  # kvmm._kernels
    "test_policy_hooks.py",  # kvmm._policy_hooks
    "test_progress.py",  # kvmm._progress
    "test_report_metadata.py",  # kvmm.report
    "test_report_readability.py",  # kvmm.report
}

#: folders of tests/ that mirror no kvmm package
OTHER_FOLDERS = {
    "docs",  # every runnable block of docs/ and README.md
    "integrations",  # against the real engines, each in its own venv (.ci/run)
    "integrations_offline",  # kvmm.integrations without any engine (the main run)
}


def test_top_level_test_files_are_the_allowed_ones():
    found = {p.name for p in TESTS.glob("test_*.py")}
    assert found - TOP_LEVEL_TESTS == set(), ("put tests of a package in tests/<package>/ (mirroring kvmm), "
                                              "runnable-docs tests in tests/docs/")
    assert TOP_LEVEL_TESTS - found == set()  # a name left in the list after its file moved


def test_every_test_folder_mirrors_a_kvmm_package_and_is_a_package():
    for folder in sorted(p for p in TESTS.rglob("*") if p.is_dir() and p.name != "__pycache__"):
        rel = folder.relative_to(TESTS)
        assert (folder / "__init__.py").is_file(), f"tests/{rel} has no __init__.py"
        if rel.parts[0] in OTHER_FOLDERS:
            continue
        assert (ROOT / "kvmm" / rel).is_dir(), f"tests/{rel} mirrors no kvmm/{rel}"


def test_the_reference_models_have_one_home():
    assert not (TESTS / "naive").exists()
    assert (ROOT / "kvmm" / "testing" / "models" / "__init__.py").is_file()


def imported_modules(path):
    """Every module an import statement in ``path`` names (module level or inside a function)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module


BENCH_FILES = sorted((ROOT / "bench").rglob("*.py"))


@pytest.mark.parametrize("path", BENCH_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_bench_imports_nothing_from_tests(path):
    bad = [m for m in imported_modules(path) if m == "tests" or m.startswith("tests.")]
    assert bad == [], f"{path.relative_to(ROOT)} imports {bad}: shared code goes in kvmm.testing or bench/"


def test_the_import_scan_sees_a_planted_import(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("def f():\n    from tests.sim.sim_helpers import x\n    import tests\n", encoding="utf-8")
    assert list(imported_modules(planted)) == ["tests.sim.sim_helpers", "tests"]
    assert BENCH_FILES and any(p.parent.name == "baselines" for p in BENCH_FILES)
