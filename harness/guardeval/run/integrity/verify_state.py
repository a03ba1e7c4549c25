"""What `guardeval verify` keeps between the files of a run (see `guardeval.run.integrity.verify`): the
capped problem report, streamed line checks, and compact per-call state in arrays."""

from __future__ import annotations

import re
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NotRequired, TypedDict

import numpy as np
import orjson

from guardeval.canon import dumps_line
from guardeval.errors import CheckFailed, InputError
from guardeval.run.folder.folder import LineTooLong, RunFolder
from guardeval.run.folder.head import head_problems
from guardeval.run.folder.layout import EVENTS, RAW
from guardeval.run.integrity import verify_raw
from guardeval.run.integrity.fingerprint import FingerprintRecord, is_legacy, run_fingerprint
from guardeval.run.integrity.verify_raw import MISSING

MAX_PROBLEMS = 50
_HEX32 = re.compile(r"[0-9a-f]{32}")


class Problem(TypedDict):
    """One thing `verify` found wrong: where (file, line when one) and what."""

    file: str
    line: int | None
    message: str


class Verification(TypedDict):
    """What `verify` reports (guardeval.run.integrity.verify.verify_run); the counts and the
    fingerprint only when the manifest could be read."""

    ok: bool
    problems: list[Problem]
    skipped: list[dict[str, str]]   # {check, reason}: checks that could not be done
    checked: str
    n_calls: NotRequired[int]
    n_raw: NotRequired[int]
    n_decisions: NotRequired[int]
    undecided_answers: NotRequired[int]
    fingerprint: NotRequired[FingerprintRecord | None]


class Verified(TypedDict):
    """What a report records of the verification its run passed first (`estimators/runs.verified`):
    whether it was checked, and the checks skipped (allowed)."""

    checked: bool
    skipped: list[dict[str, str]]


