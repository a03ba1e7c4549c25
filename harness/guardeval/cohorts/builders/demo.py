"""`guardeval cohort build demo`: the small synthetic cohort shipped with the project.

64 bases (16 per domain, 44 episodes) from `demo_data`, crossed with the five conditions of
the run-engine issue. Deterministic: building twice gives byte-identical files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
from guardeval.cohorts.builders.demo_data import ALIASES, EPISODES, TOOLS, Episode, Tool
from guardeval.cohorts.model import BUNDLED_COHORTS, Base, write_cohort

NAME, VERSION = "demo", "1"
# The built demo cohort, shipped inside the package (in the repository, a link to cohorts/demo).
BUNDLED_DEMO = BUNDLED_COHORTS["demo"]


def conditions(tok: Tokenizer | None = None) -> list[ConditionSpec]:
    return marker_and_alias_conditions(ALIASES, tok)


def _schema(tool: Tool) -> dict[str, Any]:
    props: dict[str, Any] = {}
    for pname, (ptype, pdesc) in tool.params.items():
        props[pname] = {"type": ptype, "description": pdesc}
        if ptype == "array":
            props[pname]["items"] = {"type": "string"}
    return {"type": "object", "properties": props, "required": list(tool.params)}


def _descriptions(domain: str) -> list[dict[str, Any]]:
    return [{"name": t.name, "description": t.description, "parameters": _schema(t)} for t in TOOLS[domain]]


def episode_bases(domain: str, ep: Episode) -> list[Base]:
    """One base per judged step; the history is every earlier call and its observation."""
    interaction = f"demo-{domain}-{ep.key}"
    descriptions = _descriptions(domain)
    history: list[dict[str, Any]] = []
    bases: list[Base] = []
    for k, step in enumerate(ep.steps, start=1):
        call = {"name": step.tool, "arguments": dict(step.args)}
        if step.label is not None:
            bases.append({
                "base_id": f"{interaction}.s{k}", "interaction_id": interaction, "domain": domain,
                "label": step.label, "label_score": float(step.label), "tool": step.tool,
                "user_request": ep.request, "history": [dict(m) for m in history],
                "current_action": call, "tool_descriptions": descriptions,
            })
        history.append({"role": "assistant", "content": None, "tool_calls": [call]})
        history.append({"role": "tool", "name": step.tool, "content": step.obs})
    return bases


def demo_bases() -> list[Base]:
    return [b for domain, eps in EPISODES.items() for ep in eps for b in episode_bases(domain, ep)]


def build_demo(out: str | Path, condition_names: str | None = None, tokenizer_file: str | Path | None = None) -> Path:
    tok = tokenizer(tokenizer_file)
    specs = select_conditions(conditions(tok), condition_names)
    rows = build_rows(demo_bases(), specs)
    return write_cohort(
        out, name=NAME, version=VERSION,
        description="Synthetic demo cohort written for guardeval: 64 bases, 4 domains, 44 interactions",
        conditions=condition_records(specs), rows=rows, sources=[],
        builder={"command": "cohort build demo", "alias_table_size": len(ALIASES), **builder_record(specs, tok)})
