"""A back-end's own quarantine checks (docs/design.md §10): the codes they may give, and the
hook's shape. The generic decision step (guardeval.run.dispatch.decide) calls its back-end's hook
(`Backend.quarantine`) for every answered call and knows nothing of any back-end's routing."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

PROVIDER_DRIFT = "provider_drift"
PROVIDER_UNKNOWN = "provider_unknown"
RESPONSE_CACHE_HIT = "response_cache_hit"    # a response cache answered (a copy of another generation)
STIMULUS_MUTATED = "stimulus_mutated"        # a router pipeline stage may have altered input or output

# (quarantine code, what it was: the decision's detail, or None to keep the parser's)
Verdict = tuple[str, str | None]
# check(raw line of an answered call, the routing slugs the config allows) -> a verdict, or None.
QuarantineCheck = Callable[[Mapping[str, Any], Sequence[str]], Verdict | None]


def no_checks(raw: Mapping[str, Any], allowed: Sequence[str]) -> Verdict | None:
    return None
