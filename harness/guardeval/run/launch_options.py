"""The dispatch options a launch was given, recorded in its manifest and reused by `resume`.

`launch --concurrency 4` followed by a bare `resume` must not run at 32: the manifest's
`launch_options` holds what `launch` (or `replicate`) was given — `concurrency`,
`fixed_concurrency`, `rpm`, `max_cost`, `rate_limit_stop_s`; null where the option was not given —
and `resume` uses each unless its own command line gives it. `--max-calls` is a pilot's, never
reused; `--base-url` is in the recorded guard config already; the order, seed and repetitions
are the schedule's. A run from before this record resumes as before (the defaults). The record
is read as hostile: a value of the wrong type or out of range is exit 2 naming the field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal, TypedDict, TypeGuard

from guardeval.errors import InputError

FIELD: Final = "launch_options"
Option = Literal["concurrency", "fixed_concurrency", "rpm", "max_cost", "rate_limit_stop_s"]


class LaunchOptions(TypedDict, total=False):
    """The manifest's `launch_options` (`record`: every option, None where not given), or those a
    run resumes with (`recorded`: only the ones recorded; `merged`: every option)."""

    concurrency: int | None
    fixed_concurrency: bool | None
    rpm: float | None
    max_cost: float | None
    rate_limit_stop_s: float | None


# name -> the CLI flag that sets it
FLAGS: dict[Option, str] = {"concurrency": "--concurrency", "fixed_concurrency": "--fixed-concurrency", "rpm": "--rpm",
         "max_cost": "--max-cost", "rate_limit_stop_s": "--rate-limit-stop"}
# Calls in flight at most: far past any provider's limit, small enough for the dispatcher's tables.
MAX_CONCURRENCY = 1_000_000
# What each option takes, said where a value out of range is refused.
RANGES = {"concurrency": f"an integer from 1 to {MAX_CONCURRENCY:,}", "fixed_concurrency": "true or false",
          "rpm": "a finite number > 0", "max_cost": "a finite number >= 0 (USD)",
          "rate_limit_stop_s": "a finite number of seconds > 0"}


def record(given: Mapping[str, Any]) -> LaunchOptions:
    """The manifest's `launch_options` from what the command line (or the API) gave (None: not
    given); a value out of range is refused naming its option and range (InputError, exit 2)."""
    check_given(given)
    return {"concurrency": given.get("concurrency"), "fixed_concurrency": given.get("fixed_concurrency"),
            "rpm": given.get("rpm"), "max_cost": given.get("max_cost"), "rate_limit_stop_s": given.get("rate_limit_stop_s")}


def check_given(given: Mapping[str, Any]) -> None:
    """InputError naming the option (`--concurrency`) and its range for a value it cannot take."""
    for name, flag in FLAGS.items():
        if not _check(name, given.get(name)):
            raise InputError(f"{flag} {given[name]!r:.40}: out of range (takes {RANGES[name]})", field=flag)


def _is_option(name: object) -> TypeGuard[Option]:
    return name in FLAGS


def _check(name: str, value: Any) -> bool:
    if value is None:
        return True
    if name == "fixed_concurrency":
        return isinstance(value, bool)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if name == "concurrency":
        return isinstance(value, int) and 1 <= value <= MAX_CONCURRENCY
    if not math.isfinite(value):
        return False
    return value >= 0 if name == "max_cost" else value > 0


def recorded(manifest: Mapping[str, Any], path: Path) -> LaunchOptions:
    """The launch's options, checked; {} for a run from before they were recorded."""
    rec = manifest.get(FIELD)
    if rec is None:
        return {}
    if not isinstance(rec, dict):
        raise InputError("not a JSON object", path=path, field=FIELD)
    out: LaunchOptions = {}
    for name, value in rec.items():
        if not _is_option(name):
            raise InputError(f"unknown option {name!r}", path=path, field=FIELD)
        if not _check(name, value):
            raise InputError(f"not a valid value for {FLAGS[name]} (it takes {RANGES[name]})", path=path,
                             field=f"{FIELD}.{name}")
        if value is not None:
            out[name] = value
    return out


def merged(given: Mapping[str, Any], launch: LaunchOptions) -> tuple[LaunchOptions, list[str]]:
    """Each option from the command line when given there, else the launch's; with the flags
    taken from the launch, for a message. A given value out of range: InputError naming its option."""
    check_given(given)
    out: LaunchOptions = {}
    reused: list[str] = []
    for name, flag in FLAGS.items():
        if given.get(name) is not None:
            out[name] = given[name]
        elif name in launch:
            out[name] = launch[name]
            reused.append(_shown(flag, launch[name]))
        else:
            out[name] = None
    return out, reused


def _shown(flag: str, value: Any) -> str:
    if isinstance(value, bool):
        return flag if value else "--no-" + flag[2:]
    return f"{flag} {value:g}" if isinstance(value, float) else f"{flag} {value}"
