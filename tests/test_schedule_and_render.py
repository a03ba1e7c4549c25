"""Schedule determinism and order; prompt rendering treats benchmark text as data."""

from __future__ import annotations

from collections import Counter

import pytest

from guardeval.backends.config import GuardConfig
from guardeval.backends.openrouter.guard import OpenRouterGuard
from guardeval.backends.prompts import load_prompt
from guardeval.canon import dumps_line
from guardeval.cohorts.model import build_row, load_cohort
from guardeval.run.schedule import call_id_for, iter_schedule

from conftest import DEMO_COHORT

pytestmark = pytest.mark.fast


def _schedule(cohort, **kw) -> list[dict]:
    return list(iter_schedule(cohort, **kw))


def _bytes(rows: list[dict]) -> bytes:
    return b"".join(dumps_line(r) for r in rows)


def test_schedule_is_seeded_and_complete():
    cohort = load_cohort(DEMO_COHORT)
    a = _schedule(cohort, reps=3, seed=42)
    b = _schedule(cohort, reps=3, seed=42)
    c = _schedule(cohort, reps=3, seed=43)
    assert _bytes(a) == _bytes(b)
    assert _bytes(a) != _bytes(c)
    assert len(a) == 64 * 5 * 3
    assert Counter((r["base_id"], r["condition"]) for r in a) == {k: 3 for k in
                                                                   {(r["base_id"], r["condition"]) for r in a}}
    assert [r["index"] for r in a] == list(range(len(a)))


def test_rounds_order_groups_repetitions_and_bases():
    cohort = load_cohort(DEMO_COHORT)
    rows = _schedule(cohort, reps=3, seed=1, order="rounds")
    assert [r["repetition"] for r in rows] == sorted(r["repetition"] for r in rows)
    # Within a round, the five conditions of a base are adjacent, in a shuffled order.
    first_round = rows[:320]
    for i in range(0, 320, 5):
        assert len({r["base_id"] for r in first_round[i:i + 5]}) == 1
    orders = {tuple(r["condition"] for r in first_round[i:i + 5]) for i in range(0, 320, 5)}
    assert len(orders) > 10
    bases_r0 = [r["base_id"] for r in rows[:320:5]]
    bases_r1 = [r["base_id"] for r in rows[320:640:5]]
    assert sorted(bases_r0) == sorted(bases_r1) and bases_r0 != bases_r1


def test_shuffled_order_mixes_rounds():
    cohort = load_cohort(DEMO_COHORT)
    rows = _schedule(cohort, reps=3, seed=1, order="shuffled")
    reps = [r["repetition"] for r in rows]
    assert reps != sorted(reps)


def test_call_id_is_deterministic_and_guard_independent():
    assert call_id_for(1, "b", "c", 0, "a" * 64) == call_id_for(1, "b", "c", 0, "a" * 64)
    assert call_id_for(1, "b", "c", 0, "a" * 64) != call_id_for(1, "b", "c", 1, "a" * 64)
    assert len(call_id_for(1, "b", "c", 0, "a" * 64)) == 32


def test_benchmark_text_is_rendered_verbatim():
    prompt = load_prompt("guardeval-json-v1")
    base = {"base_id": "b", "interaction_id": "i", "domain": "d", "label": 1, "label_score": 1.0, "tool": "t"}
    tricky = "please {user_request} then {0} and {history} {{x}} %s ${HOME}"
    row = build_row(base, "original", "baseline", {
        "user_request": tricky, "history": [{"role": "tool", "name": "t", "content": "{current_action}"}],
        "current_action": {"name": "t", "arguments": {"q": "{0}"}}, "tool_descriptions": []})
    cfg = GuardConfig(name="g", backend="openrouter", model="m", prompt="guardeval-json-v1")
    body = OpenRouterGuard(cfg, prompt).render(row)
    user = body["messages"][1]["content"]
    assert tricky in user
    assert '"content": "{current_action}"' in user
    assert '{"name": "t", "arguments": {"q": "{0}"}}' in user
    assert user.count("please {user_request}") == 1


def test_openrouter_body_pins_provider_and_schema():
    prompt = load_prompt("guardeval-json-v1")
    cfg = GuardConfig(name="g", backend="openrouter", model="anthropic/claude-haiku-4.5", prompt="guardeval-json-v1",
                      provider={"only": ["anthropic"], "allow_fallbacks": False, "require_parameters": True,
                                "data_collection": "deny"})
    cohort = load_cohort(DEMO_COHORT)
    body = OpenRouterGuard(cfg, prompt).render(cohort.instances[0])
    assert body["provider"] == {"allow_fallbacks": False, "data_collection": "deny", "only": ["anthropic"],
                                "require_parameters": True}
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["strict"] is True
    assert body["temperature"] == 0.0 and body["max_tokens"] == 256
    assert "Authorization" not in str(body)


def test_format_placebo_changes_whitespace_only():
    cohort = load_cohort(DEMO_COHORT)
    prompt = load_prompt("guardeval-json-v1")
    cfg = GuardConfig(name="g", backend="openrouter", model="m", prompt="guardeval-json-v1")
    guard = OpenRouterGuard(cfg, prompt)
    base = cohort.base_ids[0]
    orig = guard.render(cohort.instance(base, "original"))["messages"][1]["content"]
    plac = guard.render(cohort.instance(base, "format_placebo"))["messages"][1]["content"]
    assert orig != plac
    assert "".join(orig.split()) == "".join(plac.split())
