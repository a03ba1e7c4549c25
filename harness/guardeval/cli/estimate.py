"""CLI: estimate (a run or a decision table) and compare (guards on one schedule: runs and tables)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from guardeval.cli import inspect_bridge
from guardeval.cli.args import bootstrap_n, name_list, row_limit_options, row_limits, say_verified, seed_value
from guardeval.errors import InputError
from guardeval.terminal import safe, safe_json

RULES = ("drop", "fail-closed", "fail-open")
MISSING_MODES = ("exclude", "as-failure")


def _stats_options(p: argparse.ArgumentParser, what: str) -> None:
    """The options `estimate` and `compare` share; `what` is "estimate" or "compare" (for the help)."""
    runs = "an incomplete run" if what == "estimate" else "incomplete runs"
    p.add_argument("--baseline", metavar="CONDITION",
                   help="baseline condition (default: the cohort's baseline, else original)")
    p.add_argument("--family", type=name_list, metavar="C1,C2,...",
                   help="Holm family (default: every non-baseline condition)")
    p.add_argument("--bootstrap", type=bootstrap_n, default=10000, metavar="N", help="bootstrap replicates")
    p.add_argument("--seed", type=seed_value, default=0, metavar="N", help="bootstrap seed, recorded in the result")
    p.add_argument("--failures", choices=RULES, default="drop", help="headline failure rule (all three are reported)")
    p.add_argument("--missing", choices=MISSING_MODES, default="exclude",
                   help="a scheduled call without a decision counts nowhere (exclude) or as a failed call under "
                        "each failure rule (as-failure); an incomplete run still needs --allow-partial")
    p.add_argument("--allow-partial", action="store_true", help=f"{what} {runs} anyway")
    p.add_argument("--allow-unpublishable", action="store_true",
                   help="exit 0 even when more than 2%% of a run's calls failed or were quarantined")
    p.add_argument("--margin", type=float, default=0.05, metavar="M",
                   help="equivalence margin, a proportion in (0, 1): a quantity is 'within ±M' when its equivalence "
                        "test (two one-sided tests), Holm-adjusted in its family, is below --alpha (default: 0.05)")
    p.add_argument("--alpha", type=float, default=0.05, metavar="A",
                   help="level of every verdict, star and 'yes', in (0, 0.5): Holm-adjusted p < A within the "
                        "family the output names (default: 0.05)")
    p.add_argument("--json", action="store_true",
                   help=f"print the {'report' if what == 'estimate' else 'comparison'} as JSON on stdout")


def _verify_options(p: argparse.ArgumentParser, what: str) -> None:
    runs = "the run" if what == "estimate" else "each run"
    p.add_argument("--no-verify", action="store_true",
                   help=f"{what} without first checking {runs} as `guardeval verify` does; the result says so")
    p.add_argument("--allow-skipped", action="store_true",
                   help=f"{what} even when that check had to skip a step (e.g. an old run without its prompt copy)")
    row_limit_options(p)


def register(sub: Any) -> None:
    p = sub.add_parser("estimate", help="paired effects with cluster-bootstrap intervals for a run or a table")
    p.add_argument("run", nargs="?", metavar="RUN", help="run folder (the one holding manifest.json)")
    p.add_argument("--table", metavar="FILE", help="a JSONL decision table to estimate instead of a run "
                                                   "(docs/estimators.md, Input table)")
    p.add_argument("--out", metavar="DIR", help="folder for report.json, report.md, effects.png (and a run's "
                                                "report.html) instead of the run folder: a run on a read-only "
                                                "mount is estimated so (default: the run folder; with --table or "
                                                "--inspect-log, none written)")
    p.add_argument("--placebo", metavar="CONDITION",
                   help="placebo condition (default: the condition whose role is placebo, else format_placebo)")
    inspect_bridge.options(p, "estimate")
    _stats_options(p, "estimate")
    _verify_options(p, "estimate")
    p.set_defaults(func=cmd_estimate)

    p = sub.add_parser("compare", help="guards on one schedule (runs or tables): paired differences of the "
                                       "placebo-corrected effect and of Δ, leaderboard, ranking stability")
    p.add_argument("runs", nargs="*", metavar="RUN", help="run folders of one schedule (replicates on other guards)")
    p.add_argument("--table", action="append", default=[], metavar="FILE",
                   help="a JSONL decision table of the same bases (repeatable; inputs are the runs, then the tables)")
    p.add_argument("--label", action="append", default=[], metavar="NAME",
                   help="a name per input, in input order (default: the guard that answered a run, e.g. the "
                        "simulator's profile, or its config's label; a table's file name; the model a log names)")
    p.add_argument("--out", metavar="DIR", help="folder for compare.md, compare.html, compare.png (default: "
                                                "compare-A-B beside the first run, never a run's folder; with fewer "
                                                "than two runs, none written)")
    p.add_argument("--placebo", metavar="CONDITION",
                   help="placebo condition (default: the condition whose role is placebo, else format_placebo)")
    p.add_argument("--full", action="store_true",
                   help="print everything in the terminal (both tables of every pair, rankings, leaderboards, "
                        "ranking stability); by default the answer and the headline tables, the rest in the files")
    p.add_argument("--fail-on", choices=["differs"], dest="fail_on",
                   help="exit 3 when any headline difference (B − A of Δ − placebo; of Δ without a placebo) differs "
                        "from 0 after Holm in its stated family; the JSON's gate.tripped lists those rows; exit 4 "
                        "when an input has more than 2%% failed and quarantined calls (the gate cannot vouch)")
    inspect_bridge.options(p, "compare")
    _stats_options(p, "compare")
    _verify_options(p, "compare")
    p.set_defaults(func=cmd_compare)


def _emit(obj: Mapping[str, Any], as_json: bool, text: str) -> None:
    from guardeval.estimators.report.report import dumps_json

    print(safe_json(dumps_json(obj)) if as_json else safe(text, newlines=True))


def cmd_estimate(args: argparse.Namespace) -> int:
    from guardeval.canon import file_sha256
    from guardeval.estimators import estimate, exit_status
    from guardeval.estimators.report.report import human_text, write_reports
    from guardeval.estimators.table import load_table
    from guardeval.estimators.verdicts.decisions import check_alpha
    from guardeval.estimators.verdicts.equivalence import check_margin

    inspect_bridge.check(args)
    if sum(x is not None for x in (args.run, args.table, args.inspect_log)) != 1:
        raise InputError("give one of: a run folder, --table FILE, --inspect-log LOG…")
    common = dict(placebo=args.placebo, family=args.family, n_boot=args.bootstrap, seed=args.seed,
                  failure_rule=args.failures, missing=args.missing, allow_partial=args.allow_partial,
                  allow_unpublishable=args.allow_unpublishable, margin=check_margin(args.margin),
                  alpha=check_alpha(args.alpha))
    if args.inspect_log is not None:
        report = inspect_bridge.estimate_logs(args, common)
    elif args.table is not None:
        path = Path(args.table)
        report = estimate(load_table(path, row_limits(args)), baseline=args.baseline or "original", source=path, **common)
        report["source"] = {"table": str(path), "sha256": file_sha256(path)}
        if args.out:
            written = write_reports(report, Path(args.out))
            print("wrote " + ", ".join(str(p) for p in written), file=sys.stderr)
    else:
        from guardeval import api

        report = api.estimate(args.run, baseline=args.baseline, write=True, verify=not args.no_verify,
                              allow_skipped=args.allow_skipped, row_limits=row_limits(args), out=args.out,
                              **common).report
        say_verified(args.run, {"checked": report["source"]["verified"],
                                 "skipped": report["source"]["verify_skipped"]})
        print(safe(f"wrote report.json, report.md, effects.png, report.html in {args.out or args.run}"), file=sys.stderr)
    for note in report["notes"]:
        print(safe(f"guardeval: note: {note}"), file=sys.stderr)
    _emit(report, args.json, human_text(report))
    if not report["complete"]:
        print("guardeval: warning: incomplete run, estimated with --allow-partial", file=sys.stderr)
    code = exit_status(report)
    if code:
        ex = report["excluded"]
        print(f"guardeval: not publishable: {ex['failed']} failed and {ex['quarantined']} quarantined calls "
              f"({ex['share']:.2%} > {ex['limit']:.0%}); rerun, or pass --allow-unpublishable", file=sys.stderr)
    return code


def _labels(inputs: list[Any], given: list[str]) -> None:
    """--label names the inputs in order; default labels that repeat get " (2)", " (3)", ..."""
    if given:
        if len(given) != len(inputs):
            raise InputError(f"{len(given)} --label for {len(inputs)} inputs: give one per input, in input order",
                             field="label")
        for inp, name in zip(inputs, given):
            if not name:
                raise InputError("a label must not be empty", field="label")
            inp.label = name
        return
    seen: dict[str, int] = {}
    for inp in inputs:
        seen[inp.label] = seen.get(inp.label, 0) + 1
        if seen[inp.label] > 1:
            inp.label = f"{inp.label} ({seen[inp.label]})"


def _the_rest(written: list[Path]) -> str:
    """Where the rest of a comparison is, under the terminal's answer and headline tables."""
    rest = "B − A of Δ, the rankings, the leaderboards and the ranking stability"
    pages = sorted((p for p in written if p.suffix in (".html", ".md")), key=lambda p: p.suffix != ".html")
    if pages:
        return f"The rest ({rest}): {', '.join(str(p) for p in pages)}; or run again with --full to print it here."
    return f"The rest ({rest}): run again with --full to print it here, or with --out DIR to write compare.html."


