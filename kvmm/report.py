"""The report that ``kvmm reproduce`` prints and writes, and the tables and numbers of every
file kvmm writes (``kvmm plan``'s plan.md, ``kvmm simulate``'s table).

Each section of :mod:`kvmm.reproduce` (listed in :data:`kvmm.reproduce.SECTIONS`) fills one
:class:`Report` through :meth:`Report.table`, :meth:`Report.text` and :meth:`Report.figure`.

Everything printed also goes into a Markdown file in ``<out>``: ``report.md`` for a full run;
a partial run writes its own file so it never overwrites the full report: ``report-quick.md``
(``--quick``), ``report-only-<sections>.md`` (``--only``), ``report-quick-only-<sections>.md``.
Every report starts with its metadata: kvmm version, git commit (when run from a checkout),
date, command-line flags, and whether it is full, partial or quick.  Figures are PNGs beside
it (written only when matplotlib is installed: the ``plot`` extra), named ``<name>.png`` for the
full report and ``<report stem>-<name>.png`` otherwise; PNGs the previous file of the same report
linked and this run did not draw are removed when it is written (no other file is touched).
Plots use plain tick labels (no axis offsets).

This module sits above the simulator and below plan and reproduce (docs/architecture.md): it
imports only kvmm's foundation, so ``kvmm --help`` stays light.
"""

from __future__ import annotations

import datetime
import importlib
import math
import numbers
import re
import sys
import textwrap
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import kvmm
from kvmm._git import checkout_commit
from kvmm._progress import Progress

__all__ = ["Report", "format_table", "plain_number", "spread", "mean_pm"]

#: names that moved to :mod:`kvmm.reproduce` (the registry of sections lives with the sections);
#: still reachable here for one release, with a DeprecationWarning
MOVED = ("SECTIONS", "TRACE_SECTION", "run_sections")


