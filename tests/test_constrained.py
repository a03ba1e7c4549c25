"""The finite answer set of an output schema, the token trie and the masking logits processor."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from guardeval.backends.constrained import AnswerTrie, TrieLogitsProcessor, answer_set, build_trie
from guardeval.backends.parsers import get_parser
from guardeval.backends.prompts import load_prompt

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parents[1]


def project_schema() -> dict:
    prompt = load_prompt("guardeval-json-v1", REPO / "prompts")
    assert prompt.output_schema is not None
    return prompt.output_schema


def test_the_project_verdict_has_twelve_answers_all_strictly_parseable() -> None:
    answers = answer_set(project_schema())
    assert answers is not None and len(answers) == 12 == len(set(answers))
    parse = get_parser("json-three-field")
    seen = set()
    for text in answers:
        parsed = parse(text, "stop")
        assert parsed.status == "ok", (text, parsed.detail)
        seen.add(tuple(parsed.components.values()))
    assert seen == set(itertools.product([False, True], [False, True], [0.0, 0.5, 1.0]))
    # The form the prompt shows: keys in the schema's order, ", " and ": " separators.
    assert '{"malicious_user_request": false, "third_party_attack": true, "current_action_harmfulness": 0.5}' in answers


@pytest.mark.parametrize("schema", [
    None, {}, {"type": "array"},
    {"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"]},           # open to more keys
    {"type": "object", "additionalProperties": False, "properties": {"a": {"type": "boolean"}}, "required": []},
    {"type": "object", "additionalProperties": False, "properties": {"a": {"type": "string"}}, "required": ["a"]},
    {"type": "object", "additionalProperties": False, "properties": {"a": {"enum": [[1]]}}, "required": ["a"]},
    {"type": "object", "additionalProperties": False, "required": [f"k{i}" for i in range(13)],
     "properties": {f"k{i}": {"type": "boolean"} for i in range(13)}},                         # 8192 > the cap
])
def test_open_or_huge_schemas_have_no_answer_set(schema: object) -> None:
    assert answer_set(schema) is None


def test_a_count_past_int64_is_huge_not_small() -> None:
    # 64 booleans: 2**64 answers, which numpy's int64 product wrapped to 0 (under the cap), and
    # the enumeration then ran without end. A child process, so that failure is a timeout.
    code = ("from guardeval.backends.constrained import answer_set; k = [f'k{i}' for i in range(64)]; "
            "print(answer_set({'type': 'object', 'additionalProperties': False, 'required': k, "
            "'properties': {n: {'type': 'boolean'} for n in k}}))")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stdout == "None\n", r.stderr[-2000:]


def test_enum_const_and_null() -> None:
    schema = {"type": "object", "additionalProperties": False, "required": ["v", "c", "n"],
              "properties": {"v": {"enum": ["x", 2]}, "c": {"const": "k"}, "n": {"type": "null"}}}
    assert answer_set({"name": "s", "schema": schema}) == ['{"v": "x", "c": "k", "n": null}', '{"v": 2, "c": "k", "n": null}']


def char_codec() -> tuple:
    """A character-level 'tokenizer': id = code point + 10 (ids 0-9 are special)."""
    return (lambda s: [ord(c) + 10 for c in s]), (lambda ids: "".join(chr(i - 10) for i in ids))


def test_trie_paths_and_the_processor_walk() -> None:
    encode, decode = char_codec()
    trie = build_trie(["ab", "ac", "b"], encode, decode)
    assert trie.count == 3 and trie.walk(encode("a")) is not None and trie.walk(encode("x")) is None
    proc = TrieLogitsProcessor(trie, prompt_len=5, stop_ids=[2, 1])
    assert sorted(proc.allowed([])) == sorted(encode("ab")[:1] + encode("b"))
    assert sorted(proc.allowed(encode("a"))) == sorted(encode("b") + encode("c"))
    assert proc.allowed(encode("ab")) == [1, 2]                     # complete: only end of turn
    assert proc.allowed(encode("ab") + [2]) == [1, 2]               # mlx-lm's one step past the stop
    with pytest.raises(RuntimeError, match="left the answer trie"):
        TrieLogitsProcessor(trie, 0, [1]).allowed(encode("z"))


def test_prefix_answers_allow_both_stop_and_continuation() -> None:
    trie = AnswerTrie([[5], [5, 6]])
    proc = TrieLogitsProcessor(trie, 0, [0])
    assert sorted(proc.allowed([5])) == [0, 6]


def test_a_tokenizer_that_does_not_round_trip_is_refused() -> None:
    with pytest.raises(ValueError, match="round-trip"):
        build_trie(["ab"], lambda s: [1], lambda ids: "a")


def test_processor_masks_mlx_logits() -> None:
    mx = pytest.importorskip("mlx.core")
    encode, decode = char_codec()
    trie = build_trie(answer_set(project_schema()) or [], encode, decode)
    proc = TrieLogitsProcessor(trie, prompt_len=3, stop_ids=[2])
    rng = np.random.default_rng(0)
    tokens = [7, 8, 9]
    while True:
        logits = mx.array(rng.standard_normal((1, 300)).astype(np.float32))
        out = np.array(proc(mx.array(tokens), logits))
        pick = int(out.argmax())
        assert np.isfinite(out).sum() == len(proc.allowed(tokens[3:]))
        if pick == 2:
            break
        tokens.append(pick)
    text = decode(tokens[3:])
    assert get_parser("json-three-field")(text, "stop").status == "ok"
    assert json.loads(text).keys() == {"malicious_user_request", "third_party_attack", "current_action_harmfulness"}
