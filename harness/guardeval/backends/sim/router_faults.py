"""The router faults of the simulated provider (harness/guardeval/backends/sim/router.py), without imports: the
command line's option parser reads them and must stay quick to build."""

from __future__ import annotations

# code -> (HTTP status, retryable). The statuses are the simulator's choice (the docs tell clients
# to switch on `retryable`, which guardeval does; the status is never read for these).
AVAILABILITY: dict[str, tuple[int, bool]] = {
    "model_not_found": (404, False), "wrong_endpoint": (400, False), "no_endpoints": (404, False),
    "model_deprecated": (410, False), "model_unavailable_upstream": (503, True), "capacity_exhausted": (503, True),
    "temporarily_unavailable": (503, True), "region_restricted": (403, False), "privacy_restricted": (404, False),
    "constraint_filtered": (404, False), "free_variant_ended": (410, False),
    "unknown": (503, False),    # `avail_unknown`: a code the docs do not list (`retryable` left out)
}
AVAILABILITY_FAULTS = tuple(f"avail_{c}" for c in AVAILABILITY)
STAGE_FAULTS = ("compression_stage", "guardrail_stage")
ROUTER_FAULTS = (*STAGE_FAULTS, "fallback_attempt", "metadata_drift", *AVAILABILITY_FAULTS)
FALLBACK_PROVIDER = "Fallbackco"
