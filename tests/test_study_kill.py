"""A study survives SIGKILL of its one process during dispatch (issue 28): a real subprocess, a real
SIGKILL while every run has calls in flight; `study resume` finishes every run, and no call is
decided twice in any of them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from guardeval.backends.sim import SimServerProcess

from conftest import REPO, cli_env, run_cli, write_guard

pytestmark = pytest.mark.slow

PROFILE_NAMES = ("shortcut", "robust", "alias-sensitive")
KEY = {"GUARDEVAL_TEST_KEY": "sk-test-key-0123"}


def _decided(study: Path, label: str) -> int:
    f = study / "runs" / label / "decisions.jsonl"
    return f.read_bytes().count(b"\n") if f.is_file() else 0


def test_sigkill_during_dispatch_then_resume(small_cohort: Path, tmp_path: Path) -> None:
    sims = [SimServerProcess(["--seed", str(i), "--profile", name, "--latency-ms", "40"], env=cli_env()).launch()
            for i, name in enumerate(PROFILE_NAMES)]
    try:
        for s in sims:
            s.wait_ready()
        args = []
        for name, s in zip(PROFILE_NAMES, sims):
            args += ["--guard", str(write_guard(tmp_path / f"{name}.toml", s.base_url, name=name))]
        study = tmp_path / "s"
        proc = subprocess.Popen([sys.executable, "-m", "guardeval", "study", "launch", "--cohort", str(small_cohort),
                                 "--reps", "2", "--study-dir", str(study), "--no-preflight", "--no-progress",
                                 "--concurrency", "2", *args], cwd=REPO, env=cli_env(KEY),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 120
            while not all(_decided(study, x) >= 15 for x in PROFILE_NAMES):
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                assert time.monotonic() < deadline, "the study did not get going"
                time.sleep(0.02)
            os.kill(proc.pid, signal.SIGKILL)       # mid-dispatch: every run has calls in flight
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == -signal.SIGKILL
        st = json.loads(run_cli("study", "status", str(study), "--json").out)
        assert not st["complete"] and sorted(st["incomplete"]) == sorted(PROFILE_NAMES)
        assert {x["state"] for x in st["runs"]} == {"interrupted"} and not st["running"]

        r = run_cli("study", "resume", str(study), "--no-progress", env=KEY, timeout=300)
        assert r.code == 0, r.err
    finally:
        for s in sims:
            s.stop()
    st = json.loads(run_cli("study", "status", str(study), "--json").out)
    assert st["complete"] and all(x["decided"] == 160 for x in st["runs"])
    for name in PROFILE_NAMES:
        decisions = [json.loads(line) for line in (study / "runs" / name / "decisions.jsonl").read_text().splitlines()]
        ids = [d["call_id"] for d in decisions]
        assert len(ids) == len(set(ids)) == 160, name            # no call decided twice
        assert not any("supersedes" in d for d in decisions)
    r = run_cli("study", "verify", str(study))
    assert r.code == 0 and "study verify: OK" in r.out, r.out + r.err
    record = json.loads((study / "study.json").read_text())
    assert [c["command"][2] for c in record["commands"]] == ["launch", "resume"]


def test_sigterm_stops_every_run_cleanly(small_cohort: Path, tmp_path: Path) -> None:
    """One watcher for the study's signals: SIGTERM stops every run as it stops one (exit 1, calls in
    flight left pending, a stop event in each run), and `study resume` finishes them."""
    with SimServerProcess(["--latency-ms", "40"], env=cli_env()) as sim:
        args = []
        for name in PROFILE_NAMES[:2]:
            args += ["--guard", str(write_guard(tmp_path / f"{name}.toml", sim.base_url, name=name))]
        study = tmp_path / "s"
        proc = subprocess.Popen([sys.executable, "-m", "guardeval", "study", "launch", "--cohort", str(small_cohort),
                                 "--reps", "2", "--study-dir", str(study), "--no-preflight", "--no-progress",
                                 "--concurrency", "2", *args], cwd=REPO, env=cli_env(KEY),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while not all(_decided(study, x) >= 5 for x in PROFILE_NAMES[:2]):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 1 and "interrupted (signal SIGTERM)" in err, err
        st = json.loads(run_cli("study", "status", str(study), "--json").out)
        assert {x["state"] for x in st["runs"]} == {"stopped"}
        assert {x["last_stop"]["reason"] for x in st["runs"]} == {"signal SIGTERM"}
        assert run_cli("study", "resume", str(study), "--no-progress", env=KEY, timeout=300).code == 0
    assert run_cli("study", "verify", str(study)).code == 0
