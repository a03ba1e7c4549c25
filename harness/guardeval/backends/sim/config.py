"""The simulated provider's options: latency and fault specs, `ServerConfig`, and the
command-line arguments of `guardeval sim-server` (no server imports, so the CLI starts fast)."""

from __future__ import annotations

import argparse
import math
import os
import random
from dataclasses import dataclass, field

from guardeval.backends.sim.profiles import SHORTCUT_PROFILE, Profile, load_profile
from guardeval.backends.sim.router_faults import ROUTER_FAULTS
from guardeval.errors import InputError

NAMED_FAULTS = ("malformed", "error200", "length", "stall", "drift",
                # OpenRouter's documented error shapes (docs/sim-server.md, "Faults")
                "choice_error", "moderation403", "refusal400", "credits402", "credits402_retry",
                "no_provider_field", "empty_content", "byok_cost",
                # OpenRouter's router (guardeval.backends.sim.router): pipeline stages, fallbacks, availability errors
                *ROUTER_FAULTS)
CHAT_PATHS = ("/chat/completions", "/v1/chat/completions", "/api/v1/chat/completions")
DEFAULT_PRICE_IN, DEFAULT_PRICE_OUT = 1.0, 5.0   # USD per million tokens (Haiku 4.5 list price)
ATTEMPT_MEMORY = 100_000                           # call ids remembered for the per-call attempt counter
GENERATION_MEMORY = 100_000                        # generations remembered for GET /generation
ASSESS_MEMORY = 20_000                             # body hashes whose features are cached
DRIFT_PROVIDER = "driftco"
SUPPORTED_PARAMETERS = ("max_tokens", "temperature", "top_p", "stop", "seed", "response_format",
                        "structured_outputs")


@dataclass(frozen=True)
class Latency:
    kind: str = "fixed"        # fixed | uniform | exp
    a: float = 0.0             # fixed value, uniform low, exp mean (ms)
    b: float = 0.0             # uniform high (ms)

    def sample_s(self, rng: random.Random) -> float:
        if self.kind == "fixed":
            ms = self.a
        elif self.kind == "uniform":
            ms = rng.uniform(self.a, self.b)
        else:
            ms = rng.expovariate(1.0 / self.a) if self.a > 0 else 0.0
        return ms / 1000.0


