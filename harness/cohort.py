"""Cohorts: `cohort.json` + flat `instances.jsonl` (DESIGN §4).

Loading validates every row against a JSON Schema and every hash; a bad file is refused with
the file, line and field named (InputError, exit 2). Writing (`write_cohort`) is what every
builder uses, so hashes are computed in exactly one place.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Mapping

import jsonschema
import orjson

from harness.canon import canonical_sha256, sha256_hex
from harness.errors import InputError

CONTENT_FIELDS = ("user_request", "history", "current_action", "tool_descriptions")
ROLES = ("baseline", "placebo", "intervention")


@lru_cache(maxsize=None)
def _validator(name: str) -> jsonschema.protocols.Validator:
    text = resources.files("harness").joinpath("schemas", name).read_text("utf-8")
    schema = json.loads(text)
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema)


def schema_error(path: Path, line: int | None, obj: Any, schema_name: str) -> InputError | None:
    """First validation error of `obj`, as an InputError naming file, line and field."""
    errors = sorted(_validator(schema_name).iter_errors(obj), key=lambda e: list(e.absolute_path))
    if not errors:
        return None
    err = errors[0]
    if err.validator == "required":
        # jsonschema reports a missing key on the parent: name the key itself.
        missing = [k for k in err.validator_value if isinstance(obj, dict) and k not in _dig(obj, err.absolute_path)]
        fld = ".".join([*map(str, err.absolute_path), missing[0]]) if missing else "<row>"
        return InputError("missing required field", path=path, line=line, field=fld)
    if err.validator == "additionalProperties":
        return InputError(err.message, path=path, line=line,
                          field=".".join(map(str, err.absolute_path)) or "<row>")
    fld = ".".join(map(str, err.absolute_path)) or "<row>"
    return InputError(err.message, path=path, line=line, field=fld)


def _dig(obj: Any, keys: Iterable[Any]) -> Any:
    for k in keys:
        obj = obj[k]
    return obj


def instance_hash(row: Mapping[str, Any]) -> str:
    """SHA-256 of the canonical row without its own hash: guard-independent identity."""
    return canonical_sha256({k: v for k, v in row.items() if k != "instance_sha256"})


@dataclass(frozen=True)
class Condition:
    name: str
    role: str
    description: str
    acts_on: tuple[str, ...] = ("content",)


@dataclass
class Cohort:
    path: Path
    meta: dict[str, Any]
    conditions: list[Condition]
    instances: list[dict[str, Any]]
    sha256: str  # identity: SHA-256 of cohort.json bytes (which pin instances.jsonl)
    _index: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._index = {(r["base_id"], r["condition"]): r for r in self.instances}

    @property
    def name(self) -> str:
        return str(self.meta["name"])

    @property
    def base_ids(self) -> list[str]:
        """Bases in file order (first appearance)."""
        return list(dict.fromkeys(r["base_id"] for r in self.instances))

    @property
    def condition_names(self) -> list[str]:
        return [c.name for c in self.conditions]

    def role_of(self, condition: str) -> str:
        for c in self.conditions:
            if c.name == condition:
                return c.role
        raise KeyError(condition)

    def baseline(self) -> str:
        return next((c.name for c in self.conditions if c.role == "baseline"), "original")

    def placebo(self) -> str | None:
        return next((c.name for c in self.conditions if c.role == "placebo"), None)

    def instance(self, base_id: str, condition: str) -> dict[str, Any]:
        return self._index[(base_id, condition)]


def load_cohort(path: str | Path) -> Cohort:
    """Load and fully validate a cohort folder; raise InputError naming file/line/field."""
    root = Path(path)
    meta_path, inst_path = root / "cohort.json", root / "instances.jsonl"
    for p in (meta_path, inst_path):
        if p.is_symlink():
            raise InputError("symbolic links are refused", path=p)
        if not p.is_file():
            raise InputError("file not found", path=p)
    meta_bytes = meta_path.read_bytes()
    try:
        meta = orjson.loads(meta_bytes)
    except orjson.JSONDecodeError as exc:
        raise InputError(f"not valid JSON ({exc})", path=meta_path) from None
    if (err := schema_error(meta_path, None, meta, "cohort.schema.json")) is not None:
        raise err
    conditions = [Condition(c["name"], c["role"], c["description"], tuple(c.get("acts_on", ["content"])))
                  for c in meta["conditions"]]
    names = [c.name for c in conditions]
    if len(set(names)) != len(names):
        raise InputError("duplicate condition name", path=meta_path, field="conditions")
    if sum(c.role == "baseline" for c in conditions) != 1:
        raise InputError("exactly one condition must have role 'baseline'", path=meta_path, field="conditions")

    inst_bytes = inst_path.read_bytes()
    if len(inst_bytes) != meta["instances_bytes"]:
        raise InputError(f"size {len(inst_bytes)} does not match pinned {meta['instances_bytes']}",
                         path=inst_path, field="instances_bytes")
    digest = sha256_hex(inst_bytes)
    if digest != meta["instances_sha256"]:
        raise InputError(f"SHA-256 {digest} does not match pinned {meta['instances_sha256']}",
                         path=inst_path, field="instances_sha256")

    roles = {c.name: c.role for c in conditions}
    rows: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    base_meta: dict[str, tuple[Any, ...]] = {}
    for lineno, raw in enumerate(inst_bytes.splitlines(), start=1):
        if not raw.strip():
            raise InputError("empty line", path=inst_path, line=lineno)
        try:
            row = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise InputError(f"not valid JSON ({exc})", path=inst_path, line=lineno) from None
        if (err := schema_error(inst_path, lineno, row, "instance.schema.json")) is not None:
            raise err
        if row["condition"] not in roles:
            raise InputError(f"condition '{row['condition']}' is not declared in cohort.json",
                             path=inst_path, line=lineno, field="condition")
        if row["role"] != roles[row["condition"]]:
            raise InputError("role differs from cohort.json", path=inst_path, line=lineno, field="role")
        if instance_hash(row) != row["instance_sha256"]:
            raise InputError("instance_sha256 does not match the row's content",
                             path=inst_path, line=lineno, field="instance_sha256")
        key = (row["base_id"], row["condition"])
        if key in seen:
            raise InputError("duplicate base_id x condition", path=inst_path, line=lineno, field="base_id")
        seen.add(key)
        ident = (row["interaction_id"], row["domain"], row["label"], row["label_score"])
        if base_meta.setdefault(row["base_id"], ident) != ident:
            raise InputError("interaction_id/domain/label differ between conditions of one base",
                             path=inst_path, line=lineno, field="base_id")
        rows.append(row)
    if not rows:
        raise InputError("no instances", path=inst_path)
    for base in base_meta:
        for cond in names:
            if (base, cond) not in seen:
                raise InputError(f"base '{base}' has no row for condition '{cond}'", path=inst_path)
    return Cohort(root, meta, conditions, rows, sha256_hex(meta_bytes))


def build_row(base: Mapping[str, Any], condition: str, role: str, content: Mapping[str, Any],
              render: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Assemble one instance row from base metadata and (transformed) content; hash it."""
    row: dict[str, Any] = {
        "base_id": base["base_id"], "interaction_id": base["interaction_id"], "domain": base["domain"],
        "label": base.get("label"), "label_score": base.get("label_score"), "tool": content.get("tool", base["tool"]),
        "condition": condition, "role": role,
        **{k: content[k] for k in CONTENT_FIELDS},
    }
    if render:
        row["render"] = dict(render)
    row["instance_sha256"] = instance_hash(row)
    return row


def write_cohort(out: str | Path, *, name: str, version: str, description: str,
                 conditions: list[Condition], rows: list[dict[str, Any]],
                 sources: list[dict[str, Any]] | None = None, builder: dict[str, Any] | None = None) -> Path:
    """Write `instances.jsonl` then `cohort.json` pinning it. Deterministic bytes."""
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    # Rows keep their content's key order (a repr-rendering prompt such as TS-Guard's shows it);
    # identity does not depend on it: instance_sha256 hashes canonical (sorted-key) JSON.
    data = b"".join(orjson.dumps(r, option=orjson.OPT_APPEND_NEWLINE) for r in rows)
    (root / "instances.jsonl").write_bytes(data)
    meta: dict[str, Any] = {
        "name": name, "version": version, "description": description,
        "sources": sources or [],
        "conditions": [{"name": c.name, "role": c.role, "description": c.description, "acts_on": list(c.acts_on)}
                       for c in conditions],
        "instances_sha256": sha256_hex(data), "instances_bytes": len(data),
    }
    if builder:
        meta["builder"] = builder
    (root / "cohort.json").write_bytes(orjson.dumps(meta, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE))
    return root
