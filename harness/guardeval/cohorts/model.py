"""Cohorts: `cohort.json` + flat `instances.jsonl` (docs/design.md §4).

Loading validates every row against a JSON Schema and every hash, in one streaming pass; a bad
file is refused with the file, line and field named (InputError, exit 2). A loaded cohort is a
compact index into `instances.jsonl` (rows are read back on demand), so a 100,000-instance
cohort costs megabytes, not gigabytes. Writing (`write_cohort`) is what every builder uses, so
hashes are computed in exactly one place.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import os
import re
import shutil
import weakref
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal, NamedTuple, NotRequired, TypedDict

import jsonschema
import orjson

from guardeval.bounded import LINK, open_regular, read_fd
from guardeval.canon import canonical_sha256, sha256_hex
from guardeval.cohorts.limits import DEFAULT_ROW_LIMITS, DUPLICATE_KEY, RowLimits, deeper_than, has_duplicate_keys
from guardeval.errors import InputError, WriteFailed
from guardeval.lru import LRU

ContentField = Literal["user_request", "history", "current_action", "tool_descriptions"]
CONTENT_FIELDS: tuple[ContentField, ...] = ("user_request", "history", "current_action", "tool_descriptions")


class Judged(TypedDict):
    """What every record of one judged step carries, with or without a condition: its identity,
    its label and the user's request (declared once for `Base` and `Instance`)."""

    base_id: str
    interaction_id: str
    domain: str
    label: int | None
    label_score: float | None
    tool: str
    user_request: str


class Base(Judged):
    """One judged step as a builder reads it from its source, before any condition: the cohort's
    identity fields and the content a condition transforms (`build_row` makes it an `Instance`)."""

    history: list[dict[str, Any]]
    current_action: dict[str, Any]
    tool_descriptions: list[dict[str, Any]]


class ConditionRecord(TypedDict):
    """One condition as cohort.json declares it (`Condition` is what the code holds)."""

    name: str
    role: str
    description: str
    acts_on: NotRequired[list[str]]      # default ["content"]
    keeps: NotRequired[list[str]]
    family: NotRequired[str]


class CohortMeta(TypedDict):
    """cohort.json, as cohort.schema.json checks it on load."""

    name: str
    version: str
    description: NotRequired[str]
    sources: list[dict[str, object]]     # what the cohort was built from (pins, log identities)
    conditions: list[ConditionRecord]
    instances_sha256: str
    instances_bytes: int
    builder: NotRequired[dict[str, Any]]   # how the builder was run (its options, tokenizer)


class Render(TypedDict, total=False):
    """A condition's rendering options (cohorts/transforms/base.py): what `_row_error` allows."""

    indent: int | None


class Instance(Judged):
    """One row of instances.jsonl as validated on load (`_row_error`): a base under a condition.
    The content fields hold the agent's messages and tools as the source gave them (JSON)."""

    condition: str
    role: str
    # The agent's messages, its action and its tools as JSON, or as text a source pre-rendered.
    history: list[dict[str, Any]] | str
    current_action: dict[str, Any] | str
    tool_descriptions: list[dict[str, Any]] | str
    render: NotRequired[Render]
    instance_sha256: str


class _Index(TypedDict):
    """Where each row of instances.jsonl lies (`_index_rows`): what `Cohort` reads rows by."""

    bases: dict[str, tuple[str, str]]
    shas: list[str]
    offsets: array
    lengths: array
ROLES = ("baseline", "placebo", "intervention")
# Condition families (docs/cohorts.md): the estimate runs Holm over each family's interventions,
# corrected by the family's own placebo (else the cohort's placebo without a family).
Family = Literal["names", "arguments", "schemas", "markers"]
FAMILIES: tuple[Family, ...] = ("names", "arguments", "schemas", "markers")
MAX_COHORT_JSON_BYTES = 16 << 20


@functools.cache
def _validator(name: str) -> jsonschema.protocols.Validator:
    text = resources.files("guardeval").joinpath("schemas", name).read_text("utf-8")
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


