"""Strict parsers: a raw answer becomes a decision or a recorded failure, never a guess.

`PARSERS` maps the parser name a prompt manifest declares to its function.
"""

from __future__ import annotations

from collections.abc import Callable

from guardeval.backends.parsers.common import JSON_FIELDS, STATUSES, Parsed, composite
from guardeval.backends.parsers.json_three import parse_json_three_field
from guardeval.backends.parsers.tsguard import parse_ts_guard_tags

Parser = Callable[[str | None, str | None], Parsed]

PARSERS: dict[str, Parser] = {
    "json-three-field": parse_json_three_field,
    "ts-guard-tags": parse_ts_guard_tags,
}


def get_parser(name: str) -> Parser:
    try:
        return PARSERS[name]
    except KeyError:
        raise KeyError(f"unknown parser '{name}'") from None


__all__ = ["JSON_FIELDS", "PARSERS", "STATUSES", "Parsed", "Parser", "composite", "get_parser",
           "parse_json_three_field", "parse_ts_guard_tags"]
