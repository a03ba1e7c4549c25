"""A back-end is one registered record (guardeval.backends.backend), and each guard-config field
one declaration (guardeval.backends.config_fields): a back-end added in one place is accepted by
the parser and made into a guard with no other module edited; every field's type, range, default
and words come from its declaration (issue 38 §4)."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest

from guardeval.backends import config_fields
from guardeval.backends.backend import DECLARED, Backend, backend_for, backend_names, builtin_names, register, unregister
from guardeval.backends.config import GuardConfig, load_guard_config, range_message
from guardeval.backends.prompts import load_prompt
from guardeval.backends.registry import make_guard, make_renderer
from guardeval.errors import InputError

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parent.parent


class FakeGuard:
    def __init__(self, config: Any, prompt: Any) -> None:
        self.config, self.prompt = config, prompt

    def render(self, instance: Any) -> dict[str, Any]:
        return {"fake": self.config.model, "instance": dict(instance)}


@pytest.fixture
def fake_backend():
    entry = register(Backend(name="fake-echo", make_guard=lambda c, p, n: FakeGuard(c, p), in_process=True,
                             default_concurrency=3, dialects=frozenset({"none"}), server="the echo"))
    yield entry
    unregister("fake-echo")


def _write(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "g.toml"
    p.write_text('name = "g"\nmodel = "m"\nprompt = "guardeval-json-v1"\n' + body, encoding="utf-8")
    return p


def test_a_backend_registered_in_one_place_is_parsed_and_made_into_a_guard(tmp_path, fake_backend):
    config = load_guard_config(_write(tmp_path, 'backend = "fake-echo"\nstructured_output = false\n'))
    assert config.backend_entry is fake_backend and backend_for("fake-echo") is fake_backend
    assert config.is_local and not config.is_simulated and config.allowed_providers == ()
    prompt = load_prompt("guardeval-json-v1")
    guard = make_guard(config, prompt)
    assert isinstance(guard, FakeGuard) and guard.config is config
    # No renderer of its own: rendering goes through a guard.
    assert make_renderer(config, prompt)({"x": 1}) == {"fake": "m", "instance": {"x": 1}}
    # Its rules are its record's: a dialect it does not take, a back-end-only field of another.
    takers = " or ".join(n for n in builtin_names() if "json_schema" in backend_for(n).dialects)
    with pytest.raises(InputError, match=f"applies to the {takers} backend only"):
        load_guard_config(_write(tmp_path, 'backend = "fake-echo"\nstructured_output = "json_schema"\n'))
    with pytest.raises(InputError, match="callable applies only to the python backend"):
        load_guard_config(_write(tmp_path, 'backend = "fake-echo"\nstructured_output = false\ncallable = "a:b"\n'))


def test_the_shipped_backends_are_the_declared_ones_and_come_first(fake_backend):
    assert backend_names() == (*builtin_names(), "fake-echo") and builtin_names() == tuple(DECLARED)
    assert all(backend_for(n).name == n for n in builtin_names())


@pytest.mark.parametrize("first", list(DECLARED.values()))
def test_the_order_is_the_declared_one_whichever_module_is_imported_first(first):
    """Issue 49 §2: importing mlx's declaring module first once put "mlx" last."""
    import subprocess
    import sys

    from conftest import cli_env

    code = (f"import {first}\nfrom guardeval.backends.backend import backend_names, DECLARED\n"
            "print(list(backend_names()), list(DECLARED))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), timeout=120)
    assert out.returncode == 0, out.stderr
    names, declared = out.stdout.strip().split("] [")
    assert names + "]" == "[" + declared, out.stdout


def test_unknown_backend_lists_the_registered_ones(tmp_path, fake_backend):
    with pytest.raises(InputError) as err:
        load_guard_config(_write(tmp_path, 'backend = "nope"\n'))
    assert f"expected one of {', '.join(builtin_names())}, fake-echo" in str(err.value)
    unregister("fake-echo")
    assert "fake-echo" not in backend_names()
    with pytest.raises(InputError, match="unknown backend"):
        load_guard_config(_write(tmp_path, 'backend = "fake-echo"\n'))


def test_the_dataclass_is_the_declaration():
    own = [(f.name, f.default) for f in dataclasses.fields(GuardConfig) if f.name != "source"]
    assert own == [(f.name, dataclasses.MISSING if f.required else f.default) for f in config_fields.FIELDS]
    floats = {f.name for f in config_fields.FIELDS if f.is_float}
    assert floats == {"temperature", "timeout_s", "price_in_per_mtok", "price_out_per_mtok", "retry_initial_s",
                      "retry_max_s", "start_timeout_s"}


@pytest.mark.parametrize("field", [f for f in config_fields.FIELDS if f.range is not None], ids=lambda f: f.name)
def test_a_range_error_is_the_declarations(tmp_path, field):
    lo, hi = field.range
    over = hi + 1 if isinstance(hi, int) else hi * 2 + 1
    with pytest.raises(InputError) as err:
        load_guard_config(_write(tmp_path, f'backend = "openai-compatible"\n{field.name} = {over!r}\n'))
    assert err.value.field == field.name and range_message(field) in str(err.value)
    bounds = re.search(r"from (\S+) to (\S+)$", range_message(field))
    assert bounds is not None and (float(bounds[1]), float(bounds[2])) == (float(lo), float(hi))


def test_the_reference_page_lists_exactly_the_declared_fields():
    spec = importlib.util.spec_from_file_location("reference_hook", REPO / "docs" / "hooks" / "reference.py")
    assert spec is not None and spec.loader is not None
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    page = hook.config_reference()
    rows = [(k.replace("<wbr>", ""), t) for k, t in
            re.findall(r'^\| <code class="key">([a-z_.<>]+)</code> \| ([^|]+) \|', page, flags=re.M)]
    declared = [(f.name, " or ".join(t.__name__ for t in f.types)) for f in config_fields.FIELDS]
    declared += [(f"provider.{f.name}", " or ".join(t.__name__ for t in f.types)) for f in config_fields.provider_fields()]
    assert [(k, t.strip()) for k, t in rows] == declared
    for f in config_fields.FIELDS:
        assert config_fields.doc(f).split(";")[0][:40] in page, f.name
    names = builtin_names()
    assert f"{', '.join(names[:-1])} or {names[-1]}" in page   # the backend row names the registered ones


def test_the_manifest_leaves_out_late_fields_at_their_default():
    c = GuardConfig(name="g", backend="openrouter", model="m", prompt="p")
    left_out = {f.name for f in config_fields.FIELDS if f.omitted_at_default}
    assert left_out == {"callable", "isolation", "retry_on", "start_timeout_s", "label"} and not left_out & set(c.to_manifest())
    assert set(c.to_manifest()) == {f.name for f in config_fields.FIELDS} - left_out


def test_the_decision_step_calls_the_backends_own_quarantine_checks(fake_backend):
    from guardeval.backends.parsers import get_parser
    from guardeval.run.dispatch.decide import decide

    seen: list[tuple[str, ...]] = []

    def own(raw: Any, allowed: Any) -> tuple[str, str | None] | None:
        seen.append(tuple(allowed))
        return ("provider_drift", "the echo says so") if raw["content"].startswith("{") else None

    register(dataclasses.replace(fake_backend, quarantine=own))
    raw = {"call_id": "c", "seq": 1, "request_sha256": "r", "outcome": "reply", "final": True, "content": "{}",
           "finish_reason": "stop", "answers_call_id": None,
           # An OpenRouter cache hit on the line: only OpenRouter's own checks read it.
           "response_headers": {"x-openrouter-cache-status": "HIT"}}
    parser = get_parser("json-three-field")
    d = decide(raw, "sha", expected_request_sha256="r", parser=parser, backend="fake-echo", allowed_providers=("a",))
    assert (d["quarantine_reason"], d["detail"], seen) == ("provider_drift", "the echo says so", [("a",)])
    # A back-end without checks of its own: the generic ones only.
    d = decide(raw, "sha", expected_request_sha256="r", parser=parser, backend="python")
    assert d["quarantine_reason"] is None


# An answer in OpenRouter's shape: the upstream's own finish reason, and a BYOK call's two costs.
_BYOK_ANSWER = {"id": "gen-1", "choices": [{"index": 0, "finish_reason": "stop", "native_finish_reason": "end_turn",
                                            "message": {"role": "assistant", "content": "{}"}}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5, "cost": 0.0001,
                          "is_byok": True, "cost_details": {"upstream_inference_cost": 0.002}}}


def _judged(backend: str, answer: dict[str, Any]) -> Any:
    import json

    from guardeval.backends.base import Reply
    from guardeval.backends.chat_http import ChatCompletionsGuard

    config = GuardConfig(name="g", backend=backend, model="m", prompt="guardeval-json-v1", base_url="http://127.0.0.1:9/v1")
    guard = backend_for(backend).make_guard(config, load_prompt("guardeval-json-v1"), 1) \
        if backend_for(backend).make_renderer is not None else ChatCompletionsGuard(config, load_prompt("guardeval-json-v1"))
    return guard.judge(Reply(status=200, raw=json.dumps(answer)), {}, lambda s: s)


def test_only_openrouter_declares_what_it_adds_to_finish_reason_and_usage(fake_backend):
    """Issue 38 §4: the generic chat client reads what every OpenAI-compatible server returns;
    OpenRouter's upstream finish reason and BYOK cost are its record's `normalise_reply`."""
    from guardeval.backends.base import Reply

    byok = {}
    for name in builtin_names():
        reply = Reply(status=200, raw="", usage={"cost": 0.0001})
        backend_for(name).normalise_reply(_BYOK_ANSWER["choices"][0], _BYOK_ANSWER, reply, lambda s: s)
        byok[name] = reply.usage != {"cost": 0.0001}
    assert [n for n, added in byok.items() if added] == ["openrouter"]
    assert backend_for("mlx").normalise_reply is backend_for("python").normalise_reply is fake_backend.normalise_reply

    generic = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5, "cost": 0.0001}
    openrouter = _judged("openrouter", _BYOK_ANSWER)
    assert openrouter.usage == {**generic, "is_byok": True, "upstream_inference_cost": 0.002}
    assert openrouter.native_finish_reason == "end_turn" and openrouter.finish_reason == "stop"
    # openai-compatible: no BYOK parts recorded; the upstream's finish reason is, as it always was.
    local = _judged("openai-compatible", _BYOK_ANSWER)
    assert local.usage == generic and (local.finish_reason, local.native_finish_reason) == ("stop", "end_turn")
    # A back-end of the generic client that declares nothing: neither.
    plain = _judged("fake-echo", _BYOK_ANSWER)
    assert plain.usage == generic and (plain.finish_reason, plain.native_finish_reason) == ("stop", None)
    # Hostile numbers and text stay refused and bounded in OpenRouter's part.
    hostile = {**_BYOK_ANSWER, "choices": [{**_BYOK_ANSWER["choices"][0], "native_finish_reason": "x" * 500}],
               "usage": {"cost": -1, "is_byok": True, "cost_details": {"upstream_inference_cost": float("nan")}}}
    reply = _judged("openrouter", hostile)
    assert reply.usage == {"cost_invalid": True, "is_byok": True} and reply.native_finish_reason == "x" * 200


