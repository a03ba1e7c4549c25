"""CLI: launch, resume, replicate, status, verify, demo."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import orjson

from harness.cli import preflight
from harness.cli.args import base_url, nonneg_float, positive_float, positive_int, row_limit_options, row_limits
from harness.errors import InputError
from harness.terminal import safe, safe_json

# harness.run.runner (and with it the HTTP client and jsonschema) is imported by the commands that
# run calls, not when the parser is built: `status` and `verify` start in a fraction of a second.


def register(sub: Any) -> None:
    p = sub.add_parser("launch", help="launch a run: cohort x guard -> run folder")
    p.add_argument("--cohort", required=True, help="cohort folder (cohort.json + instances.jsonl)")
    p.add_argument("--guard", required=True, help="guard config (TOML)")
    p.add_argument("--reps", type=positive_int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--order", choices=("rounds", "shuffled"), default="rounds")
    p.add_argument("--run-dir", help="the run folder itself (default runs/<run-id>/)")
    _dispatch_options(p)
    preflight.add_option(p)
    p.add_argument("--dry-run", action="store_true",
                   help="print the plan, a cost projection and the preflight; send no call, write nothing")
    row_limit_options(p)
    p.set_defaults(func=cmd_launch)

    p = sub.add_parser("resume", help="resume a stopped or crashed run")
    p.add_argument("run")
    _dispatch_options(p)
    row_limit_options(p)
    p.set_defaults(func=cmd_resume)

    p = sub.add_parser("replicate", help="run a finished run's schedule on another guard")
    p.add_argument("run")
    p.add_argument("--guard", required=True)
    p.add_argument("--run-dir", help="the run folder itself (default runs/<run-id>/)")
    _dispatch_options(p, max_calls=False)
    preflight.add_option(p)
    row_limit_options(p)
    p.set_defaults(func=cmd_replicate)

    p = sub.add_parser("status", help="what a run has done so far")
    p.add_argument("run")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("verify", help="recompute every hash and the raw-log chain")
    p.add_argument("run")
    p.add_argument("--json", action="store_true")
    p.add_argument("--allow-skipped", action="store_true",
                   help="OK even when a check could not be done (it is still listed)")
    row_limit_options(p)
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("demo", help="run the demo cohort against a local simulated provider (no network)")
    p.add_argument("--run-dir")
    p.add_argument("--json", action="store_true")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_demo)


def _dispatch_options(p: argparse.ArgumentParser, *, max_calls: bool = True) -> None:
    """The options every command that sends calls shares (launch, resume, replicate)."""
    p.add_argument("--base-url", type=base_url, help="override the guard's base URL (http or https)")
    p.add_argument("--concurrency", type=positive_int, help="calls in flight at most")
    p.add_argument("--fixed-concurrency", action="store_true",
                   help="keep --concurrency fixed: no cut on 429 episodes, Retry-After honoured per call only")
    p.add_argument("--rpm", type=positive_float, help="cap on requests per minute")
    p.add_argument("--max-cost", type=nonneg_float,
                   help="USD: stop launching calls when spent + in flight would pass it")
    if max_calls:
        p.add_argument("--max-calls", type=positive_int, help="dispatch at most N calls (pilot run)")
    p.add_argument("--no-progress", action="store_true", help="no progress display")


def _existing_run(path: str) -> Path:
    p = Path(path)
    if not (p / "manifest.json").is_file():
        raise InputError("not a run folder (no manifest.json)", path=p)
    return p


def cmd_launch(args: argparse.Namespace) -> int:
    from harness.run.runner import materialise, plan_launch, resolve_run_dir
    from harness.run.store import check_new_run_dir

    plan = plan_launch(cohort_dir=args.cohort, guard_path=args.guard, reps=args.reps, seed=args.seed,
                       order=args.order, base_url=args.base_url, row_limits=row_limits(args))
    run_dir = resolve_run_dir(args.run_dir, plan.manifest["run_id"])
    _warn_if_plain_http(plan.config.effective_base_url)
    if args.dry_run:
        plan.digest()   # hashes the schedule as it would be written; writes nothing
        proj = plan.projection()
        print(f"plan: {plan.n_calls} calls = {len(plan.cohort.base_ids)} bases x "
              f"{len(plan.cohort.conditions)} conditions x {args.reps} repetitions; order {args.order}, seed {args.seed}")
        print(safe(f"guard: {plan.config.name} ({plan.config.backend}, model {plan.config.model}), "
                   f"prompt {plan.prompt.id}"))
        print(f"schedule sha256: {plan.manifest['schedule_sha256']}")
        print(f"would write: {safe(run_dir)}")
        cost = proj["cost_usd_upper_est"]
        print(f"projection: ~{proj['prompt_tokens_est']} prompt tokens, <= {proj['max_output_tokens']} output tokens, "
              + (f"cost <= ${cost:.4f}" if cost is not None else "cost unknown (set price_in_per_mtok/price_out_per_mtok)"))
        if args.max_cost is not None and cost is not None and cost > args.max_cost:
            print(f"note: the projection exceeds --max-cost ${args.max_cost:g}; the run would stop early")
        ready = preflight.check_plan(plan, args, max_calls=args.max_calls, out=sys.stdout)
        print("dry run: no call sent, nothing written" + ("" if ready else "; launch would refuse (exit 2)"))
        return 0 if ready else 2
    check_new_run_dir(run_dir)
    if not preflight.check_plan(plan, args, max_calls=args.max_calls, out=sys.stderr):
        raise preflight.refuse(plan)
    materialise(plan, run_dir)
    print(f"run: {safe(run_dir)}", file=sys.stderr)
    return _run(run_dir, args, base_url=args.base_url, max_calls=args.max_calls)


def _warn_if_plain_http(url: str | None) -> None:
    from urllib.parse import urlsplit

    from guards.config import plain_http_remote

    if plain_http_remote(url):
        host = urlsplit(url or "").hostname
        print(f"guardeval: warning: {safe(host)} is reached over plain http: the key (if any) and every prompt "
              "travel unencrypted; use https unless this network is yours", file=sys.stderr)


def _run(run_dir: Path, args: argparse.Namespace, *, base_url: str | None, max_calls: int | None = None) -> int:
    from harness.run.runner import execute, finish_message, raise_if_stopped

    outcome = execute(run_dir, base_url=base_url, concurrency=args.concurrency, rpm=args.rpm,
                      max_cost=args.max_cost, max_calls=max_calls, progress=not args.no_progress,
                      adaptive=not args.fixed_concurrency, row_limits=row_limits(args))
    for torn in outcome.torn:
        print(f"guardeval: recovered a torn last line into {safe(torn)}", file=sys.stderr)
    if outcome.recovered:
        print(f"guardeval: re-derived {outcome.recovered} decision(s) from the raw log", file=sys.stderr)
    print(f"guardeval: {finish_message(outcome)}", file=sys.stderr)
    raise_if_stopped(outcome)
    if not outcome.complete:
        print(f"guardeval: pilot stopped by --max-calls; continue with: guardeval resume {safe(run_dir)}",
              file=sys.stderr)
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    from guards.config import GuardConfig
    from harness.run.store import read_manifest

    run_dir = _existing_run(args.run)
    try:
        _warn_if_plain_http(GuardConfig(**read_manifest(run_dir)["guard"]).with_base_url(args.base_url)
                            .effective_base_url)
    except (KeyError, TypeError):
        pass  # a damaged manifest: `execute` says what is wrong
    return _run(run_dir, args, base_url=args.base_url, max_calls=args.max_calls)


def cmd_replicate(args: argparse.Namespace) -> int:
    from harness.run.runner import materialise, plan_replicate, resolve_run_dir
    from harness.run.store import check_new_run_dir

    parent = _existing_run(args.run)
    plan = plan_replicate(parent, guard_path=args.guard, base_url=args.base_url, row_limits=row_limits(args))
    run_dir = resolve_run_dir(args.run_dir, plan.manifest["run_id"])
    _warn_if_plain_http(plan.config.effective_base_url)
    check_new_run_dir(run_dir)
    if not preflight.check_plan(plan, args, max_calls=None, out=sys.stderr):
        raise preflight.refuse(plan)
    materialise(plan, run_dir)
    print(safe(f"run: {run_dir} (replicate of {plan.manifest['parent_run']['run_id']})"), file=sys.stderr)
    return _run(run_dir, args, base_url=args.base_url)


def cmd_status(args: argparse.Namespace) -> int:
    from harness.run.status import run_status

    st = run_status(_existing_run(args.run))
    if args.json:
        sys.stdout.write(safe_json(orjson.dumps(st, option=orjson.OPT_INDENT_2).decode()) + "\n")
    else:
        print(safe(f"run {st['run_id']}: {st['decided']}/{st['n_calls']} decided, {st['pending']} pending"
                   f" ({'complete' if st['complete'] else 'incomplete'}); attempts {st['attempts']}, "
                   f"spend ${st['spend_usd']:.4f}"))
        for k, v in sorted(st["statuses"].items()):
            print(safe(f"  {k}: {v}"))
        if st["quarantined"]:
            print(safe(f"  quarantined: {st['quarantined']} ({st['quarantine_by_reason']})"))
        if st["generation_replays"]:
            print(f"  answered under a generation id another call also got: {st['generation_replays']} "
                  "(quarantined as replay_mismatch by estimate)")
        if st["last_stop"]:
            print(safe(f"  last stop: {st['last_stop']}"))
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from harness.run.verify import verify_run

    report = verify_run(_existing_run(args.run), allow_skipped=args.allow_skipped, row_limits=row_limits(args))
    if args.json:
        sys.stdout.write(safe_json(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode()) + "\n")
    else:
        for p in report["problems"]:
            where = p["file"] + (f":{p['line']}" if p.get("line") else "")
            print(safe(f"{where}: {p['message']}"), file=sys.stderr)
        for s in report["skipped"]:
            print(safe(f"skipped: {s['check']}: {s['reason']}"), file=sys.stderr)
        note = ""
        if report["skipped"]:
            note = (f"; {len(report['skipped'])} check(s) skipped"
                    + (" (allowed)" if args.allow_skipped else ", pass --allow-skipped to accept that"))
        print(f"verify: {'OK' if report['ok'] else 'FAILED'} — {report['checked']}{note}",
              file=sys.stdout if report["ok"] else sys.stderr)
    return 0 if report["ok"] else 1


def cmd_demo(args: argparse.Namespace) -> int:
    from harness.cli.demo import run_demo

    return run_demo(run_dir=args.run_dir, as_json=args.json, progress=not args.no_progress)
