"""The ``kvmm`` command: one module per subcommand.

* :mod:`kvmm.cli.reproduce`: every paper reproduction on the bundled data (the sections of
  :data:`kvmm.reproduce.SECTIONS`), written to ``<out>/report.md`` plus PNGs;
* :mod:`kvmm.cli.mrc`: the miss-ratio curve and working set of a trace;
* :mod:`kvmm.cli.simulate`: a trace replayed through the serving simulator;
* :mod:`kvmm.cli.calibrate`: TriAttention calibration of a local transformers model;
* :mod:`kvmm.cli.plan`: the cheapest KV hierarchy meeting an SLO.

Each provides ``add_arguments(parser)`` and ``run(args) -> int`` and is registered in
:data:`COMMANDS`.  :func:`main` imports only the module of the command it runs (by name), so
``kvmm --help`` loads no subcommand and ``kvmm simulate ...`` loads only what simulating needs.
The CLI is the top layer (docs/architecture.md): nothing in the library imports it.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from types import ModuleType

from kvmm.errors import KvmmError

__all__ = ["main", "COMMANDS", "command_module"]

#: subcommand -> one-line help, in the order ``kvmm --help`` lists them; the code of ``NAME`` is
#: the module ``kvmm.cli.NAME``
COMMANDS: dict[str, str] = {
    "reproduce": "run every paper reproduction on the bundled data and write a report",
    "mrc": "miss-ratio curve and working set of a trace",
    "simulate": "replay a trace through the serving simulator",
    "calibrate": "TriAttention calibration of a local transformers model",
    "plan": "the cheapest KV hierarchy meeting a p95 TTFT SLO (analytic frontier, then simulated)",
}


def command_module(name: str) -> ModuleType:
    """The module of subcommand ``name`` (``kvmm.cli.<name>``), imported on first use: the
    subcommands import numpy, the simulator or torch, which ``kvmm --help`` must not load."""
    if name not in COMMANDS:
        raise KeyError(f"no kvmm subcommand {name!r}; expected one of {list(COMMANDS)}")
    return importlib.import_module(f"{__name__}.{name}")


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
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = OneLineParser(prog="kvmm", description="kvmm: fast, verified KV-cache data structures")
    sub = parser.add_subparsers(dest="command", required=True)
    chosen = argv[0] if argv and argv[0] in COMMANDS else None
    for name, help_text in COMMANDS.items():
        command = sub.add_parser(name, help=help_text)
        if name == chosen:  # only the command that runs gets its flags (argparse parses no other)
            command_module(name).add_arguments(command)
    try:
        args = parser.parse_args(_dash_values_attached(argv, sub.choices))
    except FlagError as exc:
        print(f"{exc.prog}: error: {exc}", file=sys.stderr)
        return 2
    args.argv = argv[1:]  # the subcommand's own flags, quoted back in what it writes (kvmm plan's plan.md)
    try:
        return int(command_module(args.command).run(args) or 0)
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
