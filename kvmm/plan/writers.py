"""What ``kvmm plan --out DIR`` writes: ``plan.md``, ``frontier.png`` and ``config.json``.

``write_plan(plan, out_dir) -> {"plan.md": path, "frontier.png": path, "config.json": path}``:

* ``plan.md``: the decision and its reasons first (the chosen configuration, or "no
  configuration meets the SLO" with the closest one), the chosen point's cost breakdown (GiB
  and USD per hour per tier, USD per million tokens), the cost-vs-latency frontier as a table
  (every point's capacities, hit ratios, estimated and, where verified, simulated p95 TTFT),
  and the estimate-vs-simulation error of every verified point, with a column saying whether it
  is on the frontier (the planner also verifies dominated points when the frontier is thin:
  ``PlanPoint.on_frontier`` False);
* ``frontier.png``: USD per hour against p95 TTFT, the frontier's estimated points (hollow,
  joined), the verified points' simulated p95 (filled squares, an arrow from each estimate; a
  verified point off the frontier: its estimate a hollow grey diamond, its simulation a filled
  purple diamond), the chosen point ringed and the SLO as a vertical line.  Needs matplotlib (the ``plot`` extra); without
  it the file is skipped, ``plan.md`` says so and a line goes to ``stream``;
* ``config.json``: the chosen point's :class:`~kvmm.sim.SimConfig`
  (:func:`kvmm.sim.config_json.save_config`), which ``kvmm simulate --config DIR/config.json``
  replays as it is.  When nothing meets the SLO it holds the closest verified point (``plan.md``
  says so); with neither, no file is written.

The writers read only the documented fields of :class:`~kvmm.plan.Plan` and
:class:`~kvmm.plan.PlanPoint`, so they work on a hand-built plan too.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kvmm.errors import BadInputError
from kvmm.report import format_table, plain_number
from kvmm.sim.config_json import save_config

GIB = 2**30

__all__ = ["write_plan", "plan_markdown", "draw_frontier", "plan_summary", "point_label", "FILES"]

#: the files :func:`write_plan` writes, in order
FILES = ("plan.md", "frontier.png", "config.json")


def write_plan(plan: Any, out_dir, *, stream=None, command: str | None = None) -> dict[str, Path]:
    """Write ``plan.md``, ``frontier.png`` and ``config.json`` into ``out_dir`` (created when
    missing); return the paths written by file name (``frontier.png`` is missing without
    matplotlib, ``config.json`` when the plan has no chosen and no closest point).

    ``command``: the command line that made the plan, quoted in ``plan.md``.  ``stream``: where
    the "matplotlib is not installed" line goes (default stderr).  Raises :class:`BadInputError`
    when ``out_dir`` cannot be created or written.

    Runtime complexity: O(points on the frontier + verified points), plus one figure.
    """
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInputError(f"plan output folder {str(out)!r}: cannot create it ({exc.strerror or type(exc).__name__}); "
                            "expected a writable folder") from None
    stream = sys.stderr if stream is None else stream
    written: dict[str, Path] = {}
    config_point = _config_point(plan)
    if config_point is not None:
        config = plan.config if plan.chosen is not None and plan.config is not None else config_point.config()
        written["config.json"] = save_config(config, out / "config.json")
    png = draw_frontier(plan, out / "frontier.png")
    if png is not None:
        written["frontier.png"] = png
    else:
        print("kvmm plan: matplotlib is not installed, so frontier.png was not drawn (pip install 'kvmm[plot]')",
              file=stream)
    md = out / "plan.md"
    md.write_text(plan_markdown(plan, figure=png is not None, config_written="config.json" in written,
                                command=command), encoding="utf-8")
    written["plan.md"] = md
    return {name: written[name] for name in FILES if name in written}


def plan_summary(plan: Any) -> list[str]:
    """The decision in a few plain lines (what the CLI prints and ``plan.md`` opens with)."""
    slo = _slo_text(plan.slo)
    if plan.chosen is not None:
        p = plan.chosen
        lines = [f"chosen: {point_label(p)}: {_usd(p.usd_per_hour)}/h, {_usd(_usd_per_m(p))} per M tokens, "
                 f"p95 TTFT {_seconds(_ttft(p), plan.slo.ttft_p95_s)} "
                 f"{'simulated' if p.sim_ttft_p95_s is not None else 'estimated'} "
                 f"(SLO {slo})"]
    else:
        lines = [f"no configuration meets the SLO ({slo})"]
        if plan.closest is not None:
            c = plan.closest
            lines.append(f"closest: {point_label(c)}: {_usd(c.usd_per_hour)}/h, "
                         f"p95 TTFT {_seconds(_ttft(c), plan.slo.ttft_p95_s)} "
                         f"{'simulated' if c.sim_ttft_p95_s is not None else 'estimated'}")
    lines.append(f"{plan.points_evaluated:,} capacity combinations estimated, {len(plan.frontier)} on the frontier, "
                 f"{len(plan.verified)} simulated")
    return lines


def point_label(point: Any) -> str:
    """``dram 512 GiB/instance + layer3.5 8 TiB shared``: a point's capacity per candidate tier (per
    instance for a private tier, in all for a shared one); tiers at 0 bytes (absent) left out."""
    return " + ".join(f"{name} {_gib_text(cap / GIB)}{suffix}" for (name, suffix), cap in
                      zip(_tier_columns([point]), point.capacities) if cap) or "no lower tier"


def plan_markdown(plan: Any, *, figure: bool = True, config_written: bool = True, command: str | None = None) -> str:
    """The text of ``plan.md``.  Runtime complexity: O(frontier + verified points)."""
    parts = ["# kvmm plan\n"]
    if command:
        parts.append(f"`{command}`\n")
    parts.append(f"SLO: p95 TTFT <= {_seconds(plan.slo.ttft_p95_s)}"
                 + (f", p95 TPOT <= {_seconds(plan.slo.tpot_p95_s)}" if plan.slo.tpot_p95_s is not None else "")
                 + ".  " + _timings_text(plan) + "\n")
    parts.append("## Decision\n")
    parts.append("\n".join(f"**{line}**" if i == 0 else line for i, line in enumerate(plan_summary(plan))) + "\n")
    if plan.reasons:
        parts.append("Why:\n\n" + "\n".join(f"- {r}" for r in plan.reasons) + "\n")
    point = _config_point(plan)
    if point is not None:
        parts.append(_breakdown(point, "Cost breakdown of the chosen configuration" if plan.chosen is not None
                                else "Cost breakdown of the closest configuration (it does not meet the SLO)"))
    if config_written:
        what = "the chosen configuration" if plan.chosen is not None else "the closest configuration (not meeting the SLO)"
        parts.append(f"`config.json` holds {what}; replay it as it is with "
                     "`kvmm simulate --config config.json`.\n")
    parts.append("## Frontier\n")
    parts.append("The cost-vs-estimated-latency Pareto frontier, cheapest first (est: the analytic estimate; "
                 "sim: the simulator, for the verified points).\n")
    parts.append(_frontier_table(plan))
    off = [p for p in plan.verified if not _on_frontier(p)]
    if off:
        parts.append(f"{len(off)} simulated point(s) off the frontier (dominated by the estimate, simulated because "
                     "the frontier has too few estimated to meet the SLO) are not in this table; see \"on frontier\" "
                     "under Estimate vs simulation.\n")
    if figure:
        parts.append("![frontier](frontier.png)\n")
    else:
        parts.append("(frontier.png not drawn: matplotlib is not installed; pip install 'kvmm[plot]')\n")
    parts.append("## Estimate vs simulation\n")
    errors = plan.errors()
    if errors:
        parts.append(_errors_table(errors, _tier_columns(_points(plan)), [_on_frontier(p) for p in plan.verified]))
    else:
        parts.append("No point was simulated.\n")
    return "\n".join(parts)


def draw_frontier(plan: Any, path, *, ax=None) -> Path | None:
    """Draw the frontier figure into ``path`` (or onto ``ax`` and return ``None``); ``None``
    without matplotlib.  Runtime complexity: O(frontier + verified points)."""
    try:  # the optional plot extra
        import matplotlib

        if ax is None:
            matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=110)
    frontier = sorted(plan.frontier, key=lambda p: p.est_ttft_p95_s)
    ax.plot([p.est_ttft_p95_s for p in frontier], [p.usd_per_hour for p in frontier], "o-", mfc="none",
            color="tab:blue", label="frontier (estimated)")
    verified = [p for p in plan.verified if p.sim_ttft_p95_s is not None]
    for p in verified:
        ax.annotate("", xy=(p.sim_ttft_p95_s, p.usd_per_hour), xytext=(p.est_ttft_p95_s, p.usd_per_hour),
                    arrowprops=dict(arrowstyle="->", color="0.6", lw=0.8))
    on = [p for p in verified if _on_frontier(p)]
    off = [p for p in verified if not _on_frontier(p)]
    if on:
        ax.plot([p.sim_ttft_p95_s for p in on], [p.usd_per_hour for p in on], "s", color="tab:orange",
                label="simulated")
    if off:  # dominated by the estimate: its estimate is not on the frontier line, so drawn too
        ax.plot([p.est_ttft_p95_s for p in off], [p.usd_per_hour for p in off], "D", mfc="none", color="0.5",
                label="off the frontier (estimated)")
        ax.plot([p.sim_ttft_p95_s for p in off], [p.usd_per_hour for p in off], "D", color="tab:purple",
                label="off the frontier (simulated)")
    if plan.chosen is not None:
        c = plan.chosen
        ax.plot([_ttft(c)], [c.usd_per_hour], "o", ms=13, mfc="none", mec="tab:green", mew=2, label="chosen")
    elif plan.closest is not None:
        c = plan.closest
        ax.plot([_ttft(c)], [c.usd_per_hour], "o", ms=13, mfc="none", mec="tab:red", mew=2, label="closest (misses SLO)")
    ax.axvline(plan.slo.ttft_p95_s, color="tab:red", ls="--", lw=1, label=f"SLO p95 TTFT {_seconds(plan.slo.ttft_p95_s)}")
    ax.set_xlabel("p95 TTFT (s)")
    ax.set_ylabel("USD per hour")
    ax.set_title("kvmm plan: cost vs p95 TTFT")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    if fig is None:
        return None
    path = Path(path)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------- helpers


def _config_point(plan: Any):
    """The point whose config is written: the chosen one, else the closest verified one."""
    return plan.chosen if plan.chosen is not None else plan.closest


def _ttft(point: Any) -> float:
    """A point's simulated p95 TTFT where verified, else its estimate."""
    return point.sim_ttft_p95_s if point.sim_ttft_p95_s is not None else point.est_ttft_p95_s


