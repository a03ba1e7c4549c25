"""`resume --retry-failed` (issue 19 §4): failed calls get new attempts against the real simulated
provider, their new decisions supersede the old, and every reader counts each call once."""

from __future__ import annotations

import csv
import io
import json
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from guardeval.backends.sim import SimServerProcess
from guardeval.canon import dumps_line, sha256_hex
from guardeval.cli import run as cli_run
from guardeval.run.folder import supersede
from guardeval.run.run import Run

from conftest import REPO, cli_env, run_cli, write_guard

pytestmark = pytest.mark.fast


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _live(run: Path) -> dict[str, dict]:
    return {d["call_id"]: d for d in _jsonl(run / "decisions.jsonl")}


@pytest.fixture(scope="module")
def failed_run(tmp_path_factory: pytest.TempPathFactory, small_cohort: Path) -> Path:
    """160 calls (the small cohort, 2 repetitions) against a provider failing 60% of requests
    with a 500, two attempts per call: about a third of the calls end `exhausted`."""
    base = tmp_path_factory.mktemp("failed")
    with SimServerProcess(["--seed", "4", "--faults", "500=0.6"], env=cli_env()) as sim:
        guard = write_guard(base / "g.toml", sim.base_url, max_attempts=2)
        run = base / "run"
        r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--reps", "2", "--seed", "9",
                    "--run-dir", str(run), "--no-progress", "--no-preflight")
        assert r.code == 0, r.err      # failures are recorded, the launch succeeds
    statuses = Counter(d["status"] for d in _jsonl(run / "decisions.jsonl"))
    assert statuses["exhausted"] >= 20 and statuses["ok"] >= 60, statuses
    return run


@pytest.fixture
def copy_failed(tmp_path: Path, failed_run: Path) -> Callable[[str], Path]:
    def copy(name: str = "run") -> Path:
        dst = tmp_path / name
        shutil.copytree(failed_run, dst)
        return dst
    return copy


def _bytes(run: Path) -> dict[str, bytes]:
    return {n: (run / n).read_bytes() for n in ("raw.jsonl", "decisions.jsonl", "events.jsonl")}


