"""`guardeval audit providers RUN` for OpenRouter: confirm after the fact, from its generation-stats
endpoint, which provider served each answered call and what it cost (docs/design.md §7).

The live drift check reads the completion's `provider` field, which OpenRouter shows in its
examples but not in its published response schema; this audit rests on documented ground
(`provider_name` and `total_cost` of `GET /generation?id=`). Given the final answer of every call
(read from raw.jsonl by guardeval.run.provider_audit), it asks for the stats of its generation id
and reports: answers confirmed as coming from an allowed provider, answers from another provider
(drift), answers it could not confirm (no generation id, not found, an error), where the
completion's own `provider` field disagrees with the stats, and logged spend against OpenRouter's
total cost.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import anyio

from guardeval.backends.backend import AuditFindings, CostDiffersCall, DriftCall, FinalAnswer, ReportedDiffersCall, UnconfirmedCall
from guardeval.backends.openrouter import providers
from guardeval.backends.openrouter.generation import fetch_generations

SHOWN = 20   # calls listed per finding (the counts are complete)


def audit(config: Any, key: str | None, answers: list[FinalAnswer], concurrency: int) -> tuple[AuditFindings, bool]:
    """(the findings, in report order; whether every answer was confirmed from an allowed provider)."""
    ids = [a["generation_id"] for a in answers if a["generation_id"]]
    stats = anyio.run(lambda: fetch_generations(config.effective_base_url or "", key, ids, concurrency=concurrency))
    allowed = config.allowed_providers
    confirmed = 0
    drift: list[DriftCall] = []
    unconfirmed: list[UnconfirmedCall] = []
    reported_differs: list[ReportedDiffersCall] = []
    cost_differs: list[CostDiffersCall] = []
    served: Counter[str] = Counter()
    logged = reported_total = 0.0
    for a in answers:
        st = stats.get(a["generation_id"]) if a["generation_id"] else None
        if st is None or not st.found:
            unconfirmed.append({"call_id": a["call_id"], "generation_id": a["generation_id"],
                                "why": st.error if st is not None else "no generation id recorded"})
            continue
        served[st.provider_name or "(none)"] += 1
        if allowed and not providers.is_allowed(st.provider_name, allowed):
            drift.append({"call_id": a["call_id"], "provider_name": st.provider_name})
        else:
            confirmed += 1
        if a["provider"] is not None and providers.key(a["provider"]) != providers.key(st.provider_name):
            reported_differs.append({"call_id": a["call_id"], "reported": a["provider"],
                                     "provider_name": st.provider_name})
        spend = a["spend"] if isinstance(a["spend"], (int, float)) and math.isfinite(a["spend"]) else None
        if spend is not None:
            logged += spend
        if st.total_cost is not None:
            reported_total += st.total_cost
        if spend is None or st.total_cost is None or not math.isclose(spend, st.total_cost, rel_tol=1e-6,
                                                                        abs_tol=1e-9):
            cost_differs.append({"call_id": a["call_id"], "logged": spend, "total_cost": st.total_cost})
    found: AuditFindings = {
        "allowed_providers": list(allowed),
        "answers": len(answers), "confirmed": confirmed,
        "drift": len(drift), "drift_calls": drift[:SHOWN],
        "unconfirmed": len(unconfirmed), "unconfirmed_calls": unconfirmed[:SHOWN],
        "reported_differs": len(reported_differs), "reported_differs_calls": reported_differs[:SHOWN],
        "served_by": dict(served.most_common()),
        "spend_logged_usd": round(logged, 10), "total_cost_usd": round(reported_total, 10),
        "cost_differs": len(cost_differs), "cost_differs_calls": cost_differs[:SHOWN],
    }
    # Confirmed means every answer's provider was read from the stats and was allowed.
    return found, not drift and not unconfirmed
