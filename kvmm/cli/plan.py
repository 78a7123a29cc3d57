"""``kvmm plan``: the cheapest KV hierarchy whose simulated p95 TTFT meets an SLO.

Spelling (each flag's bad part is named in a one-line error, exit code 2)::

    kvmm plan --trace conversation --ttft-p95 12s --tier dram:0-4TiB \\
        --tier layer3.5:0-64TiB:shared --tier nvme:0-16TiB --instances 8 \\
        --price gpu=3.5/h,dram=0.004/GiBh --out plan/

``--ttft-p95`` / ``--tpot-p95``: a duration (``2s``, ``500ms``, ``0.5``: seconds, ``us``,
``min``).  ``--tier KIND:MIN-MAX[:shared][:points=N]`` (repeatable, fastest first; see
:meth:`kvmm.plan.TierCandidate.parse`); the simulator reads private tiers before shared ones
whatever the order given.  ``--requests``, ``--load`` and what serves (``--model``,
``--hardware``, ``--tp``, ``--latency``, ``--gpu-kv``, ... as ``kvmm simulate``): the base
:class:`~kvmm.sim.SimConfig` every candidate keeps.  ``--price``: as ``kvmm simulate --price``.
``--budget``: the most USD per hour a configuration may cost (``120`` or ``120/h``).
``--verify N``: up to N of the cheapest candidates the estimate says meet the SLO (plus their
neighbours) are simulated, cheapest first, until one meets it; ``--jobs N`` runs N at once.
Progress goes to stderr; the decision to stdout (``--json``: one JSON object); the files (:mod:`kvmm.plan.writers`) to ``--out``.
"No configuration meets the SLO" is an answer (exit 0, the closest one shown).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shlex
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path

from kvmm.cli._out_folder import check_out_folder
from kvmm.cli.simulate import add_serving_arguments, parse_price_flag, serving_fields
from kvmm.errors import BadInputError
from kvmm.plan import core
from kvmm.plan.core import SLO, TierCandidate
from kvmm.plan.progress import StageProgress
from kvmm.plan.writers import plan_summary, write_plan
from kvmm.sim.config import SimConfig

#: duration units of --ttft-p95 / --tpot-p95 -> seconds
_DURATION_UNITS = {"": 1.0, "s": 1.0, "sec": 1.0, "ms": 1e-3, "us": 1e-6, "min": 60.0}
#: the candidate tiers when no --tier is given: per-node DRAM, a shared Layer 3.5 pool, per-node NVMe (docs/plan.md)
DEFAULT_TIERS = ("dram:0-4TiB", "layer3.5:0-64TiB:shared", "nvme:0-16TiB")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trace", default="conversation",
                        help="bundled trace name (conversation, synthetic) or a trace file (default conversation)")
    parser.add_argument("--requests", type=int, default=None, metavar="N",
                        help="plan for the first N requests of the trace (default: all)")
    parser.add_argument("--load", type=float, default=0.7,
                        help="target utilisation the arrivals are rescaled to, as kvmm simulate --load (default 0.7)")
    add_serving_arguments(parser)  # --model, --hardware, --tp, --latency, --gpu-kv, ... as kvmm simulate
    parser.add_argument("--ttft-p95", required=True, metavar="DURATION",
                        help="the SLO: p95 time to first token, e.g. 2s or 500ms")
    parser.add_argument("--tpot-p95", default=None, metavar="DURATION",
                        help="optional SLO on p95 time per output token, e.g. 50ms")
    parser.add_argument("--tier", action="append", default=None, metavar="KIND:MIN-MAX[:shared][:points=N]",
                        help="a candidate tier and its capacity range, fastest first (repeatable; default "
                             f"{' '.join(DEFAULT_TIERS)})")
    parser.add_argument("--instances", type=int, default=1, help="serving instances (default 1)")
    parser.add_argument("--price", default=None, metavar="NAME=AMOUNT/UNIT,...",
                        help="prices of the cost account, e.g. gpu=3.5/h,dram=0.004/GiBh,layer3.5=12/h "
                             "(units h, GiBh, GiBmo; docs/cost.md)")
    parser.add_argument("--budget", default=None, metavar="USD/h",
                        help="drop configurations costing more than this many USD per hour")
    parser.add_argument("--verify", type=int, default=8,
                        help="simulate up to this many of the cheapest candidates estimated to meet the SLO, "
                             "cheapest first, until one meets it in simulation (default 8)")
    parser.add_argument("--jobs", type=int, default=2, help="parallel simulations (process pool; default 2)")
    parser.add_argument("--out", default="plan", metavar="DIR",
                        help="folder for plan.md, frontier.png and config.json (default ./plan)")
    parser.add_argument("--json", action="store_true", help="print the plan as one JSON object")
    parser.add_argument("--no-progress", action="store_true", help="do not draw progress bars")


def parse_duration(text: str, flag: str) -> float:
    """``2s`` / ``500ms`` / ``0.5`` (seconds) -> seconds > 0; a one-line error naming ``flag``."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z]*)\s*", text)
    unit = m.group(2).lower() if m else ""
    if not m or unit not in _DURATION_UNITS or not float(m.group(1)) > 0:
        raise BadInputError(f"{flag} {text!r}: expected a duration > 0 such as 2s, 500ms or 0.5 (seconds)")
    return float(m.group(1)) * _DURATION_UNITS[unit]


