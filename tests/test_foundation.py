"""The package skeleton: errors, Protocols, input validation, the CLI and the report."""

import importlib
import subprocess
import sys

import numpy as np
import pytest

import kvmm
from kvmm import errors, protocols
from kvmm._validate import as_count, as_fraction, as_index_array, as_key_array, as_positive_float, check_ids_in_range
from kvmm.cli import main
from kvmm.report import Report, format_table
from tests.paths import ROOT


def test_every_error_is_a_kvmm_error_and_a_builtin():
    for name in errors.__all__:
        cls = getattr(errors, name)
        if issubclass(cls, Warning):  # kvmm's warnings are one family too
            assert issubclass(cls, errors.KvmmWarning)
            continue
        assert issubclass(cls, errors.KvmmError)
    assert issubclass(errors.InvalidIdError, IndexError)
    assert issubclass(errors.DTypeError, TypeError)
    assert issubclass(errors.UnknownSequenceError, LookupError)
    assert str(errors.UnknownKeyError("no key 7")) == "no key 7"


def test_protocols_are_structural():
    class Lru:
        def on_insert(self, key): ...
        def on_access(self, key): ...
        def on_remove(self, key): ...
        def victims(self, n, protected=()): return []

    assert isinstance(Lru(), protocols.EvictionPolicy)
    assert not isinstance(object(), protocols.EvictionPolicy)


def test_validation_rejects_bad_input_with_clear_messages():
    assert as_index_array([1, 2], "ids").dtype == np.int64
    assert as_index_array([], "ids").shape == (0,)
    with pytest.raises(errors.DTypeError, match="ids must hold integers"):
        as_index_array([1.5], "ids")
    with pytest.raises(errors.ShapeError, match="1-dimensional"):
        as_index_array([[1]], "ids")
    with pytest.raises(errors.BadInputError, match="do not fit int32"):
        as_index_array([2**40], "ids", dtype=np.int32)
    with pytest.raises(errors.InvalidIdError, match=r"id 5; expected ids in \[0, 5\)"):
        check_ids_in_range(np.array([0, 5]), 5, "ids")
    keys = as_key_array(np.array([3, 4]))
    assert keys.shape == (2, 2) and keys.dtype == np.uint64 and keys[1, 0] == 4 and keys[1, 1] == 0
    with pytest.raises(errors.ShapeError):
        as_key_array(np.zeros((2, 3), dtype=np.uint64))
    with pytest.raises(errors.DTypeError):
        as_key_array(np.zeros((2, 2)))
    assert as_count(3, "n") == 3
    for bad in (-1, 1.0, True):
        with pytest.raises(errors.BadInputError):
            as_count(bad, "n")
    assert as_fraction(1, "f") == 1.0
    for bad in (0, 1.5, float("nan"), "x"):
        with pytest.raises(errors.BadInputError):
            as_fraction(bad, "f")
    for include_zero, rng in ((False, r"\(0, 1\]"), (True, r"\[0, 1\]")):  # a wrong type names the right range
        with pytest.raises(errors.DTypeError, match=rf"f must be a number in {rng}, got True"):
            as_fraction(True, "f", include_zero=include_zero)
    for bad in (0, -1, float("inf"), float("nan")):
        with pytest.raises(errors.BadInputError):
            as_positive_float(bad, "rate")


def test_lazy_subpackages():
    assert kvmm.traces.load_mooncake is not None
    with pytest.raises(AttributeError):
        kvmm.nonexistent  # noqa: B018


def test_report_writes_markdown(tmp_path, capsys):
    rep = Report(out=tmp_path)
    rep.heading("H")
    rep.table("T", ["a", "b"], [[1, 0.5], [2, float("nan")]])
    path = rep.write()
    text = path.read_text()
    assert "| a | b |" in text and "| 1 | 0.5 |" in text and "| 2 | nan |" in text
    assert "T" in capsys.readouterr().out
    assert format_table(["x"], [[1e-5]]).splitlines()[-1] == "| 0.00001 |"  # fixed point, never 1.000e-05


def test_cli_rejects_unknown_section(tmp_path, capsys):
    rc = main(["reproduce", "--only", "nope", "--out", str(tmp_path)])
    assert rc == 2
    assert "unknown section" in capsys.readouterr().err


def test_ragged_input_is_a_shape_error():
    with pytest.raises(errors.ShapeError, match="ragged"):
        as_index_array([[1], [2, 3]], "ids")
    with pytest.raises(errors.ShapeError, match="ragged"):
        as_key_array([[1, 2], [3]])


def test_import_kvmm_and_cli_help_load_no_heavy_module():
    heavy = ("numba", "torch", "transformers", "dask", "redis", "pytest", "hypothesis", "matplotlib")
    code = ("import sys, contextlib, io, kvmm, kvmm.compress, kvmm.cluster\n"
            "from kvmm.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
            "    main(['--help'])\n"
            f"print(sorted(m for m in {heavy!r} if m in sys.modules))")
    root = ROOT
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("package", ["cluster", "compress", "policies", "sim"])
def test_every_public_name_of_a_lazy_package_loads_on_first_use(package):
    pkg = importlib.import_module(f"kvmm.{package}")
    for name in pkg.__all__:
        module = pkg._LAZY[name]
        assert module.startswith(f"kvmm.{package}.") and getattr(pkg, name) is getattr(importlib.import_module(module), name)
    assert set(pkg.__all__) <= set(dir(pkg))
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        pkg.Nope  # noqa: B018


def test_kvmm_policies_exports_every_registered_policy():
    import kvmm.policies

    for registry in (kvmm.policies.STAGING_POLICIES, kvmm.policies.EVICTION_POLICIES):
        for cls in registry.values():
            assert getattr(kvmm.policies, cls.__name__) is cls


def test_an_export_stays_the_export_after_its_module_is_imported():
    # kvmm.sim.sweep is a function (in kvmm.sim._sweep): importing its module first, as the CLI
    # does, must not turn `from kvmm.sim import sweep` into a module
    code = ("import types, kvmm.sim._sweep\n"
            "from kvmm.sim import sweep\n"
            "print(isinstance(sweep, types.ModuleType), sweep.__module__, sweep.__name__)")
    root = ROOT
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "kvmm.sim._sweep", "sweep"]


def test_an_export_named_like_its_submodule_is_refused():
    from kvmm._lazy import lazy_exports

    with pytest.raises(ImportError, match=r"kvmm.sim exports \['sweep'\] from submodules of the same names"):
        lazy_exports("kvmm.sim", {"sweep": "kvmm.sim.sweep"}, {})
