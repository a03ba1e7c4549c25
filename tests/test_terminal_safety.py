"""Control characters from providers, cohorts and run files never reach the terminal raw
(issue 10, item 3); `raw.jsonl` still keeps the provider's bytes exactly."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from guardeval.cohorts.model import instance_hash, load_cohort, write_cohort
from guardeval.terminal import safe, safe_json

from app_server import in_thread
from conftest import run_cli, write_guard

pytestmark = pytest.mark.fast

# Clear screen, set the window title, write the clipboard (OSC 52), return to column 0 and
# print a fake verdict, an 8-bit CSI, a right-to-left override and a lone surrogate.
HOSTILE = "\x1b[2J\x1b]0;pwned\x07\x1b]52;c;ZXZpbA==\x07\r\x1b[32mall good\x1b[0m\n\x9b31m\u202etxt.exe\ud800"
ESCAPES = ("\x1b", "\x07", "\x9b", "\u202e", "\r")


def _assert_clean(*texts: str) -> None:
    for text in texts:
        for ch in ESCAPES:
            assert ch not in text, (repr(ch), text[-2000:])


def test_safe_escapes_every_control_and_keeps_text():
    out = safe(HOSTILE)
    _assert_clean(out)
    assert "\n" not in out and "\\x1b]0;pwned\\x07" in out and "\\u202e" in out and "\\ud800" in out
    assert "all good" in out
    assert safe("line one\nline\ttwo\x1b", newlines=True) == "line one\nline\\ttwo\\x1b"
    assert safe("plain text, ünïcode ✓") == "plain text, ünïcode ✓"
    # JSON text: C1, bidi and surrogates become \\u escapes; the value is unchanged.
    js = safe_json(json.dumps({"k": "a\x9bb\u202e"}, ensure_ascii=False))
    assert json.loads(js) == {"k": "a\x9bb\u202e"} and "\x9b" not in js


class _Provider:
    """A chat-completions server on 127.0.0.1 that answers every call with a 401 carrying
    `HOSTILE` (a fatal error: the run stops and prints the message): under `/json/v1` as a JSON
    error message (escaped on the wire), under `/raw/v1` as raw bytes in a plain-text body."""

    def __init__(self, url: str) -> None:
        self.url = url

    @staticmethod
    def app() -> web.Application:
        async def as_json(request: web.Request) -> web.Response:
            body = json.dumps({"error": {"message": HOSTILE, "code": 401}})
            return web.Response(status=401, text=body, content_type="application/json")

        async def as_raw(request: web.Request) -> web.Response:
            return web.Response(status=401, body=HOSTILE.replace("\ud800", "").encode(), content_type="text/plain")

        app = web.Application()
        app.router.add_post("/json/v1/chat/completions", as_json)
        app.router.add_post("/raw/v1/chat/completions", as_raw)
        return app


@pytest.fixture
def provider() -> Iterator[_Provider]:
    with in_thread(_Provider.app()) as url:
        yield _Provider(url)


def _hostile_cohort(src: Path, out: Path, *, drop_one: bool = False, break_invariance: bool = False) -> Path:
    """The small cohort with an ESC sequence in one base's id and domain."""
    demo = load_cohort(src)
    victim = demo.base_ids[0]
    rows = []
    for r in demo.instances:
        r = dict(r)
        if r["base_id"] == victim:
            r["base_id"] = "b\x1b]0;pwned\x07\x1b[2J"
            r["domain"] = "d\x1b[31m\u202e"
            r["interaction_id"] = r["interaction_id"] + "\x1b[1A"
            if break_invariance and r["condition"] != demo.baseline():
                r["user_request"] += " (changed)"
            if drop_one and r["condition"] == demo.condition_names[-1]:
                continue
        r["instance_sha256"] = instance_hash(r)
        rows.append(r)
    return write_cohort(out, name="hostile\x1b[2J", version="t", description="d", conditions=demo.conditions,
                        rows=rows)


@pytest.mark.parametrize("mode", ["json", "raw"])
def test_provider_error_with_escape_codes_is_shown_escaped(tmp_path, small_cohort, provider, mode):
    guard = write_guard(tmp_path / "g.toml", f"{provider.url}/{mode}/v1")
    run = tmp_path / "run"
    r = run_cli("launch", "--no-preflight", "--cohort", str(small_cohort), "--guard", str(guard), "--reps", "1",
                "--run-dir", str(run), "--no-progress")
    assert r.code == 1 and "fatal provider error" in r.err and "Traceback" not in r.err, r.err
    assert "pwned" in r.err and "all good" in r.err    # the message is shown, escaped
    _assert_clean(r.out, r.err)
    # raw.jsonl is data: the provider's text is kept exactly.
    first = json.loads((run / "raw.jsonl").read_text().splitlines()[0])
    if mode == "json":
        assert json.loads(first["response"])["error"]["message"] == HOSTILE
    else:
        assert first["response"] == HOSTILE.replace("\ud800", "")
    for args in (("status", str(run)), ("status", str(run), "--json"), ("verify", str(run))):
        r = run_cli(*args)
        assert r.code == 0 and "Traceback" not in r.err, (args, r.code, r.err)
        if args[0] == "status":
            assert "pwned" in r.out + r.err, (args, r.out)   # the provider's text is shown, escaped
        _assert_clean(r.out, r.err)


