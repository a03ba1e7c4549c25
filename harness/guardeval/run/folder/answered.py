"""Which guard answered a run (issue 37): its identity as the answers give it, not as the config
names it. A config's `name` and `model` say what was asked for; the simulated provider answers
under its profile's fingerprint whatever model is asked, a router may serve another model than
the slug, and a python guard's answers name the callable that gave them.

One answer's identity (`identity`): the simulated profile's name when `system_fingerprint` is
the simulator's (`sim-NAME-<12 hex>`), else a python guard's callable (`module:function`), else
the `model` the provider reports. Each session counts its answers' identities and records them
in its stop event (`answered_by`: identity -> attempts answered); a run whose sessions did not
all record them (a crash before the stop, a run from an earlier version) is read from its raw
log instead. `run_name` is what every output calls the run: the config's `label`, else the one
identity that answered, else the config's name.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

import orjson

from guardeval.errors import GuardevalError
from guardeval.run.folder.folder import LineTooLong, RunFolder
from guardeval.run.folder.layout import EVENTS, RAW

FIELD = "answered_by"
_SIM = re.compile(r"sim-([A-Za-z0-9][A-Za-z0-9._-]{0,63})-[0-9a-f]{12}")
MAX_IDENTITY_CHARS = 200   # a reported model name longer than this is cut (it is the provider's text)


def identity(response: str | None) -> str | None:
    """The identity one answer gives (None: not a JSON object, or it names no model)."""
    if not response:
        return None
    try:
        body = orjson.loads(response)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(body, dict):
        return None
    fp = body.get("system_fingerprint")
    if isinstance(fp, str) and (m := _SIM.fullmatch(fp)):
        return m.group(1)
    fn = body.get("callable")
    if isinstance(fn, dict) and isinstance(fn.get("name"), str):
        return str(fn["name"])[:MAX_IDENTITY_CHARS]
    model = body.get("model")
    if isinstance(model, str) and model:
        return model[:MAX_IDENTITY_CHARS]
    return None


def answered_by(folder: RunFolder) -> dict[str, int]:
    """identity -> answers, over the whole run: from the sessions' stop events when every session
    recorded them, else from raw.jsonl (every attempt that brought a reply)."""
    recorded = _from_events(folder)
    return recorded if recorded is not None else _from_raw(folder)


def _from_events(folder: RunFolder) -> dict[str, int] | None:
    counts: Counter[str] = Counter()
    open_sessions = 0
    try:
        for _, line in folder.lines(EVENTS):
            try:
                ev = orjson.loads(line)
            except orjson.JSONDecodeError:
                return None
            if not isinstance(ev, dict):
                return None
            if ev.get("event") == "start":
                open_sessions += 1
            elif ev.get("event") == "stop":
                seen = ev.get(FIELD)
                if not isinstance(seen, dict):
                    return None          # a session of an earlier version: the raw log says
                counts.update({str(k): v for k, v in seen.items() if type(v) is int and v > 0})
                open_sessions -= 1
    except (LineTooLong, OSError, GuardevalError):
        return None   # a damaged log: verify and status say what is wrong with it
    return dict(counts) if open_sessions <= 0 else None


def _from_raw(folder: RunFolder) -> dict[str, int]:
    counts: Counter[str] = Counter()
    try:
        for _, line in folder.lines(RAW):
            # Only lines that brought a reply are parsed (a cheap test on the bytes first).
            if b'"outcome":"reply"' not in line:
                continue
            try:
                rec = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(rec, dict) and rec.get("outcome") == "reply":
                who = identity(rec.get("response") if isinstance(rec.get("response"), str) else None)
                if who is not None:
                    counts[who] += 1
    except (LineTooLong, OSError, GuardevalError):
        pass   # likewise: named by what was read before the damage
    return dict(counts)


def run_name(guard: Mapping[str, Any], seen: Mapping[str, int]) -> str:
    """What outputs call a run: the config's `label`, else the one identity that answered, else
    (none, or several) the config's name."""
    label = guard.get("label")
    if isinstance(label, str) and label:
        return label
    if len(seen) == 1:
        return next(iter(seen))
    return str(guard.get("name") or "run")


def describe(seen: Mapping[str, int]) -> str:
    """`alias-sensitive` / `a (90), b (10)`: the identities, most answers first."""
    if not seen:
        return "no answer names its guard"
    if len(seen) == 1:
        return next(iter(seen))
    return ", ".join(f"{k} ({v})" for k, v in sorted(seen.items(), key=lambda kv: (-kv[1], kv[0])))


def run_title(manifest: Mapping[str, Any], seen: Mapping[str, int]) -> str:
    """A run's report title (report.html, effects.png): what answered first (`run_name`), then
    the config and the model it asked for (`guardeval · robust · config sim (sim/server-profile)
    · run …`); the config's name alone where nothing else names the run."""
    g = manifest.get("guard") or {}
    g = g if isinstance(g, Mapping) else {}
    name = run_name(g, seen)
    asked = f"{g.get('name')} ({g.get('model')})"
    return f"guardeval · {asked if name == g.get('name') else f'{name} · config {asked}'} · run {manifest.get('run_id')}"
