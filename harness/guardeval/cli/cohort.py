"""`guardeval cohort ...`: build cohorts from their sources, inspect them, export rows."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from guardeval.cli.args import nonneg_float, positive_int, row_limit_options, row_limits, seed_value
from guardeval.cli.inspect_bridge import max_unpacked_option
from guardeval.errors import CheckFailed
from guardeval.terminal import safe, safe_json


def _done(what: str, out: object, start: float, extra: dict | None = None) -> int:
    """The build's summary as JSON on stdout (the result); the message on stderr."""
    secs = time.perf_counter() - start
    print(safe(f"wrote {what} cohort to {out} in {secs:.1f} s"), file=sys.stderr)
    print(safe_json(json.dumps({"cohort": str(out), **(extra or {}), "build_seconds": round(secs, 2)}, indent=2)))
    return 0


def _start(args: argparse.Namespace) -> float:
    """Check --out before any source is read (an AgentDojo build takes minutes)."""
    from guardeval.cohorts.model import check_out_dir

    check_out_dir(args.out)
    return time.perf_counter()


def _build_demo(args: argparse.Namespace) -> int:
    from guardeval.cohorts.builders.demo import build_demo

    start = _start(args)
    return _done("demo", build_demo(args.out, args.conditions, args.tokenizer), start)


def _build_agentdojo(args: argparse.Namespace) -> int:
    from guardeval.cohorts.builders.agentdojo import build_agentdojo

    start = _start(args)
    suites = [s.strip() for s in args.suites.split(",") if s.strip()] if args.suites else None
    out, stats = build_agentdojo(args.out, suites=suites, version=args.version, attack=args.attack,
                                 condition_names=args.conditions, max_bases=args.max_bases, seed=args.seed,
                                 tokenizer_file=args.tokenizer)
    return _done("agentdojo", out, start, stats)


def _build_asb(args: argparse.Namespace) -> int:
    from guardeval.cohorts.builders.asb import build_asb

    start = _start(args)
    out, stats = build_asb(args.source, args.out, condition_names=args.conditions, tools=args.tools,
                           max_bases=args.max_bases, seed=args.seed, tokenizer_file=args.tokenizer)
    return _done("asb", out, start, stats)


def _build_tsbench(args: argparse.Namespace) -> int:
    from guardeval.cohorts.builders.tsbench import build_tsbench

    start = _start(args)
    out, stats = build_tsbench(args.source, args.out, args.pins, condition_names=args.conditions,
                               tokenizer_file=args.tokenizer)
    return _done("tsbench", out, start, stats)


def _build_inspect(args: argparse.Namespace) -> int:
    from guardeval.cohorts.builders.inspect_log import Labelling, build_inspect
    from guardeval.inspect_logs import unpacked_cap

    start = _start(args)
    labelling = None
    if args.label_score:
        labelling = Labelling(args.label_score, tuple(args.unsafe_values.split(",")), tuple(args.safe_values.split(",")),
                              args.unsafe_steps)
    out, stats = build_inspect(args.logs, args.out, tool_calls=args.tool_calls, condition_names=args.conditions,
                               domain_field=args.domain_field, labelling=labelling,
                               skip_bad_samples=args.skip_bad_samples, tokenizer_file=args.tokenizer,
                               max_unpacked=unpacked_cap(args.inspect_max_unpacked))
    if stats["samples_skipped"]:
        print(safe(f"guardeval: {stats['samples_skipped']} sample(s) skipped (--skip-bad-samples); each is listed "
                   "under 'skipped'"), file=sys.stderr)
    return _done("inspect", out, start, stats)


def _export(args: argparse.Namespace) -> int:
    from guardeval.cohorts.export_inspect import export_inspect

    out, stats = export_inspect(args.dir, args.out, prompt_id=args.prompt, epochs=args.reps,
                                temperature=args.temperature, max_tokens=args.max_tokens, limits=row_limits(args))
    print(safe(f"wrote an Inspect task to {out}: run it from there (`cd {out} && inspect eval task.py --model "
               "PROVIDER/MODEL`), then `guardeval estimate --inspect-log LOG`"), file=sys.stderr)
    print(safe_json(json.dumps({"task": str(out), **stats}, indent=2)))
    return 0


def _inspect(args: argparse.Namespace) -> int:
    from guardeval.cohorts.model import load_cohort
    from guardeval.cohorts.report import inspect

    cohort = load_cohort(args.dir, limits=row_limits(args))
    report = inspect(cohort, _record_token_count(cohort, args.tokenizer))
    if args.json:
        print(safe_json(json.dumps(report, indent=2)))   # ASCII, and DEL escaped too
    else:
        # Names, domains and base ids are the cohort's text: shown, never obeyed by the terminal.
        print(safe(f"cohort {report['name']}  sha256 {report['sha256']}"))
        print(f"rows {report['n_rows']}  bases {report['n_bases']}  interactions {report['n_interactions']}")
        print(f"steps per interaction: {report['steps_per_interaction']}")
        print(safe(f"by domain: {report['by_domain']}"))
        print(f"by label: {report['by_label']}")
        for c, v in report["by_condition"].items():
            share = report["threat_word_share"][c]
            print(safe(f"  {c:<22} {v['role']:<13} rows {v['rows']:>6}  threat_word_share "
                       f"{'n/a' if share is None else f'{share:.3f}'}"))
        inv = report["invariance"]
        print("invariance: ok" if inv["ok"] else f"invariance: {inv['n_problems']} problem(s)")
        for c, checks in (inv.get("checks") or {}).items():
            print(safe(f"  {c}: {'; '.join(checks)}"))
        for what in inv.get("not_checked") or []:
            print(safe(f"  not checked: {what}"))
        for p in inv["problems"]:
            print(f"  {safe(p)}", file=sys.stderr)
    if not report["invariance"]["ok"]:
        raise CheckFailed(f"{report['invariance']['n_problems']} invariance problem(s) in {args.dir}")
    return 0


