"""Lazy package exports: a name is imported from its module on first use.

Packages whose modules compile numba kernels or pull optional dependencies (torch, dask,
hypothesis) export their public names through :func:`lazy_exports`, so ``import kvmm.<package>``
costs nothing until a name is used::

    _LAZY = {"StackDistanceTracker": "kvmm.policies.stack_distance", ...}
    __all__ = sorted(_LAZY)
    __getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Callable, Mapping


def lazy_exports(package: str, exports: Mapping[str, str], namespace: dict,
                 submodules: frozenset[str] = frozenset()) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """Module-level ``__getattr__`` and ``__dir__`` for ``package``.

    ``exports`` maps a public name to the module that defines it; ``submodules`` names modules of
    the package returned as themselves.  A resolved name is cached in ``namespace`` (the
    package's ``globals()``), so later look-ups skip ``__getattr__``.

    A name exported from a submodule of the same name (``kvmm.sim.sweep`` defines ``sweep``) stays
    the exported object: importing the submodule binds it as an attribute of the package, which
    would otherwise shadow the export (``from kvmm.sim import sweep`` would give the module after
    ``import kvmm.sim.sweep``), so the package's module type binds the export instead.
    """
    same_named = {name for name, module in exports.items() if module == f"{package}.{name}"}
    if same_named:
        module = sys.modules[package]
        module.__class__ = type("LazyPackage", (types.ModuleType,), {"__setattr__": _keep_exports(same_named)})

    def __getattr__(name: str) -> object:
        if name in exports:
            value = getattr(importlib.import_module(exports[name]), name)
        elif name in submodules:
            value = importlib.import_module(f"{package}.{name}")
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports) | set(submodules))

    return __getattr__, __dir__


def _keep_exports(same_named: set[str]) -> Callable[[types.ModuleType, str, object], None]:
    """A module ``__setattr__`` that binds ``name`` to the submodule's ``name``, not the submodule."""

    def __setattr__(self: types.ModuleType, name: str, value: object) -> None:
        if name in same_named and isinstance(value, types.ModuleType) and value.__name__ == f"{self.__name__}.{name}":
            value = getattr(value, name)
        types.ModuleType.__setattr__(self, name, value)

    return __setattr__
