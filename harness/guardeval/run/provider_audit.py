"""`guardeval audit providers RUN`: confirm after the fact which provider served each answered
call and what it cost, from the endpoint's own records (docs/design.md §7). The final answer of
every call is read from raw.jsonl here; asking the endpoint and judging its answers is the
back-end's (its record's `audit_providers`); generation replays are the run's. The run folder is
only read.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson

from guardeval.backends.backend import AuditFindings, FinalAnswer, backend_for, backends_with
from guardeval.errors import InputError
from guardeval.run.folder.folder import RunFolder
from guardeval.run.folder.layout import MANIFEST, RAW
from guardeval.run.folder.lines import iter_jsonl
from guardeval.run.folder.manifest import read_manifest, run_config
from guardeval.run.folder.spend import reported_cost
from guardeval.run.integrity.replay import generation_replays


class ProviderAudit(AuditFindings):
    """`guardeval audit providers`: the back-end's findings on the run, and its verdict `ok`."""

    run_id: str
    base_url: str | None
    generation_replays: int
    ok: bool


def final_answers(folder: RunFolder) -> list[FinalAnswer]:
    """call id, generation id, reported provider and logged spend of every call's final answer."""
    out: dict[str, FinalAnswer] = {}
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


def audit_providers(run: Path | RunFolder, *, base_url: str | None = None, concurrency: int = 8) -> ProviderAudit:
    from guardeval.run.run import Run

    with Run.using(run) as r:
        return _audit(r.folder, base_url, concurrency)


def _audit(folder: RunFolder, base_url: str | None, concurrency: int) -> ProviderAudit:
    manifest = read_manifest(folder)
    config = run_config(folder, manifest).with_base_url(base_url)
    audit = config.backend_entry.audit_providers
    if audit is None:
        servers = " or ".join(f"{backend_for(n).server}'s" for n in backends_with(lambda b: b.audit_providers is not None))
        raise InputError(f"audit providers reads {servers} generation stats; this run used the "
                         f"{config.backend!r} back-end", path=folder.file(MANIFEST), field="guard.backend")
    key = (os.environ.get(config.api_key_env) or None) if config.api_key_env else None
    # A remote endpoint needs the key that made the run; a local one (the simulated provider) is
    # asked with the key when it is set, without it when not, as the run itself was.
    if config.needs_key and not key:
        raise InputError(f"audit providers needs the key that made the run: ${config.api_key_env} is not set")
    answers = final_answers(folder)
    found, all_confirmed = audit(config, key, answers, concurrency)
    replays = generation_replays(folder)
    return {"run_id": manifest["run_id"], "base_url": config.effective_base_url, **found,
            "generation_replays": len(replays), "ok": all_confirmed and not replays}
