"""What a kvpress press does with a :class:`~kvmm.compress.TriAttentionPolicy` (no kvpress import).

kvpress calls a press once per layer after the prefill and keeps each KV head's top
``(1 - compression_ratio)`` share of that layer's tokens.  :class:`~kvmm.integrations.kvpress.KvmmPress`
therefore uses only a policy's per-layer :class:`~kvmm.compress.TriAttentionScorer`; the policy's
own decisions (which heads share a kept set, how many tokens, which are protected, when to
compress) cannot reach kvpress.  :func:`unhonoured_settings` names them, so the press can warn
instead of dropping them silently.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

__all__ = ["unhonoured_settings", "warn_unhonoured_policies"]


def unhonoured_settings(policy: Any) -> list[str]:
    """The settings of ``policy`` (a TriAttentionPolicy) that a kvpress press cannot apply, each
    with what kvpress does instead.  Runtime complexity: O(1)."""
    dropped = []
    if policy.aggregation != "layer_head":
        dropped.append(f"aggregation={policy.aggregation!r} (kvpress scores one layer at a time and keeps each "
                       f"KV head's own top tokens, i.e. 'layer_head')")
    dropped.append(f"budget={policy.budget} (kvpress keeps the share 1 - compression_ratio of the tokens)")
    if policy.protect_prompt:
        dropped.append("protect_prompt=True (kvpress compresses the prompt itself, so no prompt token is protected)")
    dropped.append(f"trigger={policy.trigger!r} and interval={policy.interval} (kvpress compresses once, "
                   f"after the prefill)")
    if policy.table is not None:
        dropped.append("table (kvpress evicts from its own cache; the table is not told)")
    return dropped


def warn_unhonoured_policies(policies: Iterable[Any], *, stacklevel: int = 3) -> None:
    """One ``UserWarning`` naming what kvpress drops of the given TriAttentionPolicies (nothing
    when there are none)."""
    settings = sorted({s for p in policies for s in unhonoured_settings(p)})
    if not settings:  # no policy (a policy always has its budget and trigger dropped)
        return
    warnings.warn(
        f"KvmmPress uses only the per-layer TriAttentionScorer of a TriAttentionPolicy; kvpress cannot apply "
        f"its {'; '.join(settings)}. Pass the scorers instead (KvmmPress(policy.scorer, compression_ratio) or "
        f"KvmmPress.triattention(calibration, compression_ratio)) to keep the same tokens without this warning",
        UserWarning, stacklevel=stacklevel)
