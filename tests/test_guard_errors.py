"""Issue 45 item 5: a guard's own errors fail fast and are named. A python guard's exception,
wrong return or dead worker is tried once more at once, then the call is `guard_error` (not
`exhausted`, which is the transport's); `retry_on` opts an exception back into back-off
retries; a streak of the same guard error, or of worker deaths, stops the run with the error
quoted; launch's last lines, `status` and `study status` list the failures by cause, with
counts and an example. Real guard modules, real launches in subprocesses."""

from __future__ import annotations

import json
import textwrap
from collections import Counter
from pathlib import Path

import orjson
import pytest

from conftest import REPO, run_cli

pytestmark = pytest.mark.slow

GUARDS = '''
import os

ALLOW = '{"malicious_user_request": false, "third_party_attack": false, "current_action_harmfulness": 0}'


def ok(inp):
    return ALLOW


def third(inp):
    # A third of the calls, the same ones on every attempt: an input this guard cannot read.
    if int(inp.call_id[:8], 16) % 3 == 0:
        raise ValueError("unknown tool in " + inp.call_id[:8])
    return ALLOW


def always(inp):
    raise KeyError("policy")


def service_down(inp):
    raise TimeoutError("the policy service did not answer")


def wrong(inp):
    return 42


def dies(inp):
    os._exit(3)
'''


def _setup(tmp_path: Path, fn: str, **fields: object) -> tuple[Path, dict[str, str]]:
    lib = tmp_path / "lib"
    lib.mkdir(exist_ok=True)
    (lib / "ge_guards.py").write_text(textwrap.dedent(GUARDS))
    lines = [f'name = "ge-{fn}"', 'backend = "python"', f'callable = "ge_guards:{fn}"', 'model = "rules"',
             'prompt = "guardeval-json-v1"', "retry_initial_s = 0.01", "retry_max_s = 0.05"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in fields.items()]
    cfg = tmp_path / f"{fn}.toml"
    cfg.write_text("\n".join(lines) + "\n")
    return cfg, {"PYTHONPATH": f"{REPO / 'harness'}:{lib}"}


def _launch(tmp_path: Path, fn: str, *extra: str, **fields: object):
    cfg, env = _setup(tmp_path, fn, **fields)
    run = tmp_path / f"run-{fn}"
    r = run_cli("launch", "--cohort", "demo", "--guard", str(cfg), "--reps", "1", "--run-dir", str(run),
                "--no-progress", *extra, env=env)
    return r, run, env


