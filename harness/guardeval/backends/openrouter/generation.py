"""OpenRouter's generation-stats endpoint: which provider served a generation, at what cost.

`GET /generation?id=ID` (https://openrouter.ai/docs/api-reference/get-a-generation) answers
`{"data": {"id", "provider_name", "total_cost", "model", "is_byok", "upstream_inference_cost",
...}}` for a generation the key made; a generation can take a moment to appear (404 until
then). Unlike the chat completion's undocumented `provider` field, `provider_name` here is
documented: `guardeval audit providers` confirms a run's providers from it after the fact.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import anyio

from guardeval.backends import http_get as http
from guardeval.backends.openrouter.errors import message_of

ATTEMPTS = 4            # per id: 429 and 5xx are retried with a short backoff
TIMEOUT_S = 20.0


@dataclass
class GenerationStats:
    id: str
    found: bool
    provider_name: str | None = None
    total_cost: float | None = None
    error: str | None = None        # why the stats could not be read (not found, HTTP status, network)


async def fetch_generations(base_url: str, key: str | None, ids: Iterable[str], *, concurrency: int = 8,
                            timeout_s: float = TIMEOUT_S) -> dict[str, GenerationStats]:
    """Stats of every id (at most `concurrency` requests in flight)."""
    todo = list(dict.fromkeys(ids))
    out: dict[str, GenerationStats] = {}
    limiter = anyio.Semaphore(max(1, concurrency))
    target = http.url(base_url, "generation")
    async with http.client(concurrency) as client:
        async def one(gen: str) -> None:
            async with limiter:
                out[gen] = await _fetch(client, target, key, gen, timeout_s)
        async with anyio.create_task_group() as tg:
            for gen in todo:
                tg.start_soon(one, gen)
    return out


async def _fetch(client: Any, target: str, key: str | None, gen: str, timeout_s: float) -> GenerationStats:
    error = ""
    for attempt in range(ATTEMPTS):
        try:
            answer = await http.get_json(client, target, key=key, timeout_s=timeout_s, params={"id": gen})
        except http.FetchError as exc:
            error = str(exc)
        else:
            data = answer.data.get("data") if isinstance(answer.data, dict) else None
            if answer.status == 200 and isinstance(data, dict):
                name, cost = data.get("provider_name"), data.get("total_cost")
                usd = float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) else math.nan
                return GenerationStats(gen, True, name if isinstance(name, str) else None,
                                       usd if math.isfinite(usd) else None)
            error = f"HTTP {answer.status}: {message_of(answer.text, limit=200)}"
            if answer.status != 429 and answer.status < 500:
                break   # 404 (not there, or not yet), 401: asking again now will not help
        if attempt + 1 < ATTEMPTS:
            await anyio.sleep(min(4.0, 0.25 * 2 ** attempt) * random.uniform(0.5, 1.5))
    return GenerationStats(gen, False, error=error)