def _record_token_count(cohort: Any, path: str | None) -> Callable[[str], int] | None:
    """`cohort inspect --tokenizer FILE`: the tokenizer the cohort's record names (its SHA-256
    must match), for arg_matched's token counts."""
    if path is None:
        return None
    from guardeval.cohorts.builders.common import tokenizer
    from guardeval.errors import InputError

    tok = tokenizer(path)
    named = (cohort.meta.get("builder") or {}).get("tokenizer") or {}
    if named.get("sha256") != tok.sha256:
        raise InputError(f"is not the tokenizer the cohort's record names ({named.get('name') or 'the built-in count'})",
                         path=Path(path))
    return tok.count


def _rows(args: argparse.Namespace) -> int:
    """One line per base (baseline condition): base_id, interaction_id, domain, tool, label."""
    from guardeval.canon import dumps_line
    from guardeval.cohorts.model import load_cohort
    from guardeval.view.files import out_file, write_atomically

    out = out_file(args.out, Path(args.out))   # a folder or a missing parent: exit 2, before reading
    cohort = load_cohort(args.dir, limits=row_limits(args))
    base = cohort.baseline()
    data = b"".join(dumps_line({k: r[k] for k in ("base_id", "interaction_id", "domain", "tool", "label")})
                    for r in cohort.iter_instances() if r["condition"] == base)
    write_atomically(out, lambda tmp: tmp.write_bytes(data))
    n = data.count(b"\n")
    print(safe(f"wrote {n} rows to {args.out}"), file=sys.stderr)
    return 0


def _subset_options(p: argparse.ArgumentParser, which: str) -> None:
    """--conditions, --max-bases, --seed: the builders that can build a part of their source."""
    p.add_argument("--conditions", metavar="NAMES",
                   help=f"comma-separated subset of the {which} (default: all; the baseline is always kept)")
    p.add_argument("--max-bases", type=positive_int, metavar="N",
                   help="sample this many bases, stratified by domain and label (default: all)")
    p.add_argument("--seed", type=seed_value, default=0, metavar="N", help="sampling seed")
    _tokenizer_option(p)


NEW_CONDITIONS = "arg_alias,arg_threat,arg_matched,schema_placebo"


def _tokenizer_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tokenizer", metavar="FILE",
                   help="tokenizer.json or *.tiktoken (read offline) that arg_matched matches token counts with; "
                        "the cohort's record names it (default: the built-in count of identifier components)")


