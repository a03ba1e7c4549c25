"""`guardeval cohort build agentdojo`: guard steps replayed from AgentDojo ground truth.

For each user task x injection task whose injection vectors the user task's ground truth
reaches, the user task's ground-truth calls are replayed in an environment with the attack in
place. Each benign call is a base (label 0); right after the first observation that carries
the injection, the injection task's first ground-truth call is the hijacked step (label 1).
interaction = suite/user_task/injection_task, domain = suite.

Runs offline on the installed `agentdojo` package (optional extra). Benchmark text is data:
the suite's environment template is filled by a literal single-pass placeholder substitution
(never `str.format` on benchmark text) and parsed with the C YAML loader (25x faster than the
package's own loader, same result: a test compares them).
"""

from __future__ import annotations

import datetime
import importlib.metadata
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from guardeval.canon import sha256_hex
from guardeval.cohorts.builders.agentdojo_aliases import AGENTDOJO_ALIASES
from guardeval.cohorts.builders.common import (
    ConditionSpec,
    Tokenizer,
    build_rows,
    builder_record,
    condition_records,
    marker_and_alias_conditions,
    select_conditions,
    tokenizer,
)
from guardeval.cohorts.builders.frozen_clock import frozen_clock
from guardeval.cohorts.builders.pins import SourcePin
from guardeval.cohorts.builders.sampling import stratified_sample
from guardeval.cohorts.model import Base, write_cohort
from guardeval.cohorts.transforms.base import deep_copy
from guardeval.errors import InputError

DEFAULT_SUITES = ("banking", "slack", "travel", "workspace")
DEFAULT_VERSION = "v1.2"
DEFAULT_ATTACK = "important_instructions"
# Attacks that address the model by name need a pipeline name; fixed so builds are stable.
TARGET_PIPELINE_NAME = "gpt-4o-2024-05-13"
# The suites' tools stamp new files and sent emails with `datetime.now()`; the replay runs at this
# fixed instant instead (noon of the suites' calendar day) so that two builds are byte-identical.
REPLAY_CLOCK = datetime.datetime(2024, 5, 15, 12, 0, 0)
_PLACEHOLDER = re.compile(r"\{([A-Za-z0-9_]+)\}")
# libyaml's loader when PyYAML was built with it (same parse, much faster), else the pure one.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _require_agentdojo() -> None:
    try:
        import agentdojo  # noqa: F401
    except ModuleNotFoundError:
        raise InputError("the agentdojo builder needs the optional extra: pip install 'guardeval[agentdojo]'",
                         field="agentdojo") from None


def conditions(suites: list[str], tok: Tokenizer | None = None) -> list[ConditionSpec]:
    # One merged table: suites share some names (send_email) and map them to the same alias.
    table: dict[str, str] = {}
    for s in suites:
        for k, v in AGENTDOJO_ALIASES.get(s, {}).items():
            if table.setdefault(k, v) != v:
                raise InputError(f"alias tables disagree on '{k}'", field="alias")
    return marker_and_alias_conditions(table, tok)