def _usd_per_m(point: Any) -> float:
    return point.sim_usd_per_m_tokens if point.sim_usd_per_m_tokens is not None else point.usd_per_m_tokens


def _points(plan: Any) -> list:
    return [p for p in (plan.chosen, plan.closest, *plan.frontier, *plan.verified) if p is not None]


def _tier_columns(points: Sequence[Any]) -> list[tuple[str, str]]:
    """``(name, suffix)`` per candidate tier, in the points' capacity order: the candidates' kinds
    (suffix ``/instance`` for a private tier, `` shared`` for a shared one) when the points carry
    them, else the non-GPU names of ``tier_gib``."""
    for p in points:
        if getattr(p, "candidates", ()):
            return [(c.kind, " shared" if c.shared else "/instance") for c in p.candidates]
    for p in points:
        names = [n for n in p.tier_gib if n != "gpu"]
        if len(names) == len(p.capacities):
            return [(n, "") for n in names]
        return [(f"tier {i + 1}", "") for i in range(len(p.capacities))]
    return []


def _breakdown(point: Any, title: str) -> str:
    names = list(point.tier_usd_per_hour) + [n for n in point.tier_gib if n not in point.tier_usd_per_hour]
    rows = [(name, "" if name not in point.tier_gib else round(point.tier_gib[name], 1),
             round(point.tier_usd_per_hour.get(name, 0.0), 4)) for name in names]
    rows.append(("total", "", round(point.usd_per_hour, 4)))
    head = (f"### {title}\n\n{point_label(point)}: {_usd(point.usd_per_hour)} per hour, "
            f"{_usd(point.usd_per_m_tokens)} per million tokens estimated"
            + (f", {_usd(point.sim_usd_per_m_tokens)} simulated" if point.sim_usd_per_m_tokens is not None else "")
            + ".\n\n")
    return head + format_table(["tier", "GiB provisioned", "USD per hour"], rows)