@pytest.mark.slow
def test_cohort_text_with_escape_codes_is_shown_escaped(tmp_path, small_cohort, provider):
    broken = _hostile_cohort(small_cohort, tmp_path / "broken", drop_one=True)
    guard = write_guard(tmp_path / "g.toml", f"{provider.url}/json/v1")
    r = run_cli("launch", "--no-preflight", "--cohort", str(broken), "--guard", str(guard), "--run-dir", str(tmp_path / "run"))
    assert r.code == 2 and "has no row for condition" in r.err and "pwned" in r.err, r.err
    _assert_clean(r.out, r.err)
    assert not (tmp_path / "run").exists()

    odd = _hostile_cohort(small_cohort, tmp_path / "odd", break_invariance=True)
    for args in (("cohort", "inspect", str(odd)), ("cohort", "inspect", str(odd), "--json")):
        r = run_cli(*args)
        assert r.code == 1 and "invariance" in (r.out + r.err) and "Traceback" not in r.err, r.err
        _assert_clean(r.out, r.err)

    # A run of that cohort stopped by the hostile provider: every command's output stays clean.
    fine = _hostile_cohort(small_cohort, tmp_path / "fine")
    run = tmp_path / "run2"
    r = run_cli("launch", "--no-preflight", "--cohort", str(fine), "--guard", str(guard), "--reps", "1", "--run-dir", str(run))
    assert r.code == 1, r.err
    _assert_clean(r.out, r.err)
    for args in (("status", str(run)), ("verify", str(run)), ("estimate", str(run), "--allow-partial")):
        r = run_cli(*args)
        assert r.code == 0 and "Traceback" not in r.err, (args, r.code, r.err)
        if args[0] == "status":
            assert "pwned" in r.out + r.err, (args, r.out)   # the cohort's text is shown, escaped
        _assert_clean(r.out, r.err)


def test_verify_messages_quoting_a_damaged_line_are_escaped(tmp_path, small_cohort, provider):
    guard = write_guard(tmp_path / "g.toml", f"{provider.url}/raw/v1")
    run = tmp_path / "run"
    r = run_cli("launch", "--no-preflight", "--cohort", str(small_cohort), "--guard", str(guard), "--reps", "1",
                "--run-dir", str(run))
    assert r.code == 1 and "fatal provider error" in r.err, r.err
    assert run_cli("verify", str(run)).code == 0   # intact before the edit below
    lines = (run / "raw.jsonl").read_text().splitlines(keepends=True)
    rec = json.loads(lines[0])
    rec["seq"] = "\x1b]0;pwned\x07"
    lines[0] = json.dumps(rec, separators=(",", ":"), sort_keys=True) + "\n"
    (run / "raw.jsonl").write_text("".join(lines))
    for args in (("verify", str(run)), ("verify", str(run), "--json")):
        r = run_cli(*args)
        assert r.code == 1 and "Traceback" not in r.err, r.err
        assert "pwned" in r.out + r.err
        _assert_clean(r.out, r.err)


@pytest.mark.slow
def test_audit_and_cohort_output_is_escaped(tmp_path, small_cohort):
    # `audit lookup` prints the rows' domains (text and JSON), `cohort inspect --json` the
    # cohort's domains and name: the files' text, hostile, DEL included (README: `--json`
    # output escapes DEL, C1 and bidi characters too).
    hostile = "D\x7f" + HOSTILE.replace("\ud800", "")
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"interaction_id": f"g{i}", "domain": [hostile, "E"][i % 2],
                                        "tool": f"t{i % 3}", "label": i % 2}) + "\n" for i in range(8)))
    for args in (("audit", "lookup", str(rows)), ("audit", "lookup", str(rows), "--json")):
        r = run_cli(*args)
        assert r.code == 0 and "pwned" in r.out, r.err
        _assert_clean(r.out, r.err)
        assert "\x7f" not in r.out
    assert hostile in json.loads(run_cli("audit", "lookup", str(rows), "--json").out)["lodo_by_domain"]

    demo = load_cohort(small_cohort)
    rows_out = [dict(r, domain=hostile) for r in demo.instances]
    for r in rows_out:
        r["instance_sha256"] = instance_hash(r)
    odd = write_cohort(tmp_path / "odd", name="odd", version="t", description="d", conditions=demo.conditions,
                       rows=rows_out)
    r = run_cli("cohort", "inspect", str(odd), "--json")
    assert r.code == 0, r.err
    _assert_clean(r.out, r.err)
    assert "\x7f" not in r.out and json.loads(r.out)["by_domain"] == {hostile: 16}
