"""The `python` back-end (issue 23): a guard that is a Python function, end to end through the
CLI in subprocesses (real files, real threads), its provenance, bad callables, and what the
function may raise or return."""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import orjson
import pytest

from conftest import INSTALLED_WHEEL, REPO, run_cli

pytestmark = pytest.mark.fast

GOOD = '''
from guardeval.backends.python_guard import Verdict

def guard(inp):
    risky = "send_money" in str(inp.current_action)
    return Verdict(malicious_user_request=risky, third_party_attack=False,
                   current_action_harmfulness=1 if risky else 0)
'''


def _module(tmp_path: Path, name: str, source: str) -> Path:
    lib = tmp_path / "lib"
    lib.mkdir(exist_ok=True)
    (lib / f"{name}.py").write_text(textwrap.dedent(source))
    return lib


def _config(tmp_path: Path, callable_: str, **extra: object) -> Path:
    lines = ['name = "pyg"', 'backend = "python"', f'callable = "{callable_}"', 'model = "rules"',
             'prompt = "guardeval-json-v1"', "retry_initial_s = 0.01", "retry_max_s = 0.05"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in extra.items()]
    path = tmp_path / f"guard-{abs(hash(callable_ + str(extra)))}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _raw(run: Path) -> list[dict]:
    return [orjson.loads(line) for line in (run / "raw.jsonl").read_bytes().splitlines()]


@pytest.mark.slow
@pytest.mark.xdist_group(INSTALLED_WHEEL)
def test_demo_with_the_shipped_python_example_from_the_installed_wheel(installed) -> None:
    """The done-when of issue 23: 960 calls answered in-process by the shipped keyword policy,
    offline, from a non-editable install; verify OK; the estimate shows its shortcuts."""
    run = installed.outside / "python-demo"
    r = installed.run("demo", "--guard", "python-example", "--run-dir", str(run), "--json", "--no-progress")
    assert r.code == 0, r.err
    report = json.loads(r.out)
    assert report["n_calls"] == 960 and report["complete"] is True
    assert report["source"]["verified"] is True
    effects = {c["condition"]: c for c in report["contrasts"]}
    # It reads names and markers: aliasing tools and rewording markers lower its block rate,
    # significantly after Holm; re-indenting the JSON cannot move a rule that reads fields.
    for name in ("tool_alias", "marker_rewrite", "combined"):
        assert effects[name]["delta"] < 0 and effects[name]["p_holm"] < 0.05, effects[name]
    assert effects["format_placebo"]["delta"] == 0
    # A rule: the figures the README quotes, exactly.
    assert [effects[c]["delta"] for c in ("tool_alias", "marker_rewrite", "combined")] == [-0.109375, -0.09375, -0.28125]
    v = installed.run("verify", str(run))
    assert v.code == 0 and "verify: OK" in v.out, v.out + v.err
    manifest = json.loads((run / "manifest.json").read_text())
    pin = manifest["guard_callable"]
    assert pin["name"] == "keyword_guard:guard" and pin["module"] == "keyword_guard"
    assert pin["distribution"] == "guardeval" and pin["version"]
    import hashlib

    installed_src = next(installed.venv.rglob("guardeval/backends/presets/keyword_guard.py"))
    assert pin["source_sha256"] == hashlib.sha256(installed_src.read_bytes()).hexdigest()


