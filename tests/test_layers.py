"""Layers only point down (DESIGN.md, Layout): the control plane (``kvmm.cluster``) and every
package below it import nothing from the simulator or anything above it, at module level or
inside a function.  ``kvmm.cluster``'s deprecated aliases of names that moved to ``kvmm.sim``
are looked up by module name (``importlib``), only when such a name is used.

The ``_cli.py`` modules inside packages are the command line (the top layer) living beside the
code they drive, until they move into one ``kvmm/cli/`` package: they are not checked here."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "kvmm"
#: packages (and top-level modules) that must not reach up, and what is above them
LOWER = ("cluster", "allocators", "policies", "tiers", "compress", "traces", "errors.py", "_validate.py",
         "protocols.py", "_arrays.py", "_lazy.py")
UPPER = ("kvmm.sim", "kvmm.plan", "kvmm.reproduce", "kvmm.integrations", "kvmm.cli", "kvmm.report")


def upward_imports(path: Path) -> list[str]:
    """``file:line module`` of every import in ``path`` of a module in :data:`UPPER`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found += [f"{path.name}:{node.lineno} {n}" for n in names if n in UPPER or n.startswith(tuple(u + "." for u in UPPER))]
    return found


def lower_files() -> list[Path]:
    files = []
    for name in LOWER:
        target = ROOT / name
        files += sorted(target.rglob("*.py")) if target.is_dir() else [target]
    return [f for f in files if f.name != "_cli.py"]


def test_the_control_plane_and_below_never_import_the_simulator_or_above():
    assert len(lower_files()) > 30
    offenders = [hit for path in lower_files() for hit in upward_imports(path)]
    assert offenders == []


def test_the_check_catches_a_planted_import(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("import numpy\n\ndef f():\n    from kvmm.sim.engine import Instance\n    import kvmm.plan\n",
                       encoding="utf-8")
    assert upward_imports(planted) == ["planted.py:4 kvmm.sim.engine", "planted.py:5 kvmm.plan"]


def test_names_that_moved_to_the_simulator_still_resolve_from_kvmm_cluster_with_a_warning():
    import pytest

    import kvmm.cluster
    import kvmm.sim

    for name in ("ClusterConfig", "Prices", "cost_account", "CostAccount", "parse_prices"):
        with pytest.warns(DeprecationWarning, match=f"kvmm.cluster.{name} moved to kvmm.sim"):
            assert getattr(kvmm.cluster, name) is getattr(kvmm.sim, name)
    with pytest.raises(AttributeError):
        kvmm.cluster.not_a_name  # noqa: B018
