"""The ``kvmm`` command.

``kvmm reproduce`` is the main job: it runs every registered report section (see
:data:`kvmm.report.SECTIONS`) on the bundled data and writes ``<out>/report.md`` plus PNGs
(``--quick`` / ``--only`` runs write their own ``report-quick*.md`` / ``report-only-*.md``).
Other subcommands (``mrc``, ``simulate``, ``calibrate``, ``plan``) live in their component's ``_cli``
module, registered in :data:`COMMANDS`, which provides ``add_arguments(parser)`` and
``run(args) -> int``; those modules import their heavy parts inside ``run`` so ``kvmm --help``
stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import Sequence

#: subcommand -> (module path, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "mrc": ("kvmm.policies._cli", "miss-ratio curve and working set of a trace"),
    "simulate": ("kvmm.sim._cli", "replay a trace through the serving simulator"),
    "calibrate": ("kvmm.compress._cli", "TriAttention calibration of a local transformers model"),
    "plan": ("kvmm.plan._cli", "the cheapest KV hierarchy meeting a p95 TTFT SLO (analytic frontier, then simulated)"),
}


class FlagError(Exception):
    """A flag argparse refuses (a missing value, ``--instances 2.5``), raised by :class:`OneLineParser`."""

    def __init__(self, prog: str, message: str) -> None:
        super().__init__(message)
        self.prog = prog


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line naming the flag (``main`` prints it, exit code 2),
    like every other bad-input error of the CLI, not the whole usage text."""

    def error(self, message: str):  # noqa: D102 - argparse's hook
        raise FlagError(self.prog, f"{message} (see {self.prog} --help)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(prog="kvmm", description="kvmm: fast, verified KV-cache data structures")
    sub = parser.add_subparsers(dest="command", required=True)

    rep = sub.add_parser("reproduce", help="run every paper reproduction on the bundled data and write a report")
    rep.add_argument("--out", type=Path, default=Path("kvmm-report"), help="output folder (default ./kvmm-report)")
    rep.add_argument("--only", action="append", default=None, metavar="SECTION",
                     help="run only this section (repeatable); default: all. Writes report-only-<sections>.md")
    rep.add_argument("--quick", action="store_true",
                     help="smaller workloads (for smoke tests); writes report-quick*.md, not report.md")
    rep.add_argument("--no-progress", action="store_true", help="do not draw progress bars")
    rep.add_argument("--trace", default=None, metavar="PATH",
                     help="replay this trace (any format kvmm reads) in the allocator section instead of the bundled ones")
    rep.add_argument("--format", default=None, metavar="FMT",
                     help="format of --trace: mooncake, bailian, lmcache, vllm, oracle (default: detected)")

    handlers = {}
    for name, (module_path, help_text) in COMMANDS.items():
        module = importlib.import_module(module_path)
        p = sub.add_parser(name, help=help_text)
        module.add_arguments(p)
        handlers[name] = module.run

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(_dash_values_attached(argv, sub.choices))
    except FlagError as exc:
        print(f"{exc.prog}: error: {exc}", file=sys.stderr)
        return 2
    args.argv = argv[1:]  # the subcommand's own flags, quoted back in what it writes (kvmm plan's plan.md)
    from kvmm.errors import KvmmError

    try:
        if args.command == "reproduce":
            return _reproduce(args)
        return int(handlers[args.command](args) or 0)
    except KvmmError as exc:
        print(f"kvmm {args.command}: error: {exc}", file=sys.stderr)
        return 2


def _dash_values_attached(argv: list[str], commands: dict) -> list[str]:
    """``--flag -2s`` as ``--flag=-2s`` for a flag that takes one value: argparse reads a value
    that starts with ``-`` (other than a plain negative number) as another flag and says the
    first one lacks its value; this way the flag's own check names what is wrong with it.  A
    following token that is itself a flag of the command stays a flag."""
    command = commands.get(argv[0]) if argv else None
    if command is None:
        return argv
    flags = command._option_string_actions
    out = [argv[0]]
    i = 1
    while i < len(argv):
        token = argv[i]
        action = flags.get(token)
        if (action is not None and action.nargs is None and i + 1 < len(argv) and argv[i + 1].startswith("-")
                and argv[i + 1].split("=")[0] not in flags):
            out.append(f"{token}={argv[i + 1]}")
            i += 2
            continue
        out.append(token)
        i += 1
    return out


def _reproduce(args: argparse.Namespace) -> int:
    from kvmm.errors import BadInputError
    from kvmm.report import TRACE_SECTION, Report, run_sections

    flags = (["--quick"] if args.quick else []) + [f"--only {name}" for name in args.only or []] + \
        ([f"--trace {args.trace}"] if args.trace else []) + ([f"--format {args.format}"] if args.format else []) + \
        ([f"--out {args.out}"] if args.out != Path("kvmm-report") else []) + (["--no-progress"] if args.no_progress else [])
    if args.format is not None and args.trace is None:
        raise BadInputError("--format names the format of --trace; give --trace PATH too")
    if args.trace is not None and args.only and TRACE_SECTION not in args.only:
        raise BadInputError(f"--trace is replayed by the {TRACE_SECTION} section only; add --only {TRACE_SECTION}")
    _check_out_folder(args.out)  # before the (long) run, not a traceback when the report is written
    report = Report(out=args.out, quick=args.quick, progress_enabled=not args.no_progress, only=args.only, flags=flags,
                    trace=args.trace, trace_format=args.format)
    ran = run_sections(report, only=args.only)
    path = report.write()
    print(f"\nsections run: {', '.join(ran) if ran else 'none'}; report written to {path}")
    return 0


def _check_out_folder(out: Path) -> None:
    """``--out`` must be a folder kvmm can create and write files in."""
    import tempfile

    from kvmm.errors import BadInputError

    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise BadInputError(f"--out {str(out)!r}: cannot create or write files in this folder ({reason}); "
                            f"expected a writable folder") from None


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