def checked_json(raw: bytes, path: Path, schema_name: str, max_depth: int) -> Any:
    """A small JSON record file's text (cohort.json, a study's study.json), checked: no deeper
    than `max_depth`, valid JSON, no key repeated in an object, valid under `schema_name`
    (InputError naming the file and field)."""
    if deeper_than(raw, max_depth):
        raise InputError(f"nested more than {max_depth} levels deep", path=path)
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InputError(f"not valid JSON ({exc})", path=path) from None
    if has_duplicate_keys(raw, obj):
        raise InputError(DUPLICATE_KEY, path=path)
    if (err := schema_error(path, None, obj, schema_name)) is not None:
        raise err
    return obj


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
    family: Family | None = None


class InstanceKey(NamedTuple):
    """What the schedule needs of an instance, kept in the index (no row read)."""

    interaction_id: str
    domain: str
    instance_sha256: str


# Parsed rows read back by offset, most recent first: renderers touch each instance a few times
# in a row (its repetitions), never all of them at once.
ROW_CACHE = 1024


class Cohort:
    """A validated cohort, held as a compact index into `instances.jsonl`.

    A 100,000-instance cohort is ~250 MB of JSON and several GB as Python dicts, so rows are not
    kept: the index holds, per base x condition, the byte offset and length of its line and the
    fields the schedule needs (`key_fields`); `instance` reads one row back on demand (through a
    small LRU). The file is held open from the validating pass on, and a read refuses a file
    whose size or mtime changed since, so a row read later is the row that was validated.
    `instances` (every row as a dict) is still there for the small-cohort callers (builders,
    audits, inspect, estimators).
    """

    def __init__(self, path: Path, meta: CohortMeta, conditions: list[Condition], sha256: str,
                 *, inst_path: Path, fd: int, bases: dict[str, tuple[str, str]], shas: list[str],
                 offsets: array, lengths: array, meta_bytes: bytes = b"") -> None:
        self.path, self.meta, self.conditions, self.sha256 = path, meta, conditions, sha256
        self.meta_bytes = meta_bytes     # cohort.json as read and validated (what sha256 is of)
        self._inst_path = inst_path
        self._fd = fd
        self._closer = weakref.finalize(self, os.close, fd)
        st = os.fstat(fd)
        self._stamp = (st.st_size, st.st_mtime_ns)
        # base_id -> (interaction_id, domain), in file order; a base's position times the number
        # of conditions plus the condition's position is its cell in the arrays below.
        self._bases = bases
        self._base_pos = {b: i for i, b in enumerate(bases)}
        self._cond_pos = {c.name: i for i, c in enumerate(conditions)}
        self._shas, self._offsets, self._lengths = shas, offsets, lengths
        self._rows: LRU[int, Instance] = LRU(ROW_CACHE)

    @property
    def name(self) -> str:
        return str(self.meta["name"])

    @property
    def base_ids(self) -> list[str]:
        """Bases in file order (first appearance)."""
        return list(self._bases)

    @property
    def condition_names(self) -> list[str]:
        return [c.name for c in self.conditions]

    @property
    def n_instances(self) -> int:
        return len(self._shas)

    def role_of(self, condition: str) -> str:
        for c in self.conditions:
            if c.name == condition:
                return c.role
        raise KeyError(condition)

    def baseline(self) -> str:
        return next((c.name for c in self.conditions if c.role == "baseline"), "original")

    def placebo(self) -> str | None:
        """The placebo of the whole cohort: the first without a family (else the first)."""
        placebos = [c for c in self.conditions if c.role == "placebo"]
        return next((c.name for c in placebos if c.family is None), placebos[0].name if placebos else None)

    def families(self) -> dict[str, str]:
        """{condition: family} for the conditions the record gives one (empty: no families)."""
        return {c.name: c.family for c in self.conditions if c.family is not None}

    def cell(self, base_id: str, condition: str) -> int:
        """Position of base x condition in the index (KeyError when the cohort has no such row)."""
        return self._base_pos[base_id] * len(self.conditions) + self._cond_pos[condition]

    def key_fields(self, base_id: str, condition: str) -> InstanceKey:
        interaction_id, domain = self._bases[base_id]
        return InstanceKey(interaction_id, domain, self._shas[self.cell(base_id, condition)])

    def instance(self, base_id: str, condition: str) -> Instance:
        cell = self.cell(base_id, condition)
        row = self._rows.get(cell)
        if row is None:
            row = self._rows.put(cell, self._read(cell))
        return row

    def _read(self, cell: int) -> Instance:
        st = os.fstat(self._fd)
        if (st.st_size, st.st_mtime_ns) != self._stamp:
            raise InputError("the file changed after it was loaded and validated", path=self._inst_path)
        row = orjson.loads(os.pread(self._fd, self._lengths[cell], self._offsets[cell]))
        if row.get("instance_sha256") != self._shas[cell]:
            raise InputError("the file changed after it was loaded and validated", path=self._inst_path)
        return row

    def instance_chunks(self, size: int = 1 << 20) -> Iterator[bytes]:
        """instances.jsonl as validated, a piece at a time, from the descriptor held since
        (a copy is made from the bytes checked, never from the path again)."""
        pos = 0
        while chunk := os.pread(self._fd, size, pos):
            pos += len(chunk)
            yield chunk
        if (os.fstat(self._fd).st_size, os.fstat(self._fd).st_mtime_ns) != self._stamp:
            raise InputError("the file changed after it was loaded and validated", path=self._inst_path)

    def iter_instances(self) -> Iterator[Instance]:
        """Every row, in file order, read in one sequential pass."""
        for cell in sorted(range(len(self._offsets)), key=self._offsets.__getitem__):
            yield self._read(cell)

    @functools.cached_property
    def instances(self) -> list[Instance]:
        """Every row as a dict, in file order (loads the whole cohort: small cohorts only)."""
        return list(self.iter_instances())

    def close(self) -> None:
        self._closer()


