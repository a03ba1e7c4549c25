"""Launch, resume and replicate runs: wiring cohort -> schedule -> stimuli -> dispatch.

Everything that can fail on bad input (cohort, guard config, prompt, run folder) is checked
before a run folder exists, so a refused launch leaves nothing behind.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import orjson

from guards.config import GuardConfig, load_guard_config
from guards.parsers import get_parser
from guards.prompts import Prompt, load_prompt
from guards.registry import make_guard
from harness import __version__
from harness.canon import canonical_sha256, dumps_line, sha256_hex
from harness.cohort import Cohort, load_cohort
from harness.decide import decide
from harness.dispatch import DispatchOptions, DispatchResult, Dispatcher
from harness.errors import InputError, RunStopped
from harness.schedule import ALGORITHM, build_schedule, read_schedule, schedule_bytes
from harness.store import (COHORT_DIR, SCHEDULE, STIMULI, RunLock, RunWriter,
                           create_run_dir, iter_jsonl, new_run_id, read_manifest, utcnow)

DEFAULT_RUNS_ROOT = Path("runs")


@dataclass
class Plan:
    """A launch or replicate, fully prepared but not yet written."""

    cohort: Cohort
    config: GuardConfig
    prompt: Prompt
    schedule_rows: list[dict[str, Any]]
    schedule_data: bytes
    stimuli: dict[str, str]          # call_id -> request_sha256
    prompt_tokens_est: list[int]     # per call, rough (chars / 4)
    manifest: dict[str, Any]

    @property
    def n_calls(self) -> int:
        return len(self.schedule_rows)

    def projection(self) -> dict[str, Any]:
        cfg = self.config
        tin = sum(self.prompt_tokens_est)
        tout = self.n_calls * cfg.max_tokens
        cost = None
        if cfg.price_in_per_mtok is not None and cfg.price_out_per_mtok is not None:
            cost = tin / 1e6 * cfg.price_in_per_mtok + tout / 1e6 * cfg.price_out_per_mtok
        return {"calls": self.n_calls, "prompt_tokens_est": tin, "max_output_tokens": tout,
                "cost_usd_upper_est": cost}

    def stimuli_data(self) -> bytes:
        return b"".join(dumps_line({"call_id": r["call_id"], "request_sha256": self.stimuli[r["call_id"]]})
                        for r in self.schedule_rows)


def _load_guard_and_prompt(guard_path: str | Path, base_url: str | None) -> tuple[GuardConfig, Prompt]:
    config = load_guard_config(guard_path).with_base_url(base_url)
    try:
        prompt = load_prompt(config.prompt)
    except InputError as exc:
        raise InputError(f"{exc}", path=guard_path, field="prompt") from None
    try:
        get_parser(prompt.parser)
    except KeyError as exc:
        raise InputError(str(exc), path=guard_path, field="prompt") from None
    return config, prompt


def _render_stimuli(cohort: Cohort, config: GuardConfig, prompt: Prompt,
                    rows: list[dict[str, Any]]) -> tuple[dict[str, str], list[int]]:
    # Guards construct cheaply (no connection, no model load), so rendering needs no server.
    render = make_guard(config, prompt, max_connections=1).render
    by_instance: dict[str, tuple[str, int]] = {}
    stimuli: dict[str, str] = {}
    tokens: list[int] = []
    for r in rows:
        key = r["instance_sha256"]
        if key not in by_instance:
            body = render(cohort.instance(r["base_id"], r["condition"]))
            data = orjson.dumps(body)
            by_instance[key] = (canonical_sha256(body), len(data) // 4)
        sha, tok = by_instance[key]
        stimuli[r["call_id"]] = sha
        tokens.append(tok)
    return stimuli, tokens


def _manifest(run_id: str, cohort: Cohort, config: GuardConfig, prompt: Prompt, schedule_sha: str,
              stimuli_sha: str, n_calls: int, *, seed: int, order: str, reps: int,
              parent: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "run_id": run_id, "created": utcnow(), "guardeval_version": __version__,
        "cohort": {"name": cohort.name, "sha256": cohort.sha256,
                   "instances_sha256": cohort.meta["instances_sha256"]},
        "schedule_sha256": schedule_sha, "stimuli_sha256": stimuli_sha, "n_calls": n_calls,
        "seed": seed, "order": order, "reps": reps, "schedule_algorithm": ALGORITHM[order],
        "prompt": {"id": prompt.id, "sha256": prompt.sha256, "parser": prompt.parser},
        "guard": config.to_manifest(), "guard_sha256": config.sha256,
        "parent_run": parent,
    }


def plan_launch(*, cohort_dir: str | Path, guard_path: str | Path, reps: int, seed: int, order: str,
                base_url: str | None, run_id: str | None = None) -> Plan:
    if reps < 1:
        raise InputError("--reps must be >= 1", field="reps")
    cohort = load_cohort(cohort_dir)
    config, prompt = _load_guard_and_prompt(guard_path, base_url)
    rows = build_schedule(cohort, reps=reps, seed=seed, order=order)
    data = schedule_bytes(rows)
    stimuli, tokens = _render_stimuli(cohort, config, prompt, rows)
    run_id = run_id or new_run_id(config.name)
    plan = Plan(cohort, config, prompt, rows, data, stimuli, tokens, {})
    plan.manifest = _manifest(run_id, cohort, config, prompt, sha256_hex(data), sha256_hex(plan.stimuli_data()),
                              len(rows), seed=seed, order=order, reps=reps, parent=None)
    return plan


def plan_replicate(parent_dir: Path, *, guard_path: str | Path, base_url: str | None) -> Plan:
    parent = read_manifest(parent_dir)
    cohort = load_run_cohort(parent_dir, parent)
    config, prompt = _load_guard_and_prompt(guard_path, base_url)
    data = (parent_dir / SCHEDULE).read_bytes()
    if sha256_hex(data) != parent["schedule_sha256"]:
        raise InputError("schedule.jsonl does not match its manifest (run `guardeval verify`)",
                         path=parent_dir / SCHEDULE)
    rows = [orjson.loads(line) for line in data.splitlines()]
    stimuli, tokens = _render_stimuli(cohort, config, prompt, rows)
    plan = Plan(cohort, config, prompt, rows, data, stimuli, tokens, {})
    parent_ref = {"run_id": parent["run_id"], "path": str(parent_dir), "manifest_sha256": parent["sha256"],
                  "schedule_sha256": parent["schedule_sha256"]}
    plan.manifest = _manifest(new_run_id(config.name), cohort, config, prompt, parent["schedule_sha256"],
                              sha256_hex(plan.stimuli_data()), len(rows), seed=parent["seed"],
                              order=parent["order"], reps=parent["reps"], parent=parent_ref)
    return plan


def load_run_cohort(run_dir: Path, manifest: dict[str, Any]) -> Cohort:
    cohort = load_cohort(run_dir / COHORT_DIR)
    if cohort.sha256 != manifest["cohort"]["sha256"]:
        raise InputError("cohort copy does not match the manifest", path=run_dir / COHORT_DIR / "cohort.json")
    return cohort


def materialise(plan: Plan, run_dir: Path) -> None:
    create_run_dir(run_dir, manifest=plan.manifest, cohort_src=plan.cohort.path,
                   schedule_data=plan.schedule_data, stimuli_data=plan.stimuli_data())


def resolve_run_dir(run_dir: str | Path | None, run_id: str, root: Path = DEFAULT_RUNS_ROOT) -> Path:
    return Path(run_dir) if run_dir else root / run_id


# -- executing ---------------------------------------------------------------------------------

@dataclass
class RunOutcome:
    run_dir: Path
    total: int
    decided: int
    result: DispatchResult
    recovered: int   # decisions re-derived from raw lines on open
    torn: list[Path]

    @property
    def complete(self) -> bool:
        return self.decided >= self.total


def execute(run_dir: Path, *, base_url: str | None = None, concurrency: int | None = None,
            rpm: float | None = None, max_cost: float | None = None, max_calls: int | None = None,
            progress: bool = True, handle_signals: bool = True, adaptive: bool = True) -> RunOutcome:
    """Dispatch every undecided call of a run folder (launch and resume both end here)."""
    manifest = read_manifest(run_dir)
    with RunLock(run_dir):
        cohort = load_run_cohort(run_dir, manifest)
        config = GuardConfig(**manifest["guard"]).with_base_url(base_url)
        prompt = load_prompt(manifest["prompt"]["id"])
        if prompt.sha256 != manifest["prompt"]["sha256"]:
            # Sending would only write every pending call off as a replay mismatch: refuse.
            raise InputError(f"prompt '{prompt.id}' has changed since this run was launched (sha256 "
                             f"{prompt.sha256[:12]}…, manifest {manifest['prompt']['sha256'][:12]}…); restore it, "
                             "or start a new run with `guardeval replicate`", path=run_dir / "manifest.json",
                             field="prompt.sha256")
        parser = get_parser(prompt.parser)
        expected = {}
        for _, _, rec in iter_jsonl(run_dir / STIMULI):
            expected[rec["call_id"]] = rec["request_sha256"]
        _check_rendering(run_dir, cohort, config, prompt, expected)
        writer = RunWriter(run_dir)
        state = writer.open()
        try:
            # A raw line marked final whose decision was lost (crash between the two writes):
            # derive the decision from the log instead of paying for the call again.
            recovered = 0
            pinned = config.pinned_provider if config.backend == "openrouter" else None
            for cid, (seq, line_sha, rec) in sorted(state.final_raw.items(), key=lambda kv: kv[1][0]):
                writer.append_decision(decide(rec, line_sha, expected_request_sha256=expected.get(cid),
                                              parser=parser, pinned_provider=pinned))
                recovered += 1
            state.final_raw.clear()
            spent = _spent_so_far(run_dir)
            rows = list(read_schedule(run_dir / SCHEDULE))
            pending = [r for r in rows if r["call_id"] not in state.decided]
            writer.event("start", pending=len(pending), total=len(rows),
                         torn=[p.name for p in state.torn], recovered=recovered)
            result = anyio.run(_dispatch, config, prompt, writer, cohort, expected, parser, pending, rows,
                               DispatchOptions(
                                   concurrency=concurrency or config.concurrency or _default_concurrency(config),
                                   rpm=rpm,
                                   max_cost=max_cost, max_calls=max_calls, max_attempts=config.max_attempts,
                                   retry_initial_s=config.retry_initial_s, retry_max_s=config.retry_max_s,
                                   projected_cost_per_call=_projected_cost(config, manifest),
                                   progress=progress, handle_signals=handle_signals, adaptive=adaptive),
                               len(rows) - len(pending), spent, backend_options=_backend_options())
            decided = len(state.decided)
            writer.event("stop", reason=result.stop_reason, decided=decided, total=len(rows),
                         adaptive=adaptive, min_concurrency=result.min_concurrency,
                         rate_limited=result.rate_limited, limit_cuts=result.limit_cuts,
                         last_seq=state.last_seq, last_raw_sha256=state.last_raw_sha,
                         fatal=result.fatal_message)
        finally:
            writer.close()
    return RunOutcome(run_dir, len(rows), decided, result, recovered, state.torn)


async def _dispatch(config: GuardConfig, prompt: Prompt, writer: RunWriter, cohort: Cohort,
                    expected: dict[str, str], parser: Any, pending: list[dict[str, Any]],
                    rows: list[dict[str, Any]], options: DispatchOptions, already: int,
                    spent: float) -> DispatchResult:
    guard = make_guard(config, prompt, max_connections=max(options.concurrency, 1))
    try:
        d = Dispatcher(guard=guard, writer=writer,
                       instance_for=lambda r: cohort.instance(r["base_id"], r["condition"]),
                       expected_sha=expected, parser=parser, options=options)
        return await d.run(pending, total=len(rows), already=already, spent_before=spent)
    finally:
        with anyio.CancelScope(shield=True):
            await guard.aclose()


def _check_rendering(run_dir: Path, cohort: Cohort, config: GuardConfig, prompt: Prompt,
                     expected: dict[str, str]) -> None:
    """Re-render the first scheduled call; if it no longer matches the launch, refuse to go on."""
    first = next(iter(read_schedule(run_dir / SCHEDULE)), None)
    if first is None:
        return
    body = make_guard(config, prompt, max_connections=1).render(cohort.instance(first["base_id"], first["condition"]))
    if canonical_sha256(body) != expected.get(first["call_id"]):
        raise InputError("the request re-rendered now differs from the one frozen at launch (stimuli.jsonl): the "
                         "guard config or the rendering changed; restore them, or start a new run with "
                         "`guardeval replicate`", path=run_dir / STIMULI, line=1)


def _default_concurrency(config: GuardConfig) -> int:
    # One in-process model generates one call at a time; more would only queue inside the guard
    # and inflate latency_s.
    return 1 if config.backend == "mlx" else 16


def _backend_options() -> dict[str, Any]:
    """uvloop when installed: a cheaper event loop for thousands of concurrent calls."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return {}
    return {"use_uvloop": True}


