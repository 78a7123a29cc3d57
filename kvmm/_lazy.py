"""Lazy package exports: a name is imported from its module on first use.

Packages whose modules compile numba kernels or pull optional dependencies (torch, dask,
hypothesis) export their public names through :func:`lazy_exports`, so ``import kvmm.<package>``
costs nothing until a name is used::

    _LAZY = {"StackDistanceTracker": "kvmm.policies.mrc.stack_distance", ...}
    __all__ = sorted(_LAZY)
    __getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping


def lazy_exports(package: str, exports: Mapping[str, str], namespace: dict,
                 submodules: frozenset[str] = frozenset()) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """Module-level ``__getattr__`` and ``__dir__`` for ``package``.

    ``exports`` maps a public name to the module that defines it; ``submodules`` names modules of
    the package returned as themselves.  A resolved name is cached in ``namespace`` (the
    package's ``globals()``), so later look-ups skip ``__getattr__``.

    An export must not share its name with a submodule of the package: importing the submodule
    binds it as an attribute of the package, which would shadow the export (so ``kvmm.sim.sweep``,
    the function, lives in ``kvmm.sim._sweep``).
    """
    clashing = sorted(name for name, module in exports.items() if module == f"{package}.{name}")
    if clashing:
        raise ImportError(f"{package} exports {clashing} from submodules of the same names; the submodule "
                          "would shadow the export once imported (rename the module)")

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