def _frontier_table(plan: Any) -> str:
    columns = _tier_columns(_points(plan))
    chosen = plan.chosen
    rows = []
    for i, p in enumerate(plan.frontier):
        mark = "chosen" if chosen is not None and _same(p, chosen) else \
            ("closest" if plan.closest is not None and _same(p, plan.closest) else "")
        rows.append((i + 1, *[_gib_text(c / GIB) for c in p.capacities],
                     " / ".join(f"{h:.3f}" for h in p.hit_ratio), round(p.est_ttft_p95_s, 3),
                     _opt(p.sim_ttft_p95_s), round(p.usd_per_hour, 3), round(p.usd_per_m_tokens, 4),
                     _yes(p.meets_slo_est), _yes(p.meets_slo_sim), mark))
    if not rows:
        return "The frontier is empty (no capacity combination within the budget).\n"
    return format_table(["#", *[n + suffix for n, suffix in columns], "hit ratio per tier", "est p95 TTFT s",
                         "sim p95 TTFT s", "USD / h", "USD / M tok", "meets SLO (est)", "meets SLO (sim)", ""], rows)


def _errors_table(errors: Sequence[dict], columns: Sequence[tuple[str, str]], on_frontier: Sequence[bool]) -> str:
    rows = []
    for e, on in zip(errors, on_frontier):
        rel = e.get("rel_error")
        rows.append((*[_gib_text(c / GIB) for c in e["capacities"]], "yes" if on else "no",
                     round(float(e["est_ttft_p95_s"]), 3), _opt(e.get("sim_ttft_p95_s")), _percent(rel)))
    return format_table([*[n + suffix for n, suffix in columns], "on frontier", "est p95 TTFT s", "sim p95 TTFT s",
                         "error (est - sim) / sim"], rows)


