"""The cost account: GPU-hours and GiB-hours priced in USD, per million input and output tokens.

Two accounts sit side by side, as in the seeds' verdict that offloading pays only when the pool
holds the working set and holds the fast tier only while it is needed:

* the **capacity account**: every tier is paid for the capacity it provisions, for the whole run
  (``count x capacity x duration`` GiB-hours at ``usd_per_gib_hour``, plus a fixed
  ``usd_per_hour`` per tier instance), and every GPU for the whole run (GPU-hours);
* the **time account**: the protected byte-time the staging ledger reports (bytes held in the
  fast tier for a claimed hit, times the seconds held), reported as GiB-seconds, not priced
  (the fast tier's capacity is already paid in the capacity account).

Prices come from the specs (``TierSpec.usd_per_gib_hour`` / ``usd_per_hour``,
``ModelSpec.gpu_usd_per_hour``: cited list prices, docs/cost.md) and are overridden by a
:class:`Prices`, which :func:`parse_prices` builds from the CLI spelling
``gpu=3.5/h,dram=0.004/GiBh,layer3.5=12/h``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field

from kvmm._validate import MAX_INT64, as_count, as_positive_float
from kvmm.errors import BadInputError, DTypeError
from kvmm.sim.models import H200_USD_PER_GPU_HOUR
from kvmm.tiers.spec import HOURS_PER_MONTH, TierSpec

__all__ = ["Prices", "parse_prices", "cost_account", "CostAccount", "PRICE_UNITS"]

GIB = 2**30
SECONDS_PER_HOUR = 3600.0

#: Units of the CLI spelling: what one unit of the amount buys (case-insensitive).
PRICE_UNITS = {"h": "USD per hour", "GiBh": "USD per GiB-hour", "GiBmo": "USD per GiB-month (730 hours)"}


@dataclass(frozen=True)
class Prices:
    """Price overrides for :func:`cost_account`; whatever is not given keeps its default.

    * ``gpu_usd_per_hour``: one GPU's hourly price (``None``: the model's, else
      :data:`~kvmm.sim.models.H200_USD_PER_GPU_HOUR`);
    * ``tier_usd_per_gib_hour``: tier name -> USD per GiB-hour of provisioned capacity
      (overrides ``TierSpec.usd_per_gib_hour``);
    * ``tier_usd_per_hour``: tier name -> fixed USD per hour per tier instance, e.g. an appliance
      box (overrides ``TierSpec.usd_per_hour``).

    Every price is a finite number >= 0.  Hashable and picklable (the maps are copied).
    """

    gpu_usd_per_hour: float | None = None
    tier_usd_per_gib_hour: Mapping[str, float] = field(default_factory=dict)
    tier_usd_per_hour: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.gpu_usd_per_hour is not None:
            object.__setattr__(self, "gpu_usd_per_hour",
                               as_positive_float(self.gpu_usd_per_hour, "gpu_usd_per_hour", allow_zero=True))
        for attr in ("tier_usd_per_gib_hour", "tier_usd_per_hour"):
            object.__setattr__(self, attr, _price_map(getattr(self, attr), attr))

    def __hash__(self) -> int:
        return hash((self.gpu_usd_per_hour, tuple(sorted(self.tier_usd_per_gib_hour.items())),
                     tuple(sorted(self.tier_usd_per_hour.items()))))

    def tier_prices(self, spec: TierSpec) -> tuple[float, float]:
        """``(USD per GiB-hour, USD per hour)`` of ``spec``: an override of its name, else its own.
        Runtime complexity: O(1)."""
        return (self.tier_usd_per_gib_hour.get(spec.name, spec.usd_per_gib_hour),
                self.tier_usd_per_hour.get(spec.name, spec.usd_per_hour))


@dataclass(frozen=True)
class CostAccount:
    """What a run cost.  Tier fields are tuples in the order the tiers were given.

    ``usd_per_million_input_tokens`` and ``usd_per_million_output_tokens`` are an *allocation*
    of ``total_usd``: a share ``input_share`` of the total goes to input tokens and the rest to
    output tokens, so ``input_tokens * usd_per_million_input_tokens / 1e6 +
    output_tokens * usd_per_million_output_tokens / 1e6 == total_usd``.  With ``split ==
    "gpu-time"`` the share is the GPU time spent on prefill over the GPU time spent on prefill
    and decode; with ``split == "blended"`` (no timing given, or both zero) it is the input tokens' share of
    all tokens, so both prices are the same blended price.  A price over zero tokens is NaN.

    ``tokens_per_usd`` = (input + output tokens) / ``total_usd``; ``tokens_per_s_per_usd`` is
    the throughput (all tokens per second) per USD per hour of spend (``tokens_per_usd / 3600``).
    Both are NaN when the run cost nothing.
    """

    duration_s: float
    gpus: int
    gpu_usd_per_hour: float
    gpu_hours: float
    gpu_usd: float
    tier_names: tuple
    tier_counts: tuple
    tier_usd_per_gib_hour: tuple  # the prices used
    tier_usd_per_hour: tuple
    tier_gib_hours: tuple  # capacity account: count x capacity x duration
    tier_usd: tuple
    total_usd: float
    input_tokens: int
    output_tokens: int
    split: str  # "gpu-time" or "blended"
    input_share: float
    usd_per_million_input_tokens: float
    usd_per_million_output_tokens: float
    tokens_per_usd: float
    tokens_per_s_per_usd: float
    protected_gib_seconds: float  # time account
    unpriced_tiers: tuple  # tiers at price 0 from their spec (a hand-built spec is free unless priced)
    unused_prices: tuple  # names in Prices that no given tier has (a typo, or a tier this run lacks)

    def as_dict(self) -> dict:
        return asdict(self)

    def by_tier(self) -> dict[str, tuple[float, float]]:
        """Tier name -> ``(gib_hours, usd)``."""
        return {name: (g, u) for name, g, u in zip(self.tier_names, self.tier_gib_hours, self.tier_usd)}


def parse_prices(text: str, *, tier_names: Iterable[str] | None = None) -> Prices:
    """Prices from the CLI spelling: comma-separated ``NAME=AMOUNT/UNIT`` parts.

    ``NAME`` is ``gpu`` or a tier name (a preset such as ``dram``, ``layer3.5``, or any spec's
    name); ``AMOUNT`` a number >= 0; ``UNIT`` (case-insensitive) one of ``h`` (USD per hour:
    the GPU price, or a tier's fixed hourly price such as an appliance box), ``GiBh`` (USD per
    GiB-hour) or ``GiBmo`` (USD per GiB-month of 730 hours, as storage is listed).  ``gpu``
    takes only ``/h``.  A tier may have both a ``/h`` and a per-GiB price; giving the same
    price twice is an error.  Example: ``gpu=3.5/h,dram=0.004/GiBh,layer3.5=12/h``.  An empty
    text is no override.  ``tier_names``: the tier names a price may name (the CLI passes the
    presets: its tiers are presets); ``None``, any name.  Errors are one-line
    :class:`BadInputError` naming the bad part (an unknown name lists the known ones).

    Runtime complexity: O(len(text)).
    """
    if not isinstance(text, str):
        raise DTypeError(f"prices must be text such as 'gpu=3.5/h,dram=0.004/GiBh', got {type(text).__name__}")
    gpu: float | None = None
    per_gib: dict[str, float] = {}
    per_hour: dict[str, float] = {}
    if not text.strip():
        return Prices()
    known = None if tier_names is None else sorted(set(tier_names))
    for part in text.split(","):
        name, amount, unit = _parse_part(part.strip(), text)
        if known is not None and name != "gpu" and name not in known:
            raise BadInputError(f"price {part.strip()!r} names {name!r}, which is not a price kvmm knows; expected "
                                f"gpu or a tier: {', '.join(known)}")
        if name == "gpu":
            if unit != "h":
                raise _part_error(part, f"prices a GPU per {PRICE_UNITS[unit].removeprefix('USD per ')}; "
                                        "a GPU is priced per hour (gpu=AMOUNT/h)")
            if gpu is not None:
                raise _part_error(part, "gives the GPU price a second time")
            gpu = amount
            continue
        target = per_hour if unit == "h" else per_gib
        if name in target:
            raise _part_error(part, f"gives {name!r} a {'fixed hourly' if unit == 'h' else 'per-GiB'} price a second time")
        target[name] = amount / HOURS_PER_MONTH if unit == "GiBmo" else amount
    return Prices(gpu, per_gib, per_hour)


def cost_account(*, duration_s: float, gpus: int, tiers: Iterable[tuple[TierSpec, int]], input_tokens: int,
                 output_tokens: int, protected_byte_seconds: float = 0.0, prices: Prices | None = None,
                 gpu_usd_per_hour: float | None = None, prefill_gpu_seconds: float | None = None,
                 decode_gpu_seconds: float | None = None) -> CostAccount:
    """Price a run of ``duration_s`` seconds on ``gpus`` GPUs with ``tiers``.

    ``tiers``: ``(TierSpec, count)`` pairs with distinct names; a private tier of every instance
    counts ``instances`` times, a shared one once.  The GPU price is ``prices.gpu_usd_per_hour``
    if given, else ``gpu_usd_per_hour`` (pass the model's ``ModelSpec.gpu_usd_per_hour``), else
    the H200 default.  ``prefill_gpu_seconds`` and ``decode_gpu_seconds`` (both or neither):
    GPU-busy seconds of each phase, which split the total between input and output tokens
    (see :class:`CostAccount`).  Raises :class:`BadInputError` on a negative, non-finite or
    mistyped argument, a pair that is not ``(TierSpec, count)``, or two tiers of one name.

    Runtime complexity: O(number of tiers + number of price overrides).
    """
    duration = as_positive_float(duration_s, "duration_s", allow_zero=True)
    gpus = as_count(gpus, "gpus", maximum=MAX_INT64)  # Python ints beyond int64 overflow the float arithmetic
    input_tokens = as_count(input_tokens, "input_tokens", maximum=MAX_INT64)
    output_tokens = as_count(output_tokens, "output_tokens", maximum=MAX_INT64)
    protected = as_positive_float(protected_byte_seconds, "protected_byte_seconds", allow_zero=True)
    if prices is None:
        prices = Prices()
    elif not isinstance(prices, Prices):
        raise DTypeError(f"prices must be a Prices (see parse_prices), got {type(prices).__name__}")
    specs = _tier_pairs(tiers)
    gpu_price = _gpu_price(prices, gpu_usd_per_hour)
    phase_seconds = _phase_seconds(prefill_gpu_seconds, decode_gpu_seconds)

    hours = duration / SECONDS_PER_HOUR
    gpu_hours = gpus * hours
    gpu_usd = gpu_hours * gpu_price
    used = [prices.tier_prices(s) for s, _ in specs]
    per_gib = tuple(g for g, _ in used)
    per_hour = tuple(h for _, h in used)
    gib_hours = tuple(count * (s.capacity_bytes / GIB) * hours for s, count in specs)
    tier_usd = tuple(g * pg + count * hours * ph for g, pg, ph, (_, count) in zip(gib_hours, per_gib, per_hour, specs))
    total = math.fsum((gpu_usd, *tier_usd))

    split, share = _input_share(phase_seconds, input_tokens, output_tokens)
    tokens = input_tokens + output_tokens
    tokens_per_usd = tokens / total if total > 0 else math.nan
    names = tuple(s.name for s, _ in specs)
    overridden = set(prices.tier_usd_per_gib_hour) | set(prices.tier_usd_per_hour)
    return CostAccount(
        duration_s=duration, gpus=gpus, gpu_usd_per_hour=gpu_price, gpu_hours=gpu_hours, gpu_usd=gpu_usd,
        tier_names=names, tier_counts=tuple(count for _, count in specs), tier_usd_per_gib_hour=per_gib,
        tier_usd_per_hour=per_hour, tier_gib_hours=gib_hours, tier_usd=tier_usd, total_usd=total,
        input_tokens=input_tokens, output_tokens=output_tokens, split=split, input_share=share,
        usd_per_million_input_tokens=_per_million(total * share, input_tokens),
        usd_per_million_output_tokens=_per_million(total * (1.0 - share), output_tokens),
        tokens_per_usd=tokens_per_usd, tokens_per_s_per_usd=tokens_per_usd / SECONDS_PER_HOUR,
        protected_gib_seconds=protected / GIB,
        unpriced_tiers=tuple(s.name for s, _ in specs if s.name not in overridden
                             and s.usd_per_gib_hour == 0.0 and s.usd_per_hour == 0.0),
        unused_prices=tuple(sorted(overridden - set(names))),
    )


def _price_map(value, name: str) -> dict[str, float]:
    """A copy of a name -> price map, every key a non-empty string and every price finite >= 0."""
    if not isinstance(value, Mapping):
        raise DTypeError(f"{name} must be a mapping of tier name -> price, got {type(value).__name__}")
    out: dict[str, float] = {}
    for key, price in value.items():
        if not isinstance(key, str) or not key:
            raise BadInputError(f"{name} keys must be non-empty tier names, got {key!r}")
        out[key] = as_positive_float(price, f"{name}[{key!r}]", allow_zero=True)
    return out


def _part_error(part: str, problem: str) -> BadInputError:
    return BadInputError(f"price {part.strip()!r} {problem}; expected NAME=AMOUNT/UNIT with UNIT one of "
                         f"{', '.join(PRICE_UNITS)} (e.g. gpu=3.5/h,dram=0.004/GiBh)")


def _parse_part(part: str, text: str) -> tuple[str, float, str]:
    """``(name, amount, canonical unit)`` of one ``NAME=AMOUNT/UNIT`` part."""
    if not part:
        raise BadInputError(f"prices {text!r} have an empty part (two commas in a row, or a trailing comma); "
                            "expected NAME=AMOUNT/UNIT parts separated by commas")
    if part.count("=") != 1:
        raise _part_error(part, "has no '='" if "=" not in part else "has more than one '='")
    name, _, value = (s.strip() for s in part.partition("="))
    if not name:
        raise _part_error(part, "has no name before '='")
    if "/" not in value:
        raise _part_error(part, "has no unit")
    amount_text, _, unit_text = (s.strip() for s in value.rpartition("/"))
    unit = next((u for u in PRICE_UNITS if u.lower() == unit_text.lower()), None)
    if unit is None:
        raise _part_error(part, f"has unknown unit {unit_text!r}")
    try:
        amount = float(amount_text)
    except ValueError:
        raise _part_error(part, f"has amount {amount_text!r}, not a number") from None
    if not math.isfinite(amount) or amount < 0:
        raise _part_error(part, f"has amount {amount_text!r}; a price must be a finite number >= 0")
    return name, amount, unit


def _tier_pairs(tiers) -> list[tuple[TierSpec, int]]:
    if isinstance(tiers, (str, bytes, TierSpec)) or not hasattr(tiers, "__iter__"):
        raise DTypeError(f"tiers must be a list of (TierSpec, count) pairs, got {type(tiers).__name__}")
    pairs: list[tuple[TierSpec, int]] = []
    seen: set[str] = set()
    for i, pair in enumerate(tiers):
        if not isinstance(pair, tuple) or len(pair) != 2 or not isinstance(pair[0], TierSpec):
            raise DTypeError(f"tiers[{i}] must be a (TierSpec, count) pair, got {pair!r}")
        spec, count = pair[0], as_count(pair[1], f"tiers[{i}] count", maximum=MAX_INT64)
        if spec.name in seen:
            raise BadInputError(f"tiers[{i}]: a second tier named {spec.name!r}; tier names must be distinct "
                                "(count a private tier of every instance once, with count = instances)")
        seen.add(spec.name)
        pairs.append((spec, count))
    return pairs


def _gpu_price(prices: Prices, default: float | None) -> float:
    """The override, else the caller's default (validated even when overridden), else the H200's."""
    if default is not None:
        default = as_positive_float(default, "gpu_usd_per_hour", allow_zero=True)
    if prices.gpu_usd_per_hour is not None:
        return prices.gpu_usd_per_hour
    return H200_USD_PER_GPU_HOUR if default is None else default


def _phase_seconds(prefill, decode) -> tuple[float, float] | None:
    if (prefill is None) != (decode is None):
        raise BadInputError("give both prefill_gpu_seconds and decode_gpu_seconds (the split of GPU time), or neither")
    if prefill is None:
        return None
    return (as_positive_float(prefill, "prefill_gpu_seconds", allow_zero=True),
            as_positive_float(decode, "decode_gpu_seconds", allow_zero=True))


def _input_share(phase_seconds, input_tokens: int, output_tokens: int) -> tuple[str, float]:
    """The allocation rule and the share of the total that input tokens carry."""
    if phase_seconds is not None and sum(phase_seconds) > 0:
        prefill, decode = phase_seconds
        return "gpu-time", prefill / (prefill + decode)
    tokens = input_tokens + output_tokens
    return "blended", (input_tokens / tokens if tokens else 0.0)


def _per_million(usd: float, tokens: int) -> float:
    return usd / tokens * 1e6 if tokens else math.nan
