"""docs/explanation/layout.md's back-end recipe, done for real (issue 49 §2): a chat back-end whose
endpoint, auth header, body and answer all differ from chat-completions (Anthropic's Messages
shape, tests/anthropic_backend.py) is one module plus one line of `DECLARED`, and a run through
it, against a real server of that shape on 127.0.0.1, goes end to end: launched, decided,
verified, the key sent in its own header and never written down."""

from __future__ import annotations

import ast
import hashlib
import json
import secrets
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from guardeval import api
from guardeval.backends.backend import DECLARED, backend_for, backend_names, builtin_names, unregister
from guardeval.backends.config import load_guard_config
from guardeval.backends.parsers.common import JSON_FIELDS

pytestmark = pytest.mark.fast

HERE = Path(__file__).resolve().parent
MODULE = "anthropic_backend"
NAME = "anthropic-messages"
# made per run, in no provider's key format: a key-shaped literal in the repository reads as a leaked secret
KEY = "recipe-test-" + secrets.token_hex(16)
KEY_ENV = "GUARDEVAL_TEST_ANTHROPIC_KEY"


class MessagesServer(ThreadingHTTPServer):
    """Anthropic's Messages API in miniature: POST /v1/messages, `x-api-key`, a verdict as text."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.seen: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: MessagesServer

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self, status: int, obj: dict[str, Any]) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        with self.server.lock:
            self.server.seen.append({"path": self.path, "x-api-key": self.headers.get("x-api-key"),
                                     "authorization": self.headers.get("Authorization"),
                                     "version": self.headers.get("anthropic-version"), "body": body})
        if self.path != "/v1/messages":
            return self._answer(404, {"type": "error", "error": {"type": "not_found_error", "message": "no such path"}})
        if self.headers.get("x-api-key") != KEY:
            return self._answer(401, {"type": "error",
                                      "error": {"type": "authentication_error", "message": "invalid x-api-key"}})
        roles = {m.get("role") for m in body.get("messages", [])}
        if not isinstance(body.get("system"), str) or not roles <= {"user", "assistant"} \
                or type(body.get("max_tokens")) is not int or "response_format" in body:
            return self._answer(400, {"type": "error",
                                      "error": {"type": "invalid_request_error", "message": "not a Messages body"}})
        # A verdict that depends on the stimulus only (the same instance, the same answer).
        digest = hashlib.sha256(json.dumps(body["messages"], sort_keys=True).encode()).digest()
        verdict = dict(zip(JSON_FIELDS, (digest[0] % 2 == 0, digest[1] % 3 == 0, 0.0), strict=True))
        self._answer(200, {"id": f"msg_{digest.hex()[:24]}", "type": "message", "role": "assistant",
                           "model": body["model"], "stop_reason": "end_turn", "stop_sequence": None,
                           "content": [{"type": "text", "text": json.dumps(verdict)}],
                           "usage": {"input_tokens": 900, "output_tokens": 30}})


@pytest.fixture
def server() -> Iterator[MessagesServer]:
    srv = MessagesServer()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.fixture
def declared(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The recipe's registration: one line of DECLARED naming the declaring module."""
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.setitem(DECLARED, NAME, MODULE)
    yield
    unregister(NAME)
    sys.modules.pop(MODULE, None)


def _guard(tmp_path: Path, base_url: str) -> Path:
    p = tmp_path / "claude.toml"
    p.write_text(f'name = "claude-test"\nbackend = "{NAME}"\nmodel = "claude-test-1"\nprompt = "guardeval-json-v1"\n'
                 f'base_url = "{base_url}"\napi_key_env = "{KEY_ENV}"\ntimeout_s = 5\nmax_attempts = 2\n'
                 'retry_initial_s = 0.01\nretry_max_s = 0.05\n', encoding="utf-8")
    return p


def test_the_recipe_is_one_module_and_one_line(declared):
    # The module uses the package's public hooks only: the record, and the generic HTTP client.
    tree = ast.parse((HERE / f"{MODULE}.py").read_text(encoding="utf-8"))
    used = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("guardeval")}
    assert used == {"guardeval.backends.backend", "guardeval.backends.chat_http"}
    # Registered by its DECLARED line alone, in its declared place (after the shipped ones).
    assert backend_names() == builtin_names() == tuple(DECLARED) and backend_names()[-1] == NAME
    entry = backend_for(NAME)
    assert (entry.chat_path, entry.auth_headers("k"), dict(entry.request_headers)) == \
        ("/v1/messages", {"x-api-key": "k"}, {"anthropic-version": "2023-06-01"})


