"""Constrained greedy decoding for local models: only answers the output schema allows.

A hosted guard gets `response_format` (json_schema) and the provider enforces it. For the
in-process `mlx` guard the schema is enforced here, when its answer set is finite (guardeval's
verdict: 2 × 2 × 3 = 12 objects): each allowed object is serialised once (`json.dumps`, keys in
the schema's order — the form the prompt shows), tokenised with the model's tokenizer, and the
token sequences form a trie. During greedy decoding a logits processor keeps only the tokens
that continue a path of the trie, and end-of-turn once an answer is complete; greedy decoding
then picks the model's most likely allowed token at each branch. Every answer is one of the
allowed serialisations, so the strict parser accepts it unless `max_tokens` cuts it short.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

MAX_ANSWERS = 4096   # beyond this an enumeration is the wrong tool: treat the schema as open


def _choices(prop: Any) -> list[Any] | None:
    """The values one property may take, if finitely many JSON scalars; else None."""
    if not isinstance(prop, dict):
        return None
    scalar = (bool, int, float, str, type(None))
    if "const" in prop:
        return [prop["const"]] if isinstance(prop["const"], scalar) else None
    if "enum" in prop:
        values = prop["enum"]
        if not isinstance(values, list) or not values or not all(isinstance(v, scalar) for v in values):
            return None
        kind = prop.get("type")
        if kind in ("number", "integer"):
            return [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)] or None
        return list(values)
    if prop.get("type") == "boolean":
        return [False, True]
    if prop.get("type") == "null":
        return [None]
    return None


def answer_set(output_schema: Any) -> list[str] | None:
    """Every answer an object schema allows, serialised; None when the set is not finite.

    `output_schema` is a prompt manifest's `output_schema` (`{"name", "strict", "schema"}`) or a
    bare JSON schema. Finite means: an object, `additionalProperties: false`, every property
    required, and each property a boolean, an enum or a const of JSON scalars.
    """
    schema = output_schema.get("schema", output_schema) if isinstance(output_schema, dict) else None
    if not isinstance(schema, dict) or schema.get("type") != "object" or schema.get("additionalProperties") is not False:
        return None
    props = schema.get("properties")
    if not isinstance(props, dict) or not props or set(schema.get("required") or ()) != set(props):
        return None
    names = list(props)
    choices = [_choices(props[n]) for n in names]
    if any(c is None for c in choices):
        return None
    count = math.prod(len(c) for c in choices if c is not None)  # Python ints: numpy's int64 would wrap
    if count > MAX_ANSWERS:
        return None
    return [json.dumps(dict(zip(names, combo)), ensure_ascii=False)
            for combo in itertools.product(*[c for c in choices if c is not None])]


class AnswerTrie:
    """Token sequences of the allowed answers, as a trie over token ids."""

    def __init__(self, sequences: Iterable[Sequence[int]]) -> None:
        self.children: list[dict[int, int]] = [{}]
        self.terminal: list[bool] = [False]
        self.count = 0
        for seq in sequences:
            node = 0
            for token in seq:
                nxt = self.children[node].get(token)
                if nxt is None:
                    nxt = len(self.children)
                    self.children[node][token] = nxt
                    self.children.append({})
                    self.terminal.append(False)
                node = nxt
            if not self.terminal[node]:
                self.terminal[node] = True
                self.count += 1

    def walk(self, tokens: Iterable[int]) -> int | None:
        """The node reached from the root along `tokens`; None if they leave the trie."""
        node = 0
        for token in tokens:
            nxt = self.children[node].get(int(token))
            if nxt is None:
                return None
            node = nxt
        return node


def build_trie(answers: Sequence[str], encode: Callable[[str], list[int]], decode: Callable[[list[int]], str]) -> AnswerTrie:
    """Tokenise each answer; refuse a tokenizer that cannot reproduce an answer exactly."""
    sequences = []
    for text in answers:
        ids = encode(text)
        if not ids or decode(ids) != text:
            raise ValueError(f"the tokenizer does not round-trip the answer {text!r}")
        sequences.append(ids)
    return AnswerTrie(sequences)


class TrieLogitsProcessor:
    """mlx-lm logits processor: mask every token that does not continue an allowed answer.

    mlx-lm calls it with all tokens so far (prompt and generated) and the next-token logits;
    the generated part starts after `prompt_len`. Once an answer is complete only `stop_ids`
    (end of turn) remain, so generation stops there with `finish_reason` "stop". mlx-lm
    computes one step ahead of what it yields, so it may also ask once more after the stop
    token: that step (discarded) gets the stop ids again.
    """

    _DONE = -1

    def __init__(self, trie: AnswerTrie, prompt_len: int, stop_ids: Iterable[int]) -> None:
        self.trie, self.prompt_len = trie, prompt_len
        self.stop_ids = sorted(set(int(i) for i in stop_ids))
        self._node, self._seen = 0, 0   # the walk so far, so each step looks at one new token

    def allowed(self, generated: Sequence[int]) -> list[int]:
        node = self._step(generated[self._seen:])
        if node is None:  # cannot happen while this processor masks every step
            raise RuntimeError("constrained decoding left the answer trie")
        self._node, self._seen = node, len(generated)
        if node == self._DONE:
            return list(self.stop_ids)
        ids = list(self.trie.children[node])
        return ids + self.stop_ids if self.trie.terminal[node] else ids

    def _step(self, tokens: Sequence[int]) -> int | None:
        node: int | None = self._node
        for token in tokens:
            if node is None:
                return None
            if node == self._DONE or (self.trie.terminal[node] and int(token) in self.stop_ids):
                node = self._DONE
            else:
                node = self.trie.children[node].get(int(token))
        return node

    def __call__(self, tokens: Any, logits: Any) -> Any:
        import mlx.core as mx

        generated = tokens[self.prompt_len:].tolist() if tokens.size > self.prompt_len else []
        mask = np.full(logits.shape[-1], -np.inf, dtype=np.float32)
        mask[self.allowed(generated)] = 0.0
        return logits + mx.array(mask)
