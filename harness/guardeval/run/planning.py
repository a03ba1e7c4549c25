"""Planning a run: a cohort and a guard config (or a parent run) -> schedule, stimuli and
manifest, streamed into a new run folder (`materialise`). Everything that can fail on bad input
(cohort, guard config, prompt) is checked here, before a run folder exists, so a refused launch
leaves nothing behind.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, TypedDict

import orjson

from guardeval import __version__
from guardeval.backends.checks import EMPTY_INSTANCE, Workload
from guardeval.backends.config import GuardConfig, config_from_manifest, load_guard_config
from guardeval.backends.parsers import get_parser
from guardeval.backends.prompts import Prompt, load_prompt
from guardeval.backends.registry import make_renderer
from guardeval.canon import canonical_bytes, dumps_line, sha256_hex
from guardeval.cohorts.model import DEFAULT_ROW_LIMITS, Cohort, RowLimits, load_cohort
from guardeval.errors import InputError
from guardeval.run.dispatch.budget import projected_cost
from guardeval.run.folder.create import create_run_dir, create_run_in
from guardeval.run.folder.folder import RunFolder
from guardeval.run.folder.layout import COHORT_DIR, PROMPT_DIR, RUNS_ROOT, SCHEDULE, STIMULI, new_run_id, utcnow
from guardeval.run.folder.manifest import (
    FileHashes,
    ParentRef,
    RunManifest,
    load_cohort_copy,
    load_run_prompt,
    read_manifest,
    row_limits_record,
    run_config,
    run_row_limits,
)
from guardeval.run.integrity import callable_pin
from guardeval.run.schedule import ALGORITHM, ScheduleRow, iter_schedule

DEFAULT_RUNS_ROOT = Path(RUNS_ROOT)



class ProjectionRecord(TypedDict):
    """What a launch would cost, projected before anything is sent (the API's `Projection`)."""

    calls: int
    prompt_tokens_est: int          # prompt characters / 4
    max_output_tokens: int          # every call's full max_tokens
    cost_usd_upper_est: float | None


@dataclass
class Plan:
    """A launch or replicate, fully prepared but not yet written.

    Nothing of the size of the schedule is held: the schedule is generated again (launch) or
    re-read from the parent (replicate) as it is written or hashed. What is held is one entry
    per distinct instance (its request hash and a token estimate): repetitions share a body,
    so each instance is rendered once.
    """

    cohort: Cohort
    config: GuardConfig
    prompt: Prompt
    manifest: RunManifest               # schedule/stimuli hashes filled in by `digest` or `materialise`
    n_calls: int
    lines: Callable[[], Iterator[tuple[bytes, ScheduleRow]]]   # schedule lines, as bytes and parsed
    requests: dict[str, tuple[str, int]] = field(default_factory=dict)  # instance_sha256 -> (request sha, tokens)
    prompt_tokens_est: int = 0          # rough (chars / 4), summed over calls
    parent_schedule_sha256: str | None = None   # replicate: the parent's schedule must still hash to this

    def projection(self, max_calls: int | None = None) -> ProjectionRecord:
        """Tokens and cost of the run, or of its first `max_calls` calls in schedule order (a pilot)."""
        cfg = self.config
        calls, tin = self.n_calls, self.prompt_tokens_est
        if max_calls is not None and max_calls < self.n_calls:
            calls, tin = max_calls, 0
            for _, row in itertools.islice(self.lines(), max_calls):
                self._request_sha(row)   # rendered once per instance
                tin += self.requests[row["instance_sha256"]][1]
        tout = calls * cfg.max_tokens
        cost = None
        if cfg.price_in_per_mtok is not None and cfg.price_out_per_mtok is not None:
            cost = projected_cost(tin, tout, cfg.price_in_per_mtok, cfg.price_out_per_mtok)
        return {"calls": calls, "prompt_tokens_est": tin, "max_output_tokens": tout,
                "cost_usd_upper_est": cost}

    def workload(self, *, max_calls: int | None = None, max_cost: float | None = None) -> Workload:
        """What the preflight needs to know about this run: one rendered body, how many calls
        this launch may send, their rough prompt tokens, the longest prompt."""
        self.render_instances()
        calls = min(self.n_calls, max_calls) if max_calls is not None else self.n_calls
        first = next(iter(self.cohort.iter_instances()), None)
        body = self._render(first) if first is not None else self._render(EMPTY_INSTANCE)
        longest = max((tokens for _, tokens in self.requests.values()), default=None)
        share = self.prompt_tokens_est * calls // self.n_calls if self.n_calls else 0
        return Workload(body=body, calls=calls, prompt_tokens=share, longest_prompt_tokens=longest, max_cost=max_cost)

    def use_config(self, config: GuardConfig) -> None:
        """Adopt the guard config the preflight settled (`structured_output = "auto"` resolved):
        the manifest records it, and every instance is rendered again with it."""
        rendered = bool(self.requests)
        self.config = config
        self.manifest.update({"guard": config.to_manifest(), "guard_sha256": config.sha256})
        self.requests.clear()
        self.prompt_tokens_est = 0
        self.__dict__.pop("_render", None)   # the cached renderer of the old config
        if rendered:
            self.render_instances()

    def render_instances(self) -> None:
        """Render every instance once (repetitions share a body), in file order, keeping each
        one's request hash and rough size; a no-op once done."""
        if self.requests:
            return
        reps = int(self.manifest.get("reps") or 1)
        for inst in self.cohort.iter_instances():
            _, tokens = self.requests[inst["instance_sha256"]] = _render_request(self._render, inst)
            self.prompt_tokens_est += tokens * reps

    def digest(self) -> FileHashes:
        """Hash the schedule and stimuli without writing them (`--dry-run`): into the manifest, and returned."""
        hashes = self.write(None)
        self.manifest.update({"schedule_sha256": hashes["schedule_sha256"], "stimuli_sha256": hashes["stimuli_sha256"]})
        return hashes

    def write(self, folder: RunFolder | None) -> FileHashes:
        """Stream schedule.jsonl and stimuli.jsonl into the partial `folder` (new files, never
        through a link: `RunFolder.create_new`), or only hash them; return their SHA-256 for the
        manifest. Lines are gathered in blocks: one write and one hash update per block, not per
        line."""
        hashes = {SCHEDULE: hashlib.sha256(), STIMULI: hashlib.sha256()}
        with ExitStack() as stack:
            out = {name: stack.enter_context(folder.new_file(name)) for name in hashes} if folder else {}
            sched: list[bytes] = []
            stim: list[bytes] = []
            n = 0
            for line, row in self.lines():
                sched.append(line)
                stim.append(dumps_line({"call_id": row["call_id"], "request_sha256": self._request_sha(row)}))
                n += 1
                # Small blocks: each orjson result holds a 4 KiB allocation until joined.
                if len(sched) >= 1024:
                    _emit(hashes, out, sched, stim)
            _emit(hashes, out, sched, stim)
        if self.parent_schedule_sha256 is not None and hashes[SCHEDULE].hexdigest() != self.parent_schedule_sha256:
            raise InputError("schedule.jsonl changed while it was being copied (run `guardeval verify`)")
        if n != self.n_calls:
            raise InputError(f"the schedule has {n} calls, the plan {self.n_calls}")
        return {"schedule_sha256": hashes[SCHEDULE].hexdigest(), "stimuli_sha256": hashes[STIMULI].hexdigest()}

    def _request_sha(self, row: ScheduleRow) -> str:
        key = row["instance_sha256"]
        hit = self.requests.get(key)
        if hit is None:
            hit = self.requests[key] = _render_request(self._render, self.cohort.instance(row["base_id"],
                                                                                           row["condition"]))
        return hit[0]

    @functools.cached_property
    def _render(self) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
        # Guards construct cheaply (no connection, no model load), so rendering needs no server.
        return make_renderer(self.config, self.prompt)


def _emit(hashes: Mapping[str, hashlib._Hash], out: Mapping[str, BinaryIO], sched: list[bytes],
          stim: list[bytes]) -> None:
    for name, block in ((SCHEDULE, sched), (STIMULI, stim)):
        data = b"".join(block)
        hashes[name].update(data)
        if out:
            out[name].write(data)
        block.clear()


def _render_request(render: Callable[[Mapping[str, Any]], dict[str, Any]],
                    instance: Mapping[str, Any]) -> tuple[str, int]:
    """(request_sha256, rough prompt tokens) of one instance's request body."""
    data = canonical_bytes(render(instance))
    return sha256_hex(data), len(data) // 4


def load_guard_and_prompt(guard_path: str | Path | GuardConfig, base_url: str | None) -> tuple[GuardConfig, Prompt]:
    """A guard config (a file, a preset name, or a GuardConfig checked by the same rules) and its
    prompt. A python guard's callable is imported here: exit 2 before anything is written."""
    if isinstance(guard_path, GuardConfig):
        config = config_from_manifest(guard_path.to_manifest(), Path(guard_path.source or "<guard config>"))
        config = GuardConfig(**{**config.to_manifest(), "source": guard_path.source}).with_base_url(base_url)
        guard_path = config.source or "<guard config>"
    else:
        config = load_guard_config(guard_path).with_base_url(base_url)
    try:
        prompt = load_prompt(config.prompt)
    except InputError as exc:
        raise InputError(exc.message, path=guard_path, field="prompt") from None
    try:
        get_parser(prompt.parser)
    except KeyError as exc:
        raise InputError(str(exc), path=guard_path, field="prompt") from None
    callable_pin.record(config, where=guard_path)
    return config, prompt


# The most calls one run may have: planning, a dry run included, walks and hashes every one
# (a dry run of 2,000,000 took 32 s on the 2-core development machine), and the run folder is
# checked at 1,000,000 (docs/reference/run-folder.md).
MAX_CALLS = 2_000_000
MAX_SEED = 2**64 - 1   # the schedule's seed is hashed into call ids as an unsigned 64-bit JSON integer


def _manifest(run_id: str, cohort: Cohort, config: GuardConfig, prompt: Prompt, n_calls: int, *, seed: int,
              order: str, reps: int, parent: ParentRef | None, row_limits: RowLimits) -> RunManifest:
    """The manifest, less the schedule and stimuli hashes (known once the files are written)."""
    limits = row_limits_record(row_limits)
    manifest: RunManifest = {
        "run_id": run_id, "created": utcnow(), "guardeval_version": __version__,
        "cohort": {"name": cohort.name, "sha256": cohort.sha256,
                   "instances_sha256": cohort.meta["instances_sha256"]},
        "schedule_sha256": None, "stimuli_sha256": None, "n_calls": n_calls,
        "seed": seed, "order": order, "reps": reps, "schedule_algorithm": ALGORITHM[order],
        # `copy`: the run folder carries the prompt's files (verify and resume read them there).
        "prompt": {"id": prompt.id, "sha256": prompt.sha256, "parser": prompt.parser, "copy": PROMPT_DIR},
        "guard": config.to_manifest(), "guard_sha256": config.sha256,
    }
    # In this order: the callable's pin (a python back-end's), the parent, the row limits (raised ones).
    if (pin := callable_pin.record(config)) is not None:
        manifest[callable_pin.FIELD] = pin
    manifest["parent_run"] = parent
    if limits is not None:
        manifest["row_limits"] = limits
    return manifest


def plan_launch(*, cohort_dir: str | Path, guard_path: str | Path | GuardConfig, reps: int, seed: int, order: str,
                base_url: str | None, run_id: str | None = None, row_limits: RowLimits = DEFAULT_ROW_LIMITS) -> Plan:
    if reps < 1:
        raise InputError("--reps must be >= 1", field="reps")
    if not 0 <= seed <= MAX_SEED:
        raise InputError(f"--seed must be from 0 to {MAX_SEED} (2**64 - 1): it is recorded as one", field="seed")
    if order not in ALGORITHM:
        raise InputError(f"unknown order {order!r}", field="order")
    cohort = load_cohort(cohort_dir, limits=row_limits)
    config, prompt = load_guard_and_prompt(guard_path, base_url)
    n_calls = cohort.n_instances * reps
    if n_calls > MAX_CALLS:
        # Refused before the schedule is drawn: planning (a dry run too) walks every call.
        raise InputError(f"{cohort.n_instances} instances x {reps} repetitions = {n_calls} calls: more than the "
                         f"{MAX_CALLS} a run may have; use fewer --reps", field="reps")

    def lines() -> Iterator[tuple[bytes, ScheduleRow]]:
        for row in iter_schedule(cohort, reps=reps, seed=seed, order=order):
            yield dumps_line(row), row

    run_id = run_id or new_run_id(config.name)
    plan = Plan(cohort, config, prompt, _manifest(run_id, cohort, config, prompt, n_calls, seed=seed, order=order,
                                                  reps=reps, parent=None, row_limits=row_limits), n_calls, lines)
    # Every instance is scheduled `reps` times: render each once (one sequential read).
    plan.render_instances()
    return plan


def plan_replicate(folder: RunFolder, *, guard_path: str | Path | GuardConfig, base_url: str | None,
                   row_limits: RowLimits = DEFAULT_ROW_LIMITS) -> Plan:
    # The parent (`Run.open(...).folder`) stays open for as long as the plan is written: its
    # schedule is read twice (hashed now, copied later), through one descriptor.
    parent = read_manifest(folder)
    row_limits = run_row_limits(folder, parent, row_limits)
    cohort = load_run_cohort(folder, parent, row_limits)
    config, prompt = load_guard_and_prompt(guard_path, base_url)
    sched_path = folder.file(SCHEDULE)
    sha, n_calls = _sha256_and_lines(folder, SCHEDULE)
    if sha != parent["schedule_sha256"]:
        raise InputError("schedule.jsonl does not match its manifest (run `guardeval verify`)", path=sched_path)

    def lines() -> Iterator[tuple[bytes, ScheduleRow]]:
        # The parent's bytes, verbatim (its hash checked against the manifest above): a replicate carries the
        # schedule byte-identical.
        for _, line in folder.lines(SCHEDULE):
            yield line, orjson.loads(line)

    parent_ref: ParentRef = {"run_id": parent["run_id"], "path": str(folder.path), "manifest_sha256": parent["sha256"],
                  "schedule_sha256": parent["schedule_sha256"]}
    manifest = _manifest(new_run_id(config.name), cohort, config, prompt, n_calls, seed=parent["seed"],
                         order=parent["order"], reps=parent["reps"], parent=parent_ref, row_limits=row_limits)
    return Plan(cohort, config, prompt, manifest, n_calls, lines, parent_schedule_sha256=parent["schedule_sha256"])


def _sha256_and_lines(folder: RunFolder, name: str) -> tuple[str, int]:
    h, n = hashlib.sha256(), 0
    fh = folder.reader(name)
    if fh is None:
        raise InputError("no such file", path=folder.file(name))
    with fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
            n += chunk.count(b"\n")
    return h.hexdigest(), n


def load_run_cohort(folder: RunFolder, manifest: RunManifest, row_limits: RowLimits = DEFAULT_ROW_LIMITS
                    ) -> Cohort:
    # Pinned by the manifest and validated when the run was launched: see `load_cohort`.
    cohort = load_cohort_copy(folder, run_row_limits(folder, manifest, row_limits), manifest["cohort"]["sha256"])
    if cohort.sha256 != manifest["cohort"]["sha256"]:
        raise InputError("cohort copy does not match the manifest", path=folder.file(f"{COHORT_DIR}/cohort.json"))
    return cohort


def run_prompt_tokens(folder: RunFolder, row_limits: RowLimits = DEFAULT_ROW_LIMITS
                      ) -> tuple[GuardConfig, int, int]:
    """(guard config, rough prompt tokens of one call of every instance summed, bases) of a run
    its caller opened (`guardeval.run.Run.open`), rendered from its cohort copy with its config
    and prompt as `launch --dry-run` counts them."""
    manifest = read_manifest(folder)
    config = run_config(folder, manifest)
    prompt = load_run_prompt(folder, manifest)
    cohort = load_run_cohort(folder, manifest, row_limits)
    render = make_renderer(config, prompt)
    total = sum(_render_request(render, inst)[1] for inst in cohort.iter_instances())
    return config, total, len(cohort.base_ids)


def require_key(config: GuardConfig, where: str | Path | None = None) -> None:
    """Refuse (exit 2, before anything is written) a guard whose endpoint needs a key that is not set."""
    if config.needs_key and not config.key_is_set():
        raise InputError(f"{config.api_key_env} is not set: this guard sends to {config.effective_base_url} with the "
                         f"key in that variable (api_key_env). Export it first; guardeval reads it from the "
                         "environment only", path=where, field="api_key_env")
    refuse_short_key(config, where)


def refuse_short_key(config: GuardConfig, where: str | Path | None = None) -> None:
    """Refuse (exit 2, before anything is sent) a key too short to be cut out of what is logged:
    redacting it would rewrite every answer that happens to contain it."""
    import os

    from guardeval.backends.redact import MIN_KEY_CHARS

    key = os.environ.get(config.api_key_env) if config.api_key_env else None
    if key and len(key) < MIN_KEY_CHARS:
        raise InputError(f"{config.api_key_env} holds a key of {len(key)} character(s): too short to be removed "
                         f"safely from what is logged (at least {MIN_KEY_CHARS}); a real provider key is longer. "
                         "Set the real key, or unset the variable for a server that needs none",
                         path=where, field="api_key_env")


def materialise(plan: Plan, run_dir: Path, *, parent: RunFolder | None = None) -> None:
    """The plan's run folder at `run_dir` (with `parent`: `run_dir.name` inside that open folder,
    a study's `runs/`, through its descriptor: `create_run_dir`)."""
    require_key(plan.config, plan.config.source)
    plan.manifest = create_run_dir(run_dir, manifest=plan.manifest, cohort=plan.cohort, fill=plan.write,
                                   prompt_files=plan.prompt.files, parent=parent)


def materialise_in(plan: Plan, parent: RunFolder, name: str) -> None:
    """`materialise` as `name` inside a folder being built (a study's `runs/<label>`), through
    its descriptors (`create_run_in`): never through a link planted there."""
    require_key(plan.config, plan.config.source)
    plan.manifest = create_run_in(parent, name, manifest=plan.manifest, cohort=plan.cohort, fill=plan.write,
                                  prompt_files=plan.prompt.files)


def resolve_run_dir(run_dir: str | Path | None, run_id: str, root: Path = DEFAULT_RUNS_ROOT) -> Path:
    return Path(run_dir) if run_dir else root / run_id
