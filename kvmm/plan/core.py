"""The planner's data: :class:`SLO`, :class:`TierCandidate`, :class:`PlanPoint`, :class:`Plan`,
and :func:`plan`, which fills them.

Plain dataclasses, validated on construction (a bad value is a one-line
:class:`~kvmm.errors.BadInputError`), picklable.  ``PlanPoint.config()`` is the
:class:`~kvmm.sim.SimConfig` that simulates the point, so a chosen plan can be replayed as it is
(``kvmm.sim.config_json.save_config(plan.config, path)``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kvmm._validate import MAX_UNITS, parse_bytes, short_repr
from kvmm.errors import BadInputError
from kvmm.plan._configs import point_config
from kvmm.sim.config import SimConfig, check_admission, check_eviction
from kvmm.sim.config_json import config_to_json
from kvmm.sim.results import SimResult
from kvmm.tiers.spec import PRESETS

__all__ = ["SLO", "TierCandidate", "PlanPoint", "Plan", "plan", "simulation_key"]

GIB = 2**30
#: the most capacity points one candidate may ask for (the grid is the product over candidates)
MAX_POINTS = 4096


@dataclass(frozen=True)
class SLO:
    """The latency objective: TTFT p95 (and optionally TPOT p95), in seconds, each finite > 0."""

    ttft_p95_s: float
    tpot_p95_s: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "ttft_p95_s", _positive(self.ttft_p95_s, "SLO ttft_p95_s"))
        if self.tpot_p95_s is not None:
            object.__setattr__(self, "tpot_p95_s", _positive(self.tpot_p95_s, "SLO tpot_p95_s"))

    def met_by(self, ttft_p95_s: float, tpot_p95_s: float | None = None) -> bool:
        """Do these latencies meet the objective?  A TPOT bound with no TPOT figure is not met."""
        if not ttft_p95_s <= self.ttft_p95_s:  # NaN never meets it
            return False
        if self.tpot_p95_s is None:
            return True
        return tpot_p95_s is not None and tpot_p95_s <= self.tpot_p95_s


@dataclass(frozen=True)
class TierCandidate:
    """One tier kind the planner may provision, with the capacity range it may take.

    ``kind``: a tier preset name (:data:`kvmm.tiers.spec.PRESETS`: ``"dram"``, ``"layer3.5"``,
    ``"nvme"``, ``"dfs"``, ...), which gives the bandwidth, latency and default price.
    ``min_bytes``..``max_bytes``: the capacity range (per instance for a private tier, in all
    for a ``shared`` one), sampled at ``points`` log-spaced capacities, both ends included
    (:meth:`capacities`; one point when ``min_bytes == max_bytes``: a fixed tier).  A capacity of 0 means the
    tier is absent.  ``eviction`` / ``admission``: the policies the verifying simulation gives
    the tier (the analytic stage assumes LRU with write-all).
    """

    kind: str
    min_bytes: int
    max_bytes: int
    points: int = 32
    shared: bool = False
    eviction: str = "lru"
    admission: str = "write-all"

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str) or self.kind not in PRESETS:
            raise BadInputError(f"tier kind {self.kind!r} is not a tier preset; expected one of {sorted(PRESETS)}")
        for name in ("min_bytes", "max_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_UNITS:
                raise BadInputError(f"tier {self.kind}: {name} must be an integer number of bytes in [0, 2**60], "
                                    f"got {short_repr(value)}")
        if self.max_bytes == 0 or self.min_bytes > self.max_bytes:
            raise BadInputError(f"tier {self.kind}: empty capacity range {self.min_bytes}-{self.max_bytes} bytes; "
                                "expected 0 <= min <= max and max > 0")
        if isinstance(self.points, bool) or not isinstance(self.points, int) or not 1 <= self.points <= MAX_POINTS:
            raise BadInputError(f"tier {self.kind}: points must be an integer in [1, {MAX_POINTS}], got "
                                f"{short_repr(self.points)}")
        if self.min_bytes != self.max_bytes and self.points < 2:
            raise BadInputError(f"tier {self.kind}: a range {self.min_bytes}-{self.max_bytes} needs points >= 2 "
                                "(both ends are sampled); give min == max for a fixed tier")
        if not isinstance(self.shared, bool):
            raise BadInputError(f"tier {self.kind}: shared must be a bool, got {self.shared!r}")

        for check, value, what in ((check_eviction, self.eviction, "eviction"), (check_admission, self.admission, "admission")):
            if not isinstance(value, str):
                raise BadInputError(f"tier {self.kind}: {what} must be a policy name, got {type(value).__name__}")
            try:
                check(value)
            except BadInputError as error:
                raise BadInputError(f"tier {self.kind}: {error}") from None

    @classmethod
    def parse(cls, text: str) -> TierCandidate:
        """The CLI spelling ``KIND:MIN-MAX[:shared][:points=N][:eviction=NAME][:admission=NAME]``.

        Sizes take a unit (``B``, ``KiB``..``PiB``, ``KB``..``PB``); a bare number before the
        dash takes the unit after it (``0-4TiB`` is 0 to 4 TiB); ``4TiB`` alone is a fixed
        capacity.  Examples: ``dram:0-4TiB``, ``layer3.5:0-64TiB:shared``,
        ``nvme:0-16TiB:points=16``.  Errors are one-line :class:`BadInputError` naming the part.

        Runtime complexity: O(len(text)).
        """
        if not isinstance(text, str):
            raise BadInputError(f"a tier candidate must be text such as 'dram:0-4TiB', got {type(text).__name__}")
        parts = [p.strip() for p in text.split(":")]
        if len(parts) < 2 or not parts[0] or not parts[1]:
            raise BadInputError(f"--tier {_quoted(text)}: expected KIND:MIN-MAX[:shared][:points=N] (e.g. dram:0-4TiB)")
        lo, hi = _parse_range(parts[1], text)
        options: dict[str, Any] = {}
        for part in parts[2:]:
            key, eq, value = (s.strip() for s in part.partition("="))
            if part == "shared":
                key, value = "shared", True
            elif not eq or key not in ("points", "eviction", "admission"):
                raise BadInputError(f"--tier {_quoted(text)}: unknown option {part!r}; expected shared, points=N, "
                                    "eviction=NAME or admission=NAME")
            elif key == "points":
                # ASCII digits only: str.isdigit accepts "²", which int() refuses; a long run of
                # digits is out of range however it reads (int() refuses 4,300 and more)
                if not (value.isascii() and value.isdigit()) or len(value) > len(str(MAX_POINTS)):
                    raise BadInputError(f"--tier {_quoted(text)}: points={short_repr(value)} is not a whole number "
                                        f"in [1, {MAX_POINTS}]")
                value = int(value)
            if key in options:
                raise BadInputError(f"--tier {_quoted(text)}: option {key!r} given twice")
            options[key] = value
        if lo == hi:
            options.setdefault("points", 1)
        try:
            return cls(parts[0], lo, hi, **options)
        except BadInputError as error:
            raise BadInputError(f"--tier {_quoted(text)}: {error}") from None

    def capacities(self) -> tuple[int, ...]:
        """The sampled capacities in bytes, ascending, both ends included: ``points`` log-spaced
        (geometric) capacities from ``min_bytes`` to ``max_bytes``; with ``min_bytes == 0``, 0
        (the tier absent) and ``points - 1`` log-spaced from ``max_bytes / 2**octaves`` to
        ``max_bytes``, ``octaves = min(16, 2 (points - 2))`` (a step of at most 4x; 32 points
        span 16 octaves, 1.45x a step).  Rounded to whole bytes; capacities that round to
        the same byte count appear once.  The planner refines the grid around the cheapest
        point estimated to meet the SLO (kvmm.plan._planner), so a cheaper point between these
        is found.  Runtime complexity: O(points)."""
        if self.min_bytes == self.max_bytes:
            return (self.max_bytes,)
        return log_capacities(self.min_bytes, self.max_bytes, self.points)

    @property
    def label(self) -> str:
        """The tier's name in reports and cost breakdowns (the preset name)."""
        return self.kind