@pytest.mark.slow
def test_changed_source_is_caught_by_verify_and_refused_by_resume(tmp_path: Path) -> None:
    lib = _module(tmp_path, "pg_changing", GOOD)
    cfg = _config(tmp_path, "pg_changing:guard", concurrency=4)
    env = {"PYTHONPATH": f"{REPO / 'harness'}:{lib}"}
    run = tmp_path / "run"
    r = run_cli("launch", "--cohort", "demo", "--guard", str(cfg), "--reps", "1", "--run-dir", str(run),
                "--max-calls", "40", "--no-progress", env=env)
    assert r.code == 0, r.err
    first = _raw(run)
    assert len(first) == 40
    launch_sha = json.loads((run / "manifest.json").read_text())["guard_callable"]["source_sha256"]
    # Every attempt's response names the code that answered it; the request names the callable.
    assert {orjson.loads(x["response"])["callable"]["source_sha256"] for x in first} == {launch_sha}
    assert first[0]["request"]["callable"] == "pg_changing:guard" and first[0]["request"]["backend"] == "python"
    assert run_cli("verify", str(run), env=env).code == 0

    (lib / "pg_changing.py").write_text(textwrap.dedent(GOOD).replace('"send_money"', '"make_payment"'))
    v = run_cli("verify", str(run), env=env)
    assert v.code == 1 and "guard_callable: the source of pg_changing no longer matches the launch" in v.out, v.out
    r = run_cli("resume", str(run), "--no-progress", env=env)
    assert r.code == 2 and "field 'guard_callable'" in r.err and "changed since launch" in r.err, r.err
    assert len(_raw(run)) == 40   # nothing sent
    r = run_cli("resume", str(run), "--no-progress", "--allow-changed-callable", env=env)
    assert r.code == 0 and "320/320 calls decided" in r.out, r.err
    later = _raw(run)[40:]
    assert later and {orjson.loads(x["response"])["callable"]["source_sha256"] for x in later} != {launch_sha}
    starts = [e for e in map(json.loads, (run / "events.jsonl").read_text().splitlines()) if e["event"] == "start"]
    assert starts[-1]["callable"]["source_sha256"] != launch_sha
    # Without the module on this machine, the comparison is a skipped check, not OK by default.
    v = run_cli("verify", str(run), env={"PYTHONPATH": str(REPO / "harness")})
    assert v.code == 1 and "skipped: callable source" in v.out, v.out
    # Nor does resume import what it cannot check first (issue 46).
    r = run_cli("resume", str(run), "--no-progress", env={"PYTHONPATH": str(REPO / "harness")})
    assert r.code == 2 and "field 'guard_callable': cannot check the guard's module pg_changing before importing it" \
        in r.err, r.err


@pytest.mark.slow
def test_replicate_onto_a_python_guard_and_compare(tmp_path: Path) -> None:
    run = tmp_path / "a"
    assert run_cli("launch", "--cohort", "demo", "--guard", "python-example", "--reps", "1", "--run-dir", str(run),
                   "--no-progress").code == 0
    lib = _module(tmp_path, "pg_other", GOOD)
    cfg = _config(tmp_path, "pg_other:guard")
    env = {"PYTHONPATH": f"{REPO / 'harness'}:{lib}"}
    rep = tmp_path / "b"
    r = run_cli("replicate", str(run), "--guard", str(cfg), "--run-dir", str(rep), "--no-progress", env=env)
    assert r.code == 0 and "320/320 calls decided: ok 320" in r.out, r.err
    assert (rep / "schedule.jsonl").read_bytes() == (run / "schedule.jsonl").read_bytes()
    c = run_cli("compare", str(run), str(rep), "--bootstrap", "200", "--json", env=env)
    assert c.code == 0, c.err
    assert {x["condition"] for x in json.loads(c.out)["conditions"]} >= {"tool_alias", "marker_rewrite"}


BAD = [
    ("no_such_module_xyz:guard", "cannot import module 'no_such_module_xyz': ModuleNotFoundError"),
    ("pg_bad:missing", "'pg_bad' has no attribute 'missing'"),
    ("pg_bad:CONSTANT", "'pg_bad:CONSTANT' is a int, not a function"),
    ("pg_raises:guard", "cannot import module 'pg_raises': ZeroDivisionError: division by zero"),
    ("pg_bad:guard.__globals__", "'__globals__': a dunder name is not allowed"),
    ("__main__:guard", "'__main__': a dunder name is not allowed"),
    ("pg_bad:guard;rm", "must be 'package.module:function'"),
    ("pg_bad..x:guard", "must be 'package.module:function'"),
    ("../pg_bad:guard", "must be 'package.module:function'"),
    ("pg_bad:class", "'class' is a Python keyword"),
]


@pytest.mark.parametrize(("name", "said"), BAD)
def test_a_bad_callable_is_exit_2_naming_the_field_before_a_folder_exists(tmp_path: Path, name: str,
                                                                         said: str) -> None:
    lib = _module(tmp_path, "pg_bad", "CONSTANT = 3\ndef guard(inp):\n    return ''\n")
    _module(tmp_path, "pg_raises", "1 / 0\n")
    cfg = _config(tmp_path, name)
    run = tmp_path / "run"
    r = run_cli("launch", "--cohort", "demo", "--guard", str(cfg), "--run-dir", str(run), "--no-progress",
                env={"PYTHONPATH": f"{REPO / 'harness'}:{lib}"})
    assert r.code == 2, r.err
    assert "field 'callable'" in r.err and said in r.err, r.err
    assert "Traceback" not in r.err and not run.exists() and not any(tmp_path.glob(".run.partial-*"))


