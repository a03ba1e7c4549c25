"""`guardeval demo`: the whole path on the embedded demo cohort, no network.

Starts the simulated provider on 127.0.0.1 (a light fault mix: some 429s and 5xx, nothing
that quarantines), launches 64 bases x 5 conditions x 3 repetitions = 960 calls, then runs
the estimator on the finished run; the last line says where report.html is. With `--guard`,
a python guard (`python-example`: the shipped keyword policy) answers instead, in-process.
With `--study`, three simulated providers, one per shipped profile (shortcut, robust,
alias-sensitive: guards of known character), are three guards of one study on one schedule,
dispatched together and compared; the last line says where study.html is.
"""

from __future__ import annotations

import sys
from pathlib import Path

from guardeval.backends.config import PRESETS_DIR
from guardeval.cohorts.builders.demo import BUNDLED_DEMO
from guardeval.run.planning import materialise, plan_launch, resolve_run_dir
from guardeval.run.run import Run
from guardeval.run.runner import execute, finish_message, raise_if_stopped
from guardeval.terminal import safe

SIM_PRESET = PRESETS_DIR / "sim.toml"
DEMO_FAULTS = "429=0.04,500=0.02,503=0.02"
DEMO_SEED = 2026


def run_demo(*, run_dir: str | None, as_json: bool, progress: bool = True, guard: str | None = None) -> int:
    if guard is not None:
        return _python_demo(guard, run_dir=run_dir, as_json=as_json, progress=progress)
    from guardeval.backends.sim import SimServerProcess

    with SimServerProcess(["--seed", str(DEMO_SEED), "--latency-ms", "20:80", "--faults", DEMO_FAULTS]) as sim:
        print(f"demo: simulated provider at {sim.base_url} (faults {DEMO_FAULTS})", file=sys.stderr)
        plan = plan_launch(cohort_dir=BUNDLED_DEMO, guard_path=SIM_PRESET, reps=3, seed=DEMO_SEED,
                           order="rounds", base_url=sim.base_url)
        target = resolve_run_dir(run_dir, plan.manifest["run_id"])
        materialise(plan, target)
        print(f"demo: run folder {target} ({plan.n_calls} calls)", file=sys.stderr)
        with Run.using(target) as run:
            outcome = execute(run.folder, base_url=sim.base_url, concurrency=32, progress=progress)
        print(f"demo: {finish_message(outcome)}; fingerprint {outcome.fingerprint}", file=sys.stderr)
        raise_if_stopped(outcome)
    return _estimate(target, as_json)


def _python_demo(guard: str, *, run_dir: str | None, as_json: bool, progress: bool) -> int:
    from guardeval.backends.config import load_guard_config
    from guardeval.errors import InputError

    config = load_guard_config(guard)
    if not config.backend_entry.takes_callable:
        from guardeval.backends.backend import backends_with

        takers = " or ".join(f'"{n}"' for n in backends_with(lambda b: b.takes_callable))
        raise InputError(f"demo --guard takes a python guard (backend = {takers}); this one uses the "
                         f"{config.backend!r} back-end: use `guardeval launch` for it", path=config.source, field="backend")
    from guardeval import api

    planned = api.plan_launch(BUNDLED_DEMO, config, reps=3, seed=DEMO_SEED, order="rounds", run_dir=run_dir)
    print(safe(f"demo: run folder {planned.run_dir} ({planned.n_calls} calls, python guard {config.callable})"),
          file=sys.stderr)
    result = api.launch_plan(planned, progress=progress)
    print(f"demo: {result.message()}", file=sys.stderr)
    result.raise_if_stopped()
    target = planned.run_dir
    return _estimate(target, as_json)


def _estimate(target: Path, as_json: bool) -> int:
    from guardeval.cli import main

    # The same command a user would run next: prints the effects table (or the JSON).
    code = main(["estimate", str(target), *(["--json"] if as_json else [])])
    report = target / "report.html"
    if report.is_file():
        print(safe(f"demo: report: {report.resolve()} (one self-contained file: open it in a browser)"),
              file=sys.stderr)
    return code


STUDY_PROFILES = ("shortcut", "robust", "alias-sensitive")


def run_study_demo(*, study_dir: str | None, as_json: bool, progress: bool = True,
                   command: list[str] | None = None) -> int:
    from guardeval import api
    from guardeval.backends.config import GuardConfig, load_guard_config
    from guardeval.backends.sim import SimServerProcess

    sims = [SimServerProcess(["--seed", str(DEMO_SEED + i), "--profile", name, "--latency-ms", "20:80",
                              "--faults", DEMO_FAULTS]).launch() for i, name in enumerate(STUDY_PROFILES)]
    try:
        for sim in sims:
            sim.wait_ready()
        base = load_guard_config(SIM_PRESET)
        guards = [GuardConfig(**{**base.to_manifest(), "name": name, "model": f"sim/{name}-guard",
                                 "base_url": sim.base_url, "source": f"{SIM_PRESET} (profile {name})"})
                  for name, sim in zip(STUDY_PROFILES, sims)]
        for name, sim in zip(STUDY_PROFILES, sims):
            print(f"demo: simulated provider, profile {name}, at {sim.base_url} (faults {DEMO_FAULTS})", file=sys.stderr)
        planned = api.study_plan(BUNDLED_DEMO, guards, reps=3, seed=DEMO_SEED, study_dir=study_dir)
        print(safe(f"demo: study folder {planned.study_dir} ({len(guards)} guards x {planned.n_calls} calls, one "
                   "schedule)"), file=sys.stderr)
        result = api.study_launch_plan(planned, progress=progress, command=command)
        result.raise_if_stopped()
    finally:
        for sim in sims:
            sim.stop()
    report = api.study_report(planned.study_dir, command=command)
    if as_json:
        import orjson

        from guardeval.terminal import safe_json

        sys.stdout.write(safe_json(orjson.dumps(report.report["answer"], option=orjson.OPT_INDENT_2).decode()) + "\n")
    else:
        for line in report.answer:
            print(safe(line))
    print(safe(f"demo: study fingerprint {report.fingerprint}"), file=sys.stderr)
    html = planned.study_dir / "study.html"
    print(safe(f"demo: study: {html.resolve()} (one self-contained file: open it in a browser)"), file=sys.stderr)
    return 0
