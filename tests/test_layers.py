"""Layers only point down (docs/architecture.md): a module imports only from its own layer or
the layers below it, at module level, inside a function or under ``if TYPE_CHECKING:``.

kvmm's layers, lowest first (:data:`LAYERS`):

1. the foundation: the ``kvmm`` package itself (a lazy facade), ``errors``, ``protocols`` and
   every private top-level module (``_validate``, ``_arrays``, ``_lazy``, ``_progress``, ``_git``,
   shared kernels);
2. the components: ``allocators``, ``policies``, ``tiers``, ``compress``, ``traces``;
3. the control plane: ``cluster``;
4. the simulator: ``sim``;
5. ``testing`` and ``report``.  ``kvmm.testing`` (contract suites, reference models, strategies,
   the pytest plugin) imports the components and the control plane (the router contract reads
   ``kvmm.cluster.view``), and its reference models may model the simulator, so it sits above
   ``sim``; nothing in the library imports it (:func:`test_only_tests_import_kvmm_testing`).
   ``kvmm.report`` (the report writer and the number formats of every file kvmm writes) imports
   only the foundation, but it is how plan and reproduce present results, so it sits just below
   them: the structures and the simulator never depend on how results are printed;
6. the applications: ``plan``, ``reproduce``, ``integrations``;
7. the command line: ``cli``.

Inside ``kvmm.cluster`` and ``kvmm.sim`` the modules are layered too (:data:`SUBLAYERS`): the
block index and its event feeds, then the router's view, then the routers; the latency models,
then the configurations and results, then the engine, then the drivers (``simulate``,
``sweep``).  A package's ``__init__`` (a lazy facade) may name any of its modules; ``kvmm``'s own
names its packages under ``if TYPE_CHECKING:`` only (for editors; they load on first use).

Imports by name are not statements and are not checked: the lazy export tables, the deprecated
aliases that resolve a moved name from its new home (``kvmm.cluster.ClusterConfig``,
``kvmm.report.SECTIONS``), ``kvmm.reproduce.run_sections`` (each section by name) and the CLI's
``command_module``.

Every module must sit in a layer: a new top-level package fails :func:`test_every_module_has_a_layer`
until it is placed here and in docs/architecture.md.
"""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import pytest

from tests.paths import ROOT as REPO

ROOT = REPO / "kvmm"

#: lowest first; a name is a top-level module or package of kvmm ("kvmm": the package's __init__)
LAYERS: list[tuple[str, frozenset[str]]] = [
    ("foundation", frozenset({"kvmm", "errors", "protocols"})),  # plus every private top-level module
    ("components", frozenset({"allocators", "policies", "tiers", "compress", "traces"})),
    ("control plane", frozenset({"cluster"})),
    ("simulator", frozenset({"sim"})),
    ("testing and report", frozenset({"testing", "report"})),
    ("applications", frozenset({"plan", "reproduce", "integrations"})),
    ("command line", frozenset({"cli"})),
]

#: packages layered inside: package -> its layers, lowest first (a name is the first part of the
#: module's path inside the package: ``sim/engine/cluster.py`` is ``engine``)
SUBLAYERS: dict[str, list[tuple[str, frozenset[str]]]] = {
    "cluster": [
        ("index and its feeds", frozenset({"index", "_index_kernels", "_index_checks", "_index_snapshot", "events",
                                           "event_stream", "fabric"})),
        ("what a router reads", frozenset({"view"})),
        ("routers", frozenset({"_router_base", "routers", "routers_llmd", "routers_sglang", "routers_dynamo"})),
    ],
    "sim": [
        ("latency models", frozenset({"latency", "models"})),
        ("configurations and results", frozenset({"levels", "config", "cluster_config", "cost", "serving", "workload",
                                                  "results", "config_json"})),
        ("engine", frozenset({"engine", "hierarchy", "demotion", "pooled_store", "compression", "write_through",
                              "load"})),
        ("drivers", frozenset({"simulator", "_sweep"})),
    ],
}


