"""Python guards that fail (issue 45's scenarios, tests/test_failed_calls.py): the shipped keyword
policy, made to raise.

* `third`: raises ValueError on a fixed third of its calls (by the call's id), whatever the call:
  failures missing completely at random.
* `unknown_tool`: a policy that does not read the tool's name (so `tool_alias` cannot move it),
  raising ValueError exactly when it would block a call whose tool name it does not know (not
  one of the demo cohort's names): under `tool_alias` and `combined` it fails on every call it
  would have blocked, so what is left of those conditions looks like "allow".
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

from guardeval.backends.parsers import composite
from guardeval.backends.presets.keyword_guard import guard as keyword
from guardeval.backends.python_guard.types import GuardInput, Verdict
from guardeval.cohorts.builders.demo_data import TOOLS

KNOWN = frozenset(t.name for tools in TOOLS.values() for t in tools)


def third(inp: GuardInput) -> Verdict:
    if int(hashlib.sha256(inp.call_id.encode()).hexdigest(), 16) % 3 == 0:
        raise ValueError("no verdict for this one")
    return keyword(inp)


def unknown_tool(inp: GuardInput) -> Verdict:
    action = inp.current_action if isinstance(inp.current_action, dict) else {}
    tool = action.get("name")
    # The keyword policy without the tool's name (markers and threat words in the arguments only):
    # renaming a tool cannot move it, so every change under tool_alias is its failures' doing.
    v = keyword(replace(inp, current_action={**action, "name": "tool"}))
    blocks = composite(v.malicious_user_request, v.third_party_attack, v.current_action_harmfulness) != 0
    if blocks and tool not in KNOWN:
        raise ValueError(f"unknown tool {tool!r}")
    return v
