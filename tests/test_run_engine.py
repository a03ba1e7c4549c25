"""End-to-end run engine tests against the real simulated provider on 127.0.0.1."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from conftest import DEMO_COHORT, REPO, cli_env, run_cli, write_guard

pytestmark = pytest.mark.slow


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _decisions_by_call(run: Path) -> dict[str, dict]:
    return {d["call_id"]: d for d in _jsonl(run / "decisions.jsonl")}


def test_full_run_with_every_fault_kind(tmp_path, sim_factory):
    sim = sim_factory("--seed", "3", "--stall-s", "2.5", "--faults",
                      "429=0.08,500=0.04,502=0.02,503=0.02,malformed=0.03,error200=0.03,"
                      "length=0.02,stall=0.01,drift=0.02")
    guard = write_guard(tmp_path / "g.toml", sim.base_url, timeout_s=1, max_attempts=4)
    run = tmp_path / "run"
    r = run_cli("launch", "--cohort", str(DEMO_COHORT), "--guard", str(guard), "--reps", "1",
                "--run-dir", str(run), "--concurrency", "32", "--seed", "11")
    assert r.code == 0, r.err
    sched = _jsonl(run / "schedule.jsonl")
    decisions = _decisions_by_call(run)
    assert len(sched) == 320
    # Nothing silently dropped: every scheduled call has exactly one decision.
    assert set(decisions) == {s["call_id"] for s in sched}
    assert len(_jsonl(run / "decisions.jsonl")) == 320
    raw = _jsonl(run / "raw.jsonl")
    classes = Counter(rec["error_class"] for rec in raw if rec["error_class"])
    # Every kind of transient fault was met and retried.
    for kind in ("http_429", "http_500", "malformed", "error200", "timeout"):
        assert classes[kind] > 0, (kind, classes)
    statuses = Counter(d["status"] for d in decisions.values())
    reasons = Counter(d["quarantine_reason"] for d in decisions.values() if d["quarantine_reason"])
    assert reasons["length_truncation"] > 0 and reasons["provider_drift"] > 0, reasons
    assert statuses["truncated"] == reasons["length_truncation"]
    for d in decisions.values():
        if d["status"] != "ok":
            assert d["detail"], d  # a failure always carries its recorded reason
        assert d["decision"] in (0, 1, None)
    v = run_cli("verify", str(run), "--json")
    assert v.code == 0, v.out + v.err
    assert json.loads(v.out)["ok"] is True


def test_retry_after_and_exhaustion_are_recorded(tmp_path, small_cohort, sim_factory):
    sim = sim_factory("--faults", "503=1", "--retry-after", "0.01")
    guard = write_guard(tmp_path / "g.toml", sim.base_url, max_attempts=3)
    run = tmp_path / "run"
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--reps", "1",
                "--run-dir", str(run), "--max-calls", "5")
    assert r.code == 0, r.err
    decisions = _jsonl(run / "decisions.jsonl")
    assert len(decisions) == 5 and {d["status"] for d in decisions} == {"exhausted"}
    raw = _jsonl(run / "raw.jsonl")
    assert len(raw) == 15  # 3 attempts per call, each logged
    assert all(rec["status"] == 503 for rec in raw)
    assert "pilot stopped by --max-calls" in r.err


def _wait_for_lines(path: Path, n: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_bytes().count(b"\n") >= n:
            return
        if proc.poll() is not None:
            raise AssertionError(f"process ended early with {proc.returncode}")
        time.sleep(0.01)
    raise AssertionError("timed out waiting for progress")


def _spawn(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "guardeval", *args], env=cli_env(), cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def test_sigkill_then_resume_equals_uninterrupted_run(tmp_path, small_cohort, sim_factory):
    sim = sim_factory("--seed", "5", "--latency-ms", "25", "--faults", "429=0.05,500=0.03")
    guard = write_guard(tmp_path / "g.toml", sim.base_url)
    common = ["--guard", str(guard), "--reps", "2", "--seed", "21", "--concurrency", "2"]

    clean = tmp_path / "clean"
    r = run_cli("launch", "--cohort", str(small_cohort), *common, "--run-dir", str(clean), "--no-progress")
    assert r.code == 0, r.err

    run = tmp_path / "killed"
    proc = _spawn("launch", "--cohort", str(small_cohort), *common, "--run-dir", str(run), "--no-progress")
    _wait_for_lines(run / "decisions.jsonl", 15, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    st = run_cli("status", str(run))   # killed: no stop event, no lock held
    assert st.code == 0 and "state: interrupted" in st.out and "guardeval resume" in st.out
    for stop_at in (50, 110):
        proc = _spawn("resume", str(run), "--no-progress", "--concurrency", "2")
        _wait_for_lines(run / "decisions.jsonl", stop_at, proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    r = run_cli("resume", str(run), "--no-progress")
    assert r.code == 0, r.err

    # Each call decided exactly once; the same schedule bytes as the clean run.
    assert (run / "schedule.jsonl").read_bytes() == (clean / "schedule.jsonl").read_bytes()
    decisions = _jsonl(run / "decisions.jsonl")
    assert len(decisions) == 160 and len({d["call_id"] for d in decisions}) == 160
    # Nothing re-sent after its call was decided.
    raw = _jsonl(run / "raw.jsonl")
    decided_at = {d["call_id"]: d["raw_seq"] for d in decisions}
    assert all(rec["seq"] <= decided_at[rec["call_id"]] for rec in raw)
    assert sum(1 for rec in raw if rec["final"]) == 160
    # Same answers as the uninterrupted run.
    a, b = _decisions_by_call(clean), _decisions_by_call(run)
    assert {k: (v["decision"], v["score"], v["status"]) for k, v in a.items()} == \
           {k: (v["decision"], v["score"], v["status"]) for k, v in b.items()}
    assert run_cli("verify", str(run)).code == 0


def _wait_for_events(run: Path, kind: str, n: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    path = run / "events.jsonl"
    while time.monotonic() < deadline:
        if path.exists() and path.read_bytes().count(f'"event":"{kind}"'.encode()) >= n:
            return
        if proc.poll() is not None:
            raise AssertionError(f"process ended early with {proc.returncode}")
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {n} {kind} events")


def test_a_session_killed_after_a_note_is_interrupted(tmp_path, small_cohort, sim_factory):
    # A provider that prices nothing, under --max-cost: the first answer makes the dispatcher write
    # a `note` event (charged at the config's prices). One call at a time at 200 ms: still running
    # (16 s) when the kill comes.
    sim = sim_factory("--price-in", "0", "--price-out", "0", "--latency-ms", "200")
    guard = write_guard(tmp_path / "g.toml", sim.base_url)
    run = tmp_path / "run"
    common = ["--max-cost", "1", "--concurrency", "1", "--no-progress"]

    def state() -> str:
        st = run_cli("status", str(run), "--json")
        assert st.code == 0, st.err
        return json.loads(st.out)["state"]

    proc = _spawn("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--reps", "1",
                  "--run-dir", str(run), *common)
    _wait_for_events(run, "note", 1, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert state() == "interrupted"
    r = run_cli("resume", str(run), "--max-calls", "2", *common)
    assert r.code == 0, r.err
    assert state() == "stopped"
    proc = _spawn("resume", str(run), *common)
    _wait_for_events(run, "note", 3, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert state() == "interrupted"


def _drop_last_stop_event(run):
    lines = (run / "events.jsonl").read_bytes().splitlines(keepends=True)
    last_stop = max(i for i, line in enumerate(lines) if json.loads(line).get("event") == "stop")
    (run / "events.jsonl").write_bytes(b"".join(lines[:last_stop]))


def test_torn_last_line_is_moved_aside_and_redispatched(tmp_path, small_cohort, sim):
    guard = write_guard(tmp_path / "g.toml", sim.base_url)
    run = tmp_path / "run"
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--reps", "1",
                "--run-dir", str(run), "--max-calls", "10")
    assert r.code == 0, r.err
    # Simulate power loss mid-write: the last decision is lost and the raw line is torn.
    dec = (run / "decisions.jsonl").read_bytes().splitlines(keepends=True)
    (run / "decisions.jsonl").write_bytes(b"".join(dec[:-1]))
    raw = (run / "raw.jsonl").read_bytes()
    torn = raw[: raw.rstrip(b"\n").rfind(b"\n") + 1] + raw[raw.rstrip(b"\n").rfind(b"\n") + 1:][:40]
    (run / "raw.jsonl").write_bytes(torn)
    # Power lost then, the session never wrote its stop event (which records the chain head:
    # a log shorter than that head is damage, refused by resume).
    _drop_last_stop_event(run)
    lost_call = json.loads(dec[-1])["call_id"]
    r = run_cli("resume", str(run), "--max-calls", "1")
    assert r.code == 0, r.err
    aside = list(run.glob("raw.jsonl.torn-*"))
    assert len(aside) == 1 and len(aside[0].read_bytes()) == 40
    assert "torn last line" in r.err
    decisions = _decisions_by_call(run)
    assert lost_call in decisions and len(decisions) == 10  # re-dispatched, decided once
    assert run_cli("verify", str(run)).code == 0


def test_replicate_keeps_schedule_and_records_parent(tmp_path, small_cohort, sim):
    guard = write_guard(tmp_path / "g.toml", sim.base_url)
    other = write_guard(tmp_path / "h.toml", sim.base_url, name="sim-other", model="sim/other-model",
                        temperature=0.5)
    parent = tmp_path / "parent"
    assert run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--reps", "1",
                   "--run-dir", str(parent)).code == 0
    child = tmp_path / "child"
    r = run_cli("replicate", str(parent), "--guard", str(other), "--run-dir", str(child))
    assert r.code == 0, r.err
    assert (child / "schedule.jsonl").read_bytes() == (parent / "schedule.jsonl").read_bytes()
    assert (child / "stimuli.jsonl").read_bytes() != (parent / "stimuli.jsonl").read_bytes()
    pm = json.loads((parent / "manifest.json").read_text())
    cm = json.loads((child / "manifest.json").read_text())
    assert cm["parent_run"]["run_id"] == pm["run_id"]
    assert cm["parent_run"]["manifest_sha256"] == pm["sha256"]
    assert cm["schedule_sha256"] == pm["schedule_sha256"]
    assert cm["guard"]["model"] == "sim/other-model"
    assert len(_jsonl(child / "decisions.jsonl")) == 80
    assert run_cli("verify", str(child)).code == 0


def test_api_key_never_written_or_printed(tmp_path, small_cohort, sim_factory):
    secret = "sk-or-v1-" + "5eC2e7" * 8
    env = {"GUARDEVAL_TEST_KEY": secret}
    ok_sim = sim_factory("--require-key")
    guard = write_guard(tmp_path / "g.toml", ok_sim.base_url)
    run = tmp_path / "run"
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--reps", "1",
                "--run-dir", str(run), "--max-calls", "20", env=env)
    assert r.code == 0, r.err
    # A server that rejects the key: 401 is fatal, the run stops resumable, exit 1.
    bad_sim = sim_factory("--expect-key-env", "SIM_EXPECTED_KEY", env={"SIM_EXPECTED_KEY": "another"})
    guard2 = write_guard(tmp_path / "g2.toml", bad_sim.base_url)
    run2 = tmp_path / "run401"
    # The preflight asks with the key first: refused before a run folder exists (exit 2) ...
    r3 = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard2), "--reps", "1",
                 "--run-dir", str(run2), env=env)
    assert r3.code == 2 and "HTTP 401" in r3.out + r3.err and not run2.exists()
    # ... and without it, the first 401 stops the run, resumable.
    r2 = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard2), "--reps", "1",
                 "--run-dir", str(run2), "--no-preflight", env=env)
    assert r2.code == 1
    assert "401" in r2.err and "resume" in r2.err
    for out in (r.out, r.err, r2.out, r2.err, r3.out, r3.err):
        assert secret not in out
    for folder in (run, run2):
        for f in folder.rglob("*"):
            if f.is_file():
                assert secret.encode() not in f.read_bytes(), f
    st = run_cli("status", str(run2), "--json")
    assert json.loads(st.out)["pending"] == 80


def test_second_process_on_one_run_is_refused(tmp_path, small_cohort, sim_factory):
    # 80 calls one at a time at 200 ms: the launch is still dispatching (16 s) when SIGTERM comes,
    # even on a loaded machine where the second process takes seconds to start.
    sim = sim_factory("--latency-ms", "200")
    guard = write_guard(tmp_path / "g.toml", sim.base_url)
    run = tmp_path / "run"
    proc = _spawn("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--reps", "1",
                  "--run-dir", str(run), "--concurrency", "1", "--no-progress")
    try:
        _wait_for_lines(run / "decisions.jsonl", 2, proc)
        r = run_cli("resume", str(run))
        assert r.code == 1
        assert "another guardeval process" in r.err
        st = run_cli("status", str(run))   # reads the files while the launch holds the lock
        assert st.code == 0 and "state: running now" in st.out, st.out
        assert json.loads(run_cli("status", str(run), "--json").out)["running"] is True
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert proc.returncode == 1  # interrupted: resumable
    assert b"interrupted" in proc.stderr.read()
    assert run_cli("verify", str(run)).code == 0
    st = json.loads(run_cli("status", str(run), "--json").out)
    assert st["running"] is False and st["state"] == "stopped" and st["last_stop"]["reason"] == "signal SIGTERM"


def test_fatal_400_stops_cleanly_and_resume_finishes(tmp_path, small_cohort, sim_factory):
    bad = sim_factory("--faults", "400=1")
    guard = write_guard(tmp_path / "g.toml", bad.base_url)
    run = tmp_path / "run"
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--reps", "1",
                "--run-dir", str(run))
    assert r.code == 1 and "fatal provider error" in r.err and "HTTP 400" in r.err
    assert _jsonl(run / "decisions.jsonl") == []
    good = sim_factory()
    r = run_cli("resume", str(run), "--base-url", good.base_url)
    assert r.code == 0, r.err
    assert len(_jsonl(run / "decisions.jsonl")) == 80
    assert run_cli("verify", str(run)).code == 0


def test_dry_run_sends_nothing_and_writes_nothing(tmp_path):
    guard = write_guard(tmp_path / "g.toml", "http://127.0.0.1:9")  # nothing listens there
    run = tmp_path / "run"
    r = run_cli("launch", "--cohort", str(DEMO_COHORT), "--guard", str(guard), "--reps", "3",
                "--run-dir", str(run), "--dry-run", "--no-preflight")
    assert r.code == 0, r.err
    assert "960 calls" in r.out and "cost <= $" in r.out
    assert not run.exists()


def test_max_cost_stops_admission(tmp_path, small_cohort, sim):
    guard = write_guard(tmp_path / "g.toml", sim.base_url)
    run = tmp_path / "run"
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--reps", "1",
                "--run-dir", str(run), "--max-cost", "0.02", "--concurrency", "4")
    assert r.code == 1 and "--max-cost" in r.err
    raw = _jsonl(run / "raw.jsonl")
    spent = sum(rec["usage"].get("cost", 0) for rec in raw)
    assert 0 < spent <= 0.02
    assert 0 < len(_jsonl(run / "decisions.jsonl")) < 80