def parse_budget(text: str | None) -> float | None:
    """``--budget 120`` or ``120/h`` -> USD per hour (a number > 0)."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*\$?([0-9]*\.?[0-9]+)\s*(?:/\s*h)?\s*", text)
    if not m or not float(m.group(1)) > 0:
        raise BadInputError(f"--budget {text!r}: expected USD per hour, a number > 0 such as 120 or 120/h")
    return float(m.group(1))


def build_request(args: argparse.Namespace) -> dict:
    """The keyword arguments of :func:`kvmm.plan.plan` the flags describe (no trace loaded yet)."""

    if args.instances < 1:
        raise BadInputError(f"--instances {args.instances}: expected an integer >= 1")
    if args.verify < 1:
        raise BadInputError(f"--verify {args.verify}: expected an integer >= 1")
    if args.requests is not None and args.requests < 1:
        raise BadInputError(f"--requests {args.requests}: expected an integer >= 1")
    if not 0.0 < args.load < math.inf:
        raise BadInputError(f"--load {args.load}: expected a number > 0")
    if args.jobs < 1:
        raise BadInputError(f"--jobs {args.jobs}: expected an integer >= 1")
    slo = SLO(parse_duration(args.ttft_p95, "--ttft-p95"),
              None if args.tpot_p95 is None else parse_duration(args.tpot_p95, "--tpot-p95"))
    tiers = []
    for text in args.tier or DEFAULT_TIERS:
        try:
            tiers.append(TierCandidate.parse(text))
        except BadInputError as exc:
            message = str(exc)
            raise BadInputError(message if "--tier" in message else f"--tier {text!r}: {message}") from None
    kinds = [t.kind for t in tiers]
    repeated = sorted({k for k in kinds if kinds.count(k) > 1})
    if repeated:
        raise BadInputError(f"--tier: {', '.join(repeated)} given twice; expected each tier kind once")
    return dict(slo=slo, tiers=tiers, prices=parse_price_flag(args.price), instances=args.instances,
                budget=parse_budget(args.budget), verify=args.verify,
                base=SimConfig(workload=args.trace, max_requests=args.requests, load=args.load,
                                              **serving_fields(args)))


def run(args: argparse.Namespace) -> int:
    request = build_request(args)
    out = Path(args.out)
    check_out_folder(out)  # before the (long) run, not a traceback when the files are written
    progress = StageProgress(enabled=not args.no_progress)
    executor = _executor(args.jobs)
    try:
        result = core.plan(args.trace, executor=executor, progress=progress, **request)
    finally:
        progress.close()
        if hasattr(executor, "shutdown"):
            executor.shutdown()
    command = "kvmm plan " + " ".join(_quote(a) for a in (getattr(args, "argv", None) or []))
    files = write_plan(result, out, command=command.strip())
    if args.json:
        print(json.dumps(plan_json(result, files)))
        return 0
    for line in plan_summary(result):
        print(line)
    for reason in result.reasons:
        print(f"  - {reason}")
    print("wrote " + ", ".join(str(p) for p in files.values()))
    return 0


def plan_json(plan, files: dict | None = None) -> dict:
    """The plan as a JSON-ready dict: the decision, the frontier, the errors, the files written."""
    def point(p):
        if p is None:
            return None
        return {"capacities": [int(c) for c in p.capacities], "tier_gib": dict(p.tier_gib),
                "tier_usd_per_hour": dict(p.tier_usd_per_hour), "hit_ratio": [float(h) for h in p.hit_ratio],
                "est_ttft_p95_s": p.est_ttft_p95_s, "est_tpot_p95_s": p.est_tpot_p95_s,
                "usd_per_hour": p.usd_per_hour, "usd_per_m_tokens": p.usd_per_m_tokens,
                "meets_slo_est": p.meets_slo_est, "sim_ttft_p95_s": p.sim_ttft_p95_s,
                "sim_tpot_p95_s": p.sim_tpot_p95_s, "sim_usd_per_m_tokens": p.sim_usd_per_m_tokens,
                "meets_slo_sim": p.meets_slo_sim}

    return _finite({"slo": {"ttft_p95_s": plan.slo.ttft_p95_s, "tpot_p95_s": plan.slo.tpot_p95_s},
                    "chosen": point(plan.chosen), "closest": point(plan.closest),
                    "frontier": [point(p) for p in plan.frontier], "verified": [point(p) for p in plan.verified],
                    "points_evaluated": plan.points_evaluated, "reasons": list(plan.reasons),
                    "timings_s": dict(plan.timings_s), "errors": [dict(e) for e in plan.errors()],
                    "files": {k: str(v) for k, v in (files or {}).items()}})


def _finite(value):
    """NaN / inf -> None (JSON has neither); tuples -> lists."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # numpy scalars
        return _finite(value.item())
    return value


def _executor(jobs: int):
    """A process pool of ``jobs`` workers, or an in-process executor for ``--jobs 1``."""
    if jobs > 1:
        return ProcessPoolExecutor(max_workers=jobs)
    return InlineExecutor()


class InlineExecutor:
    """``submit(fn, *args)`` runs ``fn`` at once in this process (``--jobs 1``); a Future-like result."""

    def submit(self, fn, *args, **kwargs):
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller through the future
            future.set_exception(exc)
        return future

    def shutdown(self, wait: bool = True) -> None:
        pass


def _quote(arg: str) -> str:
    return shlex.quote(arg)
