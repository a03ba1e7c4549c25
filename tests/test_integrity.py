"""Integrity a reader can check later (issue 19 §2): the run fingerprint and `verify --expect`,
decisions deleted from a run, a forged report.json, export of a tampered run, resume of a raw
log cut short. Each is a real run folder, changed as an attacker or an accident would."""

from __future__ import annotations

import json
import re
from pathlib import Path

import orjson
import pytest

from guardeval.canon import dumps_line

from conftest import run_cli
from tamper import rechain_with_zero_costs

pytestmark = pytest.mark.slow

FP = re.compile(r"fingerprint ([0-9]+\.[0-9]+\.[0-9]+\.[0-9a-f]{24})")


def _status(run: Path, code: int = 0) -> dict:
    r = run_cli("status", str(run), "--json")
    assert r.code == code, r.err
    return json.loads(r.out)


def test_a_rechained_log_passes_verify_but_not_the_fingerprint_taken_before(copy_run):
    run = copy_run("run")
    before = _status(run)
    assert before["spend_usd"] > 0
    token = before["fingerprint"]
    ok = run_cli("verify", str(run), "--expect", token)
    assert ok.code == 0 and f"fingerprint {token} (as expected)" in ok.out, (ok.code, ok.out)
    rechain_with_zero_costs(run)
    assert _status(run)["spend_usd"] == 0
    plain = run_cli("verify", str(run))
    assert plain.code == 0, plain.out          # the chain alone is consistent again
    pinned = run_cli("verify", str(run), "--expect", token)
    assert pinned.code == 1, pinned.out
    assert f"not the expected {token}" in pinned.out and "verify: FAILED" in pinned.out
    bad = run_cli("verify", str(run), "--expect", "not-a-fingerprint")
    assert bad.code == 2 and "--expect" in bad.err and "Traceback" not in bad.err


def test_every_session_status_and_report_show_the_same_fingerprint(copy_run):
    run = copy_run("run")
    r = run_cli("resume", str(run), "--no-progress")
    assert r.code == 0, r.err
    m = FP.search(r.err)
    assert m, r.err
    token = m.group(1)
    assert _status(run)["fingerprint"] == token
    assert f"fingerprint {token}" in run_cli("status", str(run)).out
    est = run_cli("estimate", str(run))
    assert est.code == 0, est.err
    assert f"`{token}`" in (run / "report.md").read_text()
    assert json.loads((run / "report.json").read_text())["source"]["fingerprint"] == token
    assert token in (run / "report.html").read_text()
    n_raw, n_dec = (int(x) for x in token.split(".")[:2])
    assert n_raw == len((run / "raw.jsonl").read_bytes().splitlines())
    assert n_dec == len((run / "decisions.jsonl").read_bytes().splitlines())


def test_deleted_decisions_are_counted_by_verify_and_status_and_resume_rederives_them(copy_run):
    run = copy_run("run")
    lines = (run / "decisions.jsonl").read_bytes().splitlines(keepends=True)
    kept = lines[:10] + lines[20:]   # ten decisions of answered calls deleted, the last line kept
    (run / "decisions.jsonl").write_bytes(b"".join(kept))
    v = run_cli("verify", str(run))
    assert v.code == 1, v.out
    assert "10 logged final answer(s) have no decision line" in v.out and "verify: FAILED" in v.out
    st = _status(run)
    assert st["undecided_answers"] == 10 and st["pending"] == 10
    assert "logged answers without a decision: 10" in run_cli("status", str(run)).out
    est = run_cli("estimate", str(run), "--allow-partial")
    assert est.code == 1 and "does not verify" in est.err, (est.code, est.err)
    raw_before = (run / "raw.jsonl").read_bytes()
    r = run_cli("resume", str(run), "--no-progress")
    assert r.code == 0, r.err
    assert "re-derived 10 decision(s)" in r.err
    assert (run / "raw.jsonl").read_bytes() == raw_before          # nothing was sent again
    assert run_cli("verify", str(run)).code == 0
    assert _status(run)["undecided_answers"] == 0


