"""CLI: `guardeval preflight` — can OpenRouter, or an OpenAI-compatible server, serve this guard
config as configured?

Also the preflight step of `launch` and `replicate` (`check_plan`): run before anything is
written; a failure refuses the launch with exit 2 (`--no-preflight` skips it). For an
OpenAI-compatible server it also settles `structured_output = "auto"` (the plan then records
and renders the dialect the server accepted)."""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from guardeval.cli.args import bounded_reps, nonneg_float, positive_int
from guardeval.errors import InputError
from guardeval.terminal import safe, safe_json


def register(sub: Any) -> None:
    p = sub.add_parser("preflight", help="check that OpenRouter (pinned provider, parameters, context, prices, "
                                         "credit) or an OpenAI-compatible server (model, context, structured-output "
                                         "shape) can serve a guard config as configured")
    p.add_argument("--guard", required=True, help="guard config (TOML), backend openrouter or openai-compatible")
    p.add_argument("--cohort", help="cohort folder: also check the longest prompt and project the cost")
    p.add_argument("--reps", type=bounded_reps, default=3, help="repetitions, for the projection")
    p.add_argument("--base-url", help="override the guard's base URL")
    p.add_argument("--max-calls", type=positive_int, help="project the cost of at most N calls (default: all)")
    p.add_argument("--max-cost", type=nonneg_float, help="USD: the credit needed is at most this (default: no limit)")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    p.set_defaults(func=cmd_preflight)


def add_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-preflight", action="store_true",
                   help="do not ask the provider or server first whether it can serve the run as configured "
                        "(openai-compatible: structured_output \"auto\" is then taken as json_schema)")


def cmd_preflight(args: argparse.Namespace) -> int:
    from guardeval.backends.checks import EMPTY_INSTANCE, Workload
    from guardeval.run.planning import load_guard_and_prompt, plan_launch, refuse_short_key

    if args.cohort:
        plan = plan_launch(cohort_dir=args.cohort, guard_path=args.guard, reps=args.reps, seed=0, order="rounds",
                           base_url=args.base_url)
        config, prompt = plan.config, plan.prompt
        _require_server(config.backend, args.guard)
        work = plan.workload(max_calls=args.max_calls, max_cost=args.max_cost)
    else:
        from guardeval.backends.registry import make_renderer

        config, prompt = load_guard_and_prompt(args.guard, args.base_url)
        _require_server(config.backend, args.guard)
        work = Workload(body=make_renderer(config, prompt)(EMPTY_INSTANCE), max_cost=args.max_cost)
    refuse_short_key(config, config.source)   # the preflight sends the key too
    result = _run(config, prompt, work)
    if args.json:
        import orjson

        sys.stdout.write(safe_json(orjson.dumps(result.as_dict(), option=orjson.OPT_INDENT_2).decode()) + "\n")
    else:
        show(result, sys.stdout)
    if not result.ok:
        print(safe(f"guardeval: preflight failed: {result.failures()[0].detail}"), file=sys.stderr)
        return 2
    return 0


def _run(config: Any, prompt: Any, work: Any) -> Any:
    preflight = config.backend_entry.preflight
    assert preflight is not None   # applies() was asked first
    return preflight(config, prompt, work)


def _require_server(backend: str, path: str) -> None:
    if not applies(backend):
        raise InputError(f"preflight asks a server (OpenRouter's API or an OpenAI-compatible one); this guard uses "
                         f"the {backend!r} back-end", path=path, field="backend")


def show(result: Any, out: TextIO) -> None:
    print(safe(f"preflight: {result.model} at {result.base_url}"), file=out)
    for c in result.checks:
        print(safe(f"  {c.status:<4}  {c.name}: {c.detail}"), file=out)
    print(f"preflight: {'OK' if result.ok else 'FAILED'}", file=out)


def applies(backend: str) -> bool:
    """Whether a guard of this back-end has a preflight (a server to ask)."""
    from guardeval.backends.backend import backend_for

    return backend_for(backend).preflight is not None


def check_plan(plan: Any, args: argparse.Namespace, *, max_calls: int | None, out: TextIO) -> bool:
    """The preflight step of launch/replicate: True when the run may go ahead (or the step does
    not apply: another back-end, or --no-preflight). Prints the checks to `out`. A dialect the
    local preflight resolved (`structured_output = "auto"`) replaces the plan's config."""
    backend = plan.config.backend
    if not applies(backend):
        return True
    if args.no_preflight:
        print("preflight: skipped (--no-preflight)", file=out)
        if plan.config.structured_output == "auto":
            print("preflight: structured_output \"auto\" taken as json_schema (OpenAI's shape) without the probe; "
                  "set it in the guard config to be sure", file=out)
            plan.use_config(plan.config.with_dialect("json_schema"))
        return True
    result = _run(plan.config, plan.prompt, plan.workload(max_calls=max_calls, max_cost=args.max_cost))
    show(result, out)
    # A back-end that takes "auto" probes the dialect: the preflight's finding replaces it.
    if result.ok and "auto" in plan.config.backend_entry.dialects and result.dialect != plan.config.structured_output:
        plan.use_config(plan.config.with_dialect(result.dialect))
    return bool(result.ok)


SIM_HINT = ("`guardeval sim-server` listens on a free port unless given --port: start it, and pass the URL it "
            "printed (`listening on http://127.0.0.1:PORT`) as --base-url")


def refuse(plan: Any) -> InputError:
    if plan.config.is_simulated:
        # The sim preset's base_url is a fixed port; the server picks a free one.
        return InputError(f"the simulated provider cannot serve {plan.config.name} at "
                          f"{plan.config.effective_base_url} (see the preflight above); nothing was sent or written. "
                          + SIM_HINT)
    who = plan.config.backend_entry.server
    return InputError(f"{who} cannot serve {plan.config.name} as configured (see the preflight above); nothing "
                      "was sent or written. Fix the config, or skip the check with --no-preflight")