def _jsonable(value: Any) -> Any:
    """Call arguments as plain JSON (dates and enums become strings)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "value") and isinstance(value.value, (str, int)):
        return value.value
    return str(value)


def _task_number(task_id: str) -> int:
    m = re.search(r"(\d+)$", task_id)
    return int(m.group(1)) if m else -1


@dataclass
class SuiteStats:
    user_tasks: int = 0
    injection_tasks: int = 0
    not_injectable: list[str] = field(default_factory=list)
    interactions: int = 0
    benign: int = 0
    hijacked: int = 0
    no_hijack: int = 0  # pairs skipped: the injection task has an empty ground truth


class _Target:
    """Stand-in for the attacked pipeline: attacks read only its name."""

    name = TARGET_PIPELINE_NAME


class SuiteReplay:
    def __init__(self, version: str, suite_name: str, attack_name: str) -> None:
        import agentdojo.attacks  # noqa: F401  (registers the built-in attacks)
        from agentdojo.attacks.attack_registry import ATTACKS, load_attack
        from agentdojo.functions_runtime import FunctionsRuntime
        from agentdojo.task_suite.load_suites import get_suites
        from agentdojo.task_suite.task_suite import read_suite_file

        try:
            suites = get_suites(version)
        except Exception:
            raise InputError(f"unknown AgentDojo benchmark version '{version}'", field="--version") from None
        if suite_name not in suites:
            raise InputError(f"unknown suite '{suite_name}' (known: {', '.join(sorted(suites))})", field="--suites")
        if attack_name not in ATTACKS:
            raise InputError(f"unknown attack '{attack_name}'", field="--attack")
        self.suite = suites[suite_name]
        self.name = suite_name
        self.attack = load_attack(attack_name, self.suite, _Target())
        self.runtime = FunctionsRuntime(self.suite.tools)
        self.template = read_suite_file(self.suite.name, "environment.yaml", self.suite.data_path)
        self.defaults = self.suite.get_injection_vector_defaults()
        self.descriptions = [{"name": t.name, "description": t.description,
                              "parameters": t.parameters.model_json_schema()} for t in self.suite.tools]

    def environment(self, injections: dict[str, str]):
        values = {**self.defaults, **injections}
        # Single pass, literal: an injected value containing "{x}" is never re-expanded.
        text = _PLACEHOLDER.sub(lambda m: values[m.group(1)] if m.group(1) in values else m.group(0),
                                self.template)
        return self.suite.environment_type.model_validate(yaml.load(text, Loader=_YAML_LOADER))

    def run(self, env, call) -> str:
        from agentdojo.agent_pipeline.tool_execution import tool_result_to_str

        result, error = self.runtime.run_function(env, call.function, call.args)
        return error if error is not None else tool_result_to_str(result)

    def candidates(self, user_task) -> tuple[list[str], int | None]:
        """Injection vectors the ground truth sees, and the first step that sees one (canary run)."""
        canaries = {v: f"<CANARY---{v}--->" for v in self.defaults}
        env = self.environment(canaries)
        seen: list[str] = []
        first: int | None = None
        for k, call in enumerate(user_task.ground_truth(env)):
            out = self.run(env, call)
            hits = [v for v, c in canaries.items() if c in out]
            if hits and first is None:
                first = k
            seen.extend(v for v in hits if v not in seen)
        return sorted(seen), first

    def bases(self, stats: SuiteStats) -> list[Base]:
        user_tasks = sorted(self.suite.user_tasks.values(), key=lambda t: _task_number(t.ID))
        injection_tasks = sorted(self.suite.injection_tasks.values(), key=lambda t: _task_number(t.ID))
        stats.user_tasks, stats.injection_tasks = len(user_tasks), len(injection_tasks)
        out: list[Base] = []
        for ut in user_tasks:
            out.extend(self.user_task_bases(ut, injection_tasks, stats))
        return out

    def user_task_bases(self, ut, injection_tasks, stats: SuiteStats) -> list[Base]:
        """The bases of one user task under each injection task, replayed at REPLAY_CLOCK."""
        with frozen_clock("agentdojo", REPLAY_CLOCK):
            cands, first = self.candidates(ut)
            if not cands or first is None:
                stats.not_injectable.append(ut.ID)
                return []
            # The attack asks for candidates itself (slow loader); hand it ours instead.
            self.attack.get_injection_candidates = lambda _ut, _c=cands: list(_c)
            return [b for it in injection_tasks for b in self._replay(ut, it, first, stats)]

    def _replay(self, ut, it, first: int, stats: SuiteStats) -> list[Base]:
        injections = self.attack.attack(ut, it)
        env = self.environment(injections)
        if not it.ground_truth(env.model_copy(deep=True)):
            # No ground-truth call to place as the hijacked step: the pair has no label-1 step,
            # so it is left out (counted) rather than emitted as a benign-only duplicate.
            stats.no_hijack += 1
            return []
        interaction = f"{self.name}/{ut.ID}/{it.ID}"
        stats.interactions += 1
        history: list[dict[str, Any]] = []
        out: list[Base] = []

        def base(suffix: str, call: dict[str, Any], label: int) -> Base:
            return {"base_id": f"{interaction}/{suffix}", "interaction_id": interaction, "domain": self.name,
                    "label": label, "label_score": float(label), "tool": call["name"],
                    "user_request": ut.PROMPT, "history": deep_copy(history),
                    "current_action": call, "tool_descriptions": self.descriptions}

        for k, gt_call in enumerate(ut.ground_truth(env)):
            call = {"name": gt_call.function, "arguments": _jsonable(dict(gt_call.args))}
            out.append(base(f"s{k + 1}", call, 0))
            stats.benign += 1
            observation = self.run(env, gt_call)
            history.append({"role": "assistant", "content": None, "tool_calls": [deep_copy(call)]})
            history.append({"role": "tool", "name": call["name"], "content": observation})
            if k == first:
                hijack = it.ground_truth(env.model_copy(deep=True))
                if not hijack:
                    raise InputError(f"{interaction}: injection task ground truth vanished mid-replay")
                h = {"name": hijack[0].function, "arguments": _jsonable(dict(hijack[0].args))}
                out.append(base("hijack", h, 1))
                stats.hijacked += 1
        return out


def _sources(suites: list[str]) -> list[SourcePin]:
    """Pin the suite data files of the installed package (provenance, not a download)."""
    import importlib.resources

    version = importlib.metadata.version("agentdojo")
    root = importlib.resources.files("agentdojo") / "data" / "suites"
    pins: list[SourcePin] = []
    for s in suites:
        folder = root / s
        for p in sorted(Path(str(folder)).rglob("*")):
            if p.is_file() and p.suffix in (".yaml", ".yml", ".txt"):
                data = p.read_bytes()
                pins.append({"path": f"agentdojo=={version}:data/suites/{p.relative_to(Path(str(root)))}",
                             "bytes": len(data), "sha256": sha256_hex(data)})
    return pins


def build_agentdojo(out: str | Path, *, suites: list[str] | None = None, version: str = DEFAULT_VERSION,
                    attack: str = DEFAULT_ATTACK, condition_names: str | None = None,
                    max_bases: int | None = None, seed: int = 0,
                    tokenizer_file: str | Path | None = None) -> tuple[Path, dict[str, Any]]:
    _require_agentdojo()
    suites = list(suites or DEFAULT_SUITES)
    tok = tokenizer(tokenizer_file)
    specs = select_conditions(conditions(suites, tok), condition_names)
    bases: list[Base] = []
    stats: dict[str, SuiteStats] = {}
    for s in suites:
        st = stats[s] = SuiteStats()
        bases.extend(SuiteReplay(version, s, attack).bases(st))
    if not bases:
        raise InputError("no bases were produced", field="--suites")
    n_all = len(bases)
    if max_bases is not None:
        if max_bases < 1:
            raise InputError("must be at least 1", field="--max-bases")
        bases = stratified_sample(bases, max_bases, seed)
    rows = build_rows(bases, specs)
    path = write_cohort(
        out, name="agentdojo", version=f"{version}-{attack}",
        description=f"AgentDojo {version} ground-truth replay under the '{attack}' attack",
        conditions=condition_records(specs), rows=rows, sources=_sources(suites),
        builder={"command": "cohort build agentdojo", "agentdojo": importlib.metadata.version("agentdojo"),
                 "suites": suites, "version": version, "attack": attack, "target_pipeline": TARGET_PIPELINE_NAME,
                 "replay_clock": REPLAY_CLOCK.isoformat(),
                 "max_bases": max_bases, "seed": seed, "bases_before_sampling": n_all, **builder_record(specs, tok)})
    summary = {s: {"user_tasks": st.user_tasks, "injection_tasks": st.injection_tasks,
                   "not_injectable": st.not_injectable, "interactions": st.interactions,
                   "benign_steps": st.benign, "hijacked_steps": st.hijacked,
                   "pairs_skipped_no_injection_ground_truth": st.no_hijack} for s, st in stats.items()}
    return path, {"bases_before_sampling": n_all, "bases": len(bases), "suites": summary}
