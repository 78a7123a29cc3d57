"""The report that ``kvmm reproduce`` prints and writes.

Each component contributes one *section*: a module with a function
``reproduce(report: Report) -> None`` that runs its experiment and calls :meth:`Report.table`,
:meth:`Report.text` and :meth:`Report.figure`.  Sections are listed in :data:`SECTIONS`, so a
new component adds one line here and nothing else.

Everything printed also goes into ``<out>/report.md``; figures are PNGs beside it (written only
when matplotlib is installed: the ``plot`` extra).
"""

from __future__ import annotations

import importlib
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from kvmm._progress import Progress

__all__ = ["Report", "SECTIONS", "run_sections", "format_table"]

#: (section name, module path).  The module defines ``reproduce(report)``.
SECTIONS: list[tuple[str, str]] = [
    ("allocator", "kvmm.reproduce.prefix_cache"),
    ("vtoken", "kvmm.reproduce.vtoken"),
    ("working-set", "kvmm.reproduce.efficientagent"),
    ("tempokv", "kvmm.reproduce.tempokv"),
    ("pd", "kvmm.reproduce.pd"),
    ("triattention", "kvmm.reproduce.triattention"),
]


@dataclass
class Report:
    """Collects tables, text and figures; prints as it goes; :meth:`write` saves Markdown."""

    out: Path
    quick: bool = False
    progress_enabled: bool = True
    stream: object = field(default_factory=lambda: sys.stdout)
    chunks: list[str] = field(default_factory=list)
    figures: list[Path] = field(default_factory=list)

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

    def figure(self, name: str, draw: Callable[[object], None]) -> Path | None:
        """Call ``draw(ax)`` on a fresh matplotlib axes and save ``<out>/<name>.png``.

        Returns the path, or ``None`` (and says so) when matplotlib is not installed.
        """
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print(f"(matplotlib not installed: skipping {name}.png; pip install 'kvmm[plot]')", file=self.stream)
            return None
        self.out.mkdir(parents=True, exist_ok=True)
        fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=110)
        draw(ax)
        fig.tight_layout()
        path = self.out / f"{name}.png"
        fig.savefig(path)
        plt.close(fig)
        self.figures.append(path)
        self.chunks.append(f"![{name}]({name}.png)\n")
        return path

    def progress(self, total: int, desc: str) -> Progress:
        return Progress(total, desc, enabled=self.progress_enabled)

    def write(self) -> Path:
        self.out.mkdir(parents=True, exist_ok=True)
        path = self.out / "report.md"
        path.write_text("# kvmm reproduce\n\n" + "\n".join(self.chunks), encoding="utf-8")
        return path


def run_sections(report: Report, only: Sequence[str] | None = None) -> list[str]:
    """Run every registered section (or those named in ``only``); return the names that ran."""
    names = [n for n, _ in SECTIONS]
    if only:
        unknown = [n for n in only if n not in names]
        if unknown:
            from kvmm.errors import BadInputError

            raise BadInputError(f"unknown section(s) {unknown}; expected some of {names}")
    ran = []
    for name, module_path in SECTIONS:
        if only and name not in only:
            continue
        module = importlib.import_module(module_path)
        t0 = time.perf_counter()
        module.reproduce(report)
        print(f"({name}: {time.perf_counter() - t0:.1f}s)", file=report.stream)
        ran.append(name)
    return ran


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Markdown table; floats shown with 4 significant digits."""
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
        if v != v:
            return "nan"
        if abs(v) >= 1e5 or (0 < abs(v) < 1e-3):
            return f"{v:.3e}"
        return f"{v:.4g}"
    return str(v)
