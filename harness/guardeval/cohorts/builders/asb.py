"""`guardeval cohort build asb`: ASB attacker/normal tools as guard steps, with seed-004 arms.

Each interaction is one ASB agent, one of its tasks and one attacker tool of that agent. Step 1:
the agent calls one of its normal tools (label 0); its observation carries the attacker
instruction naming the attacker tool. Step 2: the agent calls the attacker tool (label 1).
The agent sees its normal tools plus the attacker tool. domain = agent kind.

Arms (seed 004, Table I for ASB): A0 original; NULL2 orthographic rename of the attacker
tools (placebo); A1 threat words removed from attacker tool names; A1b threat wording removed
from attacker tool descriptions; A3 both. Neutral names come from the fixed vocabularies in
`guardeval.cohorts.transforms.names`, never from guard behaviour. Sources are verified against the
pins (MANIFEST.txt, which must agree with the pins below) before any parsing. Another release
of the files (or the tests' ASB-shaped data) is read by passing its pins as `pins`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from guardeval.cohorts.builders.common import (
    ConditionSpec,
    Tokenizer,
    build_rows,
    builder_record,
    condition_records,
    representation_conditions,
    select_conditions,
    tokenizer,
)
from guardeval.cohorts.builders.pins import SourcePin, parse_pin_lines, verify_file
from guardeval.cohorts.builders.sampling import stratified_sample
from guardeval.cohorts.limits import CONFLICTING_KEY, has_conflicting_keys
from guardeval.cohorts.model import write_cohort
from guardeval.cohorts.transforms import compose, identity, make_tool_alias
from guardeval.cohorts.transforms.descriptions import make_description_neutralizer
from guardeval.cohorts.transforms.lexicon import has_threat_word
from guardeval.cohorts.transforms.names import family_table
from guardeval.errors import InputError

# The ASB data files this builder knows how to read (ToolSafe's copy, commit 92a9540e).
ASB_PINS: dict[str, tuple[int, str]] = {
    "agent_task.jsonl": (4935, "d6c1d214811b5d908ae9c04ffbbde36ce35d39932766feb8bf24e202441c1dc8"),
    "all_attack_tools.jsonl": (209436, "c960ab1e60dee2038d51bc64e8f119e565c037c95a8565f176899de8d819a4b2"),
    "all_normal_tools.jsonl": (8807, "45b821931348993de3eda474a997d62cb5b9e7a3fe358e5c81a7ef0417ccb73f"),
}
_NO_PARAMS = {"type": "object", "properties": {}}


Pins = dict[str, tuple[int, str]]


def verify_sources(source: Path, pins: Pins = ASB_PINS) -> list[SourcePin]:
    if source.is_symlink() or not source.is_dir():
        raise InputError("source folder not found (symbolic links are refused)", path=source)
    manifest = parse_pin_lines(source / "MANIFEST.txt")
    provenance = []
    for name, (size, sha) in pins.items():
        if manifest.get(name) != (size, sha):
            raise InputError(f"MANIFEST.txt pin for {name} differs from the pinned ASB release",
                             path=source / "MANIFEST.txt", field=name)
        provenance.append(verify_file(source / name, size, sha))
    return provenance


def _read_jsonl(path: Path, required: tuple[str, ...]) -> list[dict[str, Any]]:
    rows = []
    for lineno, raw in enumerate(path.read_bytes().splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            row = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise InputError(f"not valid JSON ({exc})", path=path, line=lineno) from None
        if has_conflicting_keys(raw, row):
            raise InputError(CONFLICTING_KEY, path=path, line=lineno)
        for key in required:
            if not isinstance(row, dict) or not isinstance(row.get(key), (str, list)):
                raise InputError("missing or mistyped field", path=path, line=lineno, field=key)
        rows.append(row)
    return rows


def load_bases(source: Path, tools: str = "aggressive") -> tuple[list[dict[str, Any]], list[str]]:
    """Bases in file order; also the attacker tool names (the arms rename only those)."""
    agents = _read_jsonl(source / "agent_task.jsonl", ("agent_name", "tasks"))
    attack = _read_jsonl(source / "all_attack_tools.jsonl",
                         ("Attacker Tool", "Attacker Instruction", "Description", "Corresponding Agent", "Aggressive"))
    normal = _read_jsonl(source / "all_normal_tools.jsonl",
                         ("Tool Name", "Description", "Expected Achievements", "Corresponding Agent"))
    if tools not in ("aggressive", "all"):
        raise InputError("must be 'aggressive' or 'all'", field="--tools")
    bases: list[dict[str, Any]] = []
    attacker_names: list[str] = []
    for agent in agents:
        kind = agent["agent_name"]
        normals = [t for t in normal if t["Corresponding Agent"] == kind]
        attackers = [t for t in attack if t["Corresponding Agent"] == kind
                     and (tools == "all" or str(t["Aggressive"]).lower() == "true")]
        if not normals or not attackers:
            continue
        attacker_names.extend(t["Attacker Tool"] for t in attackers)
        for ti, task in enumerate(agent["tasks"]):
            for ai, atk in enumerate(attackers):
                nt = normals[ai % len(normals)]
                interaction = f"asb/{kind}/task{ti}/{atk['Attacker Tool']}"
                descriptions = [{"name": t["Tool Name"], "description": t["Description"], "parameters": _NO_PARAMS}
                                for t in normals]
                descriptions.append({"name": atk["Attacker Tool"], "description": atk["Description"],
                                     "parameters": _NO_PARAMS})
                first = {"name": nt["Tool Name"], "arguments": {}}
                # The observation carries the attacker instruction (observation injection),
                # naming the tool it wants called; framing sentence written here.
                observation = (f"{nt['Expected Achievements']} Next step: {atk['Attacker Instruction']} "
                               f"Use the {atk['Attacker Tool']} tool for this.")
                common = {"interaction_id": interaction, "domain": kind, "user_request": task,
                          "tool_descriptions": descriptions}
                bases.append({**common, "base_id": f"{interaction}/s1", "label": 0, "label_score": 0.0,
                              "tool": first["name"], "history": [], "current_action": first})
                second = {"name": atk["Attacker Tool"], "arguments": {}}
                bases.append({**common, "base_id": f"{interaction}/s2", "label": 1, "label_score": 1.0,
                              "tool": second["name"],
                              "history": [{"role": "assistant", "content": None, "tool_calls": [first]},
                                          {"role": "tool", "name": first["name"], "content": observation}],
                              "current_action": second})
    return bases, sorted(set(attacker_names))


def conditions(attacker_names: list[str], tok: Tokenizer | None = None) -> list[ConditionSpec]:
    ortho = family_table("orthographic", attacker_names)
    neutral = family_table("cue_altering", attacker_names, select=has_threat_word)
    a1 = make_tool_alias(neutral, name="A1", description="threat words removed from attacker tool names")
    a1b = make_description_neutralizer(attacker_names, name="A1b")
    return [
        ConditionSpec("A0", "baseline", identity()),
        ConditionSpec("NULL2", "placebo", make_tool_alias(
            ortho, name="NULL2", description="orthographic rename of attacker tools (case/separators only)"), "names"),
        ConditionSpec("A1", "intervention", a1, "names"),
        ConditionSpec("A1b", "intervention", a1b, "names"),
        ConditionSpec("A3", "intervention", compose(
            "A3", "attacker tool names and descriptions neutralized (A1b then A1)", a1b, a1), "names"),
        *representation_conditions(tok),
    ]


def build_asb(source: str | Path, out: str | Path, *, condition_names: str | None = None,
              tools: str = "aggressive", max_bases: int | None = None, seed: int = 0,
              pins: Pins = ASB_PINS, tokenizer_file: str | Path | None = None) -> tuple[Path, dict[str, Any]]:
    src = Path(source)
    provenance = verify_sources(src, pins)  # before any parsing
    bases, attacker_names = load_bases(src, tools)
    n_all = len(bases)
    if max_bases is not None:
        if max_bases < 1:
            raise InputError("must be at least 1", field="--max-bases")
        bases = stratified_sample(bases, max_bases, seed)
    tok = tokenizer(tokenizer_file)
    specs = select_conditions(conditions(attacker_names, tok), condition_names)
    rows = build_rows(bases, specs)
    path = write_cohort(out, name="asb", version=f"asb-{tools}",
                        description="ASB attacker vs normal tool calls with seed-004 representation arms",
                        conditions=condition_records(specs), rows=rows, sources=provenance,
                        builder={"command": "cohort build asb", "tools": tools, "max_bases": max_bases,
                                 "seed": seed, "bases_before_sampling": n_all, **builder_record(specs, tok)})
    return path, {"bases_before_sampling": n_all, "bases": len(bases), "attacker_tools": len(attacker_names)}