@dataclass
class PlanPoint:
    """One capacity combination: its analytic estimate, its price and, once verified, its simulation.

    ``capacities``: bytes per candidate tier, in the order the candidates were given (per
    instance for a private tier, in all for a shared one).  ``hit_ratio``: the share of the
    trace's blocks served by each tier (the first tier, in the simulator's order, whose LRU
    capacity exceeds the block's stack distance; with several instances a shared tier's share
    is what it holds, see kvmm.plan._analytic).  ``tier_gib`` /
    ``tier_usd_per_hour``: provisioned GiB and hourly price by tier name (private tiers counted
    once per instance; ``"gpu"`` carries the GPUs' hourly price).  ``usd_per_m_tokens``: the
    cost account's USD per million (input + output) tokens at the estimated duration.

    ``candidates``, ``base`` and ``instances`` say how to build the point's
    :class:`~kvmm.sim.SimConfig` (:meth:`config`); the planner fills them.  ``on_frontier``:
    whether the point is on the cost-vs-estimated-TTFT frontier (the planner verifies dominated
    points too when the frontier has fewer than ``verify`` estimated to meet the SLO).
    """

    capacities: tuple
    hit_ratio: tuple
    est_ttft_p95_s: float
    est_tpot_p95_s: float | None
    usd_per_hour: float
    usd_per_m_tokens: float
    tier_gib: dict
    tier_usd_per_hour: dict
    meets_slo_est: bool
    sim: SimResult | None = None
    sim_ttft_p95_s: float | None = None
    sim_tpot_p95_s: float | None = None
    sim_usd_per_m_tokens: float | None = None
    meets_slo_sim: bool | None = None
    candidates: tuple[TierCandidate, ...] = ()
    base: SimConfig | None = None
    instances: int = 1
    on_frontier: bool = True  # False: a dominated point verified to fill a thin frontier

    def __post_init__(self) -> None:
        self.capacities = tuple(self.capacities)
        self.hit_ratio = tuple(float(h) for h in self.hit_ratio)
        for c in self.capacities:
            if isinstance(c, bool) or not isinstance(c, int) or c < 0:
                raise BadInputError(f"PlanPoint capacities must be integers >= 0 (bytes), got {self.capacities!r}")
        if len(self.hit_ratio) != len(self.capacities):
            raise BadInputError(f"PlanPoint has {len(self.capacities)} capacities but {len(self.hit_ratio)} hit ratios; "
                                "expected one of each per candidate tier")
        if any(not 0.0 <= h <= 1.0 for h in self.hit_ratio) or sum(self.hit_ratio) > 1.0 + 1e-9:
            raise BadInputError(f"PlanPoint hit ratios must be shares in [0, 1] summing to at most 1, got {self.hit_ratio!r}")
        self.est_ttft_p95_s = _non_negative(self.est_ttft_p95_s, "PlanPoint est_ttft_p95_s")
        self.usd_per_hour = _non_negative(self.usd_per_hour, "PlanPoint usd_per_hour")
        self.usd_per_m_tokens = float(self.usd_per_m_tokens)  # NaN when the trace has no tokens
        for name in ("est_tpot_p95_s", "sim_ttft_p95_s", "sim_tpot_p95_s", "sim_usd_per_m_tokens"):
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, float(value))
        if not isinstance(self.meets_slo_est, bool) or not (self.meets_slo_sim is None or isinstance(self.meets_slo_sim, bool)):
            raise BadInputError("PlanPoint meets_slo_est must be a bool and meets_slo_sim a bool or None")
        self.tier_gib = {str(k): float(v) for k, v in dict(self.tier_gib).items()}
        self.tier_usd_per_hour = {str(k): float(v) for k, v in dict(self.tier_usd_per_hour).items()}
        self.candidates = tuple(self.candidates)
        if self.candidates and len(self.candidates) != len(self.capacities):
            raise BadInputError(f"PlanPoint has {len(self.capacities)} capacities but {len(self.candidates)} candidates")
        if isinstance(self.instances, bool) or not isinstance(self.instances, int) or self.instances < 1:
            raise BadInputError(f"PlanPoint instances must be an integer >= 1, got {self.instances!r}")

    @property
    def verified(self) -> bool:
        return self.sim_ttft_p95_s is not None

    @property
    def error(self) -> float | None:
        """Relative error of the estimate, ``(est - sim) / sim`` TTFT p95 (None until verified)."""
        if self.sim_ttft_p95_s is None:
            return None
        if self.sim_ttft_p95_s == 0.0:
            return 0.0 if self.est_ttft_p95_s == 0.0 else math.inf
        return (self.est_ttft_p95_s - self.sim_ttft_p95_s) / self.sim_ttft_p95_s

    def describe(self) -> str:
        """``dram 512 GiB + layer3.5 0 GiB``: the capacities by tier name."""
        names = [c.kind for c in self.candidates] or [f"tier{i}" for i in range(len(self.capacities))]
        return " + ".join(f"{n} {_gib_text(c)}" for n, c in zip(names, self.capacities))

    def config(self) -> SimConfig:
        """The :class:`~kvmm.sim.SimConfig` that simulates this point: ``base`` (the planner's
        base config) with the candidate tiers at these capacities (a tier at 0 bytes left out;
        private tiers in ``SimConfig.tiers``, shared ones in a
        :class:`~kvmm.cluster.ClusterConfig` of ``instances``).  Runtime complexity: O(tiers)."""
        if not self.candidates:
            raise BadInputError("this PlanPoint carries no tier candidates, so it cannot build a SimConfig; "
                                "expected a point made by kvmm.plan.plan()")

        return point_config(self.base, self.candidates, self.capacities, self.instances)