class Report:
    """Problems of one section (a file's pass), capped: the whole report shows the first 50."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []
        # A torn last line is found at the end of a stream but reported first in its section.
        self.torn: list[Problem] = []

    def add(self, file: str, line: int | None, message: str) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append({"file": file, "line": line, "message": message})

    def add_torn(self, file: str, line: int) -> None:
        self.torn = [{"file": file, "line": line,
                      "message": "torn last line (no newline); `guardeval resume` moves it aside"}]

    def all(self) -> list[Problem]:
        return [*self.torn, *self.problems]


def line_containing(data: bytes, needle: str) -> int | None:
    """The number of the first line of `data` (the manifest's bytes) that holds `needle`."""
    for i, line in enumerate(data.decode("utf-8", errors="replace").split("\n"), start=1):
        if needle in line:
            return i
    return None


def check_lines(lines: Iterable[tuple[int, bytes]], rep: Report, name: str,
                hasher: Any = None) -> Iterator[tuple[int, bytes, dict[str, Any], bytes]]:
    for lineno, line in lines:
        if hasher is not None:
            hasher.update(line)
        if not line.endswith(b"\n"):
            rep.add_torn(name, lineno)
            return
        body = line[:-1]
        try:
            obj = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            rep.add(name, lineno, f"not valid JSON ({exc})")
            continue
        if not isinstance(obj, dict):
            rep.add(name, lineno, "not a JSON object")
            continue
        canon = dumps_line(obj)
        if canon[:-1] != body:
            rep.add(name, lineno, "line is not in canonical form (bytes changed)")
        yield lineno, body, obj, canon


def cid_key(cid: Any) -> bytes | None:
    """A well-formed call id (32 lower-case hex digits) as 16 bytes; None for anything else."""
    if type(cid) is str and len(cid) == 32 and _HEX32.fullmatch(cid):
        return bytes.fromhex(cid)
    return None


class CallIndex:
    """call id -> schedule line (0-based), the last line naming it winning, as a dict would.

    Built once the schedule has been read, from its 16-byte call ids: a sorted array and the
    line of each entry (20 bytes a call). A dict of a million 16-byte keys and int values
    costs ~250 MB here; a lookup in the array costs a few microseconds, and there are about
    two per raw line and one per decision. Call ids that are not 32 lower-case hex digits (a
    damaged line) are kept apart, by value.
    """

    def __init__(self, cids: bytearray, parsed: bytearray, odd: dict[int, Any]) -> None:
        keys = np.frombuffer(bytes(cids), dtype="S16")
        lines = np.flatnonzero(np.frombuffer(bytes(parsed), dtype=np.uint8))
        lines = lines[~np.isin(lines, np.fromiter(odd, dtype=np.int64, count=len(odd)))]
        order = np.argsort(keys[lines], kind="stable")
        self._lines = lines[order].astype(np.int32)
        self._keys = keys[self._lines]
        self._odd: dict[Any, int] = {}
        for i in sorted(odd):
            if parsed[i]:
                try:
                    self._odd[odd[i]] = i
                except TypeError:
                    pass  # not hashable: the schedule line is reported as malformed
        # No call id on two lines: then the line of a call is where the stimuli pass meets it.
        self.unique = not self._odd and not bool(np.any(self._keys[1:] == self._keys[:-1]))

    def slot(self, cid: Any) -> int | None:
        """Raises TypeError for an unhashable id, as a dict lookup would."""
        key = cid_key(cid)
        if key is None:
            return self._odd.get(cid)
        i = int(self._keys.searchsorted(key, side="right")) - 1
        # numpy hands back S16 items without trailing NUL bytes: pad before comparing.
        return int(self._lines[i]) if i >= 0 and bytes(self._keys[i]).ljust(16, b"\0") == key else None


class ScheduleState:
    """What later passes need of each schedule line, in arrays (one entry per line)."""

    def __init__(self) -> None:
        self.cids = bytearray()          # 16 bytes per line: the line's call id (zeros: see odd_cids)
        self.odd_cids: dict[int, Any] = {}
        self.cells = array("i")          # cohort cell of base x condition; -1 when unknown
        self.parsed = bytearray()        # 1 when the line was a JSON object
        self.inst_ok = bytearray()       # 1 when instance_sha256 is a string (re-render applies)
        self.calls: CallIndex        # built once every line is read (`index`)
        self.n_rows = 0                  # JSON-object lines

    def index(self) -> None:
        self.calls = CallIndex(self.cids, self.parsed, self.odd_cids)

    def __len__(self) -> int:
        return len(self.parsed)

    def call_id_at(self, i: int) -> Any:
        if i in self.odd_cids:
            return self.odd_cids[i]
        return self.cids[16 * i:16 * i + 16].hex()


class StimuliState:
    """Stimulus of each call (as stimuli.jsonl says): an index into the distinct request hashes."""

    def __init__(self, n_slots: int) -> None:
        self.of_slot = array("i", [-1]) * n_slots
        self.odd: dict[str, str] = {}    # call ids that are not in the schedule
        self.distinct: dict[bytes, int] = {}   # request hash (UTF-8) -> index into shas
        self.shas: list[str] = []
        self.n_keys = 0                  # distinct call ids seen (the old `len(stimuli)`)

    def intern(self, sha: str) -> int:
        return self.intern_bytes(sha.encode("utf-8", "surrogatepass"))

    def intern_bytes(self, sha: bytes) -> int:
        idx = self.distinct.get(sha)
        if idx is None:
            idx = self.distinct[sha] = len(self.shas)
            self.shas.append(sha.decode("utf-8", "surrogatepass"))
        return idx

    def set_slot(self, slot: int, sha: bytes) -> int:
        """The stimulus of the call whose schedule line is `slot` (a well-formed line)."""
        self.n_keys += self.of_slot[slot] < 0
        idx = self.of_slot[slot] = self.intern_bytes(sha)
        return idx

    def set(self, cid: str, sha: str, calls: CallIndex) -> None:
        slot = calls.slot(cid)
        if slot is None:
            self.n_keys += cid not in self.odd
            self.odd[cid] = sha
        else:
            self.n_keys += self.of_slot[slot] < 0
            self.of_slot[slot] = self.intern(sha)

    def expected(self, cid: Any, calls: CallIndex) -> str | None:
        """The request hash stimuli.jsonl fixes for `cid` (None when it names none)."""
        return self.expected_at(calls.slot(cid), cid)

    def expected_at(self, slot: int | None, cid: Any) -> str | None:
        """`expected`, for a call id already looked up (`slot`)."""
        if slot is None:
            return self.odd.get(cid) if isinstance(cid, str) else None
        idx = self.of_slot[slot]
        return self.shas[idx] if idx >= 0 else None


class RawState:
    """Per raw line (JSON objects only, in order): SHA-256, call id and a digest of the decision
    re-derived from it. `seq` normally equals the position + 1; other seqs are mapped apart."""

    def __init__(self) -> None:
        self.shas = bytearray()          # 32 bytes per line
        self.cids = bytearray()          # 16 bytes per line (zeros: see odd_cids)
        self.odd_cids: dict[int, Any] = {}
        self.derived = bytearray()       # 16 bytes per line: digest of the re-derived decision
        self.derive_errors: dict[int, BaseException] = {}
        self.seq_ok = bytearray()        # 1 when the line's seq is its position + 1
        self.moved: dict[Any, int] = {}  # seq -> position, for the others (the last line wins)

    def add(self, f: verify_raw.Line, derived: Any) -> None:
        pos = len(self.seq_ok)
        self.shas += f.digest
        cid = None if f.call_id is MISSING else f.call_id
        key = cid_key(cid)
        self.cids += key if key is not None else bytes(16)
        if key is None:
            self.odd_cids[pos] = cid
        if isinstance(derived, BaseException):
            self.derive_errors[pos] = derived
        self.derived += derived if type(derived) is bytes else NO_DIGEST
        seq = f.seq if f.seq is not MISSING else -(pos + 1)
        normal = type(seq) is int and seq == pos + 1
        self.seq_ok.append(normal)
        try:
            if normal:
                self.moved.pop(seq, None)
            else:
                self.moved[seq] = pos
        except TypeError:
            pass  # an unhashable seq: reported on the line already

    def position(self, seq: Any) -> int | None:
        if seq in self.moved:
            return self.moved[seq]
        if type(seq) is int and 1 <= seq <= len(self.seq_ok) and self.seq_ok[seq - 1]:
            return seq - 1
        return None

    def line_sha(self, pos: int) -> str:
        return self.shas[32 * pos:32 * pos + 32].hex()

    def call_id(self, pos: int) -> Any:
        if pos in self.odd_cids:
            return self.odd_cids[pos]
        return self.cids[16 * pos:16 * pos + 16].hex()


NO_DIGEST = bytes(16)


def field_of(value: Any, name: str) -> Any:
    """A line's field as the old checks read it: rec[name] (KeyError when absent)."""
    if value is MISSING:
        raise KeyError(name)
    return value


def value_of(value: Any) -> Any:
    """A fact computed on the line, or the exception computing it raised."""
    if isinstance(value, BaseException):
        raise value
    return value


def fingerprint_check(folder: RunFolder, manifest: Mapping[str, object], rep: Report, expect: str | None,
                      skip: Callable[[str, str], None] | None = None) -> FingerprintRecord | None:
    """The run's fingerprint; a problem when it is not the one expected (or cannot be taken). A
    token of the older form (no events) is checked as such, and `skip` told that it leaves
    events.jsonl unpinned."""
    try:
        fp = run_fingerprint(folder, manifest)
    except (CheckFailed, InputError, OSError) as exc:
        rep.add(RAW, None, f"no fingerprint: {exc}")
        return None
    legacy = expect is not None and is_legacy(expect)
    now = fp.legacy_token if legacy else fp.token
    if expect is not None and now != expect:
        rep.add("fingerprint", None, f"the run's fingerprint is {now}, not the expected {expect}: the manifest, "
                                     "raw log, decisions or events differ from those it was taken of")
    elif legacy and skip is not None:
        skip("events.jsonl against the fingerprint", f"{expect} is a fingerprint of the older form "
             "(ATTEMPTS.DECISIONS.HEX), which pins the manifest, raw log and decisions but not events.jsonl; "
             f"this run's fingerprint now is {fp.token}")
    return fp.record()


def check_chain_head(folder: RunFolder | None, rep: Report, last_seq: int, last_sha: str) -> None:
    """The last `stop` event records the chain head; a changed or cut last line shows up here
    (`folder` None: events.jsonl was refused, reported already)."""
    if folder is None:
        return
    try:
        problems = head_problems(folder, last_seq, last_sha)
    except LineTooLong as exc:
        rep.add(EVENTS, exc.lineno, f"longer than {exc.cap} bytes, far past any line guardeval writes")
        return
    for message in problems:
        rep.add(RAW, last_seq if "differs" in message and last_seq else None, message)
