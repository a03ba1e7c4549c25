"""An OpenAI-compatible server that speaks llama-cpp-python's dialect, on 127.0.0.1: the
structured-output dialects, the local preflight, and a rejected request as a configuration
error (not an outage). No engine needed: the server below answers in the shapes
llama-cpp-python 0.3.36 was seen to answer (tests/test_llamacpp_engine.py runs the real one).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from tests.short_cohort import write_short_cohort

from guardeval.backends.chat_http import OpenAICompatibleGuard
from guardeval.backends.config import GuardConfig
from guardeval.backends.errors import FatalError
from guardeval.backends.invalid_request import MAX_REASON, invalid_request
from guardeval.backends.prompts import load_prompt

from app_server import in_thread, start
from conftest import run_cli

pytestmark = pytest.mark.fast

# llama-cpp-python's answer to `response_format: {type: json_schema}`: HTTP 500, pydantic's
# validation error, then a traceback after a blank line.
LLAMA_500 = json.dumps({"error": {
    "message": "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
               "'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema'}\n\n  File "
               "\"/srv/secret/path/app.py\", line 376, in create_chat_completion\n    POST /v1/chat/completions",
    "type": "internal_server_error", "param": None, "code": None}})
ANSWER = '{"malicious_user_request": false, "third_party_attack": false, "current_action_harmfulness": 0}'


class FakeLlama:
    """Counts requests; rejects json_schema like llama-cpp-python, accepts json_object and text."""

    def __init__(self, *, models: list[dict[str, Any]] | None = None, always: tuple[int, str] | None = None) -> None:
        self.models = models if models is not None else [{"id": "smollm2", "object": "model"}]
        self.always = always
        self.bodies: list[dict[str, Any]] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v1/models", self.list_models)
        app.router.add_post("/v1/chat/completions", self.chat)
        return app

    async def list_models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": self.models})

    async def chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.bodies.append(body)
        if self.always:
            return web.Response(status=self.always[0], text=self.always[1], content_type="application/json")
        fmt = body.get("response_format") or {"type": "text"}
        if fmt.get("type") not in ("text", "json_object"):
            return web.Response(status=500, text=LLAMA_500, content_type="application/json")
        return web.json_response({"choices": [{"index": 0, "message": {"role": "assistant", "content": ANSWER},
                                               "finish_reason": "stop"}],
                                  "usage": {"prompt_tokens": 40, "completion_tokens": 20, "total_tokens": 60}})


@pytest.fixture
def fake() -> Iterator[tuple[FakeLlama, str]]:
    server = FakeLlama()
    with in_thread(server.app()) as url:
        yield server, f"{url}/v1"


@pytest.fixture(scope="module")
def cohort(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_short_cohort(tmp_path_factory.mktemp("short") / "c", 2)


def guard_file(path: Path, base_url: str, **fields: Any) -> Path:
    values: dict[str, Any] = {"name": "local", "backend": "openai-compatible", "model": "smollm2",
                              "prompt": "guardeval-json-v1", "base_url": base_url, "timeout_s": 5,
                              "max_attempts": 6, "retry_initial_s": 0.01, "retry_max_s": 0.02, **fields}
    path.write_text("".join(f"{k} = {str(v).lower() if isinstance(v, bool) else json.dumps(v)}\n"
                            for k, v in values.items()))
    return path


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_bytes().splitlines() if line.strip()] if path.exists() else []


# -- what counts as "the request is invalid" ---------------------------------------------------

@pytest.mark.parametrize("body, server_error, expected", [
    (LLAMA_500, True, "Input should be 'text' or 'json_object'"),
    ('{"detail": [{"loc": ["body", "messages", 0, "role"], "msg": "Input should be \'user\'"}]}', False,
     "body.messages.0.role: Input should be 'user'"),
    ('{"object": "error", "message": "response_format json_schema is not supported", "type": "BadRequestError", '
     '"param": "response_format", "code": 400}', False, "is not supported"),
    ('{"error": {"message": "CUDA error: out of memory"}}', True, None),
    ('{"error": {"message": "temperature is not supported by this model"}}', True, None),   # weak wording, a 5xx
    ('{"error": {"message": "temperature is not supported by this model"}}', False, "temperature"),
    ("Internal Server Error", True, None),
])
def test_invalid_request_reasons(body: str, server_error: bool, expected: str | None) -> None:
    reason = invalid_request(body, server_error=server_error)
    if expected is None:
        assert reason is None
    else:
        assert reason is not None and expected in reason
        assert "/srv/secret/path" not in reason   # the traceback after the reason is dropped


def test_an_invalid_request_reason_is_bounded() -> None:
    body = json.dumps({"error": {"message": "1 validation error for response_format: " + "x" * 20_000}})
    reason = invalid_request(body, server_error=True)
    assert reason is not None and len(reason) <= MAX_REASON


async def test_a_validation_500_is_a_configuration_error_not_a_transient_one() -> None:
    seen = {"n": 0}

    async def handler(request: web.Request) -> web.Response:
        seen["n"] += 1
        return web.Response(status=500, text=LLAMA_500, content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    runner, url = await start(app)
    try:
        cfg = GuardConfig(name="l", backend="openai-compatible", model="m", prompt="guardeval-json-v1",
                          base_url=f"{url}/v1", timeout_s=5, structured_output="json_schema")
        guard = OpenAICompatibleGuard(cfg, load_prompt("guardeval-json-v1"))
        with pytest.raises(FatalError) as info:
            await guard.send(guard.render({"user_request": "x", "history": [], "current_action": {},
                                           "tool_descriptions": []}), "c")
        assert info.value.error_class == "invalid_request"
        assert "HTTP 500" in str(info.value) and "Input should be" in str(info.value)
        assert "guardeval preflight" in str(info.value)   # the fix, since it names response_format
        await guard.aclose()
    finally:
        await runner.cleanup()
    assert seen["n"] == 1


# -- the dialects in the request ------------------------------------------------------------------

def test_dialects_render_their_shapes() -> None:
    from guardeval.backends.chat_body import chat_body

    prompt = load_prompt("guardeval-json-v1")
    inst = {"user_request": "x", "history": [], "current_action": {}, "tool_descriptions": []}

    def body(**kw: Any) -> dict[str, Any]:
        return chat_body(GuardConfig(name="l", backend="openai-compatible", model="m", prompt="p", **kw), prompt, inst)

    assert body(structured_output="json_schema")["response_format"] == {"type": "json_schema",
                                                                       "json_schema": prompt.output_schema}
    assert body(structured_output="json_object")["response_format"] == {"type": "json_object",
                                                                       "schema": prompt.output_schema["schema"]}
    assert "response_format" not in body(structured_output=False)
    assert "response_format" not in body(structured_output="none")
    assert GuardConfig(name="l", backend="openai-compatible", model="m", prompt="p").structured_output == "auto"
    assert GuardConfig(name="l", backend="openrouter", model="m", prompt="p").structured_output == "json_schema"


@pytest.mark.parametrize("backend, value, message", [
    ("openrouter", '"auto"', "applies to the openai-compatible backend only"),
    ("openai-compatible", '"xml"', "expected true, false or one of json_schema, json_object, none, auto"),
    ("mlx", '"json_object"', "the mlx backend constrains decoding itself"),
])
def test_bad_dialects_are_refused_with_file_line_and_field(tmp_path: Path, cohort: Path, backend: str, value: str,
                                                           message: str) -> None:
    g = tmp_path / "g.toml"
    g.write_text(f'name = "x"\nbackend = "{backend}"\nmodel = "m"\nprompt = "guardeval-json-v1"\n'
                 f"structured_output = {value}\n")
    r = run_cli("launch", "--cohort", str(cohort), "--guard", str(g), "--run-dir", str(tmp_path / "run"))
    assert r.code == 2 and message in r.err and "line 5" in r.err and "structured_output" in r.err, r.err
    assert "Traceback" not in r.err and not (tmp_path / "run").exists()


def test_a_recorded_true_means_json_schema(tmp_path: Path) -> None:
    from guardeval.backends.config import config_from_manifest

    cfg = config_from_manifest({"name": "x", "backend": "openai-compatible", "model": "m", "prompt": "p",
                                "structured_output": True}, tmp_path / "manifest.json")
    assert cfg.structured_output == "json_schema"   # what runs made before dialects existed sent


# -- the preflight --------------------------------------------------------------------------------

@pytest.mark.slow
def test_preflight_auto_finds_json_object_and_launch_records_it(fake: tuple[FakeLlama, str], tmp_path: Path,
                                                                cohort: Path) -> None:
    server, url = fake
    g = guard_file(tmp_path / "g.toml", url)
    r = run_cli("preflight", "--guard", str(g), "--cohort", str(cohort), "--json")
    assert r.code == 0, r.err
    result = json.loads(r.out)
    assert result["dialect"] == "json_object"
    assert [b["response_format"]["type"] for b in server.bodies] == ["json_schema", "json_object"]
    assert all(b["max_tokens"] == 8 and len(b["messages"]) == 1 for b in server.bodies)   # tiny probes
    server.bodies.clear()
    run = tmp_path / "run"
    r = run_cli("launch", "--cohort", str(cohort), "--guard", str(g), "--reps", "1", "--run-dir", str(run),
                "--no-progress")
    assert r.code == 0, r.err
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["guard"]["structured_output"] == "json_object"
    sent = [b for b in server.bodies if b["max_tokens"] != 8]
    assert len(sent) == 4 and all(b["response_format"]["type"] == "json_object" for b in sent)
    assert {d["status"] for d in jsonl(run / "decisions.jsonl")} == {"ok"}
    assert run_cli("verify", str(run)).code == 0
    assert run_cli("resume", str(run), "--no-progress").code == 0   # the recorded dialect re-renders the same


def test_preflight_refuses_what_the_server_rejects(fake: tuple[FakeLlama, str], tmp_path: Path, cohort: Path) -> None:
    server, url = fake
    g = guard_file(tmp_path / "g.toml", url, structured_output="json_schema")
    run = tmp_path / "run"
    r = run_cli("launch", "--cohort", str(cohort), "--guard", str(g), "--reps", "1", "--run-dir", str(run))
    assert r.code == 2 and not run.exists()
    assert "rejects structured_output = 'json_schema'" in r.err and 'set structured_output = "json_object"' in r.err
    assert "Input should be 'text' or 'json_object'" in r.err and "/srv/secret/path" not in r.err
    assert "the server cannot serve local as configured" in r.err


@pytest.mark.slow
def test_preflight_model_context_and_reach(tmp_path: Path, cohort: Path) -> None:
    server = FakeLlama(models=[{"id": "other", "object": "model"}])
    with in_thread(server.app()) as url:
        r = run_cli("preflight", "--guard", str(guard_file(tmp_path / "a.toml", f"{url}/v1")))
    assert r.code == 2 and "does not serve 'smollm2' (it lists 'other')" in r.out and "--model_alias" in r.out
    assert server.bodies == []   # no probe once the model is missing
    server = FakeLlama(models=[{"id": "smollm2", "max_model_len": 300}])
    with in_thread(server.app()) as url:
        r = run_cli("preflight", "--guard", str(guard_file(tmp_path / "b.toml", f"{url}/v1")), "--cohort", str(cohort))
    assert r.code == 2 and "exceeds the server's context of 300" in r.out and "--n_ctx" in r.out, r.out
    with in_thread(FakeLlama().app()) as url:
        dead = url   # nothing listens here once the server is gone
    r = run_cli("preflight", "--guard", str(guard_file(tmp_path / "c.toml", f"{dead}/v1")))
    assert r.code == 2 and "cannot reach" in r.out and "llama_cpp.server" in r.out, r.out


def test_no_preflight_takes_auto_as_json_schema(fake: tuple[FakeLlama, str], tmp_path: Path, cohort: Path) -> None:
    server, url = fake
    run = tmp_path / "run"
    r = run_cli("launch", "--cohort", str(cohort), "--guard", str(guard_file(tmp_path / "g.toml", url)), "--reps", "1",
                "--run-dir", str(run), "--no-progress", "--no-preflight", "--concurrency", "1")
    # The OpenAI shape, refused by this server: one answer, then a stop with its reason (with
    # more calls in flight, those already sent are answered too, and recorded).
    assert r.code == 1, r.err
    assert 'structured_output "auto" taken as json_schema' in r.err
    assert json.loads((run / "manifest.json").read_text())["guard"]["structured_output"] == "json_schema"
    assert "rejected the request as invalid (HTTP 500)" in r.err and "unreachable" not in r.err
    assert len(server.bodies) == 1 and len(jsonl(run / "raw.jsonl")) == 1
    st = json.loads(run_cli("status", str(run), "--json").out)
    assert st["decided"] == 0 and st["pending"] == 4


def test_server_errors_are_not_called_unreachable(tmp_path: Path, cohort: Path) -> None:
    server = FakeLlama(always=(503, '{"error": {"message": "busy"}}'))
    with in_thread(server.app()) as url:
        run = tmp_path / "run"
        r = run_cli("launch", "--cohort", str(cohort), "--guard", str(guard_file(tmp_path / "g.toml", f"{url}/v1",
                                                                                structured_output=False,
                                                                                max_attempts=20)),
                    "--reps", "1", "--run-dir", str(run), "--no-progress", "--no-preflight")
    assert r.code == 1, r.err
    assert "kept answering with errors" in r.err and "HTTP 503" in r.err and "unreachable" not in r.err
    assert json.loads(run_cli("status", str(run), "--json").out)["decided"] == 0   # left pending


def test_a_quoted_reason_is_redacted_and_escaped(tmp_path: Path, cohort: Path) -> None:
    key = "local-secret-key-0123456789abcdef"
    hostile = json.dumps({"error": {"message": f"1 validation error: response_format \x1b[2J\x1b]0;pwned\x07 {key}",
                                    "type": "internal_server_error"}})
    server = FakeLlama(always=(500, hostile))
    with in_thread(server.app()) as url:
        run = tmp_path / "run"
        g = guard_file(tmp_path / "g.toml", f"{url}/v1", structured_output="json_object", api_key_env="LOCAL_KEY")
        r = run_cli("launch", "--cohort", str(cohort), "--guard", str(g), "--reps", "1", "--run-dir", str(run),
                    "--no-progress", "--no-preflight", "--concurrency", "1", env={"LOCAL_KEY": key})
    assert r.code == 1 and "rejected the request as invalid" in r.err, r.err
    assert "\x1b" not in r.err and "\x07" not in r.err and key not in r.err
    assert key not in (run / "raw.jsonl").read_text()
    assert len(server.bodies) == 1