def unit_of(path: Path, root: Path) -> str:
    """The top-level name ``path`` belongs to: ``sim`` for ``kvmm/sim/engine/cluster.py``,
    ``report`` for ``kvmm/report.py``, ``kvmm`` for ``kvmm/__init__.py``."""
    first = path.relative_to(root).parts[0]
    return "kvmm" if first == "__init__.py" else first.removesuffix(".py")


def rank(layers: list[tuple[str, frozenset[str]]], name: str, *, private_is_lowest: bool) -> int | None:
    """The index of ``name``'s layer (a private ``_name`` is the lowest when asked), else None."""
    for i, (_, names) in enumerate(layers):
        if name in names:
            return i
    return 0 if private_is_lowest and name.startswith("_") else None


def module_name(path: Path, root: Path) -> str:
    """``kvmm.sim.engine.cluster`` for ``<root>/sim/engine/cluster.py`` (a package: its name)."""
    parts = ("kvmm", *path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, root: Path) -> list[tuple[int, str]]:
    """``(line, module)`` of every kvmm import in ``path``, wherever it sits (relative imports
    resolved; ``from kvmm import x`` is ``kvmm.x``)."""
    package = module_name(path, root) if path.name == "__init__.py" else module_name(path, root).rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            found += [(node.lineno, f"{base}.{a.name}" if base == "kvmm" else base) for a in node.names]
    return [(line, m) for line, m in found if m == "kvmm" or m.startswith("kvmm.")]


