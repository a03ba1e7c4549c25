"""A slow, plain byte-level BPE encoder written for the tests, straight from a GGUF's vocabulary.

Control tokens are matched first; every other stretch of text is split into single digits and
then GPT-2's pieces (the `smollm` pre-tokenizer), each piece's UTF-8 bytes are mapped to GPT-2's
printable byte alphabet, and the lowest-ranked adjacent pair is merged until no merge applies.
The ids are positions in `tokenizer.ggml.tokens`. Used to check the `tokenizers` build.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from tests.gguf_files import byte_alphabet

GPT2_PIECES = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


class ReferenceBpe:
    def __init__(self, tokens: Sequence[str], merges: Sequence[str], control: Sequence[str]) -> None:
        import regex  # \p{L} classes; a dependency of transformers

        self.ids = {t: i for i, t in enumerate(tokens)}
        self.ranks = {tuple(m.split(" ")): r for r, m in enumerate(merges)}
        self.alphabet = byte_alphabet()
        self.pieces = regex.compile(GPT2_PIECES)
        self.control = re.compile("|".join(re.escape(c) for c in sorted(control, key=len, reverse=True)))

    def _word(self, piece: str) -> list[int]:
        parts = [self.alphabet[b] for b in piece.encode("utf-8")]
        while len(parts) > 1:
            ranked = [(self.ranks.get((a, b), 1 << 60), i) for i, (a, b) in enumerate(zip(parts, parts[1:]))]
            rank, i = min(ranked)
            if rank == 1 << 60:
                break
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        return [self.ids[p] for p in parts]

    def _text(self, text: str) -> list[int]:
        out: list[int] = []
        for chunk in re.split(r"(\d)", text):          # digits on their own
            for piece in self.pieces.findall(chunk):
                out += self._word(piece)
        return out

    def encode(self, text: str) -> list[int]:
        out, pos = [], 0
        for m in self.control.finditer(text):
            out += self._text(text[pos:m.start()]) + [self.ids[m.group()]]
            pos = m.end()
        return out + self._text(text[pos:])
