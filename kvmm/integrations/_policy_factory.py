"""The rules by which every engine adapter (vLLM, LMCache, SGLang) turns what a user passes as a
policy into kvmm policies: a factory of fresh eviction policies, and an admission policy from its
configured name and arguments.  (How an adapter then calls the policy, and reads the keys it
evicts on its own, is :class:`kvmm._policy_hooks.PolicyHooks`, which ManagedTier uses too.)
Engine-independent: imports no engine."""

from __future__ import annotations

import copy
import importlib
from collections.abc import Callable
from typing import Any

from kvmm.errors import BadInputError
from kvmm.protocols import AdmissionPolicy, EvictionPolicy, EvictionPolicyBase


def policy_factory(policy: Any, *, need_contains: bool = False) -> tuple[Callable[[], Any], Any]:
    """``(factory, probe)``: ``policy`` is a class or zero-argument callable returning an
    :class:`~kvmm.protocols.EvictionPolicy`, or such an object (the factory then returns a deep
    copy of it each call, so each engine backend gets its own); ``probe`` is one policy the
    factory made, for naming the class.  ``need_contains``: the adapter asks ``key in policy``.
    Anything else is a :class:`BadInputError` naming what was expected."""
    if isinstance(policy, type) or (callable(policy) and not isinstance(policy, EvictionPolicy)):
        factory = policy
    elif isinstance(policy, EvictionPolicy):
        template = copy.deepcopy(policy)
        factory = lambda: copy.deepcopy(template)  # noqa: E731 - one fresh copy per backend
    else:
        raise BadInputError(f"make_cache_policy needs an EvictionPolicy (on_insert, on_access, on_remove, victims), "
                            f"its class or a factory; got {type(policy).__name__}")
    probe = factory()
    if isinstance(probe, EvictionPolicyBase) and probe.offline:
        raise BadInputError(f"make_cache_policy: {type(probe).__name__} needs its future reference stream, which an "
                            f"engine's cache cannot know; use it offline (kvmm.policies.replay('belady', ...))")
    if not isinstance(probe, EvictionPolicy) or (need_contains and not hasattr(probe, "__contains__")):
        also = " (and `key in policy`, which this adapter asks)" if need_contains else ""
        raise BadInputError(f"make_cache_policy: the factory returned {type(probe).__name__}, which lacks the "
                            f"EvictionPolicy methods on_insert, on_access, on_remove, victims{also}")
    return factory, probe


def load_admission(spec: Any, kwargs: Any, *, setting: str = "kvmm_admission",
                   args_setting: str = "kvmm_admission_args") -> Any:
    """Instantiate ``spec`` (a class name in :mod:`kvmm.policies.admission` or ``"module:Class"``)
    with ``kwargs``; a :class:`BadInputError` naming the engine's settings (``setting`` /
    ``args_setting``) when it cannot be found, built or is no admission policy."""
    if not isinstance(spec, str) or not spec:
        raise BadInputError(f"{setting} must be a class name or 'module:Class', got {spec!r}")
    if not isinstance(kwargs, dict):
        raise BadInputError(f"{args_setting} must be a JSON object of keyword arguments, got {kwargs!r}")
    module_name, _, class_name = spec.rpartition(":") if ":" in spec else ("kvmm.policies.admission", ":", spec)
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise BadInputError(f"{setting} {spec!r}: cannot load {class_name!r} from {module_name!r} ({exc}); "
                            "expected a class of kvmm.policies.admission or 'package.module:Class'") from None
    try:
        policy = cls(**kwargs)
    except TypeError as exc:  # an unknown or missing keyword argument
        raise BadInputError(f"{setting} {spec!r} with {args_setting} {kwargs!r}: {exc}") from None
    if not isinstance(policy, AdmissionPolicy):
        raise BadInputError(f"{setting} {spec!r} built a {type(policy).__name__}, which has no admit(request)")
    return policy
