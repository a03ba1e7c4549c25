"""CLI: the Inspect side of `estimate` and `compare` (`--inspect-log`), kept here so the two
commands gain one option group and one branch each (docs/inspect.md)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from guardeval.terminal import safe

if TYPE_CHECKING:     # the parser is built from the standard library only
    from guardeval.estimators.types import Report

TABLE_FILE = "inspect-decisions.jsonl"   # written beside the reports: `estimate --table` reads it back


def options(p: argparse.ArgumentParser, what: str) -> None:
    """--inspect-log (with --inspect-parser / --inspect-score) for `estimate` or `compare`."""
    if what == "estimate":
        p.add_argument("--inspect-log", nargs="+", metavar="LOG",
                       help="Inspect log(s) of one guard run as an Inspect task over a guardeval cohort, estimated "
                            "instead of a run (needs the 'inspect' extra; docs/inspect.md)")
    else:
        p.add_argument("--inspect-log", action="append", default=[], metavar="LOG",
                       help="an Inspect log of a guard run on the same cohort (repeatable; one input each, after "
                            "the runs and tables; needs the 'inspect' extra)")
    p.add_argument("--inspect-parser", metavar="NAME",
                   help="with --inspect-log: the strict parser for the answers, for a task that does not name one in "
                        "its samples' metadata (guardeval_parser)")
    p.add_argument("--inspect-score", metavar="NAME",
                   help="with --inspect-log: take the decision from this score (1 block, 0 allow, N no answer) "
                        "instead of parsing the answer")
    max_unpacked_option(p, "with --inspect-log: ")


def max_unpacked_option(p: argparse.ArgumentParser, prefix: str = "") -> None:
    """--inspect-max-unpacked: guardeval's cap on what a .eval log unpacks to, raised for a log one trusts."""
    p.add_argument("--inspect-max-unpacked", type=int, metavar="MIB",
                   help=prefix + "what a .eval log may unpack to in memory, all members together, in MiB (default: 256, "
                        "at most 4096); reading takes about 15 times that in memory (docs/inspect.md)")


def check(args: argparse.Namespace) -> None:
    """--inspect-parser and --inspect-score say how to read --inspect-log: alone they are a mistake."""
    from guardeval.errors import InputError

    for given, name in ((args.inspect_parser, "--inspect-parser"), (args.inspect_score, "--inspect-score"),
                        (args.inspect_max_unpacked, "--inspect-max-unpacked")):
        if given is not None and not args.inspect_log:
            raise InputError(f"{name} goes with --inspect-log", field=name)


def estimate_logs(args: argparse.Namespace, common: Mapping[str, Any]) -> Report:
    """The report of `estimate --inspect-log LOG…` (and its files, with --out)."""
    from guardeval.estimators import estimate
    from guardeval.estimators.inspect_decisions import decision_table
    from guardeval.estimators.report.report import write_reports
    from guardeval.run.folder.folder import write_into

    out = Path(args.out) if args.out else None
    table = decision_table(args.inspect_log, parser=args.inspect_parser, score=args.inspect_score,
                           max_unpacked=_cap(args))
    report = estimate(table.rows, baseline=args.baseline or table.baseline or "original", roles=table.roles,
                      n_scheduled=table.n_scheduled, complete=table.complete, **common)
    report["source"] = table.source
    if out is not None:
        written = write_reports(report, out, title=f"guardeval · {table.model} · Inspect log")
        data = table.table_bytes()
        written.append(write_into(out, TABLE_FILE, lambda fh: fh.write(data)))
        print(safe("wrote " + ", ".join(str(p) for p in written)), file=sys.stderr)
    return report


def _cap(args: argparse.Namespace) -> int | None:
    from guardeval.inspect_logs import unpacked_cap

    return unpacked_cap(args.inspect_max_unpacked)


def compare_inputs(args: argparse.Namespace) -> list[Any]:
    """One `compare` input per --inspect-log, labelled by the guard model the log names."""
    from guardeval.estimators.compare.compare import CompareInput
    from guardeval.estimators.inspect_decisions import decision_table

    inputs = []
    for log in args.inspect_log:
        t = decision_table([log], parser=args.inspect_parser, score=args.inspect_score, max_unpacked=_cap(args))
        inputs.append(CompareInput(t.model or Path(log).name, t.rows, t.roles or {}, t.baseline, t.placebo,
                                   t.complete, t.source))
    return inputs
