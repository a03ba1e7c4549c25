"""A damaged run folder is bad input, not a crash: `status` and `resume` on a hand-edited
manifest or a line that is JSON but not a record name the file and the field or line, exit 2
(a manifest) or 1 (a log), print no traceback and send nothing. A run folder's guard config is
checked as a config file is: it decides where the key goes and how long a call may wait."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import run_cli

pytestmark = pytest.mark.slow

KEY = {"GUARDEVAL_TEST_KEY": "sk-or-" + "v1-test-key-for-the-simulator"}
# An address nothing listens on: a resume that got as far as sending would record connection errors.
NOWHERE = "http://127.0.0.1:9/v1"


def _edit_manifest(run: Path, change: Callable[[dict[str, Any]], Any]) -> None:
    """`change` edits the manifest in place, or returns what to write instead."""
    path = run / "manifest.json"
    m = json.loads(path.read_text())
    out = change(m)
    path.write_text(json.dumps(m if out is None else out))


def _untouched(run: Path, names: tuple[str, ...] = ("raw.jsonl", "decisions.jsonl", "events.jsonl")
               ) -> Callable[[], bool]:
    before = {name: (run / name).read_bytes() for name in names}
    return lambda: all((run / name).read_bytes() == data for name, data in before.items())


def _set_guard(field: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda m: m["guard"].__setitem__(field, value)


@pytest.mark.parametrize("change, needle", [
    (lambda m: [], "not a JSON object"),
    (lambda m: m.pop("guard") and None, "field 'guard'"),
    (lambda m: m.__setitem__("n_calls", "80"), "field 'n_calls'"),
    (lambda m: m["prompt"].pop("id") and None, "field 'prompt.id'"),
    (_set_guard("colour", "blue"), "field 'guard.colour'"),
    (_set_guard("max_attempts", "8"), "field 'guard.max_attempts'"),
    # Waits and bounds outside their documented ranges, as a config file could not set them.
    (_set_guard("retry_max_s", 1e9), "field 'guard.retry_max_s'"),
    (_set_guard("max_response_bytes", 1 << 40), "field 'guard.max_response_bytes'"),
    # Credentials in the URL: refused, and not echoed.
    (_set_guard("base_url", "http://user:hunter2-password@127.0.0.1:9/v1"), "field 'guard.base_url'"),
], ids=["list", "no-guard", "n_calls-text", "no-prompt-id", "unknown-guard-field", "attempts-text",
        "retry_max_s", "max_response_bytes", "credentials"])
def test_a_damaged_manifest_is_named_not_a_traceback(copy_run, change, needle):
    run = copy_run()
    _edit_manifest(run, change)
    untouched = _untouched(run)
    for args in (("status", str(run)), ("status", str(run), "--json"),
                 ("resume", str(run), "--base-url", NOWHERE, "--no-progress")):
        r = run_cli(*args, env=KEY)
        assert r.code == 2 and "Traceback" not in r.err, (args, r.err)
        assert "manifest.json" in r.err and needle in r.err, (args, r.err)
        assert "hunter2" not in r.out + r.err
    assert untouched()


def test_a_decision_line_without_its_fields_is_named(copy_run):
    run = copy_run()
    path = run / "decisions.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    lines[2] = json.dumps({"call_id": json.loads(lines[2])["call_id"], "decision": 1}) + "\n"
    path.write_text("".join(lines))
    untouched = _untouched(run)
    for args in (("status", str(run)), ("resume", str(run), "--base-url", NOWHERE, "--no-progress")):
        r = run_cli(*args, env=KEY)
        assert r.code == 1 and "Traceback" not in r.err, (args, r.err)
        assert "decisions.jsonl: line 3" in r.err and "'status'" in r.err, (args, r.err)
    assert untouched()


def test_a_raw_line_whose_call_id_is_not_text_is_named(copy_run):
    run = copy_run()
    # An undecided call's last attempt, its call id made a list: resume reads it, status does not need to.
    path = run / "raw.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    rec = json.loads(lines[-1])
    rec["call_id"] = [rec["call_id"]]
    lines[-1] = json.dumps(rec) + "\n"
    path.write_text("".join(lines))
    untouched = _untouched(run)
    r = run_cli("resume", str(run), "--base-url", NOWHERE, "--no-progress", env=KEY)
    assert r.code == 1 and "Traceback" not in r.err, r.err
    assert f"raw.jsonl: line {len(lines)}" in r.err and "'call_id'" in r.err, r.err
    assert untouched()


@pytest.mark.parametrize("change", [lambda row: row.__setitem__("base_id", "no-such-base"),
                                    lambda row: row.pop("instance_sha256")], ids=["unknown-base", "no-instance"])
def test_a_pending_schedule_line_that_names_no_instance_is_named(copy_run, change):
    run = copy_run()
    # The last call made pending again: its decision and its attempts (the last raw lines: the run
    # went one call at a time) taken away, then its schedule line damaged, its call id intact.
    sched = (run / "schedule.jsonl").read_text().splitlines(keepends=True)
    last = json.loads(sched[-1])
    for name in ("decisions.jsonl", "raw.jsonl"):
        lines = (run / name).read_text().splitlines(keepends=True)
        kept = [line for line in lines if json.loads(line)["call_id"] != last["call_id"]]
        assert kept == lines[:len(kept)]
        (run / name).write_text("".join(kept))
    # As if the run had died during that call: no stop event recorded a chain head past it.
    events = (run / "events.jsonl").read_text().splitlines(keepends=True)
    (run / "events.jsonl").write_text("".join(e for e in events if json.loads(e).get("event") != "stop"))
    change(last)
    sched[-1] = json.dumps(last, separators=(",", ":"), sort_keys=True) + "\n"
    (run / "schedule.jsonl").write_text("".join(sched))
    untouched = _untouched(run, ("raw.jsonl", "decisions.jsonl"))
    r = run_cli("resume", str(run), "--base-url", NOWHERE, "--no-progress", env=KEY)
    assert r.code == 1 and "Traceback" not in r.err, r.err
    assert "line 80" in r.err and "damaged" in r.err, r.err
    assert untouched()      # nothing sent, nothing decided


# -- one verdict for a damaged run (issue 27, items 8, 10, 13, 14) ----------------------------------

def _decisions(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "decisions.jsonl").read_text().splitlines()]


def _append(path: Path, line: bytes) -> None:
    with path.open("ab") as fh:
        fh.write(line)


@pytest.mark.parametrize("forge", ["supersedes-nothing", "decided-twice"])
def test_a_tampered_retry_chain_is_named_by_status_and_never_counted(copy_run, forge):
    """Item 8: a decision that supersedes a decision that does not exist (its `exhausted` taken
    back out of nothing: "exhausted -1", "ok 81 of 80"), or a second first decision of a call."""
    from guardeval.canon import dumps_line

    run = copy_run()
    before = json.loads(run_cli("status", str(run), "--json").out)
    first = _decisions(run)[0]
    if forge == "supersedes-nothing":
        forged = {**first, "retry_round": 1, "supersedes": {"decision_sha256": "ab" * 32, "raw_seq": first["raw_seq"],
                                                           "status": "exhausted", "quarantine_reason": None}}
        said = "supersedes no earlier failed decision of its call"
    else:
        forged = dict(first)
        said = "decided twice"
    _append(run / "decisions.jsonl", dumps_line(forged))
    r = run_cli("status", str(run), "--json")
    assert r.code == 1, r.err
    st = json.loads(r.out)
    assert st["statuses"] == before["statuses"] and min(st["statuses"].values()) > 0
    assert sum(st["statuses"].values()) <= st["n_calls"]
    assert st["state"] == "damaged" and st["complete"] is False
    assert any(p.startswith("decisions.jsonl line 81: ") and said in p for p in st["problems"]), st["problems"]
    text = run_cli("status", str(run))
    assert text.code == 1 and "state: damaged" in text.out and " -1" not in text.out
    assert "damaged: decisions.jsonl line 81: " in text.out, text.out
    assert run_cli("verify", str(run)).code == 1


def test_a_rewritten_stop_reason_fails_verify_expect(copy_run):
    """Item 10: events.jsonl is pinned by the fingerprint; a changed stop reason or retry time
    (still well-formed) fails `verify --expect`, and a stop whose recorded chain head is not the
    chain's fails plain `verify`."""
    run = copy_run()
    token = json.loads(run_cli("status", str(run), "--json").out)["fingerprint"]
    assert run_cli("verify", str(run), "--expect", token).code == 0
    events = (run / "events.jsonl").read_text().splitlines()
    stop = next(i for i, line in enumerate(events) if json.loads(line)["event"] == "stop")
    ev = json.loads(events[stop])
    ev["reason"], ev["at"] = "budget", "2020-01-01T00:00:00.000Z"
    events[stop] = json.dumps(ev, sort_keys=True, separators=(",", ":"))
    (run / "events.jsonl").write_text("\n".join(events) + "\n")
    assert run_cli("verify", str(run)).code == 0          # well-formed: only the fingerprint can tell
    pinned = run_cli("verify", str(run), "--expect", token)
    assert pinned.code == 1 and f"not the expected {token}" in pinned.out, pinned.out
    ev["last_raw_sha256"] = "0" * 64
    events[stop] = json.dumps(ev, sort_keys=True, separators=(",", ":"))
    (run / "events.jsonl").write_text("\n".join(events) + "\n")
    v = run_cli("verify", str(run))
    assert v.code == 1 and f"events.jsonl:{stop + 1}: the stop's last_raw_sha256 is not the SHA-256" in v.out, v.out