def type_checking_lines(path: Path) -> set[int]:
    """Lines of the imports under a module-level ``if TYPE_CHECKING:``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.lineno for block in tree.body if isinstance(block, ast.If) and isinstance(block.test, ast.Name)
            and block.test.id == "TYPE_CHECKING" for node in ast.walk(block) if isinstance(node, (ast.Import, ast.ImportFrom))}


def checked_imports(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """:func:`imported_modules` less the TYPE_CHECKING block of ``kvmm/__init__.py``, which names
    every package for type checkers (the facade of the whole tree; nothing is imported)."""
    facade = type_checking_lines(path) if path == root / "__init__.py" else set()
    return [(line, module) for line, module in imported_modules(path, root) if line not in facade]


def violations(path: Path, root: Path = ROOT) -> list[str]:
    """``file:line imports module (layer A -> layer B)`` for every import of ``path`` that points up."""
    src_unit = unit_of(path, root)
    src_rank = rank(LAYERS, src_unit, private_is_lowest=True)
    out = []
    for line, module in checked_imports(path, root):
        parts = module.split(".")
        dst_unit = parts[1] if len(parts) > 1 else "kvmm"
        dst_rank = rank(LAYERS, dst_unit, private_is_lowest=True)
        where = f"{path.relative_to(root.parent)}:{line} imports {module}"
        if src_rank is None or dst_rank is None:
            continue  # an unplaced module: test_every_module_has_a_layer says so
        if dst_rank > src_rank:
            out.append(f"{where} ({LAYERS[src_rank][0]} -> {LAYERS[dst_rank][0]})")
        elif dst_unit == src_unit and src_unit in SUBLAYERS and len(parts) > 2:
            inner = SUBLAYERS[src_unit]
            src_parts = path.relative_to(root).with_suffix("").parts
            if src_parts[1:] == ("__init__",):
                continue  # the package's facade names every module
            src_sub, dst_sub = rank(inner, src_parts[1], private_is_lowest=False), rank(inner, parts[2], private_is_lowest=False)
            if src_sub is not None and dst_sub is not None and dst_sub > src_sub:
                out.append(f"{where} (kvmm.{src_unit}: {inner[src_sub][0]} -> {inner[dst_sub][0]})")
    return out


def kvmm_files(root: Path = ROOT) -> list[Path]:
    return sorted(root.rglob("*.py"))


def unplaced(root: Path = ROOT) -> list[str]:
    """Top-level modules and packages (and modules of a layered package) that sit in no layer."""
    out = set()
    for path in kvmm_files(root):
        parts = path.relative_to(root).with_suffix("").parts
        unit = unit_of(path, root)
        if rank(LAYERS, unit, private_is_lowest=True) is None:
            out.add(f"kvmm.{unit}")
        elif unit in SUBLAYERS and len(parts) > 1 and parts[1] != "__init__" and \
                rank(SUBLAYERS[unit], parts[1], private_is_lowest=False) is None:
            out.add(f"kvmm.{unit}.{parts[1]}")
    return sorted(out)


def test_every_module_has_a_layer():
    assert len(kvmm_files()) > 200
    assert unplaced() == []


def test_no_module_imports_a_layer_above_its_own():
    assert [v for path in kvmm_files() for v in violations(path)] == []


def test_only_tests_import_kvmm_testing():
    users = [f"{p.relative_to(ROOT.parent)}:{line}" for p in kvmm_files() if unit_of(p, ROOT) != "testing"
             for line, module in checked_imports(p, ROOT) if module == "kvmm.testing" or module.startswith("kvmm.testing.")]
    assert users == []


def _planted_tree(tmp_path: Path, where: str, source: str) -> Path:
    """A copy of the kvmm package with ``source`` appended to the module at ``where``."""
    root = tmp_path / "kvmm"
    shutil.copytree(ROOT, root, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "data"))
    target = root / where
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text((target.read_text(encoding="utf-8") if target.exists() else "") + source, encoding="utf-8")
    return root


@pytest.mark.parametrize("where, source, expected", [
    # a component reaching the simulator from inside a function (the import a cycle used to hide behind)
    ("tiers/spec.py", "\n\ndef _planted():\n    from kvmm.sim.engine import Instance\n",
     r"kvmm/tiers/spec.py:\d+ imports kvmm.sim.engine \(components -> simulator\)"),
    # the control plane importing the command line, spelled `from kvmm import cli`
    ("cluster/view.py", "\nfrom kvmm import cli\n",
     r"kvmm/cluster/view.py:\d+ imports kvmm.cli \(control plane -> command line\)"),
    # a relative import from the foundation up to the components
    ("_validate.py", "\nfrom .policies import eviction\n",
     r"kvmm/_validate.py:\d+ imports kvmm.policies \(foundation -> components\)"),
    # a type-only import still points up
    ("sim/results.py", "\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import kvmm.plan.core\n",
     r"kvmm/sim/results.py:\d+ imports kvmm.plan.core \(simulator -> applications\)"),
    # kvmm's own facade importing a package at run time (only its TYPE_CHECKING block may name them)
    ("__init__.py", "\nfrom kvmm import sim\n", r"kvmm/__init__.py:\d+ imports kvmm.sim \(foundation -> simulator\)"),
    # inside the simulator: the configuration reaching the engine
    ("sim/cluster_config.py", "\n\ndef _planted():\n    from kvmm.sim.pooled_store import SegmentedStore\n",
     r"kvmm/sim/cluster_config.py:\d+ imports kvmm.sim.pooled_store \(kvmm.sim: configurations and results -> engine\)"),
    # inside the control plane: the index importing a router
    ("cluster/index.py", "\nimport kvmm.cluster.routers\n",
     r"kvmm/cluster/index.py:\d+ imports kvmm.cluster.routers \(kvmm.cluster: index and its feeds -> routers\)"),
])
def test_the_check_fails_on_a_planted_upward_import(tmp_path, where, source, expected):
    root = _planted_tree(tmp_path, where, source)
    found = [v for path in kvmm_files(root) for v in violations(path, root)]
    assert len(found) == 1 and re.fullmatch(expected, found[0]), found


def test_the_check_passes_downward_and_sideways_imports(tmp_path):
    root = _planted_tree(tmp_path, "sim/engine/planted.py",
                         "import kvmm\nfrom kvmm.errors import KvmmError\nfrom kvmm.cluster.view import ClusterView\n"
                         "from kvmm.sim.config import SimConfig\nfrom kvmm.sim.latency import Roofline\n"
                         "from ..results import SimResult\nfrom . import clock\n")
    assert violations(root / "sim/engine/planted.py", root) == []


def test_a_new_package_must_be_placed(tmp_path):
    root = _planted_tree(tmp_path, "newthing/__init__.py", "")
    _planted_tree(tmp_path / "again", "sim/newpart.py", "")
    assert unplaced(root) == ["kvmm.newthing"]
    assert unplaced(tmp_path / "again" / "kvmm") == ["kvmm.sim.newpart"]


def test_a_planted_import_of_kvmm_testing_is_caught(tmp_path):
    root = _planted_tree(tmp_path, "plan/core.py", "\n\ndef _planted():\n    from kvmm.testing import strategies\n")
    users = [line for p in kvmm_files(root) if unit_of(p, root) != "testing"
             for line, m in checked_imports(p, root) if m.startswith("kvmm.testing")]
    assert len(users) == 1


def test_names_that_moved_to_the_simulator_still_resolve_from_kvmm_cluster_with_a_warning():
    import kvmm.cluster
    import kvmm.sim

    for name in ("ClusterConfig", "Prices", "cost_account", "CostAccount", "parse_prices"):
        with pytest.warns(DeprecationWarning, match=f"kvmm.cluster.{name} moved to kvmm.sim"):
            assert getattr(kvmm.cluster, name) is getattr(kvmm.sim, name)
    with pytest.raises(AttributeError):
        kvmm.cluster.not_a_name  # noqa: B018


#: packages (and modules) swept of unexplained function-level imports
EXPLAINED = ("sim", "plan", "cluster", "policies", "integrations", "testing", "allocators", "tiers", "traces", "compress",
             "report.py", "reproduce", "cli", "errors.py", "protocols.py", "_validate.py", "_arrays.py", "_lazy.py",
             "_progress.py", "_git.py", "_kernels.py", "_policy_hooks.py", "__init__.py")


def unexplained_function_imports(path: Path, root: Path = ROOT) -> list[str]:
    """``file:line`` of each import inside a function with no comment saying why: on its own lines,
    on the line just above its block of consecutive imports (``# numba: ...``), or on the ``try:``
    line around it (``try:  # the optional plot extra``).  Only optional extras and modules kept off
    an import path on purpose belong inside a function."""
    lines = path.read_text(encoding="utf-8").splitlines()
    tree = ast.parse("\n".join(lines))
    imports: dict[int, ast.stmt] = {}  # in-function import -> the try around it, if any
    tries: dict[ast.stmt, ast.Try] = {}

    def visit(node: ast.AST, in_function: bool, around: ast.Try | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)) and in_function:
                imports[id(child)] = child
                if around is not None:
                    tries[child] = around
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)),
                  child if isinstance(child, ast.Try) else around)

    visit(tree, False, None)
    covered = {ln for n in imports.values() for ln in range(n.lineno, n.end_lineno + 1)}
    out = []
    for node in sorted(imports.values(), key=lambda n: n.lineno):
        first = node.lineno
        while first - 1 in covered:
            first -= 1
        block = lines[first - 1: node.end_lineno]
        above = lines[first - 2] if first >= 2 else ""
        around = tries.get(node)
        try_line = lines[around.lineno - 1] if around is not None else ""
        if not any("#" in ln for ln in block) and "#" not in above and "#" not in try_line:
            out.append(f"{path.relative_to(root.parent)}:{node.lineno}")
    return out


def explained_files(root: Path = ROOT) -> list[Path]:
    files = []
    for name in EXPLAINED:
        target = root / name
        files += sorted(target.rglob("*.py")) if target.is_dir() else [target]
    return files


def test_an_import_inside_a_function_says_why():
    assert len(explained_files()) > 120
    assert [hit for path in explained_files() for hit in unexplained_function_imports(path)] == []


def test_the_why_check_catches_a_silent_import(tmp_path):
    planted = tmp_path / "kvmm" / "planted.py"
    planted.parent.mkdir()
    planted.write_text("def quiet():\n    import json\n    from kvmm import errors\n    return json, errors\n\n\n"
                       "def explained():\n    # on first use: a heavy module\n    import json\n    from kvmm import errors\n"
                       "    return json, errors\n\n\ndef optional():\n    try:  # the optional plot extra\n"
                       "        import matplotlib\n    except ImportError:\n        return None\n    return matplotlib\n",
                       encoding="utf-8")
    assert unexplained_function_imports(planted, tmp_path / "kvmm") == ["kvmm/planted.py:2", "kvmm/planted.py:3"]