def _jsonl(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def test_an_exception_is_tried_once_at_once_then_named_guard_error(tmp_path: Path) -> None:
    """max_attempts 6 (the default): a call whose guard raises gets two attempts, not six, and
    its decision is `guard_error` with the exception in its detail; launch and status list the
    cause with its count and an example; verify re-derives every decision."""
    r, run, env = _launch(tmp_path, "third")
    assert r.code == 0, r.err
    raw = _jsonl(run / "raw.jsonl")
    per_call = Counter(x["call_id"] for x in raw)
    failed = {x["call_id"] for x in raw if x["error_class"]}
    assert 60 < len(failed) < 160, len(failed)          # about a third of 320
    assert all(per_call[c] == 2 for c in failed) and all(per_call[c] == 1 for c in per_call if c not in failed)
    bad = [x for x in raw if x["error_class"]]
    assert {x["outcome"] for x in bad} == {"guard_error"} and {x["error_class"] for x in bad} == {"python_exception"}
    assert sorted(x["final"] for x in bad) == [False] * len(failed) + [True] * len(failed)
    decisions = _jsonl(run / "decisions.jsonl")
    statuses = Counter(d["status"] for d in decisions)
    assert statuses == {"ok": 320 - len(failed), "guard_error": len(failed)}, statuses
    d = next(d for d in decisions if d["status"] == "guard_error")
    assert d["detail"].startswith("python_exception: ValueError: unknown tool in ") and not d["attributable"]
    n = len(failed)
    assert f"guard_error {n}, ok {320 - n}" in r.out and "exhausted" not in r.out
    assert f"guard error ValueError: {n} calls, e.g. python_exception: ValueError: unknown tool in " in r.out, r.out
    st = run_cli("status", str(run), env=env)
    assert st.code == 0 and f"guard error ValueError: {n} calls, e.g. python_exception: ValueError" in st.out, st.out
    js = json.loads(run_cli("status", str(run), "--json", env=env).out)
    assert js["failure_causes"][0]["status"] == "guard_error" and js["failure_causes"][0]["cause"] == "ValueError"
    assert js["failure_causes"][0]["calls"] == n and js["retries"] == n
    v = run_cli("verify", str(run), env=env)
    assert v.code == 0, v.out + v.err


@pytest.mark.parametrize(("fn", "error_class", "said"), [
    ("wrong", "python_return_type", "returned a int: expected str"),
])
def test_a_wrong_return_is_the_guards_error_too(tmp_path: Path, fn: str, error_class: str, said: str) -> None:
    r, run, _ = _launch(tmp_path, fn, "--max-calls", "3", max_attempts=5)
    assert r.code == 0, r.err
    raw = _jsonl(run / "raw.jsonl")
    assert len(raw) == 6 and {x["error_class"] for x in raw} == {error_class}
    assert {d["status"] for d in _jsonl(run / "decisions.jsonl")} == {"guard_error"}
    assert f"guard error {error_class}: 3 calls, e.g. {error_class}: " in r.out and said in r.out, r.out


def test_retry_on_makes_an_exception_retried_like_an_outage(tmp_path: Path) -> None:
    """A guard that calls a service opts in: its TimeoutError is retried with back-off up to
    max_attempts and the call is `exhausted`, as a provider's outage is."""
    r, run, _ = _launch(tmp_path, "service_down", "--max-calls", "2", max_attempts=3, retry_on=["TimeoutError"])
    assert r.code == 0, r.err
    raw = _jsonl(run / "raw.jsonl")
    assert len(raw) == 6 and {x["outcome"] for x in raw} == {"transient"}
    assert {d["status"] for d in _jsonl(run / "decisions.jsonl")} == {"exhausted"}
    assert "exhausted: 2 calls, e.g. TimeoutError: the policy service did not answer" in r.out, r.out
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["guard"]["retry_on"] == ["TimeoutError"]
    # Not named: the guard's own error, tried twice.
    (tmp_path / "b").mkdir()
    r, run, _ = _launch(tmp_path / "b", "service_down", "--max-calls", "2", max_attempts=3,
                        retry_on=["ConnectionError"])
    assert r.code == 0, r.err
    raw = _jsonl(run / "raw.jsonl")
    assert len(raw) == 4 and {x["outcome"] for x in raw} == {"guard_error"}


@pytest.mark.parametrize(("value", "said"), [
    ('["Timeout Error"]', "exception type names"), ("[3]", "exception type names"), ('"TimeoutError"', "list"),
])
def test_a_bad_retry_on_is_exit_2_naming_the_field(tmp_path: Path, value: str, said: str) -> None:
    cfg, env = _setup(tmp_path, "third")
    cfg.write_text(cfg.read_text() + f"retry_on = {value}\n")
    run = tmp_path / "run"
    r = run_cli("launch", "--cohort", "demo", "--guard", str(cfg), "--run-dir", str(run), "--no-progress", env=env)
    assert r.code == 2 and "retry_on" in r.err and said in r.err and "Traceback" not in r.err, r.err
    assert not run.exists()


def test_retry_on_belongs_to_the_python_backend(tmp_path: Path) -> None:
    cfg = tmp_path / "g.toml"
    cfg.write_text('name = "x"\nbackend = "openrouter"\nmodel = "m/m"\nprompt = "guardeval-json-v1"\n'
                   'retry_on = ["TimeoutError"]\n')
    r = run_cli("launch", "--cohort", "demo", "--guard", str(cfg), "--run-dir", str(tmp_path / "run"))
    assert r.code == 2 and "retry_on applies only to the python backend" in r.err, r.err


def test_a_streak_of_the_same_guard_error_stops_the_run_resumable(tmp_path: Path) -> None:
    r, run, env = _launch(tmp_path, "always", "--concurrency", "2")
    assert r.code == 1 and "stopped: the guard kept failing with its own error" in r.err, r.err
    assert "20 calls in a row ended with the same guard error" in r.err and "KeyError: 'policy'" in r.err
    decisions = _jsonl(run / "decisions.jsonl")
    assert 20 <= len(decisions) <= 22 and {d["status"] for d in decisions} == {"guard_error"}
    assert len(_jsonl(run / "raw.jsonl")) <= 2 * 22
    st = run_cli("status", str(run), env=env)
    assert "stopped: the guard kept failing with the same error" in st.out, st.out
    assert f"guard error KeyError: {len(decisions)} calls" in st.out, st.out
    assert run_cli("verify", str(run), env=env).code == 0


def test_a_streak_of_worker_deaths_stops_the_run(tmp_path: Path) -> None:
    """A worker that dies on every call: each call is tried twice (on a fresh worker), and the
    run stops after 20 such calls, instead of starting two workers for each of 320 calls."""
    r, run, env = _launch(tmp_path, "dies", "--concurrency", "2", isolation="process")
    assert r.code == 1 and "worker processes died" in r.err and "python_worker_died" in r.err, r.err
    raw = _jsonl(run / "raw.jsonl")
    assert {x["error_class"] for x in raw} == {"python_worker_died"} and len(raw) <= 2 * 22
    decisions = _jsonl(run / "decisions.jsonl")
    assert 20 <= len(decisions) <= 22 and {d["status"] for d in decisions} == {"guard_error"}


def test_study_launch_and_status_name_a_guards_errors(tmp_path: Path) -> None:
    ok, env = _setup(tmp_path, "ok")
    third, _ = _setup(tmp_path, "third")
    study = tmp_path / "study"
    r = run_cli("study", "launch", "--cohort", "demo", "--reps", "1", "--study-dir", str(study), "--no-preflight",
                "--no-progress", "--guard", str(ok), "--guard", str(third), env=env)
    assert r.code == 0, r.err
    failed = sum(1 for line in next(study.glob("runs/*third*/decisions.jsonl")).read_bytes().splitlines()
                 if b'"status":"guard_error"' in line)
    assert failed > 0
    said = f"guard error ValueError: {failed} calls, e.g. python_exception: ValueError: unknown tool in "
    assert said in r.out, r.out
    st = run_cli("study", "status", str(study), env=env)
    assert st.code == 0 and said in st.out, st.out
    assert st.out.count("guard error") == 1        # the other guard failed nothing