# The fast row check below was written against this exact schema text; if the schema changes,
# the fast path switches itself off and every row goes through jsonschema again.
_FAST_SCHEMA_SHA256 = "019a8707c761204c726c2b4d18523a0f5b26ba8c167c2a13409097f0c7e6f350"
_REQUIRED = frozenset(("base_id", "interaction_id", "domain", "label", "label_score", "tool", "condition", "role",
                       "instance_sha256", "user_request", "history", "current_action", "tool_descriptions"))
_ALLOWED = _REQUIRED | {"render"}
_CONDITION_RE = re.compile(r"[A-Za-z0-9_.-]+")
_SHA_RE = re.compile(r"[0-9a-f]{64}")


@functools.cache
def _fast_check_enabled() -> bool:
    data = resources.files("guardeval").joinpath("schemas", "instance.schema.json").read_bytes()
    return sha256_hex(data) == _FAST_SCHEMA_SHA256


def _surely_valid_instance(row: Any) -> bool:
    """A strict, sufficient condition for `instance.schema.json`.

    True only for rows the schema accepts; anything else (including odd but valid rows, such as
    a label written 1.0) goes to jsonschema, which decides and words the error. jsonschema costs
    ~200 µs a row here, this ~3 µs: it is what lets a 100,000-row cohort load in seconds.
    """
    if type(row) is not dict or not _REQUIRED <= row.keys() <= _ALLOWED:
        return False
    for key in ("base_id", "interaction_id", "domain", "tool"):
        v = row[key]
        if type(v) is not str or not v:
            return False
    label, score = row["label"], row["label_score"]
    if not (label is None or (type(label) is int and label in (0, 1))):
        return False
    if not (score is None or type(score) in (int, float)):
        return False
    cond, sha = row["condition"], row["instance_sha256"]
    if type(cond) is not str or not _CONDITION_RE.fullmatch(cond):
        return False
    if type(sha) is not str or not _SHA_RE.fullmatch(sha):
        return False
    if row["role"] not in ROLES or type(row["role"]) is not str or type(row["user_request"]) is not str:
        return False
    if type(row["history"]) not in (list, str) or type(row["tool_descriptions"]) not in (list, str):
        return False
    if type(row["current_action"]) not in (dict, str):
        return False
    if "render" in row:
        render = row["render"]
        if type(render) is not dict or not render.keys() <= {"indent"}:
            return False
        indent = render.get("indent")
        if not (indent is None or (type(indent) is int and 0 <= indent <= 8)):
            return False
    return True


