"""harness/guardeval/backends/redact.py: the key in any spelling, as a whole or as a run of 12+ characters."""

from __future__ import annotations

import json
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guardeval.backends.redact import MARK, Redactor

from hostile_server import key_form, leaked

pytestmark = pytest.mark.fast

# Shaped like an OpenRouter key, built here so that no tracked file holds a key-like literal.
KEY = "sk-or-v1-" + "0123456789abcdef" * 4


def test_forms_are_replaced_and_json_stays_json():
    r = Redactor(KEY)
    for form in ("plain", "json", "json-mixed", "percent", "partial"):
        body = '{"error": {"message": "bad key %s here"}}' % key_form(KEY, form)
        out = r(body)
        assert leaked(out, KEY) is None, (form, out)
        assert json.loads(out)["error"]["message"] == f"bad key {MARK} here", (form, out)


NEW_FORMS = ("upper", "mixed-case", "reversed", "hex", "hex-upper", "b64-0", "b64-1", "b64-2", "b64-bearer", "b64-url")


@pytest.mark.parametrize("form", NEW_FORMS)
def test_case_reversal_hex_and_base64_at_every_alignment_are_replaced(form):
    r = Redactor(KEY)
    echo = key_form(KEY, form)
    assert leaked(echo, KEY) is not None, form      # the detector sees the spelling
    for spelled in (echo, json.dumps(echo)[1:-1], "".join(f"\\u{ord(c):04x}" for c in echo)):
        body = '{"error": {"message": "bad key %s here"}}' % spelled
        out = r(body)
        assert leaked(out, KEY) is None, (form, out)
        assert MARK in json.loads(out)["error"]["message"], (form, out)


def test_short_runs_and_other_text_are_left_alone():
    r = Redactor(KEY)
    text = "prefix sk-or-v1-01 and 0123456789a and a 50% chance \\u00e9 \\n done"
    assert r(text) is text    # 11 characters of the key: not a run; nothing else touched
    assert r("") == "" and Redactor(None)("any " + KEY) == "any " + KEY


def test_a_key_shorter_than_a_run_rewrites_nothing():
    # Issue 36: a 1-character key turned every "a" of every answer into [redacted]. A key this
    # short is refused at launch (test_hardening3); the redactor itself never cuts a spelling
    # shorter than a run out of text.
    for key in ("a", "ab", "abc", "abc123", "x" * 11):
        text = f"a body {key} {key.upper()} %61 {key * 3}"
        assert Redactor(key)(text) is text


def test_an_escaped_backslash_is_not_read_as_an_escape():
    # `\\u0073` in JSON is a backslash then the text "u0073", not an "s".
    r = Redactor("s" * 12)
    text = "\\\\u0073" * 12
    assert r(text) is text


@settings(max_examples=200, deadline=None)
@given(key=st.text(string.ascii_letters + string.digits + "-_", min_size=20, max_size=80),
       start=st.integers(0, 60), length=st.integers(12, 80),
       form=st.sampled_from(["plain", "json", "json-mixed", "percent", "upper", "reversed", "hex", "b64-0", "b64-1",
                             "b64-2"]),
       before=st.text(string.printable, max_size=40), after=st.text(string.printable, max_size=40))
def test_any_run_of_twelve_in_any_form_is_gone(key, start, length, form, before, after):
    # Base64 hides 12 bytes in 16 characters only in whole 3-byte groups: 16 characters of the
    # key leave 12 whole at any alignment.
    need = 16 if form.startswith("b64") else 12
    start = min(start, len(key) - need)
    piece = key[start:start + max(length, need)]
    text = before + key_form(piece, form) + after
    out = Redactor(key)(text)
    # The spelled run is gone; what the surrounding text might happen to share with the key
    # (hypothesis draws both from one alphabet) may go too, but never more than runs of the key.
    assert leaked(out, key) is None, (text, out)
    # Something was there to redact, except when `before` ends in a backslash that turns the
    # run's first character into an escape (`\` + `n...` reads as a newline, leaving 11).
    assert MARK in out or leaked(text, key) is None, (text, out)
    if not before.endswith("\\"):
        assert MARK in out, (text, out)


def test_a_run_after_a_backslash_is_redacted_in_both_readings():
    # `\r` decodes to a carriage return, but a reader sees the key's run `r00000000000`.
    r = Redactor("00000000r00000000000")
    out = r("\\r00000000000")
    assert leaked(out, "00000000r00000000000") is None and MARK in out


def test_a_backslash_before_the_run_can_take_its_first_character():
    # `\` + `n00000000000` (as JSON-mixed escapes): a decoder reads a newline and 11 zeros, a
    # reader sees `n` then escapes; neither holds 12 key characters, so there is nothing to remove.
    key = "n" + "0" * 11 + "abcdefgh"
    text = "\\" + key_form(key[:12], "json-mixed")
    assert leaked(text, key) is None and Redactor(key)(text) == text
    # One more key character after it and the run is there again: redacted.
    text = "\\" + key_form(key[:13], "json-mixed")
    assert leaked(text, key) is not None
    out = Redactor(key)(text)
    assert leaked(out, key) is None and MARK in out


def test_an_escaped_backslash_before_a_json_escaped_run_is_redacted_in_both_readings():
    # Found by hypothesis: `\\` + `\u0048\u0030…` is a backslash and the text "u0048…" to a JSON
    # decoder, and the key's run "H00000000048" to a reader that starts one character later.
    key = "0000000H00000000048U"
    text = "\\\\" + "".join(f"\\u{ord(c):04x}" for c in key[7:19])
    out = Redactor(key)(text)
    assert leaked(out, key) is None and MARK in out, out
