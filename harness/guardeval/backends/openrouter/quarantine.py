"""OpenRouter's own quarantine checks of an answered call, read from its raw line alone: a
response-cache hit, a router pipeline stage that may have altered the stimulus, and an answer
from outside the pinned providers (or from one the router does not name)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from guardeval.backends.openrouter import providers, routing
from guardeval.backends.quarantine import (
    PROVIDER_DRIFT,
    PROVIDER_UNKNOWN,
    RESPONSE_CACHE_HIT,
    STIMULUS_MUTATED,
    Verdict,
)


def checks(raw: Mapping[str, Any], allowed: Sequence[str]) -> Verdict | None:
    """The first of these that holds, in this order; None when none does."""
    hit, source = routing.cache_hit(raw.get("response_headers"), raw.get("usage"))
    if hit:
        return RESPONSE_CACHE_HIT, f"response cache hit: a replay of generation {source or '(source not named)'}"
    meta = raw.get("openrouter_metadata")
    stage = routing.mutating_stage(meta)
    if stage is not None:
        return STIMULUS_MUTATED, f"router pipeline stage {stage} may have altered the input or the output"
    if allowed:
        # The documented provider is router metadata's (selected endpoint, attempts); the
        # top-level `provider` (absent from OpenRouter's published schema) is the fallback. The
        # dispatcher stores the resolved one as `provider`; reading both again keeps this a
        # function of the raw line as written.
        served, _ = routing.served_by(meta, raw.get("provider"))
        if served is None:
            return PROVIDER_UNKNOWN, None     # `guardeval audit providers` checks it afterwards
        if not providers.is_allowed(served, allowed):
            return PROVIDER_DRIFT, f"answered by {served!r}, outside the pin ({', '.join(allowed)})"
        outside = routing.tried_outside(meta, lambda p: providers.is_allowed(p, allowed))
        if outside is not None:
            return PROVIDER_DRIFT, (f"answered by {served!r} after the router tried {outside!r}, outside the pin "
                                    f"({', '.join(allowed)})")
    return None
