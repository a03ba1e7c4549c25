"""A preflight's checks (OpenRouter's and a local server's): each named, with a status and a
detail, and the run refused when any failed."""

from __future__ import annotations

from dataclasses import dataclass


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
