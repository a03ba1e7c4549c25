"""Remove one secret (the API key) from text, in every form a server might echo it.

A hostile or careless server can send the key back plain, JSON-escaped (`\\u0073\\u006b…`, any
mix of escaped and literal characters), percent-encoded (`%73%6B…`), in part, in another case,
reversed, as hex, or as base64 (of the key, or of the `Bearer KEY` header it was sent in, which
puts the key at another alignment). Every text a back-end stores or shows passes through
`Redactor`, which replaces any run of 12 or more consecutive characters of the key (of the
reversed key, or their upper/lower-case forms), 24 hex digits (12 bytes) or 16 base64 characters
(12 bytes, at any of the three alignments, standard or URL-safe alphabet) of its encodings, in any
of the escape spellings above, with `[redacted]`. A run is replaced as whole escape units, so a
JSON string stays a valid JSON string.

Cost: a text that holds none of each spelling's 6-character (base64: 8, hex: 12) blocks and no
`\\u` or `%` (the usual answer) costs a few dozen substring searches; anything else is tokenised
and checked exactly.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable

MARK = "[redacted]"
MIN_RUN = 12                # key characters (also bytes, for hex and base64)
# A key shorter than a run cannot be cut out without cutting ordinary text too (a 1-character
# key would be every such letter of every answer): launch refuses it (`require_key`), and the
# redactor never redacts a spelling shorter than this.
MIN_KEY_CHARS = MIN_RUN
_SHORT_ESCAPES = {"/": "/", '"': '"', "\\": "\\", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_MIN_SPELLING = 8           # an encoding shorter than this (a very short key's) would match noise


class Redactor:
    """Redacts one secret in every spelling above. With no secret (a local server needs no key)
    it returns text as is."""

    def __init__(self, secret: str | None, min_run: int = MIN_RUN) -> None:
        self.secret = secret or None
        self._spellings: list[_Spelling] = []
        if self.secret is None or len(self.secret) < min_run:
            return   # too short to tell from text (refused at launch): nothing is rewritten
        key = self.secret
        raw = key.encode("utf-8")
        self._spellings = [_Spelling(key, min_run, fold=True), _Spelling(key[::-1], min_run, fold=True)]
        # Hex: two digits a byte, either case; a run of 12 bytes is 24 digits.
        candidates = [(raw.hex(), 2 * min_run, True)]
        # Base64 of the key starting at byte 0, 1 or 2 of a 3-byte group (`Bearer KEY` puts it at
        # 1): from the key's first whole group on, the encoding is that of the key from there,
        # whatever came before. Only whole groups: the last one depends on what follows.
        for j in range(3):
            tail = raw[j:]
            whole = tail[:len(tail) // 3 * 3]
            candidates.append((base64.b64encode(whole).decode(), min_run * 4 // 3, False))
            candidates.append((base64.urlsafe_b64encode(whole).decode(), min_run * 4 // 3, False))
        seen = {key}
        for text, run, fold in candidates:
            if len(text) >= _MIN_SPELLING and text not in seen:
                seen.add(text)
                self._spellings.append(_Spelling(text, run, fold=fold))

    def __call__(self, text: str) -> str:
        """`text` with the secret removed; the same object when there was nothing to remove."""
        if self.secret is None or not text:
            return text
        folded = text.lower()
        out = text
        for spelling in self._spellings:
            out = spelling(out, folded)
            if out is not text:
                folded = out.lower()
                text = out
        return out


class _Spelling:
    """One string whose runs of `run` characters are redacted in any escape spelling; with
    `fold`, in any mix of upper and lower case."""

    def __init__(self, s: str, min_run: int, *, fold: bool) -> None:
        self.fold = fold
        if fold:
            s = s.lower()
        self.run = min(min_run, len(s))
        self._grams = frozenset(s[i:i + self.run] for i in range(len(s) - self.run + 1))
        # Any run of `run` key characters contains one of these aligned blocks whole: a text
        # holding none of them (and no escapes) holds no run.
        step = max(1, self.run // 2)
        self._blocks = tuple(s[i:i + step] for i in range(0, len(s) - step + 1, step))
        chars = set(s) | ({c.upper() for c in s if len(c.upper()) == 1} if fold else set())
        # Escapes that could spell a key character: \uXXXX, %XX, and the short JSON escapes
        # of characters the key contains.
        self._triggers = ("\\u", "%", *(f"\\{c}" for c in sorted(chars & set('/"\\'))))
        literal = "".join(re.escape(c) for c in sorted(chars))
        # One unit = one decoded character. Case-insensitive hex, as servers differ.
        self._units = re.compile(rf'[{literal}]|\\u[0-9A-Fa-f]{{4}}|\\[/"\\bfnrt]|%[0-9A-Fa-f]{{2}}')
        self._runs = re.compile(rf'(?:[{literal}]|\\u[0-9A-Fa-f]{{4}}|\\[/"\\bfnrt]|%[0-9A-Fa-f]{{2}}){{{self.run},}}')
        # The same text read literally: `\r0000…` is an escape to a decoder but a plain run of the
        # key to a reader, so both readings are redacted.
        self._plain = re.compile(rf'[{literal}]{{{self.run},}}')
        # And read with an escaped backslash split: `\\u0048…` is `\` + `u0048` to a JSON decoder
        # but `\` + `\u0048` (an H) to a reader that starts one character later.
        self._units_split = re.compile(rf'[{literal}]|\\u[0-9A-Fa-f]{{4}}|\\[/"bfnrt]|%[0-9A-Fa-f]{{2}}')
        self._runs_split = re.compile(
            rf'(?:[{literal}]|\\u[0-9A-Fa-f]{{4}}|\\[/"bfnrt]|%[0-9A-Fa-f]{{2}}){{{self.run},}}')

    def __call__(self, text: str, folded: str) -> str:
        """`text` with this spelling removed (`folded`: the text in lower case, for the quick
        test); the same object when there was nothing to remove."""
        if not any(t in text for t in self._triggers) and \
                not any(b in (folded if self.fold else text) for b in self._blocks):
            return text
        decoded = self._replace(text, self._runs, lambda run: [u.group() for u in self._units.finditer(run)])
        if "\\\\" in decoded:
            decoded = self._replace(decoded, self._runs_split,
                                    lambda run: [u.group() for u in self._units_split.finditer(run)])
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
        if self.fold:
            # Per character, so that positions stay those of the units.
            chars = "".join(c.lower() if len(c.lower()) == 1 else c for c in chars)
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
