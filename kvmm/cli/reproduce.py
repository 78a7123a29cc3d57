"""``kvmm reproduce``: every registered report section (:data:`kvmm.reproduce.SECTIONS`) on the
bundled data, written to ``<out>/report.md`` plus PNGs (``--quick`` / ``--only`` runs write their
own ``report-quick*.md`` / ``report-only-*.md``; :class:`kvmm.report.Report`)."""

from __future__ import annotations

import argparse
from pathlib import Path

import kvmm.reproduce
from kvmm.cli._out_folder import check_out_folder
from kvmm.errors import BadInputError
from kvmm.report import Report

DEFAULT_OUT = Path("kvmm-report")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default ./kvmm-report)")
    parser.add_argument("--only", action="append", default=None, metavar="SECTION",
                        help="run only this section (repeatable); default: all. Writes report-only-<sections>.md")
    parser.add_argument("--quick", action="store_true",
                        help="smaller workloads (for smoke tests); writes report-quick*.md, not report.md")
    parser.add_argument("--no-progress", action="store_true", help="do not draw progress bars")
    parser.add_argument("--trace", default=None, metavar="PATH",
                        help="replay this trace (any format kvmm reads) in the allocator section instead of the "
                             "bundled ones")
    parser.add_argument("--format", default=None, metavar="FMT",
                        help="format of --trace: mooncake, bailian, lmcache, vllm, oracle (default: detected)")


def run(args: argparse.Namespace) -> int:
    trace_section = kvmm.reproduce.TRACE_SECTION
    flags = (["--quick"] if args.quick else []) + [f"--only {name}" for name in args.only or []] + \
        ([f"--trace {args.trace}"] if args.trace else []) + ([f"--format {args.format}"] if args.format else []) + \
        ([f"--out {args.out}"] if args.out != DEFAULT_OUT else []) + (["--no-progress"] if args.no_progress else [])
    if args.format is not None and args.trace is None:
        raise BadInputError("--format names the format of --trace; give --trace PATH too")
    if args.trace is not None and args.only and trace_section not in args.only:
        raise BadInputError(f"--trace is replayed by the {trace_section} section only; add --only {trace_section}")
    check_out_folder(args.out)  # before the (long) run, not a traceback when the report is written
    report = Report(out=args.out, quick=args.quick, progress_enabled=not args.no_progress, only=args.only, flags=flags,
                    trace=args.trace, trace_format=args.format)
    ran = kvmm.reproduce.run_sections(report, only=args.only)
    path = report.write()
    print(f"\nsections run: {', '.join(ran) if ran else 'none'}; report written to {path}")
    return 0
