"""CLI: launch, resume, replicate, status, verify, demo."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from guardeval.cli import preflight
from guardeval.cli.args import (
    base_url,
    bounded_reps,
    concurrency,
    nonneg_float,
    positive_float,
    positive_int,
    row_limit_options,
    row_limits,
    say_problems,
    seed_value,
)
from guardeval.errors import GuardevalError, InputError
from guardeval.terminal import safe, safe_json

if TYPE_CHECKING:
    from collections.abc import Sequence

    from guardeval.run.folder.causes import FailureCause
    from guardeval.run.folder.folder import RunFolder
    from guardeval.run.run import Run

# Only the standard library and guardeval.cli/guardeval.errors are imported to build the parser: each
# command imports what it needs when it runs (the runner brings the HTTP client, jsonschema, numpy),
# so `--help`, `--version`, `status` and `verify` start in a fraction of a second.


RUN_HELP = "run folder (the one holding manifest.json)"
# guardeval.run.folder.supersede's FAILURE_STATUSES and DEFAULT_STATUSES, spelled here so that building
# the parser imports nothing (tests/test_retry_failed.py checks that they agree).
FAILURE_STATUSES = ("exhausted", "provider_error", "refused", "truncated", "unparseable", "guard_error")
DEFAULT_RETRY = "exhausted,provider_error"


def _retry_statuses(text: str) -> str:
    """--retry-failed's list, checked at parse time (a bad status: exit 2 with the usage)."""
    from guardeval.run.folder.supersede import parse_statuses

    try:
        parse_statuses(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def register(sub: Any) -> None:
    p = sub.add_parser("launch", help="launch a run: cohort x guard -> run folder",
                       description="Plan a run (schedule, stimuli), write its folder and send its calls.")
    p.add_argument("--cohort", required=True, help="cohort folder (cohort.json + instances.jsonl)")
    p.add_argument("--guard", required=True, help="guard config (TOML)")
    p.add_argument("--reps", type=bounded_reps, default=3, help="repetitions of every instance")
    p.add_argument("--seed", type=seed_value, default=0, help="schedule seed (recorded in the manifest)")
    p.add_argument("--order", choices=("rounds", "shuffled"), default="rounds",
                   help="rounds: bases shuffled per repetition round, conditions shuffled within a base; "
                        "shuffled: all calls shuffled")
    p.add_argument("--run-dir", help="the run folder itself (default: runs/<run-id>/)")
    _dispatch_options(p)
    preflight.add_option(p)
    p.add_argument("--dry-run", action="store_true",
                   help="print the plan, a token and cost projection, whether the key is set and the preflight; "
                        "send no call, write nothing")
    row_limit_options(p)
    p.set_defaults(func=cmd_launch)

    p = sub.add_parser("resume", help="resume a stopped or crashed run",
                       description="Send every undecided call of a run. The dispatch options its launch was given "
                                   "(--concurrency, --fixed-concurrency, --rpm, --max-cost, --rate-limit-stop; "
                                   "recorded in manifest.json) are used again unless given here. With --retry-failed, "
                                   "also give the calls whose decision failed new attempts (their new decisions "
                                   "supersede the old).")
    p.add_argument("run", metavar="RUN", help=RUN_HELP)
    p.add_argument("--retry-failed", nargs="?", const=DEFAULT_RETRY, type=_retry_statuses, metavar="STATUS,...",
                   help="also send again the calls whose live decision has one of these failure statuses (default: "
                        f"{DEFAULT_RETRY}; any of {', '.join(FAILURE_STATUSES)}; never ok); each call's new decision "
                        "supersedes its old one, on the record (docs/design.md §6)")
    _dispatch_options(p)
    p.add_argument("--allow-changed-callable", action="store_true",
                   help="python guard: resume although its code changed since launch (the run then mixes code; "
                        "each attempt's response records which answered)")
    row_limit_options(p)
    p.set_defaults(func=cmd_resume)

    p = sub.add_parser("replicate", help="run a run's schedule on another guard")
    p.add_argument("run", metavar="RUN", help=RUN_HELP + " whose schedule to replicate")
    p.add_argument("--guard", required=True, help="guard config (TOML) of the other guard")
    p.add_argument("--run-dir", help="the run folder itself (default: runs/<run-id>/)")
    _dispatch_options(p)
    preflight.add_option(p)
    p.add_argument("--dry-run", action="store_true",
                   help="print the plan, a token and cost projection, whether the key is set and the preflight; "
                        "send no call, write nothing")
    row_limit_options(p)
    p.set_defaults(func=cmd_replicate)

    p = sub.add_parser("status", help="what a run has done so far, and whether a process is running it now")
    p.add_argument("run", metavar="RUN", help=RUN_HELP)
    p.add_argument("--json", action="store_true", help="print the status as JSON on stdout")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("verify", help="recompute every hash and the raw-log chain")
    p.add_argument("run", metavar="RUN", help=RUN_HELP)
    p.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    p.add_argument("--allow-skipped", action="store_true",
                   help="OK even when a check could not be done (it is still listed)")
    p.add_argument("--expect", metavar="FINGERPRINT",
                   help="fail unless the run's fingerprint is this one (as printed when a session ends, by "
                        "`status` and in report.md): pins the log against re-chained edits")
    row_limit_options(p)
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("demo", help="run the demo cohort against a local simulated provider (no network)",
                       description="960 calls (64 bases x 5 conditions x 3 repetitions) against the simulated "
                                   "provider on 127.0.0.1, then the effects table.")
    p.add_argument("--run-dir", help="the run folder (default: runs/<run-id>/)")
    p.add_argument("--guard", metavar="GUARD",
                   help="a python guard (a config file, or the preset python-example) to run instead of the "
                        "simulated provider's guard")
    p.add_argument("--study", action="store_true",
                   help="a study instead: the simulator's three profiles (shortcut, robust, alias-sensitive) as three "
                        "guards on one schedule, dispatched together, compared; ends with the path of study.html")
    p.add_argument("--study-dir", help="with --study: the study folder (default: studies/<study-id>/)")
    p.add_argument("--json", action="store_true", help="print the estimate as JSON on stdout instead of the table")
    p.add_argument("--no-progress", action="store_true", help="no progress display")
    p.set_defaults(func=cmd_demo)


def _dispatch_options(p: argparse.ArgumentParser) -> None:
    """The options every command that sends calls shares (launch, resume, replicate). `resume`
    reuses what the launch was given (manifest `launch_options`) for any it is not given."""
    p.add_argument("--base-url", type=base_url,
                   help="send to this URL (http or https) instead of the guard config's base_url")
    p.add_argument("--concurrency", type=concurrency,
                   help="calls in flight at most (default: the guard config's concurrency, else 16; 1 for mlx)")
    p.add_argument("--fixed-concurrency", action=argparse.BooleanOptionalAction, default=None,
                   help="keep --concurrency fixed: no cut on 429 episodes, Retry-After honoured per call only "
                        "(default: adaptive)")
    p.add_argument("--rpm", type=positive_float, help="cap on requests per minute (default: no cap)")
    p.add_argument("--max-cost", type=nonneg_float,
                   help="USD: stop launching calls when spent + in flight would pass it (default: no limit)")
    p.add_argument("--rate-limit-stop", type=positive_float, metavar="SECONDS",
                   help="stop (resumable) when nothing but 429s has come back for this long (default: 600)")
    p.add_argument("--max-calls", type=positive_int,
                   help="dispatch at most N calls, a pilot; continue with resume (default: all)")
    p.add_argument("--no-progress", action="store_true", help="no progress display")
    p.add_argument("--json", action="store_true", help="print the outcome as JSON on stdout")


def check_new_run_dir(run_dir: Path) -> None:
    """The store's check, and for a folder that already holds a run, what was probably meant."""
    from guardeval.run.folder.create import check_new_run_dir as check
    from guardeval.run.run import Run

    try:
        check(run_dir)
    except InputError as exc:
        try:
            with Run.open(run_dir):   # never through a link; anything odd: just the store's message
                holds_run = True
        except (GuardevalError, OSError):
            holds_run = False
        if holds_run:
            raise InputError(f"{exc.message}: it holds a run; continue that run with: guardeval resume "
                             f"{run_dir} (or give a new --run-dir)", path=run_dir) from None
        raise


def cmd_launch(args: argparse.Namespace) -> int:
    from guardeval.run.planning import plan_launch, resolve_run_dir

    plan = plan_launch(cohort_dir=args.cohort, guard_path=args.guard, reps=args.reps, seed=args.seed,
                       order=args.order, base_url=args.base_url, row_limits=row_limits(args))
    return _start_new_run(plan, resolve_run_dir(args.run_dir, plan.manifest["run_id"]), args)


def _start_new_run(plan: Any, run_dir: Path, args: argparse.Namespace, *, replicate: bool = False) -> int:
    """What `launch` and `replicate` do with their plan: the plain-http warning, then `--dry-run`'s
    summary, or the checks (a new folder, the key, the preflight), the folder written and the
    first session."""
    from guardeval.run.planning import materialise, require_key

    _warn_if_plain_http(plan.config.effective_base_url)
    if args.dry_run:
        return _dry_run(plan, run_dir, args)
    check_new_run_dir(run_dir)
    require_key(plan.config, plan.config.source)   # before the preflight, which would send it
    if not preflight.check_plan(plan, args, max_calls=args.max_calls, out=sys.stderr):
        raise preflight.refuse(plan)
    _record_options(plan, args)
    materialise(plan, run_dir)
    of = f" (replicate of {plan.manifest['parent_run']['run_id']})" if replicate else ""
    print(safe(f"run: {run_dir}{of}"), file=sys.stderr)
    return _first_session(run_dir, args)


def _first_session(run_dir: Path, args: argparse.Namespace) -> int:
    """The new run's first session; refused before sending anything (a link planted in the new
    folder), the folder this launch built is removed again."""
    from guardeval.run.folder.create import discard_unstarted

    try:
        return _run(run_dir, args, base_url=args.base_url, max_calls=args.max_calls)
    except InputError:
        if discard_unstarted(run_dir):
            print(f"guardeval: removed {safe(run_dir)}: the launch was refused before any call was sent",
                  file=sys.stderr)
        raise


def _given(args: argparse.Namespace) -> dict[str, Any]:
    """The dispatch options as the command line gave them (None: not given)."""
    return {"concurrency": args.concurrency, "fixed_concurrency": args.fixed_concurrency, "rpm": args.rpm,
            "max_cost": args.max_cost, "rate_limit_stop_s": args.rate_limit_stop}


def _record_options(plan: Any, args: argparse.Namespace) -> None:
    from guardeval.run import launch_options

    plan.manifest[launch_options.FIELD] = launch_options.record(_given(args))


def _refusal(run_dir: Path) -> str | None:
    """Why the launch would refuse `run_dir` (an existing folder), in the launch's words; None: it would not."""
    try:
        check_new_run_dir(run_dir)
    except InputError as exc:
        return str(exc)
    return None


def _dry_run(plan: Any, run_dir: Path, args: argparse.Namespace) -> int:
    refused = _refusal(run_dir)   # the launch checks the folder first: so does its dry run
    plan.render_instances()
    plan.digest()   # hashes the schedule as it would be written; writes nothing
    proj = plan.projection(args.max_calls)
    cfg = plan.config
    m = plan.manifest
    reps, order, seed = m["reps"], m["order"], m["seed"]
    key = {"variable": cfg.api_key_env, "set": cfg.key_is_set(), "needed": cfg.needs_key}
    if args.json:
        # The preflight's checks go to stderr here: stdout carries only the JSON.
        ready = preflight.check_plan(plan, args, max_calls=args.max_calls, out=sys.stderr)
        _print_json({"dry_run": True, "n_calls": plan.n_calls, "bases": len(plan.cohort.base_ids),
                     "conditions": len(plan.cohort.conditions), "reps": reps, "order": order,
                     "seed": seed, "parent_run": (m.get("parent_run") or {}).get("run_id"),
                     "guard": {"name": cfg.name, "backend": cfg.backend, "model": cfg.model,
                               "base_url": cfg.effective_base_url},
                     "prompt": plan.prompt.id, "schedule_sha256": plan.manifest["schedule_sha256"],
                     "run_dir": str(run_dir), "max_calls": args.max_calls, "projection": proj, "key": key,
                     "preflight_ok": ready, "run_dir_refused": refused})
        return 0 if ready and refused is None else 2
    parent = (m.get("parent_run") or {}).get("run_id")
    print(safe(f"plan: {plan.n_calls} calls = {len(plan.cohort.base_ids)} bases x "
               f"{len(plan.cohort.conditions)} conditions x {reps} repetitions; order {order}, seed {seed}"
               + (f"; the schedule of {parent}, byte for byte" if parent else "")))
    where = cfg.backend_entry.target(cfg)
    print(safe(f"guard: {cfg.name} ({cfg.backend}, model {cfg.model}) {where}, prompt {plan.prompt.id}"))
    if cfg.api_key_env:
        state = "set" if key["set"] else ("NOT SET: launch will refuse" if key["needed"] else "not set (optional here)")
        print(f"key: {cfg.api_key_env} is {state}")
    print(f"schedule sha256: {plan.manifest['schedule_sha256']}")
    print(safe(f"would refuse: {refused}") if refused else f"would write: {safe(run_dir)}")
    cost = proj["cost_usd_upper_est"]
    pilot = f" (the first {proj['calls']}, --max-calls)" if proj["calls"] < plan.n_calls else ""
    print(f"projection for {proj['calls']} calls{pilot}: ~{proj['prompt_tokens_est']} prompt tokens, "
          f"<= {proj['max_output_tokens']} output tokens, "
          + (f"cost <= ${cost:.4f}" + (" (simulated provider: not billed)" if cfg.is_simulated else "")
             if cost is not None else "cost unknown (set price_in_per_mtok/price_out_per_mtok)"))
    if args.max_cost is not None and cost is not None and cost > args.max_cost:
        print(f"note: the projection exceeds --max-cost ${args.max_cost:g}; the run would stop early")
    ready = preflight.check_plan(plan, args, max_calls=args.max_calls, out=sys.stdout)
    ok = ready and refused is None
    print("dry run: no call sent, nothing written" + ("" if ok else "; launch would refuse (exit 2)"))
    return 0 if ok else 2


def _warn_if_plain_http(url: str | None) -> None:
    from urllib.parse import urlsplit

    from guardeval.backends.config import plain_http_remote

    if plain_http_remote(url):
        host = urlsplit(url or "").hostname
        print(f"guardeval: warning: {safe(host)} is reached over plain http: the key (if any) and every prompt "
              "travel unencrypted; use https unless this network is yours", file=sys.stderr)


def _run(run: Path | Run, args: argparse.Namespace, *, base_url: str | None, max_calls: int | None = None) -> int:
    from guardeval.run.run import Run

    with Run.using(run) as opened:
        return _session(opened, args, base_url=base_url, max_calls=max_calls)


def _session(run: Run, args: argparse.Namespace, *, base_url: str | None, max_calls: int | None) -> int:
    from guardeval import api
    from guardeval.run.folder.supersede import parse_statuses

    run_dir = run.path
    retry = getattr(args, "retry_failed", None)
    o = _given(args)
    try:
        before: str | None = run.fingerprint.token   # a session with nothing to do must leave it as it is
    except GuardevalError:
        before = None   # a run too damaged to fingerprint: the session below says what is wrong
    result = api.resume(run, base_url=base_url, concurrency=o["concurrency"], rpm=o["rpm"],
                        max_cost=o["max_cost"], max_calls=max_calls, fixed_concurrency=o["fixed_concurrency"],
                        progress=not args.no_progress, row_limits=row_limits(args),
                        rate_limit_stop_s=o["rate_limit_stop_s"],
                        retry_failed=parse_statuses(retry) if retry is not None else None,
                        allow_changed_callable=getattr(args, "allow_changed_callable", False))
    if result.retry.targets is not None:
        t = result.retry.targets
        rounds = ", ".join(f"round {k}: {v}" for k, v in result.retry.rounds.items())
        if t.calls:
            print(f"guardeval: retried {len(t.calls)} call(s) whose decision was {' or '.join(t.statuses)} "
                  f"({rounds})", file=sys.stderr)
        else:
            print(f"guardeval: nothing to retry: no call's decision is {' or '.join(t.statuses)}", file=sys.stderr)
        if any(s in ("unparseable", "truncated") for s in t.statuses):
            print("guardeval: note: unparseable and truncated are the guard's own answers; retrying them samples "
                  "the guard again (the report counts the retries)", file=sys.stderr)
    for torn in result.torn:
        print(f"guardeval: recovered a torn last line into {safe(torn)}", file=sys.stderr)
    if result.recovered:
        print(f"guardeval: re-derived {result.recovered} decision(s) from the raw log", file=sys.stderr)
    if args.json:
        _print_json(result.outcome_json())
    else:
        print(safe(f"{run_dir}: {result.message()}"))
        say_causes(result.failure_causes)
        _say_answered(run.folder)
    # Written down elsewhere, the fingerprint pins this log: `verify --expect` checks it later.
    print(f"guardeval: fingerprint {result.fingerprint} (keep it with your results; "
          f"`guardeval verify RUN --expect {result.fingerprint}` checks the run against it)", file=sys.stderr)
    if result.fingerprint == before:
        print("guardeval: nothing to send, recover or retry: the run was left as it was (the same fingerprint)",
              file=sys.stderr)
    elif result.session_dispatched == 0 and not result.recovered:
        # The token pins events.jsonl too, and a session that did something appends its start and stop there.
        print("guardeval: nothing was sent; the fingerprint still moved on: it pins the sessions' log "
              "(events.jsonl), to which this session added its start and stop. The answers and decisions are "
              "unchanged (its first two numbers, the attempts and decisions, are the same)", file=sys.stderr)
    result.raise_if_stopped()
    if not result.complete:
        print(f"guardeval: pilot stopped by --max-calls; continue with: guardeval resume {safe(run_dir)}",
              file=sys.stderr)
    elif retry is None:
        # A plain resume sends only undecided calls: a complete run with failed ones says how to
        # try those again, instead of sending nothing without a word.
        failed = {k: v for k, v in (result.statuses or {}).items() if k in DEFAULT_RETRY.split(",") and v}
        if failed:
            print(safe(f"guardeval: every call has a decision; {sum(failed.values())} failed ("
                       + ", ".join(f"{k} {v}" for k, v in sorted(failed.items()))
                       + f"): try them again with: guardeval resume {run_dir} --retry-failed"), file=sys.stderr)
    return 0


def say_causes(causes: Sequence[FailureCause], indent: str = "") -> None:
    """Why the failed calls failed, a line per cause with one example (guardeval.run.folder.causes)."""
    from guardeval.run.folder.causes import cause_lines

    if causes:
        print(safe(f"{indent}failed calls by cause:"))
    for line in cause_lines(causes):
        print(safe(f"{indent}  {line}"))


def _say_answered(folder: RunFolder) -> None:
    """Which guard answered (the simulator's profile, the reported model, the callable): the
    config's name and model say only what was asked for."""
    from guardeval.run.folder.answered import answered_by, describe

    seen = answered_by(folder)
    if seen:
        print(safe(f"answered by: {describe(seen)}"))


def _print_json(obj: Any) -> None:
    """`obj` as JSON on stdout; characters a terminal would obey are written as escapes."""
    import orjson

    sys.stdout.write(safe_json(orjson.dumps(obj, option=orjson.OPT_INDENT_2).decode()) + "\n")


def cmd_resume(args: argparse.Namespace) -> int:
    from guardeval.run.run import Run

    with Run.using(args.run) as run:
        _warn_if_plain_http(run.config.with_base_url(args.base_url).effective_base_url)
        # Only for the message: `Run.resume` itself applies the launch's options (the same merge).
        _, reused = run.resume_options(_given(args))
        if reused:
            print(safe(f"guardeval: as launched: {' '.join(reused)} (give the option to change it)"), file=sys.stderr)
        return _run(run, args, base_url=args.base_url, max_calls=args.max_calls)


def cmd_replicate(args: argparse.Namespace) -> int:
    from guardeval.run.planning import plan_replicate, resolve_run_dir
    from guardeval.run.run import Run

    with Run.using(args.run) as parent:   # open until the replicate's schedule is copied from it
        plan = plan_replicate(parent.folder, guard_path=args.guard, base_url=args.base_url,
                              row_limits=row_limits(args))
        return _start_new_run(plan, resolve_run_dir(args.run_dir, plan.manifest["run_id"]), args, replicate=True)


STATE_TEXT = {
    "running": "running now (another process holds the run)",
    "complete": "complete",
    "stopped": "stopped; continue with: guardeval resume {run}",
    "interrupted": "interrupted: the last session ended without stopping cleanly (killed or crashed); "
                   "continue with: guardeval resume {run}",
    "not_started": "not started; start with: guardeval resume {run}",
    "damaged": "damaged: its files disagree (below); `guardeval verify {run}` names every problem",
}


def cmd_status(args: argparse.Namespace) -> int:
    from guardeval import api
    from guardeval.run.run import Run

    with Run.using(args.run) as run:
        st = api.status(run).to_dict()
    # A damaged run is exit 1, as `verify` would say of it (state `damaged`).
    code = 1 if st["problems"] else 0
    if args.json:
        _print_json(st)
        return code
    print(safe(f"run {st['run_id']}: {st['decided']}/{st['n_calls']} calls decided, {st['pending']} pending"))
    print(safe(f"  state: {STATE_TEXT[st['state']].format(run=args.run)}"))
    print(safe(f"  guard {st['guard']} (model {st['model']}), cohort {st['cohort']}"
               + (f", replicate of {st['parent_run']}" if st["parent_run"] else "")))
    if st.get("answered_by"):
        from guardeval.run.folder.answered import describe

        print(safe(f"  answered by: {describe(st['answered_by'])}"))
    if st["statuses"]:
        print(safe("  decisions: " + ", ".join(f"{k} {v}" for k, v in sorted(st["statuses"].items()))))
    say_causes(st.get("failure_causes") or [], indent="  ")
    failed = sum(st["statuses"].get(k, 0) for k in DEFAULT_RETRY.split(","))
    if failed and not st["running"]:
        print(safe(f"  {failed} call(s) failed ({DEFAULT_RETRY.replace(',', ' or ')}); when the provider is back, "
                   f"try them again with: guardeval resume {args.run} --retry-failed"))
    if st["quarantined"]:
        print(safe(f"  quarantined: {st['quarantined']} ("
                   + ", ".join(f"{k} {v}" for k, v in sorted(st["quarantine_by_reason"].items())) + ")"))
    # "retried" is kept for --retry-failed's calls (below): these are the dispatcher's own repeats.
    print(f"  attempts: {st['attempts']} ({st['retries']} of them failed transiently and were tried again); "
          f"spend ${st['spend_usd']:.4f}"
          + (" (simulated provider: not billed)" if st["spend_simulated"] else ""))
    stop = st["last_stop"]
    if stop:
        reason = _stop_text(stop)
        print(safe(f"  last stop: {stop.get('at')}, {reason}, {stop.get('decided')}/{stop.get('total')} decided"
                   + (f": {stop['fatal']}" if stop.get("fatal") else "")))
    retried = st["retried"]
    if retried["calls"]:
        rounds = ", ".join(f"round {k} {v}" for k, v in retried["rounds"].items())
        last = retried["sessions"][-1] if retried["sessions"] else {}
        print(safe(f"  retried with --retry-failed: {retried['calls']} call(s) ({rounds}); counted at their "
                   "newest decision"
                   + (f"; last retry session {last.get('at')}" if last else "")))
    if st["generation_replays"]:
        print(f"  answered under a generation id another call also got: {st['generation_replays']} "
              "(quarantined as replay_mismatch by estimate)")
    if st["undecided_answers"]:
        print(f"  logged answers without a decision: {st['undecided_answers']} "
              f"(resume re-derives them without sending anything: guardeval resume {safe(args.run)})")
    for problem in st["problems"]:
        print(safe(f"  damaged: {problem} (guardeval verify {args.run} names the damage)"))
    print(f"  fingerprint {st['fingerprint']}")
    return code


STOP_TEXT = {
    "max_calls": "stopped by --max-calls (a pilot)",
    "budget": "stopped by --max-cost",
    "fatal": "stopped by a fatal provider error",
    "unreachable": "stopped: the provider looked unreachable",
    "server_errors": "stopped: the server kept answering with errors",
    "unusable_answers": "stopped: the server kept answering with nothing usable",
    "guard_timeouts": "stopped: the guard kept timing out",
    "guard_errors": "stopped: the guard kept failing with the same error",
    "rate_limited": "stopped: the provider answered nothing but 429s",
    "no_room": "stopped: no room on the disk to record answers",
    "write_failed": "stopped: a write failed",
}


def _stop_text(stop: dict[str, Any]) -> str:
    reason = stop.get("reason")
    if reason is None:
        # Runs from before the pilot's stop was recorded: a stop with calls pending was a pilot.
        pending = isinstance(stop.get("total"), int) and isinstance(stop.get("decided"), int) \
            and stop["decided"] < stop["total"]
        return "stopped with calls pending (a --max-calls pilot)" if pending else "every pending call handled"
    return STOP_TEXT.get(str(reason), str(reason))


def cmd_verify(args: argparse.Namespace) -> int:
    from guardeval import api
    from guardeval.run.integrity.fingerprint import parse_token
    from guardeval.run.run import Run

    expect = parse_token(args.expect) if args.expect is not None else None   # a bad token: exit 2 here
    with Run.using(args.run) as run:
        report = api.verify(run, allow_skipped=args.allow_skipped, row_limits=row_limits(args),
                            expect=args.expect).to_dict()
    if args.json:
        _print_json(report)
    else:
        say_problems(report)
        note = ""
        if report["skipped"]:
            note = (f"; {len(report['skipped'])} check(s) skipped"
                    + (" (allowed)" if args.allow_skipped else ", pass --allow-skipped to accept that"))
        fp = report.get("fingerprint")
        if fp:
            note += f"; fingerprint {fp['token']}" + (" (as expected)" if expect is not None and report["ok"] else "")
        print(f"verify: {'OK' if report['ok'] else 'FAILED'} — {report['checked']}{note}")
    return 0 if report["ok"] else 1


def cmd_demo(args: argparse.Namespace) -> int:
    from guardeval.cli.demo import run_demo, run_study_demo

    if args.study:
        if args.guard or args.run_dir:
            raise InputError("demo --study runs the simulator's three profiles into a study folder: --guard and "
                             "--run-dir do not apply (use --study-dir)")
        from guardeval.study.record import cli_argv

        return run_study_demo(study_dir=args.study_dir, as_json=args.json, progress=not args.no_progress,
                              command=cli_argv(args))
    if args.study_dir:
        raise InputError("--study-dir goes with --study")
    return run_demo(run_dir=args.run_dir, as_json=args.json, progress=not args.no_progress, guard=args.guard)
