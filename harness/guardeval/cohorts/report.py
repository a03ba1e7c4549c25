"""`guardeval cohort inspect`: counts, threat-word shares and re-run invariance checks."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from guardeval.canon import canonical_sha256
from guardeval.cohorts.model import CONTENT_FIELDS, Cohort
from guardeval.cohorts.transforms import arguments as ak
from guardeval.cohorts.transforms import count_markers, has_threat_word
from guardeval.cohorts.transforms.base import shape
from guardeval.cohorts.transforms.schemas import schema_meaning

ARGUMENT_CONDITIONS = ("arg_alias", "arg_threat", "arg_matched")
# What `cohort inspect` re-checks per condition, beyond what every condition keeps.
CHECKS: dict[str, tuple[str, ...]] = {
    "arg_alias": ("user_request byte-identical", "keys renamed in place, nothing else changed",
                  "one alias per key across the cohort", "no chains", "no collisions within a tool",
                  "aliases carry no threat word"),
    "arg_threat": ("user_request byte-identical", "keys renamed in place, nothing else changed",
                   "one alias per key across the cohort", "no chains", "no collisions within a tool",
                   "every alias carries a threat-lexicon word"),
    "arg_matched": ("user_request byte-identical", "keys renamed in place, nothing else changed",
                    "one alias per key across the cohort", "no chains", "no collisions within a tool",
                    "aliases carry no threat word",
                    "matched to arg_threat's alias on characters, casing and token count"),
    "schema_placebo": ("user_request byte-identical", "only tool_descriptions changes",
                       "the schemas' JSON content unchanged (required read as a set)"),
}


def threat_word_share(cohort: Cohort) -> dict[str, float | None]:
    """{condition: share of label-1 bases whose current tool name contains a threat word}."""
    out: dict[str, float | None] = {}
    for cond in cohort.condition_names:
        ones = [r for r in cohort.instances if r["condition"] == cond and r["label"] == 1]
        out[cond] = round(sum(has_threat_word(r["tool"]) for r in ones) / len(ones), 6) if ones else None
    return out


def invariance_problems(cohort: Cohort, token_count: Callable[[str], int] | None = None) -> list[str]:
    """Checks that need no builder: what every condition must keep relative to the baseline."""
    base_cond = cohort.baseline()
    acts = {c.name: c.acts_on for c in cohort.conditions}
    problems: list[str] = []
    for base_id in cohort.base_ids:
        ref = cohort.instance(base_id, base_cond)
        for cond in cohort.condition_names:
            row = cohort.instance(base_id, cond)
            where = f"base '{base_id}', condition '{cond}'"
            if row["user_request"] != ref["user_request"]:
                problems.append(f"{where}: user_request differs from {base_cond}")
            if "content" not in acts[cond]:
                if any(canonical_sha256(row[f]) != canonical_sha256(ref[f]) for f in CONTENT_FIELDS) \
                        or row["tool"] != ref["tool"]:
                    problems.append(f"{where}: a render-only condition changed content")
            if cond in ARGUMENT_CONDITIONS:
                # Keys renamed on purpose: the argument checks below compare the rows in place.
                pass
            else:
                for f in ("history", "current_action", "tool_descriptions"):
                    if f == "tool_descriptions" and cond == "schema_placebo":
                        continue
                    if shape(row[f]) != shape(ref[f]):
                        problems.append(f"{where}: '{f}' changed structure, not only text")
            if "marker" in cond or cond == "combined":
                if count_markers(row):
                    problems.append(f"{where}: markers remain")
    problems += argument_problems(cohort, token_count)
    problems += schema_placebo_problems(cohort)
    return problems


def _record_tokenizer(cohort: Cohort) -> str:
    tok = (cohort.meta.get("builder") or {}).get("tokenizer") or {}
    return str(tok.get("name") or "components")


def argument_problems(cohort: Cohort, token_count: Callable[[str], int] | None = None) -> list[str]:
    """The argument conditions against the baseline, base by base: the key table each row
    implies (place by place), one alias per key across the cohort, no chains or collisions,
    the row equal to its baseline with the table applied, and each condition's own rule on
    its aliases (arg_matched: matched to arg_threat's alias of the same key)."""
    present = [c for c in ARGUMENT_CONDITIONS if c in cohort.condition_names]
    if not present:
        return []
    base_cond = cohort.baseline()
    if token_count is None:
        # The built-in count is re-derived; a tokenizer file not given is not checked (said in
        # the report's `not_checked`), never guessed.
        token_count = ak.component_count if _record_tokenizer(cohort) == "components" else (lambda s: 0)
    problems: list[str] = []
    seen: dict[str, dict[str, str]] = {c: {} for c in present}
    for base_id in cohort.base_ids:
        ref = cohort.instance(base_id, base_cond)
        tables: dict[str, dict[str, str]] = {}
        for cond in present:
            where = f"base '{base_id}', condition '{cond}'"
            row = cohort.instance(base_id, cond)
            before, after = list(ak.argument_keys(ref)), list(ak.argument_keys(row))
            if [(w, t) for w, t, _ in before] != [(w, t) for w, t, _ in after]:
                problems.append(f"{where}: argument keys are not where the baseline's are")
                continue
            table: dict[str, str] = {}
            for (_, _, k), (_, _, a) in zip(before, after):
                if table.setdefault(k, a) != a:
                    problems.append(f"{where}: key '{k}' renamed two ways in one row")
                if seen[cond].setdefault(k, a) != a:
                    problems.append(f"{where}: key '{k}' renamed '{a}', elsewhere '{seen[cond][k]}'")
            tables[cond] = table
            for problem in (ak.table_problems(ref, table), ak.placement_problems(ref, row, table)):
                if problem:
                    problems.append(f"{where}: {problem}")
            for a in table.values():
                if cond == "arg_threat" and not has_threat_word(a):
                    problems.append(f"{where}: '{a}' carries no threat-lexicon word")
                if cond != "arg_threat" and has_threat_word(a):
                    problems.append(f"{where}: '{a}' carries a threat word")
        if "arg_matched" in tables and "arg_threat" in tables:
            for k, m in tables["arg_matched"].items():
                t = tables["arg_threat"].get(k)
                if t is not None and (problem := ak.form_problem(t, m, token_count)):
                    problems.append(f"base '{base_id}', condition 'arg_matched': {problem}")
    return problems


def schema_placebo_problems(cohort: Cohort) -> list[str]:
    """schema_placebo against the baseline: only tool_descriptions changes, and only its form."""
    if "schema_placebo" not in cohort.condition_names:
        return []
    base_cond = cohort.baseline()
    problems: list[str] = []
    for base_id in cohort.base_ids:
        ref, row = cohort.instance(base_id, base_cond), cohort.instance(base_id, "schema_placebo")
        where = f"base '{base_id}', condition 'schema_placebo'"
        for f in ("history", "current_action", "tool"):
            if canonical_sha256(row[f]) != canonical_sha256(ref[f]):
                problems.append(f"{where}: '{f}' changed (the placebo changes the tool schemas only)")
        if schema_meaning(row["tool_descriptions"]) != schema_meaning(ref["tool_descriptions"]):
            problems.append(f"{where}: the tool schemas' JSON content changed")
    return problems


def checks_run(cohort: Cohort) -> dict[str, list[str]]:
    """{condition: the condition-specific checks `inspect` ran on it}."""
    return {c: list(CHECKS[c]) for c in cohort.condition_names if c in CHECKS}


def inspect(cohort: Cohort, token_count: Callable[[str], int] | None = None) -> dict[str, Any]:
    """`token_count`: the tokenizer the record names (`--tokenizer`), for arg_matched's token
    counts; without it a record naming a tokenizer file has its token counts listed as not checked."""
    base_rows = [r for r in cohort.instances if r["condition"] == cohort.baseline()]
    steps = Counter(r["interaction_id"] for r in base_rows)
    problems = invariance_problems(cohort, token_count)
    tokenizer = _record_tokenizer(cohort)
    unchecked = (["arg_matched token counts (the record names tokenizer "
                  f"'{tokenizer}': pass it with --tokenizer)"]
                 if "arg_matched" in cohort.condition_names and token_count is None and tokenizer != "components"
                 else [])
    return {
        "name": cohort.name, "sha256": cohort.sha256, "path": str(cohort.path),
        "n_rows": len(cohort.instances), "n_bases": len(base_rows), "n_interactions": len(steps),
        "by_domain": dict(sorted(Counter(r["domain"] for r in base_rows).items())),
        "by_label": {str(k): v for k, v in sorted(Counter(str(r["label"]) for r in base_rows).items())},
        "by_domain_label": {f"{d}/{lab}": n for (d, lab), n
                            in sorted(Counter((r["domain"], str(r["label"])) for r in base_rows).items())},
        "by_condition": {c.name: {"role": c.role, "rows": sum(r["condition"] == c.name for r in cohort.instances)}
                         for c in cohort.conditions},
        "steps_per_interaction": {str(k): v for k, v in sorted(Counter(steps.values()).items())},
        "threat_word_share": threat_word_share(cohort),
        "invariance": {"ok": not problems, "problems": problems[:50], "n_problems": len(problems),
                       **({"checks": checks_run(cohort), "not_checked": unchecked} if checks_run(cohort) else {})},
        **({"families": cohort.families()} if cohort.families() else {}),
    }
