"""`guardeval audit providers RUN`: confirm after the fact, from OpenRouter's generation-stats
endpoint, which provider served each answered call and what it cost (docs/design.md §7).

The live drift check reads the completion's `provider` field, which OpenRouter shows in its
examples but not in its published response schema; this audit rests on documented ground
(`provider_name` and `total_cost` of `GET /generation?id=`). It reads the final answer of
every call from raw.jsonl, asks for the stats of its generation id, and reports: answers
confirmed as coming from an allowed provider, answers from another provider (drift), answers
it could not confirm (no generation id, not found, an error), where the completion's own
`provider` field disagrees with the stats, and logged spend against OpenRouter's total cost.
The run folder is only read.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import orjson

from guardeval.backends.openrouter import providers
from guardeval.backends.openrouter.generation import fetch_generations
from guardeval.errors import InputError
from guardeval.run.folder.folder import RunFolder
from guardeval.run.folder.layout import MANIFEST, RAW
from guardeval.run.folder.lines import iter_jsonl
from guardeval.run.folder.manifest import read_manifest, run_config
from guardeval.run.folder.spend import reported_cost
from guardeval.run.integrity.replay import generation_replays

SHOWN = 20   # calls listed per finding (the counts are complete)


def final_answers(folder: RunFolder) -> list[dict[str, Any]]:
    """call id, generation id, reported provider and logged spend of every call's final answer."""
    out: dict[str, dict[str, Any]] = {}
    for _, _, rec in iter_jsonl(folder, RAW):
        if rec.get("outcome") != "reply" or rec.get("final") is not True:
            continue
        gen = rec.get("generation_id")
        if not isinstance(gen, str) or not gen:
            gen = _id_in_response(rec.get("response"))
        out[str(rec.get("call_id"))] = {"call_id": str(rec.get("call_id")), "generation_id": gen,
                                        "provider": rec.get("provider"), "spend": reported_cost(rec.get("usage"))}
    return list(out.values())


def _id_in_response(response: Any) -> str | None:
    """The completion's `id` (lines written before generation ids were recorded on their own)."""
    if not isinstance(response, str):
        return None
    try:
        data = orjson.loads(response)
    except orjson.JSONDecodeError:
        return None
    gen = data.get("id") if isinstance(data, dict) else None
    return gen if isinstance(gen, str) and gen else None


def audit_providers(run: Path | RunFolder, *, base_url: str | None = None, concurrency: int = 8) -> dict[str, Any]:
    from guardeval.run.run import Run

    with Run.using(run) as r:
        return _audit(r.folder, base_url, concurrency)


def _audit(folder: RunFolder, base_url: str | None, concurrency: int) -> dict[str, Any]:
    manifest = read_manifest(folder)
    config = run_config(folder, manifest).with_base_url(base_url)
    if not config.backend_entry.generation_stats:
        raise InputError(f"audit providers reads OpenRouter's generation stats; this run used the "
                         f"{config.backend!r} back-end", path=folder.file(MANIFEST), field="guard.backend")
    key = (os.environ.get(config.api_key_env) or None) if config.api_key_env else None
    # OpenRouter needs the key that made the run; a local endpoint (the simulated provider) is
    # asked with the key when it is set, without it when not, as the run itself was.
    if config.needs_key and not key:
        raise InputError(f"audit providers needs the key that made the run: ${config.api_key_env} is not set")
    answers = final_answers(folder)
    ids = [a["generation_id"] for a in answers if a["generation_id"]]
    stats = anyio.run(lambda: fetch_generations(config.effective_base_url or "", key, ids, concurrency=concurrency))
    allowed = config.allowed_providers
    confirmed = 0
    drift: list[dict[str, Any]] = []
    unconfirmed: list[dict[str, Any]] = []
    reported_differs: list[dict[str, Any]] = []
    cost_differs: list[dict[str, Any]] = []
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
    replays = generation_replays(folder)
    return {
        "run_id": manifest["run_id"], "base_url": config.effective_base_url, "allowed_providers": list(allowed),
        "answers": len(answers), "confirmed": confirmed,
        "drift": len(drift), "drift_calls": drift[:SHOWN],
        "unconfirmed": len(unconfirmed), "unconfirmed_calls": unconfirmed[:SHOWN],
        "reported_differs": len(reported_differs), "reported_differs_calls": reported_differs[:SHOWN],
        "served_by": dict(served.most_common()),
        "spend_logged_usd": round(logged, 10), "total_cost_usd": round(reported_total, 10),
        "cost_differs": len(cost_differs), "cost_differs_calls": cost_differs[:SHOWN],
        "generation_replays": len(replays),
        # Confirmed means every answer's provider was read from the stats and was allowed.
        "ok": not drift and not unconfirmed and not replays,
    }
