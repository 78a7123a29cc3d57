"""The module paths :mod:`kvmm.policies` had before it was split into ``eviction/``, ``staging/``
and ``mrc/``: each old path still imports, for one release, as the module that replaced it (the
same object), with a :class:`DeprecationWarning` naming the new path.

``kvmm.policies.eviction`` and ``kvmm.policies.staging`` are not here: those paths are now the
packages, which export every name the old modules did.  Remove this module (and its two lines in
``kvmm/policies/__init__.py``) in the release after the split.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import warnings
from types import ModuleType

_EVICTION = "kvmm.policies.eviction"

#: old module path -> the module that replaced it
MOVED: dict[str, str] = {
    **{f"kvmm.policies.{order}": f"{_EVICTION}.{order}"
       for order in ("belady", "clock", "lirs", "s3fifo", "sieve", "slru", "twoq", "wtinylfu")},
    **{f"kvmm.policies._replay_{kernel}": f"{_EVICTION}._kernels.{kernel}"
       for kernel in ("arc", "belady", "classic", "clock", "lfu", "lirs", "s3fifo", "sieve", "slru", "twoq",
                      "wtinylfu")},
    "kvmm.policies._replay": f"{_EVICTION}._replay",
    "kvmm.policies._policy_checks": f"{_EVICTION}._checks",
    **{f"kvmm.policies.{name}": f"kvmm.policies.staging.{name}"
       for name in ("ledger", "_ledger_checks", "_ledger_invariants", "_ledger_kernels", "_ledger_state")},
    **{f"kvmm.policies.{name}": f"kvmm.policies.mrc.{name}"
       for name in ("stack_distance", "_stack_kernels", "shards", "_shards_kernels", "distributed")},
}


class MovedModuleFinder:
    """Imports an old path of :data:`MOVED` as its new module.  Last on ``sys.meta_path``: only a
    path no file answers reaches it.  The import system keeps what ``exec_module`` leaves in
    ``sys.modules`` (the new module, whose ``__spec__`` and ``__name__`` stay its own), so
    ``import kvmm.policies.ledger`` binds the very module ``kvmm.policies.staging.ledger``.
    It is a finder and a loader by their protocols, not by subclassing ``importlib.abc``: that
    module imports ``importlib.resources`` and ``tempfile``, 5 ms on every ``import kvmm.policies``."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if fullname in MOVED:
            return importlib.machinery.ModuleSpec(fullname, self)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # a throwaway module; exec_module puts the new one in its place

    def exec_module(self, module: ModuleType) -> None:
        new = MOVED[module.__name__]
        # stacklevel 2: the warnings module skips the import system's frames, so this names the
        # line that imported the old path
        warnings.warn(f"{module.__name__} moved to {new}; the old path is kept for one release",
                      DeprecationWarning, stacklevel=2)
        sys.modules[module.__name__] = importlib.import_module(new)


def install() -> None:
    """Put the finder last on ``sys.meta_path`` (once per process)."""
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(MovedModuleFinder())


def old_submodule(name: str) -> ModuleType | None:
    """``kvmm.policies.<name>`` for an old submodule name read as an attribute (no import
    statement), imported through the finder (so it warns); None for any other name."""
    if f"kvmm.policies.{name}" not in MOVED:
        return None
    return importlib.import_module(f"kvmm.policies.{name}")