def test_report_refuses_a_forged_report_json(copy_run):
    run = copy_run("run")
    assert run_cli("estimate", str(run)).code == 0
    good = run_cli("report", str(run))
    assert good.code == 0, good.err
    report = json.loads((run / "report.json").read_text())
    forged = json.loads(json.dumps(report))
    c = next(c for c in forged["contrasts"] if isinstance(c.get("delta"), float))
    c["delta"] = round(c["delta"] + 0.25, 6)
    (run / "report.json").write_text(json.dumps(forged))
    r = run_cli("report", str(run))
    assert r.code == 1 and "not the estimate of this run" in r.err and "Traceback" not in r.err, (r.code, r.err)
    # A report of another state of the run (or one that names none) is refused too.
    other = json.loads(json.dumps(report))
    other["source"]["fingerprint"] = "1.1." + "0" * 24
    (run / "report.json").write_text(json.dumps(other))
    r = run_cli("report", str(run))
    assert r.code == 1 and "another state of this run" in r.err, r.err
    del other["source"]["options"]
    (run / "report.json").write_text(json.dumps(other))
    assert run_cli("report", str(run)).code == 1


def test_export_verifies_first(copy_run, tmp_path):
    run = copy_run("run")
    assert run_cli("export", str(run), "--out", str(tmp_path / "ok.csv")).code == 0
    lines = (run / "decisions.jsonl").read_bytes().splitlines(keepends=True)
    d = orjson.loads(lines[3])
    d["decision"] = 1 - d["decision"] if d["decision"] in (0, 1) else 1
    lines[3] = dumps_line(d)
    (run / "decisions.jsonl").write_bytes(b"".join(lines))
    r = run_cli("export", str(run), "--out", str(tmp_path / "bad.csv"))
    assert r.code == 1 and "decisions.jsonl:4" in r.err and "does not export" in r.err, (r.code, r.err)
    assert not (tmp_path / "bad.csv").exists()
    forced = run_cli("export", str(run), "--out", str(tmp_path / "forced.csv"), "--no-verify")
    assert forced.code == 0 and "without verification (--no-verify)" in forced.err
    assert (tmp_path / "forced.csv").exists()


def test_resume_refuses_a_raw_log_cut_short(copy_run):
    run = copy_run("run")
    raw = (run / "raw.jsonl").read_bytes()
    lines = raw.splitlines(keepends=True)
    for cut in (b"".join(lines[: len(lines) // 2]),                       # at a line boundary
                b"".join(lines[: len(lines) // 2]) + lines[len(lines) // 2][:40]):   # inside a line
        (run / "raw.jsonl").write_bytes(cut)
        r = run_cli("resume", str(run), "--no-progress")
        assert r.code == 1, (r.code, r.err)
        assert "raw.jsonl" in r.err and "ends at seq" in r.err and "nothing was sent" in r.err
        assert (run / "raw.jsonl").read_bytes() == cut     # nothing sent, nothing moved aside
        # One verdict (issue 27 item 13): status says damaged, not complete, and exits 1 as verify does.
        st = _status(run, code=1)
        assert st["problems"] and "ends at seq" in st["problems"][0]
        assert st["state"] == "damaged" and st["complete"] is False
        text = run_cli("status", str(run))
        assert text.code == 1 and "damaged: raw.jsonl" in text.out and "state: damaged" in text.out
        assert "state: complete" not in text.out
        assert run_cli("verify", str(run)).code == 1


def test_a_later_session_grows_the_events_and_a_rewrite_does_not(copy_run):
    """What `study verify` and `study report` read a run's change by: a resume is a later session,
    a re-chained log with the same counts is not (nor one cut short)."""
    from guardeval.run.integrity.fingerprint import not_a_later_session

    run = copy_run("run")
    token = _status(run)["fingerprint"]
    assert run_cli("resume", str(run), "--no-progress").code == 0          # nothing to do: leaves the run be
    assert _status(run)["fingerprint"] == token
    # A decision lost in a crash: the next resume re-derives it from the raw log, sending nothing,
    # and appends its session.
    decisions = (run / "decisions.jsonl").read_bytes().splitlines(keepends=True)
    (run / "decisions.jsonl").write_bytes(b"".join(decisions[:-1]))
    assert run_cli("resume", str(run), "--no-progress").code == 0
    resumed = _status(run)["fingerprint"]
    assert resumed != token and not_a_later_session(token, resumed) is None
    rechain_with_zero_costs(run)
    rewritten = _status(run)["fingerprint"]
    why = not_a_later_session(resumed, rewritten)
    assert why is not None and "rewritten in place" in why, why
    a, d, e, h = token.split(".")
    assert "shorter" in (not_a_later_session(token, f"{int(a) - 1}.{d}.{int(e) + 2}.{h}") or "")
    assert not_a_later_session(token, "1.2.3") is None                       # an older token form: no events count