def _on_frontier(point: Any) -> bool:
    """Is this (verified) point on the frontier?  ``PlanPoint.on_frontier``; True when absent."""
    return bool(getattr(point, "on_frontier", True))


def _percent(value) -> str:
    if value is None:
        return ""
    return f"{100 * value:+.1f} %" if math.isfinite(value) else str(value)


def _same(a: Any, b: Any) -> bool:
    return a is b or tuple(a.capacities) == tuple(b.capacities)


def _opt(value) -> object:
    return "" if value is None else round(float(value), 3)


def _yes(flag) -> str:
    return "" if flag is None else ("yes" if flag else "no")


def _gib_text(gib: float) -> str:
    if gib == 0:
        return "0"
    return f"{plain_number(gib / 1024)} TiB" if gib >= 1024 else f"{plain_number(gib)} GiB"


def _seconds(value: float, bound: float | None = None) -> str:
    """``value`` seconds in ms or s; beside a ``bound`` (the SLO) with as many digits as it takes
    never to read as on the other side of it (7.0004 s beside 7 s)."""
    scale, unit = (1000.0, "ms") if value < 1.0 else (1.0, "s")
    text = plain_number(value * scale)
    if bound is not None and math.isfinite(value):
        try:
            shown = float(text.replace(",", ""))
        except ValueError:
            shown = value * scale
        if (shown <= bound * scale) != (value <= bound) or (shown == bound * scale and value != bound):
            text = seconds_text(value * scale, bound * scale)
    return f"{text} {unit}"


def _usd(value: float) -> str:
    return f"${plain_number(value)}"


def _slo_text(slo: Any) -> str:
    text = f"p95 TTFT <= {_seconds(slo.ttft_p95_s)}"
    return text + (f", p95 TPOT <= {_seconds(slo.tpot_p95_s)}" if slo.tpot_p95_s is not None else "")


def _timings_text(plan: Any) -> str:
    t = plan.timings_s or {}
    return ", ".join(f"{stage} {t[stage]:.2f} s" for stage in t) + "." if t else ""


def seconds_text(x: float, bound: float | None = None) -> str:
    """``x`` seconds to 3 significant digits, more when that would round it onto ``bound`` or
    past it (7.005 s beside a 7 s SLO reads 7.005, never 7; 11.952 s beside 12 s reads 11.95).
    O(1)."""
    text = f"{x:.3g}"
    if bound is None or not math.isfinite(x):
        return text
    for digits in range(3, 18):
        text = f"{x:.{digits}g}"
        shown = float(text)
        if (shown <= bound) == (x <= bound) and (shown != bound or x == bound):
            return text
    return repr(float(x))
