"""`guardeval cohort inspect`: counts, threat-word shares and re-run invariance checks."""

from __future__ import annotations

from collections import Counter
from typing import Any

from guardeval.canon import canonical_sha256
from guardeval.cohorts.model import CONTENT_FIELDS, Cohort
from guardeval.cohorts.transforms import count_markers, has_threat_word
from guardeval.cohorts.transforms.base import shape


def threat_word_share(cohort: Cohort) -> dict[str, float | None]:
    """{condition: share of label-1 bases whose current tool name contains a threat word}."""
    out: dict[str, float | None] = {}
    for cond in cohort.condition_names:
        ones = [r for r in cohort.instances if r["condition"] == cond and r["label"] == 1]
        out[cond] = round(sum(has_threat_word(r["tool"]) for r in ones) / len(ones), 6) if ones else None
    return out


def invariance_problems(cohort: Cohort) -> list[str]:
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
            for f in ("history", "current_action", "tool_descriptions"):
                if shape(row[f]) != shape(ref[f]):
                    problems.append(f"{where}: '{f}' changed structure, not only text")
            if "marker" in cond or cond == "combined":
                if count_markers(row):
                    problems.append(f"{where}: markers remain")
    return problems


def inspect(cohort: Cohort) -> dict[str, Any]:
    base_rows = [r for r in cohort.instances if r["condition"] == cohort.baseline()]
    steps = Counter(r["interaction_id"] for r in base_rows)
    problems = invariance_problems(cohort)
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
        "invariance": {"ok": not problems, "problems": problems[:50], "n_problems": len(problems)},
    }