def _row_error(path: Path, lineno: int, row: Any) -> InputError | None:
    if _fast_check_enabled() and _surely_valid_instance(row):
        return None
    return schema_error(path, lineno, row, "instance.schema.json")


# Cohorts shipped inside the package (in the repository, links to cohorts/<name>).
BUNDLED_COHORTS = {"demo": Path(__file__).resolve().parent / "bundled" / "demo"}


def resolve_cohort(value: str | Path) -> Path:
    """A `--cohort` value: a folder, or, when nothing of that name exists, the name of a cohort
    shipped with the package (`demo`); looked up by name, never joined into a path."""
    p = Path(value)
    if isinstance(value, Path) or p.exists():
        return p
    return BUNDLED_COHORTS.get(value, p)


def load_cohort(path: str | Path, *, pinned_sha256: str | None = None,
                limits: RowLimits = DEFAULT_ROW_LIMITS, dir_fd: int | None = None) -> Cohort:
    """Load and fully validate a cohort folder; raise InputError naming file/line/field.

    `pinned_sha256`: the SHA-256 a run's manifest pins for this cohort.json. When it matches,
    the cohort is a run folder's own copy, validated row by row when that run was launched and
    pinned byte for byte since (cohort.json pins instances.jsonl, whose size and SHA-256 are
    still checked here), so each row's `instance_sha256` is not recomputed (canonical JSON of
    every row: a third of the load time of a large cohort). The schema and the structure (one
    row per base x condition) are always checked.

    `dir_fd`: the folder's descriptor (a run folder's `cohort/`, `RunFolder.subdir`), its
    files opened relative to it; otherwise the folder at `path` is opened once. Either way the
    two files are opened once, never through a link, and refused unless they are regular files
    when open (a FIFO renamed into place is not waited on: `open_regular`).
    """
    root = resolve_cohort(path)
    meta_path, inst_path = root / "cohort.json", root / "instances.jsonl"
    if dir_fd is None:
        try:
            dfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                raise InputError("file not found", path=meta_path) from None
            raise InputError(f"cannot read ({exc.strerror or exc})", path=root) from None
    else:
        dfd = dir_fd
    try:
        meta_fd = _open_file(meta_path, dfd)
        try:
            meta_bytes = read_fd(meta_fd, MAX_COHORT_JSON_BYTES, path=meta_path, what="a cohort.json")
        finally:
            os.close(meta_fd)
        fd = _open_file(inst_path, dfd)
    finally:
        if dir_fd is None:
            os.close(dfd)
    try:
        return _load(root, meta_path, meta_bytes, inst_path, fd, pinned_sha256=pinned_sha256, limits=limits)
    except BaseException:
        os.close(fd)
        raise


def _open_file(path: Path, dir_fd: int) -> int:
    try:
        return open_regular(path.name, path=path, dir_fd=dir_fd, follow=False)
    except FileNotFoundError:
        raise InputError("file not found", path=path) from None
    except InputError as exc:
        if exc.message == LINK:
            raise InputError("symbolic links are refused", path=path) from None
        raise


def _load(root: Path, meta_path: Path, meta_bytes: bytes, inst_path: Path, fd: int, *,
          pinned_sha256: str | None, limits: RowLimits) -> Cohort:
    meta = checked_json(meta_bytes, meta_path, "cohort.schema.json", DEFAULT_ROW_LIMITS.max_depth)
    conditions = [Condition(c["name"], c["role"], c["description"], tuple(c.get("acts_on", ["content"])),
                            c.get("family")) for c in meta["conditions"]]
    names = [c.name for c in conditions]
    if len(set(names)) != len(names):
        raise InputError("duplicate condition name", path=meta_path, field="conditions")
    if sum(c.role == "baseline" for c in conditions) != 1:
        raise InputError("exactly one condition must have role 'baseline'", path=meta_path, field="conditions")
    meta_sha = sha256_hex(meta_bytes)
    trusted = pinned_sha256 is not None and pinned_sha256 == meta_sha
    # The pins first (a damaged file is named as such, not by its first odd row), then the
    # rows; the second pass hashes again, so the index is built from the pinned bytes.
    _check_pins(fd, inst_path, meta)
    index = _index_rows(fd, inst_path, meta, conditions, trusted=trusted, limits=limits)
    return Cohort(root, meta, conditions, meta_sha, inst_path=inst_path, fd=fd, meta_bytes=meta_bytes, **index)