@dataclass
class Plan:
    """The planner's answer.

    ``chosen``: the cheapest verified point whose *simulated* latencies meet ``slo`` (None when
    none does; then ``closest`` is the cheapest verified point whose shortfall is within 1 % of
    the smallest); ``config`` is ``chosen.config()``.  ``frontier``: the Pareto frontier of cost
    vs estimated TTFT (and TPOT when the SLO bounds it), cheapest first; ``verified``: the
    simulated points, cheapest first (candidates on both sides of the estimated SLO boundary,
    and dominated ones when the frontier is thin, simulated cheapest first up to the first that
    meets the SLO: see kvmm.plan._planner); ``points_evaluated``: the capacity combinations the
    analytic stage priced (the refined grid's); ``reasons``: sentences saying why;
    ``timings_s``: seconds per stage (``"analytic"``, ``"verify"``).
    """

    slo: SLO
    chosen: PlanPoint | None
    closest: PlanPoint | None
    config: SimConfig | None
    frontier: list
    verified: list
    points_evaluated: int
    reasons: list
    timings_s: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.slo, SLO):
            raise BadInputError(f"Plan slo must be an SLO, got {type(self.slo).__name__}")
        for name in ("chosen", "closest"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, PlanPoint):
                raise BadInputError(f"Plan {name} must be a PlanPoint or None, got {type(value).__name__}")
        self.frontier = list(self.frontier)
        self.verified = list(self.verified)
        self.reasons = [str(r) for r in self.reasons]
        for name in ("frontier", "verified"):
            if not all(isinstance(p, PlanPoint) for p in getattr(self, name)):
                raise BadInputError(f"Plan {name} must hold PlanPoints")
        if isinstance(self.points_evaluated, bool) or not isinstance(self.points_evaluated, int) or self.points_evaluated < 0:
            raise BadInputError(f"Plan points_evaluated must be an integer >= 0, got {self.points_evaluated!r}")
        self.timings_s = {str(k): float(v) for k, v in dict(self.timings_s).items()}

    def errors(self) -> list[dict]:
        """Per verified point: ``capacities``, ``est_ttft_p95_s``, ``sim_ttft_p95_s`` and
        ``rel_error`` = (est - sim) / sim; the same for TPOT where both are known.
        Runtime complexity: O(verified points)."""
        rows = []
        for p in self.verified:
            row = {"capacities": p.capacities, "est_ttft_p95_s": p.est_ttft_p95_s, "sim_ttft_p95_s": p.sim_ttft_p95_s,
                   "rel_error": p.error}
            if p.est_tpot_p95_s is not None and p.sim_tpot_p95_s is not None:
                row["est_tpot_p95_s"], row["sim_tpot_p95_s"] = p.est_tpot_p95_s, p.sim_tpot_p95_s
                row["tpot_rel_error"] = ((p.est_tpot_p95_s - p.sim_tpot_p95_s) / p.sim_tpot_p95_s
                                         if p.sim_tpot_p95_s else None)
            rows.append(row)
        return rows