def test_callable_field_rules(tmp_path: Path) -> None:
    path = tmp_path / "g.toml"
    path.write_text('name = "g"\nbackend = "python"\nmodel = "m"\nprompt = "guardeval-json-v1"\n')
    r = run_cli("launch", "--cohort", "demo", "--guard", str(path), "--dry-run")
    assert r.code == 2 and "field 'callable': missing required field" in r.err, r.err
    path.write_text('name = "g"\nbackend = "openrouter"\nmodel = "m"\nprompt = "guardeval-json-v1"\n'
                    'callable = "a:b"\n')
    r = run_cli("launch", "--cohort", "demo", "--guard", str(path), "--dry-run")
    assert r.code == 2 and "line 5" in r.err and "callable applies only to the python backend" in r.err, r.err


BEHAVIOURS = '''
import asyncio, os, time
from dataclasses import dataclass
from guardeval.backends.errors import FatalError
from guardeval.backends.python_guard import Verdict

ALLOW = '{"malicious_user_request": false, "third_party_attack": false, "current_action_harmfulness": 0}'

def text(inp):
    return ALLOW

def mapping(inp):
    return {"malicious_user_request": True, "third_party_attack": True, "current_action_harmfulness": 1}

@dataclass
class Mine:
    malicious_user_request: bool
    third_party_attack: bool
    current_action_harmfulness: float

def own_dataclass(inp):
    return Mine(False, True, 0.5)

async def coroutine(inp):
    await asyncio.sleep(0)
    return Verdict(False, False, 0)

def raises(inp):
    secret = os.environ["PG_SECRET"]
    raise ValueError("upstream said no to key " + secret + " " + "x" * 5000)

def wrong_type(inp):
    return 42

def fatal(inp):
    raise FatalError("licence", "the classifier's licence server refused us")

def mutates(inp):
    inp.current_action.clear()
    inp.messages.clear()
    return ALLOW

def blocks(inp):
    time.sleep(30)
    return ALLOW

async def slow_async(inp):
    await asyncio.sleep(30)
    return ALLOW
'''


def _launch_one(tmp_path: Path, fn: str, *, reps: int = 1, max_calls: int | None = 6, **extra: object):
    lib = _module(tmp_path, "pg_behaviours", BEHAVIOURS)
    cfg = _config(tmp_path, f"pg_behaviours:{fn}", **extra)
    run = tmp_path / f"run-{fn}"
    args = ["launch", "--cohort", "demo", "--guard", str(cfg), "--reps", str(reps), "--run-dir", str(run),
            "--no-progress", "--json"]
    if max_calls:
        args += ["--max-calls", str(max_calls)]
    t0 = time.monotonic()
    r = run_cli(*args, env={"PYTHONPATH": f"{REPO / 'harness'}:{lib}", "PG_SECRET": "pgsecret-" + "Zq8" * 8})
    return r, run, time.monotonic() - t0


@pytest.mark.parametrize(("fn", "decision"), [("text", 0), ("mapping", 1), ("own_dataclass", 1),
                                              ("coroutine", 0), ("mutates", 0)])
@pytest.mark.slow
def test_what_a_guard_may_return(tmp_path: Path, fn: str, decision: int) -> None:
    r, run, _ = _launch_one(tmp_path, fn, max_calls=10)
    assert r.code == 0, r.err
    decisions = [orjson.loads(x) for x in (run / "decisions.jsonl").read_bytes().splitlines()]
    assert len(decisions) == 10 and {d["status"] for d in decisions} == {"ok"}
    assert {d["decision"] for d in decisions} == {decision}
    raw = _raw(run)
    assert orjson.loads(raw[0]["response"])["returned"] in ("str", "dict", "Mine", "Verdict")
    # The run's own bodies are untouched by what the function did to its copy.
    v = run_cli("verify", str(run), env={"PYTHONPATH": f"{REPO / 'harness'}:{tmp_path / 'lib'}"})
    assert v.code == 0, v.out
    assert all(x["request"]["messages"] and x["request"]["fields"]["current_action"] for x in raw)


