"""Text from a provider, a cohort or a config, made safe to print on a terminal.

Control characters (C0 except newline and tab, DEL, C1) and the bidirectional overrides are
shown as escapes (`\\x1b`, `\\u202e`): an ANSI or OSC sequence in a provider's answer must not
clear a screen, set a title or write the clipboard, and a right-to-left override must not make
one call id look like another. The stored bytes stay exact; only what is printed is escaped.
"""

from __future__ import annotations

import re

_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_UNSAFE_MULTILINE = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}]")
_UNSAFE_ONE_LINE = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}]")


def _escape(m: re.Match[str]) -> str:
    cp = ord(m.group())
    return f"\\x{cp:02x}" if cp < 0x100 else f"\\u{cp:04x}"


def printable(text: str, *, multiline: bool = True) -> str:
    """`text` with every control character escaped; `multiline=False` escapes newlines and tabs too."""
    return (_UNSAFE_MULTILINE if multiline else _UNSAFE_ONE_LINE).sub(_escape, text)
