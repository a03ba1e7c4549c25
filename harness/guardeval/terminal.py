"""Text for a terminal: control characters from the outside world shown, never obeyed.

A provider's error message, a cohort's `base_id` or a config value can carry ESC sequences
(clear the screen, set the window title, write the clipboard through OSC 52, paint a fake
"all good" line). Whatever guardeval prints goes through `safe` (plain text) or `safe_json`
(JSON it prints), so such characters appear as escapes (`\\x1b`, `\\u202e`). The files of a run
keep the exact bytes: `raw.jsonl` is data, not terminal output.
"""

from __future__ import annotations

import re

# C0 controls, DEL, C1 controls, the bidirectional overrides and isolates (they reorder what a
# line appears to say), and lone surrogates (not encodable: printing one raises).
_OTHERS = "\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_ANY = re.compile(f"[\x00-\x1f{_OTHERS}]")
_BUT_NEWLINE = re.compile(f"[\x00-\x09\x0b-\x1f{_OTHERS}]")
# Inside JSON text, C0 controls are already escaped by every encoder used here; the rest is not.
_JSON_UNSAFE = re.compile(f"[{_OTHERS}]")


_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(m: re.Match[str]) -> str:
    ch = m.group()
    if ch in _NAMED:
        return _NAMED[ch]
    c = ord(ch)
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def _json_escape(m: re.Match[str]) -> str:
    return f"\\u{ord(m.group()):04x}"


def safe(text: object, *, newlines: bool = False) -> str:
    """`str(text)` with every control character escaped; with `newlines`, line breaks are kept
    (for text guardeval lays out in lines itself)."""
    s = text if type(text) is str else str(text)
    pattern = _BUT_NEWLINE if newlines else _ANY
    return pattern.sub(_escape, s) if pattern.search(s) else s


def safe_json(text: str) -> str:
    """JSON text for a terminal: DEL, C1 controls, bidi overrides and lone surrogates, which
    JSON encoders pass through raw, written as `\\uXXXX` escapes (the JSON value is unchanged)."""
    return _JSON_UNSAFE.sub(_json_escape, text) if _JSON_UNSAFE.search(text) else text
