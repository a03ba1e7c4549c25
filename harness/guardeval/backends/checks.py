"""A preflight's checks (each back-end's preflight: its record's `preflight`): each named, with a
status and a detail, and the run refused when any failed; and what the preflight is asked about
(`Workload`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# An instance with every placeholder empty: renders a body with the config's parameters when no
# cohort is at hand (`guardeval preflight --guard FILE` alone).
EMPTY_INSTANCE: dict[str, Any] = {"user_request": "", "history": [], "current_action": {}, "tool_descriptions": []}


@dataclass
class Workload:
    """What the run would send: one rendered body, and (with a cohort) its size and count."""

    body: Mapping[str, Any]
    calls: int | None = None                  # calls this launch may dispatch
    prompt_tokens: int | None = None          # rough (chars / 4) total over those calls
    longest_prompt_tokens: int | None = None  # rough, of the largest request body
    max_cost: float | None = None             # --max-cost, caps the credit needed


@dataclass
class Check:
    name: str
    status: str      # ok | warn | skip | fail
    detail: str


class CheckList:
    """What both preflights do with their `checks` (a dataclass field of the class that mixes
    this in)."""

    checks: list[Check]

    @property
    def ok(self) -> bool:
        return all(c.status != "fail" for c in self.checks)

    def add(self, name: str, status: str, detail: str) -> None:
        self.checks.append(Check(name, status, detail))

    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.status == "fail"]
