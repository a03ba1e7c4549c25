"""The question a study asks, fixed at launch (docs/study.md): the baseline, the placebo, the
Holm family, the equivalence margin and the failure rule, every default resolved to a value so
that the record says exactly what was asked. It changes only by a recorded edit
(`guardeval study edit STUDY --margin 0.03 --reason TEXT`), which keeps the old value and the new.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from guardeval.errors import InputError
from guardeval.run.folder.layout import utcnow
from guardeval.study.record import QUESTION_FIELDS, Question


def resolve_question(conditions: Sequence[tuple[str, str]], *, baseline: str | None = None,
                     placebo: str | None = None, family: Sequence[str] | None = None,
                     margin: float | None = None, failure_rule: str | None = None) -> Question:
    """The question over a cohort's conditions ((name, role), in the cohort's order), each
    default resolved as `estimate` resolves it; InputError naming the option that does not fit."""
    from guardeval.estimators.core import resolve_names  # numpy and scipy: only when a question is set
    from guardeval.estimators.effects import check_rule
    from guardeval.estimators.verdicts.equivalence import DEFAULT_MARGIN, check_margin

    roles = dict(conditions)
    base = baseline or next((c for c, r in conditions if r == "baseline"), "original")
    base, placebo, _, fam = resolve_names([c for c, _ in conditions], base, placebo, family, roles)
    return {"baseline": base, "placebo": placebo, "family": fam,
            "margin": check_margin(DEFAULT_MARGIN if margin is None else margin),
            "failure_rule": check_rule(failure_rule or "drop")}


def edited(record: Mapping[str, Any], conditions: Sequence[tuple[str, str]], changes: Mapping[str, Any],
           reason: str) -> dict[str, Any]:
    """The record with its question changed by `changes` (field -> new value; absent or None:
    unchanged) and the edit appended to `edits`; InputError for a change that does not fit, an
    edit without a reason, or one that changes nothing."""
    if not reason.strip():
        raise InputError("an edit of the question needs --reason (it is recorded with the edit)", field="reason")
    unknown = sorted(set(changes) - set(QUESTION_FIELDS))
    if unknown:
        raise InputError(f"{unknown[0]!r} is not part of the question ({', '.join(QUESTION_FIELDS)})", field=unknown[0])
    old = dict(record["question"])
    wanted = {k: v for k, v in changes.items() if v is not None}
    new = resolve_question(conditions, **{**old, **wanted})
    diff = {k: {"from": old[k], "to": new[k]} for k in QUESTION_FIELDS if old[k] != new[k]}
    if not diff:
        raise InputError("the edit changes nothing in the question")
    return {**record, "question": new,
            "edits": [*record["edits"], {"at": utcnow(), "changes": diff, "reason": reason.strip()[:4096]}]}