def __getattr__(name: str) -> object:
    if name in MOVED:
        warnings.warn(f"kvmm.report.{name} moved to kvmm.reproduce.{name}; this alias goes in the next release",
                      DeprecationWarning, stacklevel=2)
        # by name: kvmm.reproduce sits above this module (docs/architecture.md)
        return getattr(importlib.import_module("kvmm.reproduce"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass
class Report:
    """Collects tables, text and figures; prints as it goes; :meth:`write` saves Markdown."""

    out: Path
    quick: bool = False
    progress_enabled: bool = True
    stream: object = field(default_factory=lambda: sys.stdout)
    chunks: list[str] = field(default_factory=list)
    figures: list[Path] = field(default_factory=list)
    #: sections requested with ``--only`` (``None``: all), and the command-line flags, for the metadata
    only: Sequence[str] | None = None
    flags: Sequence[str] = ()
    #: ``kvmm reproduce --trace PATH [--format FMT]``: the trace the TRACE_SECTION replays (None: bundled)
    trace: str | None = None
    trace_format: str | None = None
    #: sections that ran (set by :func:`run_sections`)
    sections: list[str] = field(default_factory=list)

    @property
    def stem(self) -> str:
        """File stem of this report: ``report`` (full run), ``report-quick``, ``report-only-a+b``, ..."""
        parts = ["report"] + (["quick"] if self.quick else []) + (["only", "+".join(sorted(self.only))] if self.only else [])
        return "-".join(parts)

    @property
    def kind(self) -> str:
        """``full``, or what makes the run partial / quick."""
        tags = (["quick (smaller workloads)"] if self.quick else []) + \
            ([f"partial (only {', '.join(self.only)})"] if self.only else [])
        return ", ".join(tags) or "full"

    def heading(self, title: str) -> None:
        self.chunks.append(f"## {title}\n")
        print(f"\n== {title} ==", file=self.stream)

    def text(self, markdown: str) -> None:
        self.chunks.append(markdown.rstrip() + "\n")
        print(markdown.rstrip(), file=self.stream)

    def table(self, title: str, headers: Sequence[str], rows: Sequence[Sequence[object]], note: str = "") -> None:
        """Print an aligned table and add it to the Markdown report."""
        md = f"### {title}\n\n" + format_table(headers, rows) + ("\n" + note.rstrip() + "\n" if note else "")
        self.chunks.append(md)
        print(f"\n{title}", file=self.stream)
        print(_format_plain(headers, rows), file=self.stream)
        if note:
            print(note.rstrip(), file=self.stream)

    def figure(self, name: str, draw: Callable[[object], None], *, size: tuple[float, float] = (6.4, 4.2),
               ncols: int = 1) -> Path | None:
        """Call ``draw(ax)`` on a fresh matplotlib axes (``draw(axes)``, a row of ``ncols`` of them,
        when ``ncols > 1``) of a ``size``-inch figure and save ``<out>/<name>.png``; titles are
        wrapped to their axes' width and the layout tightened (:func:`fit_titles`).

        Returns the path, or ``None`` (and says so) when matplotlib is not installed.
        """
        try:  # the optional plot extra
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print(f"(matplotlib not installed: skipping {name}.png; pip install 'kvmm[plot]')", file=self.stream)
            return None
        self.out.mkdir(parents=True, exist_ok=True)
        with matplotlib.rc_context({"axes.formatter.useoffset": False}):  # plain tick labels, no "+1e3"
            fig, ax = plt.subplots(1, ncols, figsize=size, dpi=110, squeeze=True)
            draw(ax)
            fit_titles(fig)
        path = self.out / self._figure_file(name)
        fig.savefig(path)
        plt.close(fig)
        self.figures.append(path)
        self.chunks.append(f"![{name}]({path.name})\n")
        return path

    def _figure_file(self, name: str) -> str:
        return f"{name}.png" if self.stem == "report" else f"{self.stem}-{name}.png"

    def progress(self, total: int, desc: str) -> Progress:
        return Progress(total, desc, enabled=self.progress_enabled)

    def metadata(self) -> str:
        """The Markdown block every report starts with."""
        rows = [("kvmm version", kvmm.__version__), ("git commit", git_commit() or "none (not run from a checkout)"),
                ("date", datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")),
                ("command", " ".join(["kvmm reproduce", *self.flags])), ("run", self.kind),
                ("sections", ", ".join(self.sections) or "none")]
        return format_table(["", ""], rows)

    def write(self) -> Path:
        """Write ``<out>/<stem>.md`` (metadata first) and remove this report's stale PNGs."""
        self.out.mkdir(parents=True, exist_ok=True)
        path = self.out / f"{self.stem}.md"
        # Stale PNGs are those the previous report of this stem linked and this run did not
        # write: other PNGs in --out (the user's own, other reports') are never touched.
        previous = set(_FIGURE_LINK.findall(path.read_text(encoding="utf-8"))) if path.is_file() else set()
        path.write_text("# kvmm reproduce\n\n" + self.metadata() + "\n" + "\n".join(self.chunks), encoding="utf-8")
        for name in previous - {p.name for p in self.figures}:
            (self.out / name).unlink(missing_ok=True)
        return path


def fit_titles(fig, *, fontsize: float = 10.0) -> None:
    """Wrap every axes title of ``fig`` onto as many lines as its axes' width needs, then
    ``tight_layout`` (which makes room for the lines): a long title is never cut off at the
    figure's edge.  Runtime complexity: O(title length) per axes."""
    for ax in fig.axes:
        title = ax.get_title()
        if not title:
            continue
        # characters of a ``fontsize``-point title that fit the axes' width (about 0.55 em each)
        width_pt = ax.get_position().width * fig.get_figwidth() * 72.0
        chars = max(int(width_pt / (0.55 * fontsize)), 16)
        ax.set_title(textwrap.fill(" ".join(title.split()), chars), fontsize=fontsize)
    fig.tight_layout()


#: a figure link of a report (``![name](file.png)``), capturing a plain file name in ``out``
_FIGURE_LINK = re.compile(r"!\[[^\]]*\]\(([^()/\\]+\.png)\)")


def git_commit() -> str | None:
    """``HEAD`` of the checkout kvmm is imported from (``+dirty`` with uncommitted changes); for an
    installed (non-editable) copy, the commit it was built from (``kvmm/_build_info.py``, written
    by ``setup.py``); else ``None``."""
    commit = checkout_commit(Path(__file__).resolve().parent.parent)
    if commit is not None:
        return commit
    try:  # written by setup.py into a built (non-editable) copy only: absent in a checkout
        from kvmm._build_info import GIT_COMMIT
    except ImportError:
        return None
    return GIT_COMMIT


def spread(values: Sequence[float]) -> tuple[float, float]:
    """``(mean, std)`` of repeated measurements: the run-to-run spread every reproduction reports,
    with the sample standard deviation (``ddof=1``; 0 for a single value)."""
    import numpy as np  # on first use: `kvmm --help` imports this module, and numpy costs ~0.15 s

    arr = np.asarray(values, dtype=np.float64).ravel()
    return float(arr.mean()), float(arr.std(ddof=1)) if arr.size > 1 else 0.0


def mean_pm(values: Sequence[float], fmt: str = ".3f", *, scale: float = 1.0, unit: str = "") -> str:
    """``"mean<unit> ± std"`` of :func:`spread` (each times ``scale``), e.g. ``1.23x ± 0.05``."""
    mean, std = spread(values)
    return f"{scale * mean:{fmt}}{unit} ± {scale * std:{fmt}}"


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Markdown table; floats shown by :func:`plain_number` (4 significant digits, never
    scientific notation), integers with thousands separators."""
    cells = [[_cell(v) for v in row] for row in rows]
    lines = ["| " + " | ".join(str(h) for h in headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in cells]
    return "\n".join(lines) + "\n"


def _format_plain(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers]] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    out = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)


def _cell(v: object) -> str:
    if isinstance(v, float):
        return plain_number(v)
    if isinstance(v, numbers.Integral) and not isinstance(v, bool):
        return f"{int(v):,}"  # 15,355,484 like the floats' whole numbers
    return str(v)


def plain_number(value: float, digits: int = 4) -> str:
    """A float in fixed-point notation, never scientific: ``digits`` significant digits below
    1,000 with trailing zeros dropped (``0.5``, ``0.1234``, ``0.0003``, ``12.35``), whole numbers
    with thousands separators from 1,000 up (``14,540``), ``nan`` / ``inf`` / ``-inf`` as such.

    What every table cell and every number in a sentence of the report goes through, so that
    none reads ``1.454e+04`` or ``3.000e-04``.  Runtime complexity: O(1).
    """
    v = float(value)
    if v != v:
        return "nan"
    if v in (float("inf"), float("-inf")):
        return "inf" if v > 0 else "-inf"
    if abs(v) >= 999.5:
        return f"{v:,.0f}"
    if v == 0.0:
        return "0"
    decimals = max(digits - 1 - math.floor(math.log10(abs(v))), 0)
    text = f"{v:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text