def plan(trace: Any, *, slo: SLO, tiers: Any, prices: Any = None, instances: int = 1, budget: float | None = None,
         verify: int = 8, neighbours: int = 2, executor: Any = None, base: Any = None,
         progress: Callable[[str, int, int], None] | None = None, simulated: Any = None) -> Plan:
    """Size the tiers for ``trace`` so that TTFT p95 meets ``slo`` at the lowest cost.

    See :mod:`kvmm.plan._planner` for the method (docs/plan.md).  ``simulated``: None, or a
    mutable mapping (a plain ``dict``) from a config's key (:func:`simulation_key`: its
    :func:`~kvmm.sim.config_json.config_to_json` text) to its :class:`~kvmm.sim.SimResult`,
    shared across calls: a picked point whose config is in it is not simulated again, and every
    new simulation is added to it.  Pass the same dict to plans of one trace at several SLOs
    (they pick many of the same points); a run is deterministic, so a reused result is the one
    a new run would give.  Runtime complexity: one O(n log n) stack-distance pass over the
    trace's n block references (SHARDS-sampled when n is large), O(G x T) for the G-point
    capacity grid over T tiers (a few times over while the grid is refined), plus up to ``verify
    + 2 x neighbours`` simulations, cheapest first, stopping at the first that meets the SLO
    (fewer when ``simulated`` holds some).
    """
    # the planner loads numba (its kernels) and imports this module: on first use, so that
    # `import kvmm.plan` and the plan's data (SLO, TierCandidate) compile nothing
    from kvmm.plan._planner import run_plan

    return run_plan(trace, slo=slo, tiers=tiers, prices=prices, instances=instances, budget=budget, verify=verify,
                    neighbours=neighbours, executor=executor, base=base, progress=progress, simulated=simulated)


