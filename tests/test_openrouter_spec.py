"""Conformance with OpenRouter's published OpenAPI specification itself (issue 21).

The spec (`openapi/openapi.yaml` of github.com/OpenRouterTeam/docs) is read from
`../shared/reference/openrouter-openapi.yaml`, checked against the sha256 pinned in the
MANIFEST.txt beside it, and never copied into the repository; without it these tests skip,
naming the file. Its component schemas are JSON Schema 2020-12 (OpenAPI 3.1), validated with
jsonschema: guardeval's rendered request body against `ChatRequest`; every body of the
conformance fixture (tests/fixtures/openrouter/conformance.json) and every answer of the
simulated provider against `ChatResult` or the error envelope documented for its status.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator

from guardeval.backends.config import load_guard_config
from guardeval.backends.openrouter.guard import OpenRouterGuard
from guardeval.backends.prompts import load_prompt
from guardeval.backends.sim import SimServerProcess
from guardeval.backends.sim.config import NAMED_FAULTS

from conftest import DEMO_COHORT, REPO, cli_env, shared_or_skip

pytestmark = pytest.mark.fast

SPEC = "reference/openrouter-openapi.yaml"
FIXTURE = REPO / "tests" / "fixtures" / "openrouter" / "conformance.json"
CASES: list[dict[str, Any]] = json.loads(FIXTURE.read_text("utf-8"))["cases"]


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    path = shared_or_skip(SPEC)
    import yaml  # the test extra's PyYAML: the spec is YAML
    data = path.read_bytes()
    pinned = [line.split() for line in (path.parent / "MANIFEST.txt").read_text("utf-8").splitlines()
              if line.strip().endswith(path.name) and not line.startswith("#")]
    assert pinned, f"{path.parent / 'MANIFEST.txt'} does not pin {path.name}"
    assert hashlib.sha256(data).hexdigest() == pinned[0][1], f"{path} is not the pinned copy (sha256 differs)"
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    loaded: dict[str, Any] = yaml.load(data, Loader=loader)
    return loaded


def validator(spec: dict[str, Any], ref: str) -> Draft202012Validator:
    """A validator of the component `ref` (`#/components/schemas/NAME`), the spec as its document."""
    return Draft202012Validator({"$ref": ref, "components": spec["components"]})


def problems(spec: dict[str, Any], ref: str, body: Any) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path)) or '(body)'}: {e.message[:200]}"
            for e in validator(spec, ref).iter_errors(body)][:5]


def chat_schema(spec: dict[str, Any], status: int, body: Any) -> str:
    """The schema the spec documents for a chat-completions answer with this status and body."""
    responses = spec["paths"]["/chat/completions"]["post"]["responses"]
    if status == 200 and isinstance(body, dict) and "error" not in body:
        return "#/components/schemas/ChatResult"
    if status == 200:   # an error carried by a 200: the envelope of the status it names
        code = body["error"].get("code")
        status = code if isinstance(code, int) else 500
    # A status the path does not list (410, ...) has the same envelope as the others.
    entry = responses.get(str(status)) or responses["400"]
    return str(entry["content"]["application/json"]["schema"]["$ref"])


# ------------------------------------------------------------------------------ the request

def test_the_rendered_request_matches_chat_request(spec: dict[str, Any]) -> None:
    config = load_guard_config(REPO / "guards" / "haiku-4.5.toml")
    prompt = load_prompt(config.prompt)
    row = json.loads((DEMO_COHORT / "instances.jsonl").read_text("utf-8").splitlines()[0])
    body = OpenRouterGuard(config, prompt).render(row)
    assert problems(spec, "#/components/schemas/ChatRequest", body) == []
    # Nothing that turns on a pipeline stage that could rewrite the stimulus or the answer.
    assert not {"plugins", "transforms"} & set(body)
    # And the check can fail: a body the spec refuses is named.
    assert problems(spec, "#/components/schemas/ChatRequest", {**body, "messages": []})


# ------------------------------------------------------------------------- the fixture bodies

@pytest.mark.parametrize("case", [c for c in CASES if "body" in c], ids=lambda c: c["name"])
def test_every_fixture_body_matches_the_spec(spec: dict[str, Any], case: dict[str, Any]) -> None:
    ref = chat_schema(spec, case["status"], case["body"])
    found = problems(spec, ref, case["body"])
    if "spec" in case:   # off the spec on purpose: it must really be off it
        assert found, f"{case['name']} is marked off the spec ({case['spec']}) but validates against {ref}"
    else:
        assert found == [], (ref, found)


# ------------------------------------------------------------------------- the simulator

@pytest.fixture(scope="module")
def sim_answers() -> Iterator[tuple[list[tuple[int, Any, dict[str, str]]], dict[str, Any]]]:
    """Answers of a simulator drawing every fault kind that answers in JSON (not `malformed`,
    cut in the middle on purpose, nor `stall`), with its cache forced on, router metadata asked for."""
    kinds = [k for k in NAMED_FAULTS if k not in ("malformed", "stall")]
    faults = ",".join(f"{k}={0.9 / (len(kinds) + 4):.6f}" for k in (*kinds, "429", "500", "502", "503"))
    body = {"model": "anthropic/claude-haiku-4.5", "messages": [{"role": "user", "content": "Summarise my inbox."}],
            "temperature": 0, "max_tokens": 64, "provider": {"only": ["anthropic"], "allow_fallbacks": False}}
    out: list[tuple[int, Any, dict[str, str]]] = []
    with SimServerProcess(["--seed", "21", "--faults", faults, "--preset-cache", "forced"], env=cli_env()) as sim, \
            httpx.Client(timeout=10) as client:
        for i in range(400):
            # Distinct bodies for most requests (fault draws), a few repeated (cache hits).
            b = {**body, "seed": i % 300}
            r = client.post(f"{sim.base_url}/chat/completions", json=b,
                            headers={"X-Call-Id": f"c{i}", "X-OpenRouter-Metadata": "enabled"})
            out.append((r.status_code, r.json(), dict(r.headers)))
        # A body the request schema refuses, and a route that does not exist: the sim's own errors.
        for r in (client.post(f"{sim.base_url}/chat/completions", json={"model": "x"}),
                  client.get(f"{sim.base_url}/no/such/route")):
            out.append((r.status_code, r.json(), dict(r.headers)))
        stats = client.get(sim.base_url + "/stats").json()
    yield out, {"stats": stats, "kinds": kinds}


def test_every_simulator_answer_matches_the_spec(spec: dict[str, Any], sim_answers: Any) -> None:
    answers, info = sim_answers
    seen = set(info["stats"]["faults"])
    assert set(info["kinds"]) <= seen, sorted(set(info["kinds"]) - seen)   # every kind was drawn
    assert info["stats"]["cache_hits"] > 0
    bad = []
    for status, body, _ in answers:
        ref = chat_schema(spec, status, body)
        found = problems(spec, ref, body)
        if found:
            bad.append((status, ref, found))
    assert bad == [], bad[:5]
    # Router metadata is there, in the spec's shape, and the stages and fallbacks were exercised.
    metas = [b["openrouter_metadata"] for s, b, _ in answers if s == 200 and "openrouter_metadata" in b]
    assert metas and any(m.get("pipeline") for m in metas) and any(len(m.get("attempts", [])) > 1 for m in metas)
    assert any("availability" in b.get("error", {}) for s, b, _ in answers if s != 200)


def test_the_spec_test_can_fail(spec: dict[str, Any]) -> None:
    """Without `system_fingerprint` (required by ChatResult) a completion does not validate."""
    body = json.loads(json.dumps(next(c["body"] for c in CASES if c["name"] == "ok_pinned_provider")))
    assert problems(spec, "#/components/schemas/ChatResult", body) == []
    del body["system_fingerprint"]
    assert problems(spec, "#/components/schemas/ChatResult", body)