@pytest.mark.slow
def test_retry_after_the_provider_recovers_counts_each_call_once(copy_failed, sim_factory):
    run = copy_failed()
    before = _bytes(run)
    failed = {c for c, d in _live(run).items() if d["status"] == "exhausted"}
    sim = sim_factory("--seed", "4")     # the provider is back: no faults

    # A plain resume sends nothing: every call has a decision.
    r = run_cli("resume", str(run), "--base-url", sim.base_url, "--no-progress", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["session"]["dispatched"] == 0
    assert (run / "raw.jsonl").read_bytes() == before["raw.jsonl"]

    r = run_cli("resume", str(run), "--retry-failed", "--base-url", sim.base_url, "--no-progress", "--json")
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert out["session"]["retry"] == {"statuses": ["exhausted", "provider_error"], "targets": len(failed),
                                       "rounds": {"1": len(failed)}, "decided": len(failed),
                                       "new_statuses": {"ok": len(failed)}}
    assert out["statuses"] == {"ok": 160}
    assert f"retried {len(failed)} call(s) whose decision was exhausted or provider_error" in r.err

    # Append-only: the old bytes are a prefix of the new files.
    for name in ("raw.jsonl", "decisions.jsonl"):
        assert (run / name).read_bytes().startswith(before[name]), name
    decisions = _jsonl(run / "decisions.jsonl")
    assert len(decisions) == 160 + len(failed)
    old_lines = {sha256_hex(line): json.loads(line)
                 for line in before["decisions.jsonl"].splitlines()}
    new = decisions[160:]
    assert {d["call_id"] for d in new} == failed
    raw_by_seq = {rec["seq"]: rec for rec in _jsonl(run / "raw.jsonl")}
    for d in new:
        old = old_lines[d["supersedes"]["decision_sha256"]]      # names a real earlier decision of the call
        assert old["call_id"] == d["call_id"] and old["status"] == "exhausted"
        assert d["supersedes"] == {"decision_sha256": d["supersedes"]["decision_sha256"], "raw_seq": old["raw_seq"],
                                   "status": "exhausted", "quarantine_reason": None}
        assert d["retry_round"] == 1 and d["status"] == "ok" and d["raw_seq"] > old["raw_seq"]
        # the retry's attempts number on from the call's earlier ones
        assert raw_by_seq[d["raw_seq"]]["attempt"] == raw_by_seq[old["raw_seq"]]["attempt"] + 1

    v = run_cli("verify", str(run), "--json")
    assert v.code == 0 and json.loads(v.out)["ok"], v.out

    st = json.loads(run_cli("status", str(run), "--json").out)
    assert st["statuses"] == {"ok": 160} and st["decided"] == 160 and st["complete"]
    assert st["retried"]["calls"] == len(failed) and st["retried"]["rounds"] == {"1": len(failed)}
    assert [s["calls"] for s in st["retried"]["sessions"]] == [len(failed)]
    text = run_cli("status", str(run)).out
    assert f"retried with --retry-failed: {len(failed)} call(s) (round 1 {len(failed)})" in text and "decisions: ok 160" in text

    ex = run_cli("export", str(run), "--format", "csv", "--out", "-")
    assert ex.code == 0, ex.err
    rows = list(csv.DictReader(io.StringIO(ex.out)))
    assert len(rows) == 160 and len({r["call_id"] for r in rows}) == 160
    assert {r["call_id"] for r in rows if r["retry_round"] == "1"} == failed
    assert {r["status"] for r in rows} == {"ok"}

    e = run_cli("estimate", str(run), "--json", "--bootstrap", "200")
    assert e.code == 0, e.err
    rep = json.loads(e.out)
    assert sum(c["valid"] for c in rep["coverage"].values()) == 160
    assert rep["retried"]["n_calls"] == len(failed) and [x["round"] for x in rep["retried"]["rounds"]] == [1]
    assert rep["retried"]["rounds"][0]["n_calls"] == len(failed)
    # A retry is a later measurement: the retried calls are ranked by the retry, in the last third.
    assert sum(rep["order"]["retried_by_third"]) == len(failed)
    assert rep["order"]["retried_by_third"][2] == min(len(failed), rep["order"]["thirds"][2]["n_calls"])
    md = (run / "report.md").read_text()
    assert "## Retried calls" in md and f"{len(failed)} calls counted at a retry's decision" in md
    rep_html = run_cli("report", str(run))
    assert rep_html.code == 0, rep_html.err
    assert "Retried calls" in (run / "report.html").read_text()

    cid = sorted(failed)[0]
    show = run_cli("show", str(run), cid)
    assert show.code == 0, show.err
    assert "decisions (2; the last is counted" in show.out and "retry round 1, supersedes" in show.out


def _fingerprint(run: Path) -> str:
    return json.loads(run_cli("status", str(run), "--json").out)["fingerprint"]


@pytest.mark.slow
def test_a_resume_with_nothing_to_do_leaves_the_run_and_retries_count_as_retries(copy_failed, sim_factory):
    # Issue 47 §5. Progress on (stderr is not a terminal here: plain `progress:` lines).
    run = copy_failed()
    before, token = _bytes(run), _fingerprint(run)
    failed = sum(d["status"] == "exhausted" for d in _live(run).values())
    sim = sim_factory("--seed", "4")

    # Every call has a decision: nothing is sent, nothing written, no progress line of nothing.
    r = run_cli("resume", str(run), "--base-url", sim.base_url)
    assert r.code == 0, r.err
    assert "progress:" not in r.err and "the run was left as it was" in r.err, r.err
    assert _bytes(run) == before and _fingerprint(run) == token

    # Retries are counted as retries: the calls' count stays at the run's 160.
    r = run_cli("resume", str(run), "--retry-failed", "--base-url", sim.base_url)
    assert r.code == 0, r.err
    lines = [line for line in r.err.splitlines() if line.startswith("progress: ")]
    assert lines and all(line.startswith("progress: 160/160 calls + ") for line in lines), lines
    assert lines[-1].startswith(f"progress: 160/160 calls + {failed}/{failed} retried"), lines
    retried = _fingerprint(run)
    assert retried != token

    # Nothing left to retry: again nothing is written.
    after = _bytes(run)
    r = run_cli("resume", str(run), "--retry-failed", "--base-url", sim.base_url)
    assert r.code == 0 and "nothing to retry" in r.err and "progress:" not in r.err, r.err
    assert _bytes(run) == after and _fingerprint(run) == retried


@pytest.mark.slow
def test_a_retry_that_fails_again_is_retried_in_a_later_round(copy_failed, sim_factory):
    run = copy_failed()
    failed = {c for c, d in _live(run).items() if d["status"] == "exhausted"}
    # Every answer an error body (answers come, so not an outage; a streak of unreadable ones
    # would stop the run as `unusable_answers`, issue 27).
    down = sim_factory("--faults", "error200=1")
    r = run_cli("resume", str(run), "--retry-failed", "exhausted", "--base-url", down.base_url, "--no-progress",
                "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["session"]["retry"]["new_statuses"] == {"exhausted": len(failed)}
    live = _live(run)
    assert {c for c, d in live.items() if d.get("retry_round") == 1 and d["status"] == "exhausted"} == failed
    st = json.loads(run_cli("status", str(run), "--json").out)
    assert st["statuses"]["exhausted"] == len(failed) and sum(st["statuses"].values()) == 160
    text = run_cli("status", str(run)).out
    assert f"{len(failed)} call(s) failed (exhausted or provider_error)" in text and "--retry-failed" in text
    assert run_cli("verify", str(run)).code == 0

    up = sim_factory("--seed", "4")
    r = run_cli("resume", str(run), "--retry-failed", "--base-url", up.base_url, "--no-progress", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["session"]["retry"]["rounds"] == {"2": len(failed)}
    decisions = _jsonl(run / "decisions.jsonl")
    assert len(decisions) == 160 + 2 * len(failed)
    chain: dict[str, list[dict]] = {}
    for d in decisions:
        chain.setdefault(d["call_id"], []).append(d)
    for cid in failed:
        first, again, last = chain[cid]
        assert again["supersedes"]["decision_sha256"] == sha256_hex(dumps_line(first)[:-1])
        assert last["supersedes"]["decision_sha256"] == sha256_hex(dumps_line(again)[:-1])
        assert [again["retry_round"], last["retry_round"], last["status"]] == [1, 2, "ok"]
    v = run_cli("verify", str(run), "--json")
    assert v.code == 0 and json.loads(v.out)["ok"], v.out
    st = json.loads(run_cli("status", str(run), "--json").out)
    assert st["statuses"] == {"ok": 160} and st["retried"]["rounds"] == {"1": len(failed), "2": len(failed)}
    rep = json.loads(run_cli("estimate", str(run), "--json", "--bootstrap", "100").out)
    assert [(x["round"], x["n_calls"]) for x in rep["retried"]["rounds"]] == [(2, len(failed))]


def _spawn(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "guardeval", *args], env=cli_env(), cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _wait_lines(path: Path, n: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.read_bytes().count(b"\n") >= n:
            return
        if proc.poll() is not None:
            raise AssertionError(f"process ended early with {proc.returncode}: {proc.stderr.read()!r}")
        time.sleep(0.005)
    raise AssertionError("timed out waiting for progress")


def _orphans(run: Path) -> int:
    """Final raw lines that no decision points at: answers whose decision a crash lost."""
    pointed = {d["raw_seq"] for d in _jsonl(run / "decisions.jsonl")}
    return sum(1 for rec in _jsonl(run / "raw.jsonl") if rec["final"] and rec["seq"] not in pointed)


@pytest.mark.slow
def test_sigkill_during_a_retry_round_loses_nothing_and_pays_nothing_twice(copy_failed, sim_factory):
    run = copy_failed()
    failed = {c for c, d in _live(run).items() if d["status"] == "exhausted"}
    n0 = len(_jsonl(run / "decisions.jsonl"))
    # Some latency and a few more faults, so that the kill lands mid-round, between raw lines and
    # the decisions written for them (every 0.5 s), and some retries fail again.
    sim = sim_factory("--seed", "4", "--latency-ms", "30", "--faults", "500=0.2")
    common = ["--base-url", sim.base_url, "--concurrency", "2", "--no-progress"]
    recovered = 0
    for step in (5, 12):
        proc = _spawn("resume", str(run), "--retry-failed", *common)
        _wait_lines(run / "decisions.jsonl", n0 + step, proc)
        # Kill while answers are logged whose decisions are still held (written every 0.5 s).
        deadline = time.monotonic() + 30
        while _orphans(run) == 0 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        lost = _orphans(run)
        assert Run.open(run).verify()["undecided_answers"] == lost     # verify names the lost ones
        # A plain resume decides the lost answers from the log and sends nothing.
        raw_before = (run / "raw.jsonl").read_bytes()
        r = run_cli("resume", str(run), "--json", *common)
        assert r.code == 0, r.err
        assert json.loads(r.out)["session"]["dispatched"] == 0
        assert (run / "raw.jsonl").read_bytes() == raw_before
        assert json.loads(r.out)["session"]["recovered"] == lost and _orphans(run) == 0
        recovered += lost
        assert run_cli("verify", str(run)).code == 0
    r = run_cli("resume", str(run), "--retry-failed", *common)
    assert r.code == 0, r.err
    for _ in range(5):         # until no retry fails again (each round a new measurement)
        live = _live(run)
        if not any(d["status"] == "exhausted" for d in live.values()):
            break
        assert run_cli("resume", str(run), "--retry-failed", *common).code == 0
    live = _live(run)
    assert len(live) == 160 and {d["status"] for d in live.values()} == {"ok"}
    v = run_cli("verify", str(run), "--json")
    assert v.code == 0 and json.loads(v.out)["ok"], v.out
    raw = _jsonl(run / "raw.jsonl")
    # Nothing lost: every final raw line has its decision; nothing paid twice: no call has more
    # than one answer, and nothing was sent for a call after its answer.
    assert _orphans(run) == 0
    answers = Counter(rec["call_id"] for rec in raw if rec["outcome"] == "reply")
    assert max(answers.values()) == 1 and len(answers) == 160
    answered_at = {rec["call_id"]: rec["seq"] for rec in raw if rec["outcome"] == "reply"}
    assert all(rec["seq"] <= answered_at[rec["call_id"]] for rec in raw)
    # Every retried call's live decision supersedes, so the chain leads back to its first.
    assert all(live[c].get("retry_round", 0) >= 1 for c in failed)
    st = json.loads(run_cli("status", str(run), "--json").out)
    assert st["statuses"] == {"ok": 160} and st["retried"]["calls"] == len(failed)
    assert recovered > 0     # the kills did land between an answer and its decision


@pytest.mark.parametrize("arg", ["ok", "bogus", "exhausted,,refused", "exhausted,ok", ""])
def test_statuses_that_are_not_failure_statuses_exit_2(copy_failed, arg):
    run = copy_failed()
    before = _bytes(run)
    r = run_cli("resume", str(run), "--retry-failed", arg, "--base-url", "http://127.0.0.1:9/v1")
    assert r.code == 2, (r.out, r.err)
    assert "--retry-failed" in r.err and "Traceback" not in r.err
    if "ok" in arg.split(","):
        assert "'ok' is a counted answer" in r.err
    assert _bytes(run) == before


def test_the_run_folder_after_the_option_is_named_in_the_message(copy_failed):
    run = copy_failed()
    r = run_cli("resume", "--retry-failed", str(run))
    assert r.code == 2 and "the run folder goes before --retry-failed" in r.err, r.err


def test_the_cli_spells_the_statuses_as_the_library_does():
    # Written twice so that building the parser imports nothing: they must agree.
    assert cli_run.FAILURE_STATUSES == supersede.FAILURE_STATUSES
    assert tuple(cli_run.DEFAULT_RETRY.split(",")) == supersede.DEFAULT_STATUSES
    from guardeval.estimators.table import FAILURE_STATUSES

    assert set(FAILURE_STATUSES) == set(supersede.FAILURE_STATUSES)


# -- verify: the supersession chain ----------------------------------------------------------------

@pytest.fixture(scope="module")
def retried_run(tmp_path_factory: pytest.TempPathFactory, failed_run: Path) -> Path:
    run = tmp_path_factory.mktemp("retried") / "run"
    shutil.copytree(failed_run, run)
    with SimServerProcess(["--seed", "4"], env=cli_env()) as sim:
        r = run_cli("resume", str(run), "--retry-failed", "--base-url", sim.base_url, "--no-progress")
        assert r.code == 0, r.err
    assert Run.open(run).verify()["ok"]
    return run


def _edit(run: Path, tmp_path: Path, change: Callable[[list[dict]], None]) -> list[dict]:
    dst = tmp_path / f"edited-{len(list(tmp_path.iterdir()))}"
    shutil.copytree(run, dst)
    lines = _jsonl(dst / "decisions.jsonl")
    change(lines)
    (dst / "decisions.jsonl").write_bytes(b"".join(dumps_line(d) for d in lines))
    return Run.open(dst).verify()["problems"]


def _messages(problems: list[dict]) -> list[str]:
    return [p["message"] for p in problems if p["file"] == "decisions.jsonl"]


def _first_retry(lines: list[dict]) -> dict:
    return next(d for d in lines if "supersedes" in d)


def test_verify_refuses_a_supersession_of_nothing(retried_run, tmp_path):
    def change(lines: list[dict]) -> None:
        _first_retry(lines)["supersedes"]["decision_sha256"] = "0" * 64
    assert "supersedes no earlier decision with a failure status (decision_sha256 names none)" in \
        _messages(_edit(retried_run, tmp_path, change))


def test_verify_refuses_a_supersession_of_an_ok_decision(retried_run, tmp_path):
    def change(lines: list[dict]) -> None:
        d = _first_retry(lines)
        ok = next(x for x in lines if x["status"] == "ok" and "supersedes" not in x)
        d["supersedes"] = {"decision_sha256": sha256_hex(dumps_line(ok)[:-1]), "raw_seq": ok["raw_seq"],
                           "status": "ok", "quarantine_reason": None}
    assert "supersedes no earlier decision with a failure status (decision_sha256 names none)" in \
        _messages(_edit(retried_run, tmp_path, change))


def test_verify_refuses_a_supersession_of_another_calls_decision(retried_run, tmp_path):
    def change(lines: list[dict]) -> None:
        retries = [d for d in lines if "supersedes" in d]
        a, b = retries[0], retries[1]
        a["supersedes"] = dict(b["supersedes"])
        b["supersedes"]["decision_sha256"] = "f" * 64
    msgs = _messages(_edit(retried_run, tmp_path, change))
    assert "supersedes a decision of another call" in msgs


def test_verify_refuses_two_live_decisions_for_one_call(retried_run, tmp_path):
    def twice(lines: list[dict]) -> None:
        lines.append(dict(_first_retry(lines)))      # a second retry of the same decision
    msgs = _messages(_edit(retried_run, tmp_path, twice))
    assert "supersedes a decision that an earlier decision already superseded (two live decisions for one call)" \
        in msgs

    def plain(lines: list[dict]) -> None:
        d = dict(_first_retry(lines))
        del d["supersedes"], d["retry_round"]
        lines.append(d)                               # a second decision that supersedes nothing
    assert "call decided twice" in _messages(_edit(retried_run, tmp_path, plain))


def test_verify_refuses_a_wrong_round_or_copied_fields(retried_run, tmp_path):
    def rnd(lines: list[dict]) -> None:
        _first_retry(lines)["retry_round"] = 2
    assert "retry_round 2 does not follow the superseded decision's round 0" in \
        _messages(_edit(retried_run, tmp_path, rnd))

    def status(lines: list[dict]) -> None:
        _first_retry(lines)["supersedes"]["status"] = "provider_error"
    assert "supersedes.status differs from the decision it supersedes" in \
        _messages(_edit(retried_run, tmp_path, status))

    def changed(lines: list[dict]) -> None:
        _first_retry(lines)["decision"] = 1 - (_first_retry(lines)["decision"] or 0)
    assert "decision differs from its re-derivation from the raw line" in \
        _messages(_edit(retried_run, tmp_path, changed))


def test_verify_refuses_a_superseded_decision_changed_afterwards(retried_run, tmp_path):
    # The old decision is named by its line's SHA-256: editing it breaks the link.
    def change(lines: list[dict]) -> None:
        target = _first_retry(lines)["supersedes"]["decision_sha256"]
        old = next(d for d in lines if sha256_hex(dumps_line(d)[:-1]) == target)
        old["detail"] = "edited"
    msgs = _messages(_edit(retried_run, tmp_path, change))
    assert "supersedes no earlier decision with a failure status (decision_sha256 names none)" in msgs


def test_estimate_table_checks_retry_round(tmp_path):
    rows = [{"base_id": "b", "interaction_id": "i", "domain": "d", "condition": c, "repetition": 0,
             "decision": 0, "status": "ok", "retry_round": rnd} for c, rnd in (("original", 0), ("x", -1))]
    table = tmp_path / "t.jsonl"
    table.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = run_cli("estimate", "--table", str(table), "--out", str(tmp_path / "out"))
    assert r.code == 2 and "line 2" in r.err and "retry_round" in r.err, r.err