def cmd_compare(args: argparse.Namespace) -> int:
    from guardeval.estimators.compare.compare import compare_inputs
    from guardeval.estimators.compare.compare_text import headline_text, text
    from guardeval.estimators.runs import (
        check_distinct,
        compare_input_from_run,
        compare_input_from_table,
        distinguish,
        first_schedule_difference,
    )
    from guardeval.estimators.verdicts.decisions import check_alpha
    from guardeval.estimators.verdicts.equivalence import check_margin
    from guardeval.run.folder.layout import SCHEDULE
    from guardeval.run.run import Run
    from guardeval.view.files import compare_folder, make_folder, out_folder

    inspect_bridge.check(args)
    n_inputs = len(args.runs) + len(args.table) + len(args.inspect_log)
    if n_inputs < 2:
        raise InputError(f"compare needs at least two inputs (runs, --table files or --inspect-log logs), got {n_inputs}")
    margin, alpha = check_margin(args.margin), check_alpha(args.alpha)
    if args.label and len(args.label) != n_inputs:
        raise InputError(f"{len(args.label)} --label for {n_inputs} inputs: give one per input, in input order",
                         field="label")
    if args.out:
        out_folder(args.out)    # an --out that cannot be a folder: refused before any run is read
    with ExitStack() as held:   # each run opened once, and closed once its input is read
        runs = [held.enter_context(Run.using(r)) for r in args.runs]
        folders = [r.folder for r in runs]
        check_distinct(folders)
        for f in folders[1:]:
            line = first_schedule_difference(folders[0], f, row_limits(args))
            if line is not None:
                raise InputError(f"schedule.jsonl of {folders[0].path} and {f.path} differ from line {line}: not runs "
                                 "of one schedule", path=f.file(SCHEDULE), line=line)
        # Its own folder (never a run's): --out, else compare-A-B beside the first run; with fewer
        # than two runs (tables, Inspect logs) only --out writes files.
        out_dir = compare_folder(args.out, [r.path for r in runs]) if args.out or len(runs) >= 2 else None
        inputs = []
        for r in runs:
            inp = compare_input_from_run(r, None, verify=not args.no_verify, allow_skipped=args.allow_skipped,
                                         row_limits=row_limits(args))
            say_verified(r.path, {"checked": inp.source["verified"], "skipped": inp.source["verify_skipped"]},
                         "comparing")
            inputs.append(inp)
    inputs += [compare_input_from_table(t, None, row_limits(args)) for t in args.table]
    inputs += inspect_bridge.compare_inputs(args)
    distinguish(inputs)
    _labels(inputs, args.label)
    result = compare_inputs(inputs, baseline=args.baseline, placebo=args.placebo, family=args.family,
                            n_boot=args.bootstrap, seed=args.seed, failure_rule=args.failures, missing=args.missing,
                            margin=margin, alpha=alpha, allow_partial=args.allow_partial,
                            allow_unpublishable=args.allow_unpublishable)
    # The first two inputs, as `compare RUN_A RUN_B` has always named them.
    result["run_a"], result["run_b"] = inputs[0].source, inputs[1].source
    verdict_gate = None
    if args.fail_on:
        from guardeval.estimators.compare.gate import gate

        verdict_gate = result["gate"] = gate(result, args.fail_on)
    written: list[Path] = []
    if out_dir is not None:
        from guardeval.view.compare import write_compare

        make_folder(out_dir)   # made once the comparison holds, not before
        written = write_compare(result, out_dir)
        print(safe("wrote " + ", ".join(p.name for p in written) + f" in {out_dir}"), file=sys.stderr)
    _emit(result, args.json, text(result) if args.full else headline_text(result) + "\n\n" + _the_rest(written))
    if not result["complete"]:
        print("guardeval: warning: an incomplete input, compared with --allow-partial", file=sys.stderr)
    if verdict_gate is not None and verdict_gate["unpublishable"]:
        from guardeval.estimators.compare.gate import gate_line

        print(safe(gate_line(verdict_gate)), file=sys.stderr)
        return int(verdict_gate["exit"])
    if not result["publishable"] and not args.allow_unpublishable:
        print("guardeval: not publishable: an input has more than 2% failed and quarantined calls", file=sys.stderr)
        return 1
    if verdict_gate is not None:
        from guardeval.estimators.compare.gate import gate_line

        print(safe(gate_line(verdict_gate)), file=sys.stderr)
        return int(verdict_gate["exit"])
    return 0
