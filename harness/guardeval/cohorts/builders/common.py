"""What every builder shares: conditions -> checked rows."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guardeval.canon import sha256_hex
from guardeval.cohorts.model import Condition, Family, build_row
from guardeval.cohorts.transforms import (
    Transform,
    apply_checked,
    arg_alias,
    arg_matched,
    arg_threat,
    check_row,
    combined,
    format_placebo,
    identity,
    make_marker_rewrite,
    make_tool_alias,
    schema_placebo,
)

# The families whose conditions a cohort records its families for (see `condition_records`).
RECORDED_FAMILIES: frozenset[str] = frozenset(("arguments", "schemas"))
BUILTIN_TOKENIZER = "components"


@dataclass(frozen=True)
class ConditionSpec:
    """A cohort condition: its name, role and the transform that produces it."""

    name: str
    role: str
    transform: Transform
    family: Family | None = None

    def condition(self, with_family: bool = False) -> Condition:
        keeps = ", ".join(("label", *self.transform.keeps))
        return Condition(self.name, self.role, f"{self.transform.description}; keeps {keeps} byte-identical",
                         self.transform.acts_on, self.family if with_family else None)


def condition_records(specs: list[ConditionSpec]) -> list[Condition]:
    """The cohort's conditions. Families are recorded when the cohort has a condition of the
    arguments or schemas family (the estimate then runs Holm per family); a cohort without one
    is recorded as before, so its record and its estimates stay as they were."""
    with_family = any(s.family in RECORDED_FAMILIES for s in specs)
    return [s.condition(with_family) for s in specs]


@dataclass(frozen=True)
class Tokenizer:
    """What `arg_matched` counts tokens with, as the cohort's record names it."""

    name: str
    count: Callable[[str], int] | None = None     # None: the built-in component count
    sha256: str | None = None

    def record(self) -> dict[str, Any]:
        return {"name": self.name, **({"sha256": self.sha256} if self.sha256 else {})}


def tokenizer(path: str | Path | None) -> Tokenizer:
    """`--tokenizer FILE` (tokenizer.json or *.tiktoken, read offline), or the built-in count."""
    if path is None:
        return Tokenizer(BUILTIN_TOKENIZER)
    from guardeval.cohorts.transforms.names import load_token_counter

    count = load_token_counter(path)
    return Tokenizer(Path(path).name, count, sha256_hex(Path(path).read_bytes()))


def representation_conditions(tok: Tokenizer | None = None) -> list[ConditionSpec]:
    """The argument and schema conditions every agent-trajectory builder offers (seed 004 §VI a)."""
    tok = tok or Tokenizer(BUILTIN_TOKENIZER)
    return [
        ConditionSpec("arg_alias", "intervention", arg_alias(), "arguments"),
        ConditionSpec("arg_threat", "intervention", arg_threat(), "arguments"),
        ConditionSpec("arg_matched", "intervention", arg_matched(tok.count, tok.name), "arguments"),
        ConditionSpec("schema_placebo", "placebo", schema_placebo(), "schemas"),
    ]


def builder_record(specs: list[ConditionSpec], tok: Tokenizer | None) -> dict[str, Any]:
    """What a builder's record adds for the conditions it built: the tokenizer `arg_matched` used."""
    if tok is None or not any(s.name == "arg_matched" for s in specs):
        return {}
    return {"tokenizer": tok.record()}


def marker_and_alias_conditions(alias_table: Mapping[str, str], tok: Tokenizer | None = None) -> list[ConditionSpec]:
    """The conditions of an agent-trajectory cohort: the baseline, the formatting placebo (the
    placebo of every family without its own), the marker rewrite, the tools renamed by
    `alias_table`, both (its family the markers', its first step), then the argument and schema
    conditions (demo, agentdojo, inspect). A build without `--conditions` makes the first five."""
    return [
        ConditionSpec("original", "baseline", identity()),
        ConditionSpec("format_placebo", "placebo", format_placebo()),
        ConditionSpec("marker_rewrite", "intervention", make_marker_rewrite(), "markers"),
        ConditionSpec("tool_alias", "intervention", make_tool_alias(alias_table), "names"),
        ConditionSpec("combined", "intervention", combined(alias_table), "markers"),
        *representation_conditions(tok),
    ]


def build_rows(bases: Iterable[Mapping[str, Any]], specs: list[ConditionSpec]) -> list[dict[str, Any]]:
    """One row per base x condition, in base order then condition order; every variant checked."""
    rows: list[dict[str, Any]] = []
    for base in bases:
        for spec in specs:
            variant = apply_checked(spec.transform, base, spec.name)
            row = build_row(base, spec.name, spec.role, variant.content, variant.render)
            check_row(base, row, spec.name)
            rows.append(row)
    return rows


def select_conditions(specs: list[ConditionSpec], wanted: str | None) -> list[ConditionSpec]:
    """`--conditions a,b`: keep the named ones (baseline always kept, order of `specs`). Without
    it, the builder's defaults: every condition but the argument and schema ones (opt-in)."""
    from guardeval.errors import InputError

    if not wanted:
        return [s for s in specs if s.family not in RECORDED_FAMILIES]
    names = [w.strip() for w in wanted.split(",") if w.strip()]
    known = {s.name for s in specs}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise InputError(f"unknown condition(s) {', '.join(unknown)}; known: {', '.join(s.name for s in specs)}",
                         field="--conditions")
    return [s for s in specs if s.name in names or s.role == "baseline"]