def register(subparsers: argparse._SubParsersAction) -> None:
    cohort = subparsers.add_parser("cohort", help="build and inspect cohorts")
    pc = type(cohort)
    sub = cohort.add_subparsers(dest="cohort_command", metavar="ACTION", parser_class=pc)
    sub.required = True
    build = sub.add_parser("build", help="build a cohort folder from a source")
    builders = build.add_subparsers(dest="builder", metavar="SOURCE", parser_class=pc)
    builders.required = True

    demo = builders.add_parser("demo", help="the synthetic demo cohort (no third-party text)")
    demo.add_argument("--out", required=True, metavar="DIR", help="output folder")
    demo.add_argument("--conditions", metavar="NAMES",
                      help="comma-separated subset of conditions (default: original,format_placebo,marker_rewrite,"
                           f"tool_alias,combined; also {NEW_CONDITIONS}; the baseline is always kept)")
    _tokenizer_option(demo)
    demo.set_defaults(func=_build_demo)

    ad = builders.add_parser("agentdojo", help="AgentDojo ground-truth replay (needs the 'agentdojo' extra)")
    ad.add_argument("--out", required=True, metavar="DIR", help="output folder")
    ad.add_argument("--suites", default="banking,slack,travel,workspace", metavar="NAMES",
                    help="comma-separated AgentDojo suites")
    ad.add_argument("--version", default="v1.2", metavar="V", help="AgentDojo benchmark version")
    ad.add_argument("--attack", default="important_instructions", metavar="NAME",
                    help="AgentDojo attack that places the injections")
    _subset_options(ad, f"conditions (default: the five of the demo; also {NEW_CONDITIONS})")
    ad.set_defaults(func=_build_agentdojo)

    asb = builders.add_parser("asb", help="ASB attacker/normal tools with the A0/NULL2/A1/A1b/A3 arms")
    asb.add_argument("--source", required=True, metavar="DIR", help="folder with ASB jsonl files and MANIFEST.txt")
    asb.add_argument("--out", required=True, metavar="DIR", help="output folder")
    asb.add_argument("--tools", choices=("aggressive", "all"), default="aggressive",
                     help="attacker tools to use (ASB's 'Aggressive' flag)")
    _subset_options(asb, f"arms: A0,NULL2,A1,A1b,A3 (the default), {NEW_CONDITIONS}")
    asb.set_defaults(func=_build_asb)

    ts = builders.add_parser("tsbench", help="ToolSafe TS-Bench files supplied by the user (pinned)")
    ts.add_argument("--source", required=True, metavar="DIR", help="ToolSafe checkout or TS-Bench folder")
    ts.add_argument("--out", required=True, metavar="DIR", help="output folder")
    ts.add_argument("--pins", metavar="FILE",
                    help="pin file of 'BYTES SHA256 PATH' lines (default: ToolSafe 92a9540e's, shipped with guardeval)")
    ts.add_argument("--conditions", metavar="NAMES",
                    help=f"comma-separated conditions besides the baseline: format_placebo,{NEW_CONDITIONS} "
                         "(default: the baseline alone)")
    _tokenizer_option(ts)
    ts.set_defaults(func=_build_tsbench)

    _register_inspect_builder(builders)
    _register_export(sub)

    ins = sub.add_parser("inspect", help="counts, threat_word_share, invariance checks, SHA-256")
    ins.add_argument("dir", metavar="DIR", help="cohort folder")
    ins.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    ins.add_argument("--tokenizer", metavar="FILE",
                     help="the tokenizer file the cohort's record names, to re-check arg_matched's token counts")
    row_limit_options(ins)
    ins.set_defaults(func=_inspect)

    rows = sub.add_parser("rows", help="export base rows (base_id, interaction_id, domain, tool, label) for "
                                       "`guardeval audit lookup`")
    rows.add_argument("dir", metavar="DIR", help="cohort folder")
    rows.add_argument("--out", required=True, metavar="FILE", help="JSONL file to write")
    row_limit_options(rows)
    rows.set_defaults(func=_rows)


def _register_inspect_builder(builders: argparse._SubParsersAction) -> None:
    ib = builders.add_parser("inspect", help="tool calls from Inspect (inspect_ai) agent logs (needs the 'inspect' extra)")
    ib.add_argument("logs", nargs="+", metavar="LOG", help="Inspect log files (.eval or .json)")
    ib.add_argument("--out", required=True, metavar="DIR", help="output folder")
    ib.add_argument("--tool-calls", metavar="all|last|NAME,...", default="all",
                    help="which assistant tool calls become bases: every one, the last of each sample, or calls to "
                         "the named tools")
    ib.add_argument("--conditions", metavar="NAMES",
                    help="comma-separated subset of original,format_placebo,marker_rewrite,tool_alias,combined,"
                         f"{NEW_CONDITIONS} (default: the first five; the baseline is always kept)")
    _tokenizer_option(ib)
    ib.add_argument("--domain-field", metavar="NAME",
                    help="the sample metadata field that names a base's domain (default: the task's name)")
    ib.add_argument("--label-score", metavar="SCORER",
                    help="label the steps from this score of each sample (default: no labels)")
    ib.add_argument("--unsafe-values", default="1", metavar="V,...",
                    help="with --label-score: score values that mean the sample did harm (booleans read as 1/0)")
    ib.add_argument("--safe-values", default="0", metavar="V,...",
                    help="with --label-score: score values that mean it did not (every step labelled 0)")
    ib.add_argument("--unsafe-steps", choices=("last", "all"), default="last",
                    help="with --label-score: in a sample that did harm, label its last selected call 1 and leave "
                         "the earlier ones unlabelled (last), or label them all 1 (all)")
    ib.add_argument("--skip-bad-samples", action="store_true",
                    help="leave out a sample whose history is malformed or whose label score does not map (counted "
                         "and listed in the summary) instead of refusing the log")
    max_unpacked_option(ib)
    ib.set_defaults(func=_build_inspect)


def _register_export(sub: argparse._SubParsersAction) -> None:
    ex = sub.add_parser("export", help="write a cohort as an Inspect task (run any guard with Inspect's providers, "
                                       "then `estimate --inspect-log`)")
    ex.add_argument("dir", metavar="COHORT", help="cohort folder (or `demo`)")
    ex.add_argument("out", metavar="OUT", help="folder to write the task into (new or empty)")
    ex.add_argument("--format", choices=("inspect",), required=True, help="what to write")
    ex.add_argument("--prompt", default="guardeval-json-v1", metavar="ID",
                    help="guard prompt that renders the stimuli; its strict parser scores the answers")
    ex.add_argument("--reps", type=positive_int, default=3, metavar="N", help="repetitions (Inspect epochs)")
    ex.add_argument("--temperature", type=nonneg_float, default=0.0, metavar="T", help="sampling temperature")
    ex.add_argument("--max-tokens", type=positive_int, default=256, metavar="N", help="output token limit")
    row_limit_options(ex)
    ex.set_defaults(func=_export)
