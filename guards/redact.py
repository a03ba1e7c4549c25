"""Remove one secret (the API key) from text, in every form a server might echo it.

A hostile or careless server can send the key back plain, JSON-escaped (`\\u0073\\u006b…`, any
mix of escaped and literal characters), percent-encoded (`%73%6B…`), or in part. Every text a
back-end stores or shows passes through `Redactor`, which replaces any run of `min_run` (12) or
more consecutive characters of the key, in any of those spellings, with `[redacted]`. A run is
replaced as whole escape units, so a JSON string stays a valid JSON string.

Cost: a text that holds none of the key's 6-character blocks and no `\\u` or `%` (the usual
answer) costs a few substring searches; anything else is tokenised and checked exactly.
"""

from __future__ import annotations

import re
from collections.abc import Callable

MARK = "[redacted]"
MIN_RUN = 12
_SHORT_ESCAPES = {"/": "/", '"': '"', "\\": "\\", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


class Redactor:
    """Redacts one secret. With no secret (a local server needs no key) it returns text as is."""

    def __init__(self, secret: str | None, min_run: int = MIN_RUN) -> None:
        self.secret = secret or None
        if self.secret is None:
            return
        s = self.secret
        self.run = min(min_run, len(s))
        self._grams = frozenset(s[i:i + self.run] for i in range(len(s) - self.run + 1))
        # Any run of `run` key characters contains one of these aligned blocks whole: a text
        # holding none of them (and no escapes) holds no run.
        step = max(1, self.run // 2)
        self._blocks = tuple(s[i:i + step] for i in range(0, len(s) - step + 1, step))
        # Escapes that could spell a key character: \uXXXX, %XX, and the short JSON escapes
        # of characters the key contains.
        self._triggers = ("\\u", "%", *(f"\\{c}" for c in sorted(set(s) & set('/"\\'))))
        literal = "".join(re.escape(c) for c in sorted(set(s)))
        # One unit = one decoded character. Case-insensitive hex, as servers differ.
        self._units = re.compile(rf'[{literal}]|\\u[0-9A-Fa-f]{{4}}|\\[/"\\bfnrt]|%[0-9A-Fa-f]{{2}}')
        self._runs = re.compile(rf'(?:[{literal}]|\\u[0-9A-Fa-f]{{4}}|\\[/"\\bfnrt]|%[0-9A-Fa-f]{{2}}){{{self.run},}}')
        # The same text read literally: `\r0000…` is an escape to a decoder but a plain run of the
        # key to a reader, so both readings are redacted.
        self._plain = re.compile(rf'[{literal}]{{{self.run},}}')

    def __call__(self, text: str) -> str:
        """`text` with the secret removed; the same object when there was nothing to remove."""
        if self.secret is None or not text:
            return text
        if not any(t in text for t in self._triggers) and not any(b in text for b in self._blocks):
            return text
        decoded = self._replace(text, self._runs, lambda run: [u.group() for u in self._units.finditer(run)])
        return self._replace(decoded, self._plain, list)

    def _replace(self, text: str, runs: re.Pattern[str], units_of: Callable[[str], list[str]]) -> str:
        out: list[str] = []
        pos = 0
        for m in runs.finditer(text):
            spans = self._key_spans(units_of(m.group()))
            if not spans:
                continue
            out.append(text[pos:m.start()])
            out.append(spans)
            pos = m.end()
        if pos == 0:
            return text
        out.append(text[pos:])
        return "".join(out)

    def _key_spans(self, units: list[str]) -> str:
        """The run (as units, each one decoded character) with every stretch that decodes to
        `self.run`+ key characters replaced; "" when there is none."""
        chars = "".join(_decode(u) for u in units)
        n, k = len(chars), self.run
        covered = bytearray(n)
        hit = False
        for i in range(n - k + 1):
            if chars[i:i + k] in self._grams:
                covered[i:i + k] = b"\x01" * k
                hit = True
        if not hit:
            return ""
        out: list[str] = []
        i = 0
        while i < n:
            if covered[i]:
                while i < n and covered[i]:
                    i += 1
                out.append(MARK)
            else:
                out.append(units[i])
                i += 1
        return "".join(out)


def _decode(unit: str) -> str:
    if len(unit) == 1:
        return unit
    if unit[0] == "%":
        return chr(int(unit[1:], 16))
    if unit[1] == "u":
        return chr(int(unit[2:], 16))
    return _SHORT_ESCAPES[unit[1]]