def test_a_guard_runs_in_process_exactly_when_its_backends_record_says_so():
    """Said once, by the record: the dispatcher's stall rule reads `guard.in_process`."""
    from types import SimpleNamespace

    from guardeval.backends.base import Guard

    for name in builtin_names():
        holder = SimpleNamespace(config=SimpleNamespace(backend_entry=backend_for(name)))
        assert Guard.in_process.fget(holder) is backend_for(name).in_process, name   # type: ignore[attr-defined]
    assert {n for n in builtin_names() if backend_for(n).in_process} == {"mlx", "python"}
    sim = make_guard(load_guard_config("sim"), load_prompt("guardeval-json-v1"))
    assert sim.in_process is False


def test_surfaces_ask_the_record_for_a_backends_routing_and_cache_rules(fake_backend):
    """Issue 49 §2: report.html's pinned provider and the exported Inspect task's headers are the
    records' (Backend.allowed_providers, Backend.no_cache_headers), not a copy of OpenRouter's rules."""
    from guardeval.backends.backend import no_cache_headers
    from guardeval.view.html import _pinned

    register(dataclasses.replace(fake_backend, allowed_providers=lambda c: ("echo-a", "echo-b"),
                                 no_cache_headers={"X-Echo-Cache": "off"}))
    assert _pinned({"backend": "fake-echo"}) == "echo-a"
    assert _pinned({"backend": "openrouter", "provider": {"order": ["x", "y"], "allow_fallbacks": False}}) == "x"
    assert _pinned({"backend": "openrouter", "provider": {"order": ["x"]}}) is None
    assert _pinned({"backend": "python"}) is None
    # Every registered back-end's, in the registry's order: OpenRouter's exactly as it was sent before.
    assert no_cache_headers() == {"X-OpenRouter-Cache": "false", "X-Echo-Cache": "off"}
    unregister("fake-echo")
    assert no_cache_headers() == {"X-OpenRouter-Cache": "false"}
