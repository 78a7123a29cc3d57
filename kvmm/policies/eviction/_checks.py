"""Checks and small helpers shared by every eviction order (:mod:`kvmm.policies.eviction` and the
orders in their own modules), kept apart so those modules import them without a cycle."""

from __future__ import annotations

import importlib
from collections.abc import Hashable, Iterable, Iterator
from typing import Any

from kvmm._validate import as_count, as_hashable, as_key_set
from kvmm.errors import BadInputError, UnknownKeyError


def first_unprotected(keys: Iterator[Hashable], n: int, protected: Iterable[Hashable]) -> list[Hashable]:
    n = as_count(n, "n")
    protected = as_key_set(protected, "protected")
    out: list[Hashable] = []
    if n == 0:
        return out
    for key in keys:
        if key not in protected:
            out.append(key)
            if len(out) == n:
                break
    return out


def ignore_access(key: Hashable) -> None:
    """FIFO's access: the order does not change."""


def check_size(size: int | None) -> None:
    if size is not None:
        as_count(size, "size")


def require_present(table: Any, key: Hashable, policy: Any) -> None:
    if as_hashable(key) not in table:
        raise UnknownKeyError(f"{type(policy).__name__} does not track {key!r}; expected a key passed to on_insert")


def require_absent(table: Any, key: Hashable, policy: Any) -> None:
    if as_hashable(key) in table:
        raise BadInputError(f"{type(policy).__name__} already tracks {key!r}; call on_access for a present key")


class Sentinel:
    """A module-level marker (``NAME = Sentinel(__name__, "NAME")``) that copies and pickles as
    itself (policies are deep-copied per engine backend; None is a valid key, so not a marker)."""

    __slots__ = ("module", "name")

    def __init__(self, module: str, name: str) -> None:
        self.module = module
        self.name = name

    def __reduce__(self) -> tuple:
        return _module_attribute, (self.module, self.name)  # copy and pickle: the module's object

    def __repr__(self) -> str:
        return self.name


def _module_attribute(module: str, name: str) -> Any:
    return getattr(importlib.import_module(module), name)


#: "No key": the default ``incoming`` of ``victims`` (no entry named), no ghost hit pending, no
#: victim found, a list's end.  Every hashable key, None included, is a key, so none can mark these.
NO_KEY = Sentinel(__name__, "NO_KEY")