def _check_pins(fd: int, inst_path: Path, meta: Mapping[str, Any]) -> None:
    size, digest = _fd_size_sha256(fd)
    if size != meta["instances_bytes"]:
        raise InputError(f"size {size} does not match pinned {meta['instances_bytes']}",
                         path=inst_path, field="instances_bytes")
    if digest != meta["instances_sha256"]:
        raise InputError(f"SHA-256 {digest} does not match pinned {meta['instances_sha256']}",
                         path=inst_path, field="instances_sha256")


def _fd_size_sha256(fd: int) -> tuple[int, str]:
    h, size, pos = hashlib.sha256(), 0, 0
    while chunk := os.pread(fd, 1 << 20, pos):
        h.update(chunk)
        size += len(chunk)
        pos += len(chunk)
    return size, h.hexdigest()


def _index_rows(fd: int, inst_path: Path, meta: Mapping[str, Any], conditions: list[Condition], *,
                trusted: bool, limits: RowLimits) -> _Index:
    """One streaming pass: validate each row (unless trusted) and index it by offset."""
    roles = {c.name: c.role for c in conditions}
    n_cond = len(conditions)
    cond_pos = {c.name: i for i, c in enumerate(conditions)}
    bases: dict[str, tuple[str, str]] = {}
    base_pos: dict[str, int] = {}
    base_ident: dict[str, tuple[Any, Any]] = {}   # label, label_score: checked equal per base
    # Cells are filled as rows arrive; a base's block of n_cond cells is added when first seen.
    shas: list[str] = []
    offsets, lengths = array("q"), array("l")
    h = hashlib.sha256()
    offset = 0
    with os.fdopen(os.dup(fd), "rb", buffering=1 << 20) as fh:
        fh.seek(0)
        # A line is never read past the size limit (+1 for its newline): a 200 MB row is refused
        # having read 1 MiB of it.
        for lineno, raw in enumerate(iter(functools.partial(fh.readline, limits.max_bytes + 2), b""), start=1):
            if len(raw) > limits.max_bytes + (raw[-1:] == b"\n"):
                raise InputError(f"row is longer than {limits.max_bytes} bytes (raise the limit with --max-row-bytes)",
                                 path=inst_path, line=lineno)
            if deeper_than(raw, limits.max_depth):
                raise InputError(f"row is nested more than {limits.max_depth} levels deep (raise the limit with "
                                 "--max-row-depth)", path=inst_path, line=lineno)
            h.update(raw)
            row = _parse_row(raw, inst_path, lineno, roles, trusted=trusted)
            base = row["base_id"]
            if base not in bases:
                base_pos[base] = len(bases)
                bases[base] = (row["interaction_id"], row["domain"])
                base_ident[base] = (row["label"], row["label_score"])
                shas.extend([""] * n_cond)
                offsets.extend([-1] * n_cond)
                lengths.extend([0] * n_cond)
            cell = base_pos[base] * n_cond + cond_pos[row["condition"]]
            if offsets[cell] >= 0:
                raise InputError("duplicate base_id x condition", path=inst_path, line=lineno, field="base_id")
            if (*bases[base], *base_ident[base]) != (row["interaction_id"], row["domain"], row["label"],
                                                     row["label_score"]):
                raise InputError("interaction_id/domain/label differ between conditions of one base",
                                 path=inst_path, line=lineno, field="base_id")
            shas[cell], offsets[cell], lengths[cell] = row["instance_sha256"], offset, len(raw)
            offset += len(raw)
    if h.hexdigest() != meta["instances_sha256"]:
        raise InputError("the file changed while it was being read", path=inst_path)
    if not bases:
        raise InputError("no instances", path=inst_path)
    for i, base in enumerate(bases):
        for cond in conditions:
            if offsets[i * n_cond + cond_pos[cond.name]] < 0:
                raise InputError(f"base '{base}' has no row for condition '{cond.name}'", path=inst_path)
    return {"bases": bases, "shas": shas, "offsets": offsets, "lengths": lengths}