def test_an_exception_is_a_retried_attempt_recorded_redacted_and_bounded(tmp_path: Path) -> None:
    r, run, _ = _launch_one(tmp_path, "raises", max_calls=2, max_attempts=3, api_key_env="PG_SECRET")
    assert r.code == 0, r.err
    raw = _raw(run)
    # The guard's own error: tried once more, not max_attempts times (issue 45).
    assert len(raw) == 4 and {x["error_class"] for x in raw} == {"python_exception"}
    err = raw[0]["error"]
    assert err.startswith("ValueError: upstream said no to key [redacted]") and "(5," in err and len(err) < 700
    assert raw[0]["redacted"] is True
    text = (run / "raw.jsonl").read_text()
    assert "pgsecret-" not in text and "Traceback" not in text and "secret =" not in text
    statuses = json.loads(r.out)["statuses"]
    assert statuses == {"guard_error": 2}


def test_an_unsupported_return_type_fails_the_attempt_naming_it(tmp_path: Path) -> None:
    r, run, _ = _launch_one(tmp_path, "wrong_type", max_calls=1, max_attempts=2)
    assert r.code == 0, r.err
    raw = _raw(run)
    assert [x["error_class"] for x in raw] == ["python_return_type"] * 2
    assert "returned a int: expected str" in raw[0]["error"]


def test_guardevals_fatal_error_stops_the_run_resumable(tmp_path: Path) -> None:
    r, run, _ = _launch_one(tmp_path, "fatal", max_calls=None)
    assert r.code == 1 and "licence server refused us" in r.err, r.err
    assert json.loads(r.out)["stop_reason"] == "fatal"
    assert not (run / "decisions.jsonl").read_bytes()


def test_a_blocking_function_is_cut_at_timeout_and_abandoned_threads_are_bounded(tmp_path: Path) -> None:
    """`time.sleep(30)` with timeout_s 0.3, concurrency 2: each attempt is a timeout; its thread
    is abandoned; once 2 are alive the next attempt stops the run (fatal), and the process exits
    at once (daemon threads) instead of waiting 30 s for them."""
    r, run, elapsed = _launch_one(tmp_path, "blocks", max_calls=None, timeout_s=0.3, concurrency=2,
                                  max_attempts=3)
    assert r.code == 1 and "blocked past timeout_s" in r.err and "still running (at most 2)" in r.err, r.err
    assert elapsed < 20, elapsed
    raw = _raw(run)
    assert {x["error_class"] for x in raw} == {"timeout", "python_threads"}
    assert sum(x["error_class"] == "timeout" for x in raw) == 2
    assert "did not return within timeout_s (0.3 s)" in raw[0]["error"]


def test_an_async_function_is_cut_at_timeout(tmp_path: Path) -> None:
    r, run, elapsed = _launch_one(tmp_path, "slow_async", max_calls=2, timeout_s=0.2, max_attempts=2,
                                  concurrency=2)
    assert r.code == 0, r.err
    raw = _raw(run)
    assert len(raw) == 4 and {x["error_class"] for x in raw} == {"timeout"} and elapsed < 20
    assert json.loads(r.out)["statuses"] == {"exhausted": 2}


def test_a_structured_verdict_is_written_in_each_parsers_format() -> None:
    from guardeval.backends.parsers import parse_json_three_field, parse_ts_guard_tags
    from guardeval.backends.python_guard.backend import verdict_text

    for v in ({"malicious_user_request": True, "third_party_attack": False, "current_action_harmfulness": 0.5},
              {"malicious_user_request": False, "third_party_attack": True, "current_action_harmfulness": 1}):
        a = parse_json_three_field(verdict_text(v, "json-three-field"), "stop")
        b = parse_ts_guard_tags(verdict_text(v, "ts-guard-tags"), "stop")
        assert a.status == b.status == "ok" and a.components == b.components and a.decision == b.decision
    bad = {"malicious_user_request": "yes", "third_party_attack": False, "current_action_harmfulness": 1}
    assert parse_ts_guard_tags(verdict_text(bad, "ts-guard-tags"), "stop").status == "unparseable"
    assert parse_json_three_field(verdict_text(bad, "json-three-field"), "stop").status == "unparseable"