def simulation_key(config: Any) -> str:
    """The key of ``config`` in :func:`plan`'s ``simulated`` mapping: its
    :func:`~kvmm.sim.config_json.config_to_json` dict as JSON text with sorted keys (equal
    configs, equal keys).  Runtime complexity: O(size of the config; an inline trace's arrays)."""
    return json.dumps(config_to_json(config), sort_keys=True)


# ---------------------------------------------------------------------- helpers
#: at most this many octaves below ``max_bytes`` for the smallest non-zero capacity of a 0-based range
MAX_OCTAVES = 16


def log_capacities(lo: int, hi: int, points: int) -> tuple[int, ...]:
    """``points`` capacities from ``lo`` to ``hi`` (``lo < hi``, ``points >= 2``), ascending and
    distinct, both ends exact: geometric from ``lo`` when ``lo > 0``; else 0 and ``points - 1``
    geometric from ``hi / 2**min(16, 2 (points - 2))``.  O(points)."""
    if lo > 0:
        first, n, out = lo, points, []
    else:
        first, n, out = hi / 2.0 ** min(MAX_OCTAVES, 2 * (points - 2)), points - 1, [0]
    if n == 1:
        out.append(hi)
    else:
        log_first, step = math.log(first), (math.log(hi) - math.log(first)) / (n - 1)
        out += [min(max(round(math.exp(log_first + i * step)), lo), hi) for i in range(n - 1)] + [hi]
    if lo > 0:
        out[0] = lo
    return tuple(sorted(set(out)))


def _positive(value: Any, name: str) -> float:
    if isinstance(value, (bool, str)) or not isinstance(value, (int, float)) or not finite_number(value) or value <= 0:
        raise BadInputError(f"{name} must be a finite number of seconds > 0, got {short_repr(value)}")
    return float(value)


def _non_negative(value: Any, name: str) -> float:
    if isinstance(value, (bool, str)) or not isinstance(value, (int, float)) or value != value or value < 0 \
            or (isinstance(value, int) and not finite_number(value)):
        raise BadInputError(f"{name} must be a number >= 0, got {short_repr(value)}")
    return float(value)


def finite_number(value: int | float) -> bool:
    """``math.isfinite``, False for an int too large for a float (10**400) instead of OverflowError."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _quoted(text: str) -> str:
    """``repr(text)`` for an error message, cut to 60 characters (a pasted 5,000-digit flag stays one readable line)."""
    return repr(text) if len(text) <= 60 else repr(text[:57] + "...")


def _parse_size(text: str, default_unit: str, whole: str) -> tuple[int, str]:
    return parse_bytes(text, f"--tier {_quoted(whole)}", default_unit=default_unit, example="4TiB")


def _parse_range(text: str, whole: str) -> tuple[int, int]:
    """``0-4TiB`` / ``512GiB-4TiB`` / ``4TiB`` -> (min, max) bytes."""
    lo_text, dash, hi_text = text.partition("-")
    if not dash:
        size, _ = _parse_size(text, "", whole)
        return size, size
    if not lo_text.strip() or not hi_text.strip():
        raise BadInputError(f"--tier {_quoted(whole)}: bad range {short_repr(text)}; expected MIN-MAX such as 0-4TiB")
    hi, unit = _parse_size(hi_text, "", whole)
    lo, _ = _parse_size(lo_text, unit, whole)
    return lo, hi


def _gib_text(nbytes: int) -> str:
    gib = nbytes / GIB
    if gib >= 1024:
        return f"{gib / 1024:.3g} TiB"
    return f"{gib:.4g} GiB"
