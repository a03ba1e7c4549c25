"""What a newcomer trips on (issue 19, section 5), each as it was reproduced: a pilot's status,
the report of a simulated run, `models/` in git, call-id prefixes for `show`, typos, an
unfinished run given to `estimate`, a doubled field in a message, an existing `--run-dir`,
`replicate` piloted, `resume` keeping the launch's options, the sim preset's address."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, SIM_PRESET_PORTS, run_cli, write_guard

pytestmark = pytest.mark.slow


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def pilot(tmp_path, small_cohort, sim) -> Path:
    """A 20-call pilot of an 80-call run against the simulated provider."""
    guard = write_guard(tmp_path / "g.toml", sim.base_url)
    run = tmp_path / "run"
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--reps", "1", "--run-dir", str(run),
                "--max-calls", "20", "--concurrency", "4", "--no-progress")
    assert r.code == 0, r.err
    return run


def test_status_after_a_pilot_says_it_was_a_pilot(pilot):
    r = run_cli("status", str(pilot))
    assert r.code == 0, r.err
    assert "20/80 calls decided, 60 pending" in r.out
    assert "every pending call handled" not in r.out, r.out
    assert "stopped by --max-calls (a pilot)" in r.out, r.out
    stop = [e for e in _jsonl(pilot / "events.jsonl") if e["event"] == "stop"][-1]
    assert stop["reason"] == "max_calls"


def test_status_of_an_old_pilot_without_the_reason_is_not_called_handled(pilot):
    # Runs launched before the pilot's stop was recorded: reason null with calls pending.
    events = pilot / "events.jsonl"
    lines = [json.loads(line) for line in events.read_text().splitlines()]
    for e in lines:
        if e["event"] == "stop":
            e["reason"] = None
    events.write_text("".join(json.dumps(e) + "\n" for e in lines))
    r = run_cli("status", str(pilot))
    assert r.code == 0 and "every pending call handled" not in r.out and "calls pending" in r.out, r.out


def test_estimate_of_an_unfinished_run_offers_resume_and_its_report_says_simulated(pilot):
    r = run_cli("estimate", str(pilot))
    assert r.code == 1 and "Traceback" not in r.err, r.err
    assert f"guardeval resume {pilot}" in r.err and "--allow-partial" in r.err, r.err
    r = run_cli("estimate", str(pilot), "--allow-partial", "--bootstrap", "200")
    assert r.code in (0, 1), r.err
    html = (pilot / "report.html").read_text()
    assert "simulated provider" in html and "not billed" in html
    assert "(usage.cost reported by the provider)" not in html


def test_show_takes_a_unique_prefix_of_a_call_id(pilot):
    ids = [row["call_id"] for row in _jsonl(pilot / "schedule.jsonl")]
    cid = ids[0]
    # The shortest prefix (ten digits at most, as the Calls table shows) unique among the run's ids.
    n = next(n for n in range(1, 11) if sum(i.startswith(cid[:n]) for i in ids) == 1)
    full = run_cli("show", str(pilot), cid, "--json")
    short = run_cli("show", str(pilot), cid[:10], "--json")
    upper = run_cli("show", str(pilot), cid[:n].upper(), "--json")
    assert full.code == short.code == upper.code == 0, (short.err, upper.err)
    assert json.loads(short.out) == json.loads(full.out) == json.loads(upper.out)
    # Ambiguous (80 ids, 16 first digits): exit 2, a few of the ids it matches.
    prefix = next(i[0] for i in ids if sum(j.startswith(i[0]) for j in ids) > 1)
    r = run_cli("show", str(pilot), prefix)
    assert r.code == 2 and "Traceback" not in r.err and r.out == ""
    matching = [i for i in ids if i.startswith(prefix)]
    assert f"prefix of {len(matching)} call ids" in r.err and matching[0] in r.err, r.err
    r = run_cli("show", str(pilot), "xyz")
    assert r.code == 2 and "not a call id" in r.err
    missing = next(p for p in (f"{x:04x}" for x in range(1 << 16)) if not any(i.startswith(p) for i in ids))
    r = run_cli("show", str(pilot), missing)
    assert r.code == 2 and f"begins with {missing}" in r.err, r.err


def test_an_existing_run_dir_points_at_resume(pilot, small_cohort, sim, tmp_path):
    guard = write_guard(tmp_path / "g2.toml", sim.base_url)
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--run-dir", str(pilot))
    assert r.code == 2 and "Traceback" not in r.err
    assert f"guardeval resume {pilot}" in r.err, r.err
    # An occupied folder that is not a run: no resume suggested.
    other = tmp_path / "other"
    other.mkdir()
    (other / "x").write_text("x")
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--run-dir", str(other))
    assert r.code == 2 and "not empty" in r.err and "resume" not in r.err, r.err


def test_a_mistyped_option_names_the_closest_one(tmp_path):
    r = run_cli("launch", "--cohrt", "demo", "--guard", "sim", "--dry-run")
    assert r.code == 2 and "Traceback" not in r.err
    assert "--cohrt" in r.err and "did you mean --cohort?" in r.err, r.err
    r = run_cli("resume", str(tmp_path), "--concurency", "4")
    assert r.code == 2 and "did you mean --concurrency?" in r.err, r.err


def test_a_missing_prompt_names_its_field_once(tmp_path, small_cohort):
    guard = write_guard(tmp_path / "g.toml", "http://127.0.0.1:9/v1", prompt="no-such-prompt")
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--dry-run", "--no-preflight")
    assert r.code == 2 and "Traceback" not in r.err
    assert r.err.count("field 'prompt'") == 1 and "no-such-prompt" in r.err, r.err


def test_models_folder_is_ignored_by_git():
    r = subprocess.run(["git", "check-ignore", "-q", "models/smollm2-q8/model.safetensors"], cwd=REPO)
    assert r.returncode == 0
    # Only the top-level folder: the package's own modules named models stay tracked.
    r = subprocess.run(["git", "check-ignore", "-q", "harness/guardeval/cli/models.py"], cwd=REPO)
    assert r.returncode == 1


def _overlap(raw: list[dict]) -> int:
    """The most attempts in flight at once, from their start and finish times."""
    from datetime import datetime

    def t(s: str) -> float:
        return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()

    edges = sorted([(t(r["started"]), 1) for r in raw] + [(t(r["finished"]), -1) for r in raw],
                   key=lambda e: (e[0], e[1]))
    most = now = 0
    for _, d in edges:
        now += d
        most = max(most, now)
    return most


def test_resume_keeps_the_launchs_options_unless_overridden(tmp_path, small_cohort, sim_factory):
    sim = sim_factory("--seed", "7", "--latency-ms", "60")
    guard = write_guard(tmp_path / "g.toml", sim.base_url)
    run = tmp_path / "run"
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--reps", "1", "--run-dir", str(run),
                "--max-calls", "10", "--concurrency", "2", "--rpm", "60000", "--rate-limit-stop", "300",
                "--no-progress")
    assert r.code == 0, r.err
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["launch_options"] == {"concurrency": 2, "fixed_concurrency": None, "rpm": 60000.0,
                                          "max_cost": None, "rate_limit_stop_s": 300.0}
    n = len(_jsonl(run / "raw.jsonl"))
    r = run_cli("resume", str(run), "--max-calls", "30", "--no-progress")
    assert r.code == 0, r.err
    assert "as launched: --concurrency 2 --rpm 60000 --rate-limit-stop 300" in r.err, r.err
    resumed = _jsonl(run / "raw.jsonl")[n:]
    assert len(resumed) >= 30 and _overlap(resumed) <= 2, _overlap(resumed)
    # Given again on the command line, an option wins and is not reported as reused.
    n = len(_jsonl(run / "raw.jsonl"))
    r = run_cli("resume", str(run), "--concurrency", "8", "--no-progress")
    assert r.code == 0, r.err
    assert "--concurrency 2" not in r.err and "as launched: --rpm 60000" in r.err, r.err
    assert _overlap(_jsonl(run / "raw.jsonl")[n:]) > 2
    assert run_cli("verify", str(run)).code == 0


def test_a_damaged_launch_record_is_refused_naming_the_field(pilot):
    path = pilot / "manifest.json"
    m = json.loads(path.read_text())
    m["launch_options"]["concurrency"] = -3
    path.write_text(json.dumps(m))
    r = run_cli("resume", str(pilot), "--no-progress")
    assert r.code == 2 and "launch_options.concurrency" in r.err and "Traceback" not in r.err, r.err


def test_replicate_can_be_piloted_and_dry_run(pilot, tmp_path, sim):
    run_cli("resume", str(pilot), "--no-progress")
    other = write_guard(tmp_path / "other.toml", sim.base_url, name="other-guard")
    target = tmp_path / "rep"
    r = run_cli("replicate", str(pilot), "--guard", str(other), "--run-dir", str(target), "--dry-run",
                "--max-calls", "7")
    assert r.code == 0 and "Traceback" not in r.err, r.err
    assert "plan: 80 calls" in r.out and "the schedule of" in r.out and "would write" in r.out, r.out
    assert "projection for 7 calls (the first 7, --max-calls)" in r.out, r.out
    assert "preflight: OK" in r.out and not target.exists()
    r = run_cli("replicate", str(pilot), "--guard", str(other), "--run-dir", str(target), "--dry-run", "--json")
    plan = json.loads(r.out)
    assert r.code == 0 and plan["n_calls"] == 80 and plan["preflight_ok"] is True and not target.exists()
    r = run_cli("replicate", str(pilot), "--guard", str(other), "--run-dir", str(target), "--max-calls", "7",
                "--no-progress")
    assert r.code == 0, r.err
    assert len(_jsonl(target / "decisions.jsonl")) == 7 and "pilot stopped by --max-calls" in r.err, r.err
    assert (target / "schedule.jsonl").read_bytes() == (pilot / "schedule.jsonl").read_bytes()
    assert "stopped by --max-calls (a pilot)" in run_cli("status", str(target)).out


@pytest.mark.xdist_group(SIM_PRESET_PORTS)
def test_the_sim_preset_without_its_server_says_to_pass_the_url(tmp_path, small_cohort):
    # The preset points at 127.0.0.1:8089; nothing listens there in this test.
    import socket

    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", 8089)) == 0:
            pytest.skip("something listens on 127.0.0.1:8089 here")
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", "sim", "--run-dir", str(tmp_path / "run"))
    assert r.code == 2 and "Traceback" not in r.err
    assert "sim-server" in r.err and "--base-url" in r.err and "listening on" in r.err, r.err
    assert "OpenRouter cannot serve" not in r.err, r.err
