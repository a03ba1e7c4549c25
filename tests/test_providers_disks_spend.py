"""Providers, disks and spend (issue 19, section 3): a provider that answers nothing but 429s,
`resume` on a disk with no room, implausible and NaN costs, the key in other spellings, and a
SIGTERM before any call is sent. Real servers on 127.0.0.1, real subprocesses and signals."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import cli_env, run_cli, write_guard
from hostile_server import Hostile, serving

pytestmark = pytest.mark.slow

KEY_ENV = "GUARDEVAL_TEST_KEY"     # write_guard's api_key_env


@pytest.fixture(scope="module")
def hostile() -> Iterator[tuple[str, Hostile]]:
    with serving() as served:
        yield served


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _launch(tmp: Path, cohort: Path, base_url: str, *extra: str, calls: int = 8, env: dict[str, str] | None = None,
            timeout: float = 120, **guard: object) -> tuple[subprocess.CompletedProcess[str], Path]:
    run = tmp / "run"
    cfg = write_guard(tmp / "g.toml", base_url, **{"timeout_s": 10, "max_attempts": 2, **guard})
    proc = subprocess.run([sys.executable, "-m", "guardeval", "launch", "--cohort", str(cohort), "--guard", str(cfg),
                           "--reps", "1", "--run-dir", str(run), "--max-calls", str(calls), "--concurrency", "4",
                           "--no-progress", "--no-preflight", *extra],
                          capture_output=True, text=True, env=cli_env(env), timeout=timeout)
    return proc, run


# -- spend -----------------------------------------------------------------------------------------

def test_an_implausible_cost_is_invalid_and_spend_stays_finite(tmp_path, small_cohort, hostile):
    base, _ = hostile
    proc, run = _launch(tmp_path, small_cohort, f"{base}/cost/1e308/v1")
    assert proc.returncode == 0, proc.stderr
    raw = _jsonl(run / "raw.jsonl")
    assert len(raw) == 8 and all(r["usage"].get("cost_invalid") is True and "cost" not in r["usage"] for r in raw)
    st = json.loads(run_cli("status", str(run), "--json").out)
    assert isinstance(st["spend_usd"], float) and math.isfinite(st["spend_usd"]), st["spend_usd"]
    text = run_cli("status", str(run)).out
    assert "inf" not in text.split("spend")[1].split("\n")[0], text


def test_a_nan_cost_keeps_the_answer(tmp_path, small_cohort, hostile):
    base, _ = hostile
    proc, run = _launch(tmp_path, small_cohort, f"{base}/cost/NaN/v1")
    assert proc.returncode == 0, proc.stderr
    raw = _jsonl(run / "raw.jsonl")
    # One attempt per call: the answer was read, not retried as malformed.
    assert len(raw) == 8 and all(r["outcome"] == "reply" and r["error_class"] is None for r in raw), raw[0]
    assert all(r["usage"].get("cost_invalid") is True and r["usage"]["prompt_tokens"] == 1000 for r in raw)
    assert {d["status"] for d in _jsonl(run / "decisions.jsonl")} == {"ok"}
    assert run_cli("verify", str(run)).code == 0


# -- the key in other spellings ------------------------------------------------------------------

# Built here, so that no tracked file holds a key-shaped literal.
CANARY = "sk-or-v1-" + "".join(f"{(i * 7919) % 251:02x}" for i in range(32))


# Every spelling at the unit level: tests/test_redact.py.
@pytest.mark.parametrize("form, status", [("mixed-case", 200), ("reversed", 200), ("hex-upper", 401),
                                          ("b64-1", 200), ("b64-bearer", 401)])
def test_the_key_in_other_spellings_reaches_no_file_and_no_output(tmp_path, small_cohort, hostile, form, status):
    from hostile_server import key_form, leaked

    assert leaked(key_form(CANARY, form), CANARY) is not None      # the detector sees this spelling
    base, _ = hostile
    proc, run = _launch(tmp_path, small_cohort, f"{base}/key/{form}/{status}/v1", calls=3, env={KEY_ENV: CANARY})
    assert proc.returncode == (1 if status == 401 else 0), proc.stderr
    assert "Traceback" not in proc.stderr
    for text in (proc.stdout, proc.stderr):
        assert leaked(text, CANARY) is None, text
    files = [p for p in run.rglob("*") if p.is_file()]
    assert {"raw.jsonl", "events.jsonl"} <= {p.name for p in files}
    for p in files:
        assert leaked(p.read_text("utf-8", errors="replace"), CANARY) is None, p
    raw = _jsonl(run / "raw.jsonl")
    assert raw and all(r.get("redacted") is True and "[redacted]" in r["response"] for r in raw), raw
    if status == 401:
        assert "[redacted]" in proc.stderr
        assert any("[redacted]" in (e.get("fatal") or "") for e in _jsonl(run / "events.jsonl"))
    assert run_cli("verify", str(run)).code == 0


# -- a provider that answers nothing but 429s ------------------------------------------------------

def test_nothing_but_429s_with_a_huge_retry_after_stops_the_run_resumably(tmp_path, small_cohort, hostile):
    base, _ = hostile
    # Every attempt: 429 with Retry-After 1e9 (capped at retry_max_s, 0.2 s); 100 attempts a call
    # would take minutes per call. With --rate-limit-stop 2 the run stops about 2 s in.
    proc, run = _launch(tmp_path, small_cohort, f"{base}/retry-after/429/1e9/100000/v1", "--rate-limit-stop", "2",
                        calls=80, max_attempts=100, retry_max_s=0.2, timeout=60)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "nothing but rate limits" in proc.stderr and "429" in proc.stderr, proc.stderr
    assert f"guardeval resume {run}" in proc.stderr, proc.stderr
    raw = _jsonl(run / "raw.jsonl")
    assert raw and all(r["error_class"] == "http_429" and r["final"] is False for r in raw)
    assert _jsonl(run / "decisions.jsonl") == []       # nothing written off: every call is pending
    stop = [e for e in _jsonl(run / "events.jsonl") if e["event"] == "stop"][-1]
    assert stop["reason"] == "rate_limited"
    st = run_cli("status", str(run))
    assert "stopped: the provider answered nothing but 429s" in st.out, st.out
    # The provider serves again: resume finishes every call, and the run verifies.
    r = run_cli("resume", str(run), "--base-url", f"{base}/ok/v1", "--no-progress")
    assert r.code == 0, r.err
    assert len(_jsonl(run / "decisions.jsonl")) == 80
    assert run_cli("verify", str(run)).code == 0


def test_a_rate_limit_stop_that_is_not_positive_is_refused(tmp_path, small_cohort):
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", "sim", "--rate-limit-stop", "0", "--dry-run")
    assert r.code == 2 and "--rate-limit-stop" in r.err and "must be > 0" in r.err, r.err


# -- resume on a disk with no room ---------------------------------------------------------------

def _limited(fsize: int, *args: str) -> subprocess.CompletedProcess[str]:
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return subprocess.run([sys.executable, "-m", "guardeval", *args], capture_output=True, text=True, env=cli_env(),
                          timeout=120, preexec_fn=limit)


def test_resume_with_no_room_to_log_an_answer_sends_nothing(tmp_path, small_cohort, hostile):
    base, state = hostile
    path = "/retry-after/503/0/0/v1"         # always a valid answer; the server counts requests
    proc, run = _launch(tmp_path, small_cohort, f"{base}{path}", calls=5)
    assert proc.returncode == 0, proc.stderr

    def sent() -> int:
        return sum(n for (p, _), n in state.attempts.items() if p == f"{path}/chat/completions")

    before, raw = sent(), (run / "raw.jsonl").read_bytes()
    # raw.jsonl may grow by 3,000 bytes: less than one attempt's line.
    for _ in range(2):
        r = _limited(len(raw) + 3000, "resume", str(run), "--no-progress")
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
        assert "no room to record another answer" in r.stderr and "file-size limit" in r.stderr, r.stderr
        assert "raw.jsonl" in r.stderr and f"guardeval resume {run}" in r.stderr, r.stderr
        assert sent() == before                       # nothing sent, so nothing paid and lost
        assert (run / "raw.jsonl").read_bytes() == raw
    # Room for a few lines: it goes on one at a time while they fit, then stops the same way.
    r = _limited(len(raw) + 60_000, "resume", str(run), "--no-progress")
    assert r.returncode == 1 and "no room to record another answer" in r.stderr, r.stderr
    grown = len((run / "raw.jsonl").read_bytes()) - len(raw)
    assert 0 < grown <= 60_000 and sent() - before == len(_jsonl(run / "raw.jsonl")) - 5
    r = run_cli("resume", str(run), "--no-progress")
    assert r.code == 0, r.err
    assert len(_jsonl(run / "decisions.jsonl")) == 80 and run_cli("verify", str(run)).code == 0


# -- SIGTERM before any call is sent -------------------------------------------------------------

def test_sigterm_during_the_preflight_stops_cleanly(tmp_path, small_cohort):
    import signal
    import socket
    import time

    # A server that accepts connections and never answers: the preflight waits on it.
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(16)
        port = srv.getsockname()[1]
        guard = write_guard(tmp_path / "g.toml", f"http://127.0.0.1:{port}/api/v1")
        run = tmp_path / "run"
        child = subprocess.Popen([sys.executable, "-m", "guardeval", "launch", "--cohort", str(small_cohort),
                                  "--guard", str(guard), "--run-dir", str(run), "--no-progress"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env())
        srv.settimeout(30)
        conn, _ = srv.accept()       # the preflight's first request has arrived
        time.sleep(0.2)
        child.send_signal(signal.SIGTERM)
        out, err = child.communicate(timeout=30)
        conn.close()
    assert child.returncode == 1, (child.returncode, err)
    assert "stopped by SIGTERM" in err and "Traceback" not in err, err
    assert not run.exists() and not list(tmp_path.glob(".run.partial-*"))


def test_sigterm_during_planning_stops_cleanly(tmp_path):
    import signal
    import time

    # 960,000 calls: planning (rendering, then the schedule streamed into the partial folder)
    # takes far longer than the wait below.
    run = tmp_path / "run"
    child = subprocess.Popen([sys.executable, "-m", "guardeval", "launch", "--cohort", "demo", "--guard", "sim",
                              "--reps", "3000", "--run-dir", str(run), "--no-preflight", "--no-progress",
                              "--base-url", "http://127.0.0.1:9/api/v1"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env())
    time.sleep(3)
    assert child.poll() is None, child.communicate()
    child.send_signal(signal.SIGTERM)
    out, err = child.communicate(timeout=30)
    assert child.returncode == 1, (child.returncode, err)
    assert "stopped by SIGTERM" in err and "Traceback" not in err, err
    assert not run.exists() and not list(tmp_path.glob(".run.partial-*")), list(tmp_path.iterdir())


# -- the free-space check asks the folder's own disk (issue 46 §10) ------------------------------
MOVES = '''
import os

def guard(inp):
    # What a guard may do to the harness's process (thread isolation): change its working
    # directory, or rename the run folder under it (GUARDEVAL_TEST_MOVE: from:to).
    move = os.environ.get("GUARDEVAL_TEST_MOVE")
    if move and os.path.isdir(move.split(":")[0]):
        os.rename(*move.split(":"))
    os.chdir(os.environ["GUARDEVAL_TEST_CHDIR"])
    return {"malicious_user_request": False, "third_party_attack": False, "current_action_harmfulness": 0}
'''


@pytest.mark.parametrize("move", [False, True], ids=["chdir", "renamed"])
def test_a_guards_chdir_or_a_renamed_run_folder_does_not_end_the_run(tmp_path: Path, move: bool) -> None:
    # The run folder given relative to the working directory: once a guard calls os.chdir (or the
    # folder is renamed), its path leads nowhere. statvfs on that path ended the run with a
    # traceback; the folder's descriptor still names the same disk.
    guards, work, elsewhere = tmp_path / "guards", tmp_path / "work", tmp_path / "elsewhere"
    for folder in (guards, work, elsewhere):
        folder.mkdir()
    (guards / "mover.py").write_text(MOVES)
    cfg = guards / "mover.toml"
    cfg.write_text('name = "mover"\nbackend = "python"\ncallable = "mover:guard"\nisolation = "thread"\n'
                   'model = "rules"\nprompt = "guardeval-json-v1"\n')
    env = cli_env({"GUARDEVAL_TEST_CHDIR": str(elsewhere),
                   **({"GUARDEVAL_TEST_MOVE": f"{work / 'run'}:{work / 'moved'}"} if move else {})})
    proc = subprocess.run([sys.executable, "-m", "guardeval", "launch", "--cohort", "demo", "--guard", str(cfg),
                           "--reps", "1", "--run-dir", "run", "--max-calls", "6", "--concurrency", "1",
                           "--no-progress"], cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    run = work / ("moved" if move else "run")
    assert len(_jsonl(run / "decisions.jsonl")) == 6
    assert run_cli("verify", str(run)).code == 0
