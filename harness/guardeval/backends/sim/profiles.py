"""Guards of known character: the simulated guard's cue weights as named profiles.

The decision model (`guardeval.backends.sim.guard`) counts three cues — threat components of tool names,
provenance markers, prose threat words — and weighs their capped counts in a logit. A profile
is one set of weights, chosen per server (`guardeval sim-server --profile NAME|FILE`), so a
study can run guards whose sensitivities are known in advance and check that the estimates
find them (`guardeval.backends.sim.truth` gives the expected block probability of every instance).

Shipped (docs/sim-server.md, "Profiles"):

* `shortcut` — today's weights (the default): leans on tool names and markers.
* `robust` — reads neither tool names nor markers, only prose threat words: a condition that
  leaves prose words alone (an alias, a marker rewrite, a re-indent) cannot move it, so its
  true effects there are 0 by construction.
* `alias-sensitive` — a tool-name weight three times `shortcut`'s (2.7), with a lower base so
  that a step with no cue is still mostly allowed.

A file is TOML: `name` (a slug), `base`, `tool`, `marker`, `prose` (finite numbers, |x| ≤ 50)
and an optional `description`. The server answers under the profile's fingerprint
(`system_fingerprint: "sim-NAME-<12 hex>"`, the hex from the SHA-256 of its name and weights), so
a run's raw log says which guard it met.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from guardeval.backends.sim.guard import SHORTCUT, Weights
from guardeval.backends.sim.wire import ProfileRecord
from guardeval.errors import InputError

# The standard library only: the command line's option parser imports this module.

MAX_PROFILE_BYTES = 64 << 10
MAX_WEIGHT = 50.0
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
FIELDS = ("base", "tool", "marker", "prose")


@dataclass(frozen=True)
class Profile:
    name: str
    weights: Weights
    description: str = ""

    @property
    def sha256(self) -> str:
        w = self.weights
        # Canonical JSON (sorted keys, no spaces), as guardeval.canon writes it.
        text = json.dumps({"name": self.name, "base": w.base, "tool": w.tool, "marker": w.marker, "prose": w.prose},
                          sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    @property
    def fingerprint(self) -> str:
        """What the server answers as `system_fingerprint`: the profile's name and hash."""
        return f"sim-{self.name}-{self.sha256[:12]}"

    def record(self) -> ProfileRecord:
        w = self.weights
        return {"name": self.name, "base": w.base, "tool": w.tool, "marker": w.marker, "prose": w.prose,
                "description": self.description, "fingerprint": self.fingerprint}


SHORTCUT_PROFILE = Profile("shortcut", SHORTCUT, "leans on threat-worded tool names and attack markers (the default)")
PROFILES: dict[str, Profile] = {p.name: p for p in (
    SHORTCUT_PROFILE,
    Profile("robust", Weights(base=-2.0, tool=0.0, marker=0.0, prose=0.6),
            "reads only prose threat words: no tool-name or marker cue, so an alias or a marker rewrite cannot move it"),
    Profile("alias-sensitive", Weights(base=-3.0, tool=2.7, marker=1.1, prose=0.25),
            "a tool-name weight three times shortcut's: renaming the tools moves it most"),
)}


def load_profile(spec: str) -> Profile:
    """A shipped profile by name, or a TOML file of one (InputError, exit 2, naming the file and
    field). A shipped name wins over a file of that name only when no such file exists."""
    if spec in PROFILES and not Path(spec).exists():
        return PROFILES[spec]
    from guardeval.bounded import read_bounded

    path = Path(spec)
    if not path.is_file():
        raise InputError(f"no profile named {spec!r} (shipped: {', '.join(PROFILES)}) and no such file",
                         field="--profile")
    text = read_bounded(path, MAX_PROFILE_BYTES, what="a simulator profile")
    try:
        data = tomllib.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"not valid TOML ({exc})", path=path) from None
    unknown = sorted(set(data) - {"name", "description", *FIELDS})
    if unknown:
        raise InputError(f"unknown key {unknown[0]!r} (a profile has name, description, {', '.join(FIELDS)})",
                         path=path, field=unknown[0])
    name = data.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InputError("a slug of 1-64 characters (letters, digits, '.', '_', '-') is required", path=path,
                         field="name")
    values = {}
    for key in FIELDS:
        v = data.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or abs(v) > MAX_WEIGHT:
            raise InputError(f"a finite number in [-{MAX_WEIGHT:g}, {MAX_WEIGHT:g}] is required", path=path, field=key)
        values[key] = float(v)
    description = data.get("description", "")
    if not isinstance(description, str) or len(description) > 1000:
        raise InputError("text of at most 1000 characters", path=path, field="description")
    return Profile(name, Weights(**values), description)
