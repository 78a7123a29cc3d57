"""The one rule by which every engine adapter (vLLM, LMCache) turns what a user passes as a
policy into a factory of fresh kvmm eviction policies.  Engine-independent: imports no engine."""

from __future__ import annotations

import copy
from typing import Any, Callable

from kvmm.errors import BadInputError
from kvmm.protocols import EvictionPolicy


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
    if getattr(probe, "offline", False) is True:
        raise BadInputError(f"make_cache_policy: {type(probe).__name__} needs its future reference stream, which an "
                            f"engine's cache cannot know; use it offline (kvmm.policies.replay('belady', ...))")
    if not isinstance(probe, EvictionPolicy) or (need_contains and not hasattr(probe, "__contains__")):
        also = " (and `key in policy`, which this adapter asks)" if need_contains else ""
        raise BadInputError(f"make_cache_policy: the factory returned {type(probe).__name__}, which lacks the "
                            f"EvictionPolicy methods on_insert, on_access, on_remove, victims{also}")
    return factory, probe