def _parse_row(raw: bytes, inst_path: Path, lineno: int, roles: Mapping[str, str], *,
               trusted: bool) -> Instance:
    if not raw.strip():
        raise InputError("empty line", path=inst_path, line=lineno)
    try:
        row = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InputError(f"not valid JSON ({exc})", path=inst_path, line=lineno) from None
    # A trusted row is the run's own pinned copy, checked when the run was launched.
    if not trusted and has_duplicate_keys(raw, row):
        raise InputError(DUPLICATE_KEY, path=inst_path, line=lineno)
    if (err := _row_error(inst_path, lineno, row)) is not None:
        raise err
    if row["condition"] not in roles:
        raise InputError(f"condition '{row['condition']}' is not declared in cohort.json",
                         path=inst_path, line=lineno, field="condition")
    if row["role"] != roles[row["condition"]]:
        raise InputError("role differs from cohort.json", path=inst_path, line=lineno, field="role")
    if not trusted and instance_hash(row) != row["instance_sha256"]:
        raise InputError("instance_sha256 does not match the row's content",
                         path=inst_path, line=lineno, field="instance_sha256")
    return row


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


def check_out_dir(out: str | Path) -> Path:
    """A builder's `--out`: a folder, or nothing yet (created); anything else is a usage error."""
    root = Path(out)
    if root.exists() and not root.is_dir():
        raise InputError("is not a folder; --out names the cohort folder to write", path=root)
    return root


def write_cohort(out: str | Path, *, name: str, version: str, description: str,
                 conditions: list[Condition], rows: Iterable[dict[str, Any]],
                 sources: Sequence[Mapping[str, object]] | None = None, builder: dict[str, Any] | None = None) -> Path:
    """Write `instances.jsonl` then `cohort.json` pinning it. Deterministic bytes.

    `rows` may be any iterable (a generator for a large cohort): it is written as it comes,
    hashed on the way. Both files are written beside `out` (`.<name>.partial-<pid>/`) and moved
    into place once whole: a failure (a full disk: WriteFailed naming the file) leaves `out` as
    it was, not a cut `instances.jsonl` without its `cohort.json`.
    """
    root = check_out_dir(out)
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = root.with_name(f".{root.name}.partial-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)   # a leftover of an earlier builder under this pid
    current = tmp / "instances.jsonl"
    try:
        tmp.mkdir()
        h, size = hashlib.sha256(), 0
        # Rows keep their content's key order (a repr-rendering prompt such as TS-Guard's shows it);
        # identity does not depend on it: instance_sha256 hashes canonical (sorted-key) JSON.
        with open(current, "xb") as fh:
            for r in rows:
                line = orjson.dumps(r, option=orjson.OPT_APPEND_NEWLINE)
                fh.write(line)
                h.update(line)
                size += len(line)
            fh.flush()
            os.fsync(fh.fileno())
        meta: dict[str, Any] = {
            "name": name, "version": version, "description": description,
            "sources": sources or [],
            "conditions": [{"name": c.name, "role": c.role, "description": c.description, "acts_on": list(c.acts_on),
                            **({"family": c.family} if c.family else {})} for c in conditions],
            "instances_sha256": h.hexdigest(), "instances_bytes": size,
        }
        if builder:
            meta["builder"] = builder
        current = tmp / "cohort.json"
        with open(current, "xb") as fh:
            fh.write(orjson.dumps(meta, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE))
            fh.flush()
            os.fsync(fh.fileno())
        _move_into_place(tmp, root)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise WriteFailed(root / current.name, exc, f"Nothing of the cohort was written to {root}: free some "
                              "space, then build it again.") from None
        raise InputError(f"cannot write the cohort ({exc.strerror or exc})", path=root / current.name) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return root


def _move_into_place(tmp: Path, root: Path) -> None:
    """The built folder renamed to `root` (nothing there, or an empty folder); into an existing
    cohort folder, its two files renamed over the old ones, the pin (cohort.json) last."""
    try:
        os.rename(tmp, root)
        return
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
    for leaf in ("instances.jsonl", "cohort.json"):
        os.replace(tmp / leaf, root / leaf)
    tmp.rmdir()