def _spent_so_far(run_dir: Path) -> float:
    total = 0.0
    for _, _, rec in iter_jsonl(run_dir / "raw.jsonl"):
        cost = (rec.get("usage") or {}).get("cost")
        if isinstance(cost, (int, float)):
            total += cost
    return total


def _projected_cost(config: GuardConfig, manifest: dict[str, Any]) -> float:
    if config.price_in_per_mtok is None or config.price_out_per_mtok is None:
        return 0.0
    # Upper estimate per call: a 4k-token prompt is generous for guard prompts; refined by
    # the running mean once calls finish.
    return 4000 / 1e6 * config.price_in_per_mtok + config.max_tokens / 1e6 * config.price_out_per_mtok


def finish_message(outcome: RunOutcome) -> str:
    r = outcome.result
    parts = [f"{outcome.decided}/{outcome.total} calls decided"]
    if r.statuses:
        parts.append(", ".join(f"{k} {v}" for k, v in sorted(r.statuses.items())))
    return "; ".join(parts)


def raise_if_stopped(outcome: RunOutcome) -> None:
    r = outcome.result
    hint = f"resume with: guardeval resume {outcome.run_dir}"
    if r.stop_reason == "fatal":
        raise RunStopped(f"stopped by a fatal provider error: {r.fatal_message}. Fix the cause, then {hint}")
    if r.stop_reason == "unreachable":
        raise RunStopped(f"stopped: the provider looks unreachable ({r.fatal_message}); calls left pending. "
                         f"When it is back, {hint}")
    if r.stop_reason == "budget":
        raise RunStopped(f"stopped: --max-cost reached. {hint}")
    if r.stop_reason and r.stop_reason.startswith("signal"):
        raise RunStopped(f"interrupted ({r.stop_reason}); {hint}")
