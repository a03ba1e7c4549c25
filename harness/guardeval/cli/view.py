"""CLI: report (report.html), show (one call's story), export (the call frame)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from guardeval.terminal import safe, safe_json


def register(sub: Any) -> None:
    p = sub.add_parser("report", help="write report.html for a run: one self-contained file with a call browser",
                       description="Write report.html (needs the run's report.json: run `guardeval estimate RUN` "
                                   "first; `estimate` writes report.html too).")
    p.add_argument("run", metavar="RUN", help="run folder")
    p.add_argument("--out", metavar="FILE", help="file to write (default: RUN/report.html)")
    p.add_argument("--allow-skipped", action="store_true",
                   help="report even when a verify check could not be done (the page names it); by default a run "
                        "that does not verify gets a page saying why instead of a report, and exit 1")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("show", help="one call's story: schedule row, messages, every attempt, decision, hashes")
    p.add_argument("run", metavar="RUN", help="run folder")
    p.add_argument("call_id", metavar="CALL_ID", help="the call's id (32 hex digits, as in schedule.jsonl) or a unique prefix of it "
                        "(the Calls table shows ten digits)")
    p.add_argument("--json", action="store_true", help="print the story as JSON on stdout")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("export", help="one row per scheduled call, joined across the run's files (csv, jsonl, parquet)")
    p.add_argument("run", metavar="RUN", help="run folder")
    p.add_argument("--format", choices=("csv", "jsonl", "parquet"), default="csv",
                   help="file format (parquet needs the parquet extra)")
    p.add_argument("--out", metavar="FILE|DIR", help="file to write (or a folder: calls.FORMAT in it; a run on a read-only mount is "
                        "exported so), - for stdout (default: RUN/calls.FORMAT)")
    p.add_argument("--no-verify", action="store_true",
                   help="export without checking the run first (said on stderr); by default a run that does not "
                        "verify is not exported")
    p.add_argument("--allow-skipped", action="store_true",
                   help="export even when a verify check could not be done (it is named on stderr)")
    p.set_defaults(func=cmd_export)


def cmd_report(args: argparse.Namespace) -> int:
    from guardeval.run.run import Run
    from guardeval.view.html import write_report_html

    with Run.using(args.run) as run:
        path = write_report_html(run, out=args.out, allow_skipped=args.allow_skipped)
    print(safe(f"wrote {path} ({path.stat().st_size:,} bytes)"), file=sys.stderr)
    print(safe(path))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from guardeval.estimators.report.report import dumps_json
    from guardeval.run.run import Run
    from guardeval.view.calls import find_call
    from guardeval.view.show import story_text

    with Run.using(args.run) as run:
        story = find_call(run, args.call_id)
    print(safe_json(dumps_json(story)) if args.json else story_text(story))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from guardeval.cli.args import say_verified
    from guardeval.estimators.runs import verified
    from guardeval.run.run import Run
    from guardeval.view.calls import load_calls
    from guardeval.view.export import export

    with Run.using(args.run) as run:
        if args.out is None and not run.folder.writable():
            from guardeval.run.folder.folder import NotWritable

            raise NotWritable(run.path, f"calls.{args.format}")   # said before the run is read, not after
        run.manifest   # noqa: B018 -- read to check it: a manifest no reader takes is bad input (exit 2), as for every other reader
        # The frame is the run's data as others will analyse it: a run that does not verify is not
        # exported unless asked, as `estimate` refuses to estimate it.
        check = verified(run, verify=not args.no_verify, allow_skipped=args.allow_skipped, doing="export")
        say_verified(args.run, check, "exporting")
        calls = load_calls(run.folder)
        path = export(calls, args.format, args.out)
    if path is not None:
        print(safe(f"wrote {path} ({len(calls.rows):,} calls)"), file=sys.stderr)
        print(safe(path))
    return 0
