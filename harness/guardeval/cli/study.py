"""CLI: `guardeval study launch|status|resume|verify|add|report|edit` (docs/study.md): N guards on
one schedule, one study folder, one report with a fingerprint."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from guardeval.cli import preflight
from guardeval.cli.args import (
    bootstrap_n,
    bounded_reps,
    concurrency,
    name_list,
    nonneg_float,
    positive_float,
    positive_int,
    row_limit_options,
    row_limits,
    say_problems,
    seed_value,
)
from guardeval.cli.estimate import RULES as FAILURE_RULES
from guardeval.cli.run import say_causes
from guardeval.errors import InputError
from guardeval.terminal import safe, safe_json

STUDY_HELP = "study folder (the one holding study.json)"


def _question_options(p: argparse.ArgumentParser, when: str) -> None:
    p.add_argument("--baseline", metavar="CONDITION", help=f"baseline condition ({when}: the cohort's baseline)")
    p.add_argument("--placebo", metavar="CONDITION",
                   help=f"placebo condition ({when}: the condition whose role is placebo, else format_placebo)")
    p.add_argument("--family", type=name_list, metavar="C1,C2,...",
                   help=f"Holm family ({when}: every non-baseline condition)")
    p.add_argument("--margin", type=float, metavar="M", help=f"equivalence margin, a proportion in (0, 1) ({when}: 0.05)")
    p.add_argument("--failures", choices=FAILURE_RULES, help=f"headline failure rule ({when}: drop)")


def _dispatch_options(p: argparse.ArgumentParser, *, per_guard: bool = True) -> None:
    def each(v: str) -> str:
        return f"; {v} for every guard, or LABEL={v} for one, repeatable" if per_guard else ""

    kind = str if per_guard else concurrency
    p.add_argument("--concurrency", action="append" if per_guard else "store", type=kind, metavar="N",
                   help="calls in flight at most (default: the guard config's concurrency, else 16" + each("N") + ")")
    p.add_argument("--rpm", action="append" if per_guard else "store", type=str if per_guard else positive_float,
                   metavar="R", help="cap on requests per minute (default: no cap" + each("R") + ")")
    p.add_argument("--fixed-concurrency", action=argparse.BooleanOptionalAction, default=None,
                   help="keep --concurrency fixed: no cut on 429 episodes (default: adaptive)")
    p.add_argument("--rate-limit-stop", type=positive_float, metavar="SECONDS",
                   help="a guard's run stops (resumable) when nothing but 429s came back for this long (default: 600)")
    p.add_argument("--max-cost", type=nonneg_float, metavar="USD",
                   help="the whole study's budget: no guard starts a call that would take the study's spend past it")
    p.add_argument("--guard-max-cost", action="append" if per_guard else "store",
                   type=str if per_guard else nonneg_float, metavar="LABEL=USD" if per_guard else "USD",
                   help="one guard's own cap, beside the study's budget" + (" (repeatable)" if per_guard else ""))
    p.add_argument("--max-calls", type=positive_int,
                   help="dispatch at most the first N calls of the schedule on each guard, a pilot (default: all)")
    p.add_argument("--no-progress", action="store_true", help="no progress display")
    p.add_argument("--json", action="store_true", help="print the outcome as JSON on stdout")


def register(sub: Any) -> None:
    study = sub.add_parser("study", help="N guards on one schedule: one study folder, dispatched together, one "
                                         "report with a fingerprint (docs/study.md)")
    ss = study.add_subparsers(dest="study_command", metavar="STUDY_COMMAND", parser_class=type(study))
    ss.required = True

    p = ss.add_parser("launch", help="plan a study, write its folder, send every guard's calls together",
                      description="Every guard on one cohort and one seeded schedule (byte-identical), one folder "
                                  "(runs/<label>/ per guard), dispatched together from one process.")
    p.add_argument("--cohort", required=True, help="cohort folder (cohort.json + instances.jsonl), or demo")
    p.add_argument("--guard", action="append", required=True, metavar="FILE",
                   help="a guard config (TOML) or preset name; give two or more")
    p.add_argument("--label", action="append", metavar="NAME",
                   help="a label per guard, in --guard order (default: each guard's name; names a run's folder)")
    p.add_argument("--reps", type=bounded_reps, default=3, help="repetitions of every instance")
    p.add_argument("--seed", type=seed_value, default=0, help="schedule seed (recorded)")
    p.add_argument("--order", choices=("rounds", "shuffled"), default="rounds", help="schedule order (as launch)")
    p.add_argument("--study-dir", help="the study folder itself (default: studies/<study-id>/)")
    _question_options(p, "default")
    _dispatch_options(p)
    preflight.add_option(p)
    p.add_argument("--dry-run", action="store_true",
                   help="print the plan, each guard's projection and preflight; send nothing, write nothing")
    row_limit_options(p)
    p.set_defaults(func=cmd_launch)

    p = ss.add_parser("status", help="where a study stands: each run, spend, the study fingerprint")
    p.add_argument("study", metavar="STUDY", help=STUDY_HELP)
    p.add_argument("--json", action="store_true", help="print the status as JSON on stdout")
    p.set_defaults(func=cmd_status)

    p = ss.add_parser("resume", help="send every run's undecided calls (and, with --retry-failed, failed ones)",
                      description="Every run of the study with calls left, together; each run's launch options are "
                                  "used again unless given here, the study's budget unless --max-cost is given.")
    p.add_argument("study", metavar="STUDY", help=STUDY_HELP)
    p.add_argument("--retry-failed", nargs="?", const="exhausted,provider_error", metavar="STATUS,...",
                   help="also send again every run's calls whose decision has one of these failure statuses "
                        "(default: exhausted,provider_error); each new decision supersedes the old, on the record")
    _dispatch_options(p)
    p.set_defaults(func=cmd_resume)

    p = ss.add_parser("verify", help="verify every run and the study's own record")
    p.add_argument("study", metavar="STUDY", help=STUDY_HELP)
    p.add_argument("--expect", metavar="FINGERPRINT",
                   help="fail unless the study fingerprint is this one (as study report and status print it)")
    p.add_argument("--allow-skipped", action="store_true", help="OK even when a run's check could not be done")
    p.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    row_limit_options(p)
    p.set_defaults(func=cmd_verify)

    p = ss.add_parser("add", help="a new guard on the study's schedule, later",
                      description="The study's schedule, byte for byte, on another guard (same prompt and output "
                                  "schema), recorded in study.json and dispatched.")
    p.add_argument("study", metavar="STUDY", help=STUDY_HELP)
    p.add_argument("--guard", required=True, metavar="FILE", help="the guard config (TOML) or preset name")
    p.add_argument("--label", metavar="NAME", help="its label (default: its name)")
    p.add_argument("--base-url", help="send to this URL instead of the guard config's base_url")
    _dispatch_options(p, per_guard=False)
    preflight.add_option(p)
    row_limit_options(p)
    p.set_defaults(func=cmd_add)

    p = ss.add_parser("report", help="estimate every run under the study's question, compare them, write "
                                     "study.html, study.md and study-report.json")
    p.add_argument("study", metavar="STUDY", help=STUDY_HELP)
    p.add_argument("--bootstrap", type=bootstrap_n, default=10000, metavar="N", help="bootstrap replicates")
    p.add_argument("--seed", type=seed_value, default=0, metavar="N", help="bootstrap seed, recorded")
    p.add_argument("--missing", choices=("exclude", "as-failure"), default="exclude",
                   help="a scheduled call without a decision counts nowhere, or as a failed call")
    p.add_argument("--allow-partial", action="store_true", help="report incomplete runs anyway (the report says so)")
    p.add_argument("--allow-unpublishable", action="store_true",
                   help="exit 0 even when more than 2%% of a run's calls failed or were quarantined")
    p.add_argument("--json", action="store_true", help="print the report (study-report.json) as JSON on stdout")
    p.set_defaults(func=cmd_report)

    p = ss.add_parser("edit", help="change the study's question: a recorded edit, with its reason",
                      description="The question is fixed at launch; an edit keeps the old value and the new, when "
                                  "and why, in study.json, and the report shows every edit.")
    p.add_argument("study", metavar="STUDY", help=STUDY_HELP)
    _question_options(p, "unchanged")
    p.add_argument("--reason", required=True, help="why (recorded with the edit)")
    p.add_argument("--json", action="store_true", help="print the question now as JSON on stdout")
    p.set_defaults(func=cmd_edit)


def _print_json(obj: Any) -> None:
    import orjson

    sys.stdout.write(safe_json(orjson.dumps(obj, option=orjson.OPT_INDENT_2).decode()) + "\n")


def _per_guard(values: list[str] | None, flag: str, parse: Any) -> Any:
    """`--concurrency 8` (every guard) and `--concurrency LABEL=4` (one), repeatable: a value,
    or label -> value, `*` holding a bare value given beside labelled ones (the others' value)."""
    if not values:
        return None
    common, per = None, {}
    for text in values:
        label, eq, value = text.rpartition("=")
        try:
            v = parse(value if eq else text)
        except argparse.ArgumentTypeError as exc:
            raise InputError(f"{flag} {text!r}: {exc}", field=flag) from None
        if eq:
            if not label:
                raise InputError(f"{flag} {text!r}: give LABEL=VALUE or VALUE", field=flag)
            per[label] = v
        elif common is not None:
            raise InputError(f"{flag} given twice without a label", field=flag)
        else:
            common = v
    return per if common is None else ({"*": common, **per} if per else common)


def cmd_launch(args: argparse.Namespace) -> int:
    from guardeval import api
    from guardeval.cli.run import _warn_if_plain_http
    from guardeval.run.planning import require_key
    from guardeval.study.record import cli_argv

    labels = args.label
    planned = api.study_plan(args.cohort, args.guard, labels=labels, reps=args.reps, seed=args.seed, order=args.order,
                             study_dir=args.study_dir, baseline=args.baseline, placebo=args.placebo,
                             family=args.family, margin=args.margin, failure_rule=args.failures,
                             fixed_concurrency=args.fixed_concurrency, rate_limit_stop_s=args.rate_limit_stop,
                             max_calls=args.max_calls, max_cost=args.max_cost, row_limits=row_limits(args))
    names = planned.labels
    planned._plan.set_options(concurrency=_per_guard(args.concurrency, "--concurrency", concurrency),
                              rpm=_per_guard(args.rpm, "--rpm", positive_float),
                              fixed_concurrency=args.fixed_concurrency, rate_limit_stop_s=args.rate_limit_stop,
                              max_calls=args.max_calls, max_cost=args.max_cost,
                              guard_max_cost=_labelled(args.guard_max_cost, "--guard-max-cost", nonneg_float))
    plan = planned._plan
    for g in plan.guards:
        _warn_if_plain_http(g.plan.config.effective_base_url)
    if args.dry_run:
        return _dry_run(planned, args)
    from guardeval.study.launch import check_new_study_dir

    check_new_study_dir(planned.study_dir)
    for g in plan.guards:
        require_key(g.plan.config, g.plan.config.source)   # before the preflight, which would send it
    for g in plan.guards:
        if not preflight.applies(g.plan.config.backend):
            # Nothing to ask: say so rather than print a heading with nothing under it.
            print(safe(f"preflight of {g.label}: none ({g.plan.config.backend} back-end: no server to ask)"),
                  file=sys.stderr)
            continue
        print(safe(f"preflight of {g.label}:"), file=sys.stderr)
        if not preflight.check_plan(g.plan, args, max_calls=args.max_calls, out=sys.stderr):
            raise preflight.refuse(g.plan)
    print(safe(f"study: {planned.study_dir} ({len(names)} guards x {planned.n_calls} calls: {', '.join(names)})"),
          file=sys.stderr)
    result = api.study_launch_plan(planned, progress=not args.no_progress, command=cli_argv(args))
    return _finish(result, args, report=True)


def _labelled(values: list[str] | None, flag: str, parse: Any) -> dict[str, Any] | None:
    value = _per_guard(values, flag, parse)
    if value is not None and not isinstance(value, dict):
        raise InputError(f"{flag} takes LABEL=VALUE (the study's own budget is --max-cost)", field=flag)
    return value


def _dry_run(planned: Any, args: argparse.Namespace) -> int:
    q = planned.question
    if args.json:
        ready = all(preflight.check_plan(g.plan, args, max_calls=args.max_calls, out=sys.stderr)
                    for g in planned._plan.guards)
        _print_json({"dry_run": True, **planned.to_dict(), "preflight_ok": ready})
        return 0 if ready else 2
    plan = planned._plan
    print(safe(f"study plan: {len(planned.labels)} guards x {planned.n_calls} calls on one schedule "
               f"(sha256 {planned.schedule_sha256}); {plan.cohort.name}: {len(plan.cohort.base_ids)} bases x "
               f"{len(plan.cohort.conditions)} conditions"))
    print(safe(f"question: baseline {q['baseline']}, placebo {q['placebo']}, family {', '.join(q['family'])}, "
               f"margin {q['margin']:g}, failure rule {q['failure_rule']}"))
    ready = True
    for g, info in zip(plan.guards, planned.guards):
        proj = info["projection"]
        cost = proj["cost_usd_upper_est"]
        print(safe(f"guard {g.label}: {info['name']} ({info['backend']}, model {info['model']}) at {info['base_url']}; "
                   f"projection for {proj['calls']} calls: "
                   + (f"cost <= ${cost:.4f}" if cost is not None else "cost unknown")))
        ready = preflight.check_plan(g.plan, args, max_calls=args.max_calls, out=sys.stdout) and ready
    budget = plan.max_cost
    print(safe(f"budget: {'$%g for the whole study' % budget if budget is not None else 'none'}"
               + "".join(f"; {k} ${v:g}" for k, v in plan.per_guard.items())))
    print(safe(f"would write: {planned.study_dir}"))
    print("dry run: no call sent, nothing written" + ("" if ready else "; launch would refuse (exit 2)"))
    return 0 if ready else 2


def _finish(result: Any, args: argparse.Namespace, *, report: bool = False) -> int:
    """The study's outcome on stdout (a line per run, then the study's), the fingerprint on
    stderr; exit 1 (resumable) when a run stopped. With `report` (a launch), a study whose every
    run is complete is reported at once (study.html, study.md, study-report.json, the answer), as
    `study report` reports it."""
    if args.json:
        _print_json(result.to_dict())
    else:
        for r in result.runs:
            state = (f"{r.decided}/{r.total} calls decided" if r.decided is not None else "unreadable")
            if r.statuses:
                state += ": " + ", ".join(f"{k} {v}" for k, v in sorted(r.statuses.items()))
            if r.error:
                state += f" — {r.error}"
            elif r.stop_reason:
                state += f" — stopped ({r.stop_reason}{': ' + r.fatal_message if r.fatal_message else ''})"
            elif not r.dispatched:
                state += " (nothing to send)"
            print(safe(f"{r.label}: {state}"))
            say_causes(r.failure_causes, indent="  ")
        done = sum(r.complete for r in result.runs)
        print(safe(f"study {result.study_dir}: {done}/{len(result.runs)} runs complete; spend ${result.spend_usd:.4f}"))
    if report and result.complete and not result.interrupted and not result.stopped():
        # The launch's outcome is its own: a report that is not publishable says so, exit 0.
        _report(result.study_dir, args, gate=False, n_boot=10000, seed=0, missing="exclude", allow_partial=False,
                allow_unpublishable=False)
        return 0
    print(safe(f"guardeval: study fingerprint {result.fingerprint} (the report records it: guardeval study report "
               f"{result.study_dir})"), file=sys.stderr)
    if result.interrupted:
        print(safe(f"guardeval: interrupted ({result.interrupted}); resume with: guardeval study resume "
                   f"{result.study_dir}"), file=sys.stderr)
        return 1
    result.raise_if_stopped()
    if not result.complete:
        print(safe(f"guardeval: not every run is complete ({', '.join(result.incomplete)}); continue with: "
                   f"guardeval study resume {result.study_dir}"), file=sys.stderr)
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    from guardeval import api
    from guardeval.study.record import cli_argv

    retry = None
    if args.retry_failed is not None:
        from guardeval.run.folder.supersede import parse_statuses

        try:
            retry = list(parse_statuses(args.retry_failed))
        except ValueError as exc:
            raise InputError(str(exc), field="--retry-failed") from None
    result = api.study_resume(args.study, concurrency=_per_guard(args.concurrency, "--concurrency", concurrency),
                              rpm=_per_guard(args.rpm, "--rpm", positive_float),
                              fixed_concurrency=args.fixed_concurrency, rate_limit_stop_s=args.rate_limit_stop,
                              max_cost=args.max_cost,
                              guard_max_cost=_labelled(args.guard_max_cost, "--guard-max-cost", nonneg_float),
                              max_calls=args.max_calls, retry_failed=retry, progress=not args.no_progress,
                              command=cli_argv(args))
    return _finish(result, args)


def cmd_add(args: argparse.Namespace) -> int:
    from guardeval import api
    from guardeval.study.record import cli_argv

    if not args.no_preflight:
        _preflight_add(args)
    result = api.study_add(args.study, args.guard, label=args.label, concurrency=args.concurrency, rpm=args.rpm,
                           fixed_concurrency=args.fixed_concurrency, rate_limit_stop_s=args.rate_limit_stop,
                           max_cost=args.max_cost, guard_max_cost=args.guard_max_cost, max_calls=args.max_calls,
                           base_url=args.base_url, progress=not args.no_progress, command=cli_argv(args))
    return _finish(result, args)


def _preflight_add(args: argparse.Namespace) -> None:
    """The new guard's preflight, on the study's schedule (as `replicate` runs it)."""
    from guardeval.run.planning import plan_replicate
    from guardeval.study.record import open_run, open_study, read_record

    with open_study(args.study) as study:
        record = read_record(study)
        with open_run(study, record["runs"][0]["label"]) as first:
            plan = plan_replicate(first.folder, guard_path=args.guard, base_url=args.base_url, row_limits=row_limits(args))
            if not preflight.check_plan(plan, args, max_calls=args.max_calls, out=sys.stderr):
                raise preflight.refuse(plan)


STATE = {"running": "running now", "complete": "complete", "stopped": "stopped", "interrupted": "interrupted",
         "not_started": "not started"}


def cmd_status(args: argparse.Namespace) -> int:
    from guardeval import api

    st = api.study_status(args.study)
    code = 1 if st["damaged"] else 0   # as `status` says of a damaged run
    if args.json:
        _print_json(st)
        return code
    q = st["question"]
    print(safe(f"study {st['study_id']}: {len(st['runs'])} runs on {st['cohort']} ({st['n_calls_per_run']} calls each)"
               + ("; running now (another process holds the study)" if st["running"] else "")))
    print(safe(f"  question: baseline {q['baseline']}, placebo {q['placebo']}, margin {q['margin']:g}, failure rule "
               f"{q['failure_rule']}" + (f" ({st['edits']} edit(s) since launch)" if st["edits"] else "")))
    for r in st["runs"]:
        if r.get("problem") and "run_id" not in r:
            print(safe(f"  {r['label']}: {r['problem']}"))
            continue
        statuses = ", ".join(f"{k} {v}" for k, v in sorted(r["statuses"].items()))
        line = (f"  {r['label']}: {r['decided']}/{r['n_calls']} decided, {STATE.get(r['state'], r['state'])}"
                + (f" ({statuses})" if statuses else "") + f"; spend ${r['spend_usd']:.4f}; fingerprint {r['fingerprint']}")
        if r["changed_since_report"]:
            line += " (changed since the report)"
        if r.get("problem"):
            line += f"; {r['problem']}"
        print(safe(line))
        say_causes(r.get("failure_causes") or [], indent="    ")
    if st["incomplete"]:
        print(safe(f"  incomplete: {', '.join(st['incomplete'])}; continue with: guardeval study resume {args.study}"))
    else:
        print("  every run complete")
    print(f"  spend ${st['spend_usd']:.4f}" + (" (simulated provider: not billed)" if st["spend_simulated"] else "")
          + (f" of a ${st['budget']['max_cost']:g} budget" if st["budget"]["max_cost"] is not None else ""))
    rep = st["report"]
    if rep:
        print(safe(f"  last report {rep['at']}: fingerprint {rep['fingerprint']}"
                   + ("" if st["report_current"] else " (the study has changed since: report again)")))
    for problem in st["problems"]:
        print(safe(f"  damaged: {problem} (guardeval study verify {args.study} names every problem)"))
    print(f"  fingerprint {st['fingerprint']}")
    return code


def cmd_verify(args: argparse.Namespace) -> int:
    from guardeval import api
    from guardeval.study.record import parse_token

    expect = parse_token(args.expect) if args.expect is not None else None
    rep = api.study_verify(args.study, expect=expect, allow_skipped=args.allow_skipped,
                           row_limits=row_limits(args)).to_dict()
    if args.json:
        _print_json(rep)
    else:
        say_problems(rep)
        for n in rep["notes"]:
            print(safe(f"note: {n}"))
        fp = rep.get("fingerprint") or {}
        tail = f"; study fingerprint {fp['token']}" if fp.get("token") else ""
        if expect is not None and rep["ok"]:
            tail += " (as expected)"
        print(safe(f"study verify: {'OK' if rep['ok'] else 'FAILED'} — {rep['checked']}{tail}"))
    return 0 if rep["ok"] else 1


def cmd_report(args: argparse.Namespace) -> int:
    return _report(args.study, args, gate=True, n_boot=args.bootstrap, seed=args.seed, missing=args.missing,
                   allow_partial=args.allow_partial, allow_unpublishable=args.allow_unpublishable)


def _report(study: Any, args: argparse.Namespace, *, gate: bool, **options: Any) -> int:
    """`study report` (and a launch that completed): the answer on stdout (`--json`: by `study
    report`, study-report.json), then on stderr one line for the files written and one for the
    fingerprint; with `gate`, exit 1 when not publishable (unless allowed)."""
    from guardeval import api
    from guardeval.study.record import cli_argv

    rep = api.study_report(study, command=cli_argv(args), **options)
    if args.json:
        if gate:
            _print_json(rep.report)
    else:
        for line in rep.answer:
            print(safe(line))
    if rep.written:
        print(safe(f"guardeval: wrote {', '.join(p.name for p in rep.written)} in {rep.study_dir}"), file=sys.stderr)
    print(safe(f"guardeval: study fingerprint {rep.fingerprint} (keep it with your results; `guardeval study verify "
               f"{study} --expect {rep.fingerprint}` checks the study against it)"), file=sys.stderr)
    if not rep.complete:
        print("guardeval: warning: incomplete runs, reported with --allow-partial", file=sys.stderr)
    if not rep.publishable and not options["allow_unpublishable"]:
        print("guardeval: not publishable: a run has more than 2% failed and quarantined calls", file=sys.stderr)
        return 1 if gate else 0
    return 0


def cmd_edit(args: argparse.Namespace) -> int:
    from guardeval import api
    from guardeval.study.record import cli_argv

    question = api.study_edit(args.study, reason=args.reason, baseline=args.baseline, placebo=args.placebo,
                              family=args.family, margin=args.margin, failure_rule=args.failures, command=cli_argv(args))
    if args.json:
        _print_json(question)
    else:
        print(safe(f"question now: baseline {question['baseline']}, placebo {question['placebo']}, family "
                   f"{', '.join(question['family'])}, margin {question['margin']:g}, failure rule "
                   f"{question['failure_rule']} (recorded in study.json; the next report uses it)"))
    return 0