def _number(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"{what}: '{text}' is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise InputError(f"{what}: '{text}' must be a finite number ≥ 0")
    return value


def parse_latency(spec: str) -> Latency:
    """`N` (fixed ms), `LO:HI` (uniform ms), `exp:MEAN` (exponential ms)."""
    spec = spec.strip()
    if spec.startswith("exp:"):
        return Latency("exp", _number(spec[4:], "--latency-ms"))
    if ":" in spec:
        lo_s, _, hi_s = spec.partition(":")
        lo, hi = _number(lo_s, "--latency-ms"), _number(hi_s, "--latency-ms")
        if hi < lo:
            raise InputError(f"--latency-ms: uniform range {spec!r} has HI < LO")
        return Latency("uniform", lo, hi)
    return Latency("fixed", _number(spec, "--latency-ms"))


@dataclass(frozen=True)
class FaultPlan:
    """Fault kinds with probabilities, in a fixed order (status codes ascending, then named)."""

    kinds: tuple[tuple[str, float], ...] = ()

    def pick(self, u: float) -> str | None:
        acc = 0.0
        for kind, prob in self.kinds:
            acc += prob
            if u < acc:
                return kind
        return None


def parse_faults(spec: str | None) -> FaultPlan:
    """`429=0.2,500=0.05,malformed=0.02,...` → FaultPlan; bad input raises InputError (exit 2)."""
    if not spec or not spec.strip():
        return FaultPlan()
    seen: dict[str, float] = {}
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        key, eq, value = item.partition("=")
        key = key.strip().lower()
        if not eq:
            raise InputError(f"--faults: '{item}' is not KIND=PROBABILITY")
        if key.isdigit():
            if not 400 <= int(key) <= 599:
                raise InputError(f"--faults: status {key} is not an HTTP error status (400-599)")
            key = str(int(key))
        elif key not in NAMED_FAULTS:
            raise InputError(f"--faults: unknown fault kind '{key}' (use a status 400-599 or one of "
                             f"{', '.join(NAMED_FAULTS)})")
        if key in seen:
            raise InputError(f"--faults: '{key}' given twice")
        prob = _number(value.strip(), f"--faults {key}")
        if prob > 1:
            raise InputError(f"--faults: probability of '{key}' is {value}, above 1")
        seen[key] = prob
    total = sum(seen.values())
    if total > 1 + 1e-9:
        raise InputError(f"--faults: probabilities sum to {total:g}, above 1")
    order = sorted((k for k in seen if k.isdigit()), key=int) + [k for k in NAMED_FAULTS if k in seen]
    return FaultPlan(tuple((k, seen[k]) for k in order if seen[k] > 0))


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 0
    latency: Latency = field(default_factory=Latency)
    faults: FaultPlan = field(default_factory=FaultPlan)
    seed: int = 0
    retry_after: str = "0.05"          # seconds, sent verbatim in Retry-After on 429
    stall_s: float = 30.0
    require_key: bool = False
    expected_key: str | None = None    # when set, only this bearer key is accepted (never logged)
    price_in: float = DEFAULT_PRICE_IN
    price_out: float = DEFAULT_PRICE_OUT
    rps_cap: float | None = None       # hard cap: requests admitted per second (token bucket)
    rps_burst: float | None = None     # bucket size (default: a tenth of a second's worth, at least 1)
    max_in_flight: int | None = None   # hard cap: requests handled at once; more get a 429
    echo_call_id: bool = False         # echo X-Call-Id (OpenRouter does not)
    endpoint_providers: tuple[str, ...] | None = None   # slugs the endpoints route lists (None: sim + the table)
    supported_parameters: tuple[str, ...] = SUPPORTED_PARAMETERS
    context_length: int = 200_000
    max_completion_tokens: int = 64_000
    key_limit: float | None = None     # USD limit of the key (GET /key); None: no limit
    preset_cache: str | None = None    # the account's preset caches responses: "on" (the header can opt out) or "forced"
    guardrail_filters: bool = False    # GET /guardrails lists a guardrail with a content filter (else 403)
    profile: Profile = SHORTCUT_PROFILE   # the guard's cue weights (guardeval.backends.sim.profiles)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1", help="address to bind")
    p.add_argument("--port", type=int, default=0, help="port; 0: a free port, shown on the first line")
    p.add_argument("--latency-ms", default="0", metavar="SPEC",
                   help="added latency in ms: N fixed, LO:HI uniform, exp:MEAN exponential")
    p.add_argument("--faults", default="", metavar="SPEC",
                   help="e.g. 429=0.2,500=0.05,malformed=0.02,choice_error=0.01,moderation403=0.01 "
                        f"(kinds: an HTTP status 400-599 or {', '.join(NAMED_FAULTS)})")
    p.add_argument("--seed", type=int, default=0, help="server seed of the guard noise and the fault draws")
    p.add_argument("--profile", default="shortcut", metavar="NAME|FILE",
                   help="the simulated guard's character: shortcut, robust, alias-sensitive, or a TOML file of "
                        "weights (docs/sim-server.md, Profiles)")
    p.add_argument("--retry-after", default="0.05", metavar="S",
                   help="Retry-After value (seconds, sent as given) on --faults 429s and --max-in-flight refusals")
    p.add_argument("--stall-s", default="30", metavar="S", help="extra delay of a `stall` fault, in seconds")
    p.add_argument("--require-key", action="store_true",
                   help="answer 401 to requests without `Authorization: Bearer ...`")
    p.add_argument("--expect-key-env", metavar="VAR",
                   help="accept only the bearer key held in environment variable VAR (others: 401)")
    p.add_argument("--price-in", default=str(DEFAULT_PRICE_IN), metavar="USD",
                   help="USD per million prompt tokens in usage.cost")
    p.add_argument("--price-out", default=str(DEFAULT_PRICE_OUT), metavar="USD",
                   help="USD per million completion tokens in usage.cost")
    p.add_argument("--rps-cap", metavar="R",
                   help="hard rate limit: admit at most R requests per second (token bucket); others get "
                        "an immediate 429 with Retry-After and retry-after-ms")
    p.add_argument("--rps-burst", metavar="B",
                   help="token bucket size for --rps-cap (default: max(1, R/10))")
    p.add_argument("--max-in-flight", metavar="N",
                   help="hard concurrency limit: a request arriving while N are being handled gets an "
                        "immediate 429 with Retry-After (the --retry-after value)")
    p.add_argument("--echo-call-id", action="store_true",
                   help="echo the request's X-Call-Id header in the response (OpenRouter does not)")
    p.add_argument("--endpoint-providers", metavar="SLUGS",
                   help="comma-separated provider slugs the model-endpoints route lists (default: sim and "
                        "every provider of guardeval's display-name table)")
    p.add_argument("--unsupported-params", metavar="NAMES", default="",
                   help="comma-separated parameters the listed endpoints do not support, among "
                        f"{', '.join(SUPPORTED_PARAMETERS)} (e.g. seed)")
    p.add_argument("--context-length", type=int, default=200_000, metavar="N",
                   help="context length of the listed endpoints, in tokens")
    p.add_argument("--key-limit", metavar="USD",
                   help="spending limit of the key shown by GET /key (default: none)")
    p.add_argument("--preset-cache", nargs="?", const="on", choices=("on", "forced"),
                   help="the account's preset enables response caching: `on` (default) unless a request says "
                        "X-OpenRouter-Cache: false, `forced` whatever the request says")
    p.add_argument("--guardrail-filters", action="store_true",
                   help="GET /guardrails lists a guardrail with a content filter (default: 403, management key needed)")


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    if not 0 <= args.port <= 65535:
        raise InputError(f"--port {args.port} is out of range")
    _number(args.retry_after, "--retry-after")
    cap = _number(args.rps_cap, "--rps-cap") if args.rps_cap is not None else None
    burst = _number(args.rps_burst, "--rps-burst") if args.rps_burst is not None else None
    if cap is not None and cap <= 0:
        raise InputError("--rps-cap must be above 0")
    if burst is not None and (cap is None or burst < 1):
        raise InputError("--rps-burst needs --rps-cap and must be at least 1")
    in_flight = None
    if args.max_in_flight is not None:
        if not args.max_in_flight.strip().isdigit() or int(args.max_in_flight) < 1:
            raise InputError(f"--max-in-flight: '{args.max_in_flight}' must be a whole number ≥ 1")
        in_flight = int(args.max_in_flight)
    expected = None
    if args.expect_key_env:
        expected = os.environ.get(args.expect_key_env)
        if not expected:
            raise InputError(f"--expect-key-env: environment variable {args.expect_key_env} is not set",
                             field="--expect-key-env")
    if args.context_length < 1:
        raise InputError("--context-length must be at least 1")
    unsupported = {x.strip() for x in args.unsupported_params.split(",") if x.strip()}
    unknown = sorted(unsupported - set(SUPPORTED_PARAMETERS))
    if unknown:  # a misspelt name would otherwise leave every parameter supported
        raise InputError(f"--unsupported-params: {', '.join(map(repr, unknown))} is not one of "
                         f"{', '.join(SUPPORTED_PARAMETERS)}")
    listed = tuple(x.strip() for x in args.endpoint_providers.split(",") if x.strip()) \
        if args.endpoint_providers is not None else None
    return ServerConfig(
        echo_call_id=args.echo_call_id, endpoint_providers=listed,
        supported_parameters=tuple(x for x in SUPPORTED_PARAMETERS if x not in unsupported),
        context_length=args.context_length,
        key_limit=_number(args.key_limit, "--key-limit") if args.key_limit is not None else None,
        host=args.host, port=args.port, latency=parse_latency(args.latency_ms),
        faults=parse_faults(args.faults), seed=args.seed, retry_after=args.retry_after.strip(),
        stall_s=_number(args.stall_s, "--stall-s"), require_key=args.require_key, expected_key=expected,
        price_in=_number(args.price_in, "--price-in"), price_out=_number(args.price_out, "--price-out"),
        rps_cap=cap, rps_burst=burst, max_in_flight=in_flight,
        preset_cache=args.preset_cache, guardrail_filters=args.guardrail_filters,
        profile=load_profile(args.profile),
    )