def test_a_run_through_a_backend_with_its_own_endpoint_and_auth(tmp_path, small_cohort, server, declared,
                                                                monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    guard = _guard(tmp_path, server.base_url)
    assert load_guard_config(guard).backend_entry is backend_for(NAME)
    run = tmp_path / "run"
    result = api.launch(small_cohort, guard, reps=1, run_dir=run, concurrency=4)
    assert result.complete and result.stop_reason is None, result.fatal_message
    assert sum(result.statuses.values()) == result.total == len(server.seen) == 80
    assert result.statuses == {"ok": 80}, result.statuses
    # Every call went to its path, with the key in its header and never as a Bearer token.
    assert {(s["path"], s["x-api-key"], s["authorization"], s["version"]) for s in server.seen} == \
        {("/v1/messages", KEY, None, "2023-06-01")}
    # What was sent is the Messages body the run recorded (its stimuli), system text apart.
    body = server.seen[0]["body"]
    assert set(body) == {"model", "max_tokens", "temperature", "messages", "system"}
    raw = [json.loads(line) for line in (run / "raw.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(raw) == 80 and all(json.loads(r["response"])["type"] == "message" for r in raw)
    assert all(r["finish_reason"] == "stop" and r["usage"] == {"prompt_tokens": 900, "completion_tokens": 30,
                                                                 "total_tokens": 930} for r in raw)
    decisions = [json.loads(line) for line in (run / "decisions.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(decisions) == 80 and {d["decision"] for d in decisions} == {0, 1}, decisions[0]
    assert all(d["attributable"] and d["quarantine_reason"] is None for d in decisions), decisions[0]
    # The key reached the server and no file of the run.
    assert not [f.name for f in run.rglob("*") if f.is_file() and KEY.encode() in f.read_bytes()]
    assert api.verify(run).ok


def test_a_wrong_key_stops_the_run_naming_the_servers_answer(tmp_path, small_cohort, server, declared, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "recipe-wrong-" + secrets.token_hex(16))
    result = api.launch(small_cohort, _guard(tmp_path, server.base_url), reps=1, run_dir=tmp_path / "run",
                        concurrency=1)
    assert not result.complete and result.fatal_message is not None
    assert "HTTP 401" in result.fatal_message and "invalid x-api-key" in result.fatal_message


def test_an_answer_its_hook_cannot_read_is_a_malformed_attempt(declared):
    """The record's `to_chat_shape` reads hostile text: a shape it cannot map, or a hook that
    raises on it, is a malformed (retried) attempt, never a crash of the run."""
    import dataclasses

    from guardeval.backends.backend import register
    from guardeval.backends.base import Reply
    from guardeval.backends.config import GuardConfig
    from guardeval.backends.errors import TransientError
    from guardeval.backends.prompts import load_prompt

    def judged(answer: Any) -> Any:
        config = GuardConfig(name="g", backend=NAME, model="m", prompt="guardeval-json-v1",
                             base_url="http://127.0.0.1:9", structured_output=False)
        guard = backend_for(NAME).make_guard(config, load_prompt("guardeval-json-v1"), 1)
        return guard.judge(Reply(status=200, raw=json.dumps(answer)), {}, lambda s: s)

    ok = judged({"content": [{"type": "text", "text": "{}"}], "stop_reason": "max_tokens",
                 "usage": {"input_tokens": 5, "output_tokens": "many"}})
    assert (ok.content, ok.finish_reason, ok.usage) == ("{}", "length", {"prompt_tokens": 5})
    with pytest.raises(TransientError, match="without choices"):
        judged({"content": "not a list of blocks"})
    register(dataclasses.replace(backend_for(NAME), to_chat_shape=lambda data: data["no such key"]))
    with pytest.raises(TransientError, match="unreadable shape") as err:
        judged({"content": []})
    assert err.value.error_class == "malformed"