def test_a_fingerprint_of_the_older_form_is_checked_without_events(copy_run):
    """The token before issue 27 (ATTEMPTS.DECISIONS.HEX) still checks what it pinned; events.jsonl
    is then a skipped check, said so."""
    from guardeval.run.folder.folder import RunFolder
    from guardeval.run.folder.manifest import read_manifest
    from guardeval.run.integrity.fingerprint import run_fingerprint

    run = copy_run()
    with RunFolder(run) as folder:
        old = run_fingerprint(folder, read_manifest(folder)).legacy_token
    assert len(old.split(".")) == 3
    v = run_cli("verify", str(run), "--expect", old)
    assert v.code == 1 and "skipped: events.jsonl against the fingerprint" in v.out, v.out
    assert run_cli("verify", str(run), "--expect", old, "--allow-skipped").code == 0
    wrong = old[:-1] + ("0" if old[-1] != "0" else "1")
    assert run_cli("verify", str(run), "--expect", wrong, "--allow-skipped").code == 1


def test_a_200000_deep_event_line_is_one_verdict(copy_run):
    """Item 14: status and verify agree that the run is damaged, naming the line."""
    run = copy_run()
    n = len((run / "events.jsonl").read_bytes().splitlines())
    _append(run / "events.jsonl", b"[" * 200_000 + b"]" * 200_000 + b"\n")
    v = run_cli("verify", str(run))
    assert v.code == 1 and f"events.jsonl:{n + 1}: not valid JSON" in v.out, v.out
    st = run_cli("status", str(run))
    assert st.code == 1 and "events.jsonl" in st.err + st.out and f"line {n + 1}" in st.err + st.out, st.err
    assert "Traceback" not in st.err + v.err
