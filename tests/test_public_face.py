"""What a user of kvmm sees: every package from ``import kvmm``, every lazily exported name
resolving to its module's object, and the same names visible to editors and type checkers
(an ``if TYPE_CHECKING:`` block in each lazy package lists exactly its lazy names)."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from tests.paths import ROOT

#: every package whose names load on first use (kvmm._lazy.lazy_exports)
LAZY_PACKAGES = sorted(".".join(p.relative_to(ROOT).parent.parts) for p in (ROOT / "kvmm").rglob("__init__.py")
                       if "lazy_exports(" in p.read_text(encoding="utf-8"))


def lazy_names(pkg) -> dict[str, str]:
    """``{name: module it is imported from}`` of a lazy package: its exports and its submodules."""
    names = dict(getattr(pkg, "_LAZY", {}))
    names.update({n: f"{pkg.__name__}.{m}" for n, m in getattr(pkg, "_EXPORTS", {}).items()})
    for sub in set(getattr(pkg, "_SUBMODULES", ())) | set(getattr(pkg, "_SUBPACKAGES", ())):
        names[sub] = pkg.__name__
    return names


def type_checking_names(pkg) -> dict[str, str]:
    """``{name: module}`` imported under ``if TYPE_CHECKING:`` in the package's ``__init__``."""
    tree = ast.parse(Path(pkg.__file__).read_text(encoding="utf-8"))
    out = {}
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom), ast.dump(imp)
                out.update({a.asname or a.name: imp.module for a in imp.names})
    return out


def test_every_package_is_reachable_from_import_kvmm_and_none_loads_early():
    code = ("import sys, kvmm\n"
            "early = sorted(m for m in ('numba', 'torch', 'hypothesis', 'vllm', 'sglang', 'lmcache') if m in sys.modules)\n"
            "print(early, kvmm.cluster.__name__, kvmm.testing.__name__, kvmm.integrations.__name__, "
            "kvmm.reproduce.__name__, kvmm.sim.__name__)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["[]", "kvmm.cluster", "kvmm.testing", "kvmm.integrations", "kvmm.reproduce", "kvmm.sim"]


def test_the_lazy_packages_are_found():
    assert {"kvmm", "kvmm.sim", "kvmm.cluster", "kvmm.testing", "kvmm.plan", "kvmm.policies"} <= set(LAZY_PACKAGES)


@pytest.mark.parametrize("name", LAZY_PACKAGES)
def test_every_lazy_name_resolves_to_its_modules_object(name):
    pkg = importlib.import_module(name)
    names = lazy_names(pkg)
    assert names and set(names) <= set(dir(pkg))
    for export, module in names.items():
        target = importlib.import_module(module)
        expected = importlib.import_module(f"{module}.{export}") if module == name else getattr(target, export)
        assert getattr(pkg, export) is expected, export


@pytest.mark.parametrize("name", LAZY_PACKAGES)
def test_the_type_checking_block_lists_exactly_the_lazy_names(name):
    pkg = importlib.import_module(name)
    assert type_checking_names(pkg) == lazy_names(pkg)


def test_the_check_sees_a_missing_or_misplaced_name(tmp_path, monkeypatch):
    pkg = tmp_path / "fakepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "from typing import TYPE_CHECKING\n_LAZY = {'A': 'fakepkg.a', 'B': 'fakepkg.b'}\n"
        "if TYPE_CHECKING:\n    from fakepkg.a import A\n    from fakepkg.a import B\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    fake = importlib.import_module("fakepkg")
    assert type_checking_names(fake) == {"A": "fakepkg.a", "B": "fakepkg.a"} != lazy_names(fake)


def test_a_type_checker_sees_every_lazy_export(tmp_path):
    pytest.importorskip("mypy")
    lines, names = [], []
    for name in LAZY_PACKAGES:
        pkg = importlib.import_module(name)
        for i, export in enumerate(sorted(lazy_names(pkg))):
            alias = f"_{name.replace('.', '_')}_{i}"
            lines.append(f"from {name} import {export} as {alias}\nreveal_type({alias})")
            names.append(f"{name}.{export}")
    snippet = tmp_path / "uses_kvmm.py"
    snippet.write_text("\n".join(lines) + "\n", encoding="utf-8")
    # in a process of its own: mypy raises the interpreter's recursion limit, which other tests rely on
    run = subprocess.run([sys.executable, "-m", "mypy", str(snippet), "--follow-imports=silent", "--cache-dir",
                          str(tmp_path / "cache"), "--no-error-summary"], cwd=ROOT, capture_output=True, text=True)
    out, err = run.stdout, run.stderr
    revealed = [ln.split('Revealed type is "', 1)[1].rstrip('"') for ln in out.splitlines() if "Revealed type" in ln]
    assert len(revealed) == len(names) > 150, (out[-2000:], err)
    unseen = [n for n, t in zip(names, revealed) if t in ("Any", "object", "builtins.object")]
    assert unseen == []


@pytest.mark.parametrize("module, cls", [("kvmm.sim.config", "SimConfig"), ("kvmm.sim.config", "PDConfig"),
                                         ("kvmm.sim.levels", "TierLevel"), ("kvmm.sim.cluster_config", "ClusterConfig")])
def test_config_fields_have_real_types(module, cls):
    config = getattr(importlib.import_module(module), cls)
    hints = typing.get_type_hints(config)  # every annotation resolves at run time
    assert [f.name for f in dataclasses.fields(config) if hints[f.name] is typing.Any] == []
    if cls == "SimConfig":
        from kvmm.sim.latency import ModelArch
        from kvmm.sim.models import ModelSpec
        from kvmm.traces import KVTrace

        assert KVTrace in typing.get_args(hints["workload"])
        assert {str, ModelArch, ModelSpec} == set(typing.get_args(hints["model"]))
