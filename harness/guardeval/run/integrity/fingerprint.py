"""A run's fingerprint (docs/design.md §6): one short token that pins the whole log.

The hash chain proves the raw log was not changed *since it was chained*, but it has no key: one
who edits answers (or every cost) and recomputes every hash gets a chain that verifies. A
fingerprint written down elsewhere when the run was made (a paper's supplement, a lab notebook)
closes that gap: `verify --expect TOKEN` fails unless the manifest, the raw chain's head, the
decisions and the sessions' events are the ones the token was made from.

Token: `<attempts>.<decisions>.<events>.<24 hex>`; the hex is the start of the SHA-256 of the
canonical JSON of {manifest sha256, raw line count, raw head (SHA-256 of the last raw line),
decision line count, SHA-256 of decisions.jsonl, event line count, SHA-256 of events.jsonl}
(complete lines). It is cheap: the raw head is read from the end of the log (the chain behind
it is what `verify` checks) and the decisions and events are hashed in one pass each. Every
session appends its start and stop to events.jsonl, so the token a session prints is the run as
that session left it.

A token of the older form `<attempts>.<decisions>.<24 hex>` (guardeval before issue 27: no
events) is still checked, against the same fields less the events (`legacy_token`); `verify`
then says that events.jsonl is not pinned by it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

import orjson

from guardeval.canon import canonical_sha256
from guardeval.errors import CheckFailed, InputError
from guardeval.run.folder.folder import RunFolder
from guardeval.run.folder.layout import DECISIONS, EVENTS, GENESIS, RAW

TOKEN = re.compile(r"([0-9]{1,12})\.([0-9]{1,12})\.([0-9]{1,12})\.([0-9a-f]{24})")
LEGACY_TOKEN = re.compile(r"([0-9]{1,12})\.([0-9]{1,12})\.([0-9a-f]{24})")
_TAIL = 1 << 16


class Pinned(TypedDict):
    manifest_sha256: str
    n_raw: int
    raw_head: str
    n_decisions: int
    decisions_sha256: str


class FingerprintRecord(Pinned):
    """The run's fingerprint as `verify` and `status` report it: its token and what it pins."""

    token: str
    n_events: int
    events_sha256: str


@dataclass(frozen=True)
class Fingerprint:
    manifest_sha256: str
    n_raw: int
    raw_head: str
    n_decisions: int
    decisions_sha256: str
    n_events: int = 0
    events_sha256: str = hashlib.sha256().hexdigest()

    def _pinned(self) -> Pinned:
        return {"manifest_sha256": self.manifest_sha256, "n_raw": self.n_raw, "raw_head": self.raw_head,
                "n_decisions": self.n_decisions, "decisions_sha256": self.decisions_sha256}

    @property
    def digest(self) -> str:
        return canonical_sha256({**self._pinned(), "n_events": self.n_events, "events_sha256": self.events_sha256})

    @property
    def token(self) -> str:
        return f"{self.n_raw}.{self.n_decisions}.{self.n_events}.{self.digest[:24]}"

    @property
    def legacy_token(self) -> str:
        """The token of the older form, which pins everything but events.jsonl."""
        return f"{self.n_raw}.{self.n_decisions}.{canonical_sha256(self._pinned())[:24]}"

    def record(self) -> FingerprintRecord:
        return {"token": self.token, **self._pinned(), "n_events": self.n_events,
                "events_sha256": self.events_sha256}


def is_legacy(token: str) -> bool:
    return LEGACY_TOKEN.fullmatch(token) is not None


def not_a_later_session(recorded: str, now: str) -> str | None:
    """Why the run as it is now (`now`) cannot be the run recorded as `recorded` plus later
    sessions, or None when it can be (or either token is of the older form, which has no events
    count). Every file of a run is append-only and every session appends its start and stop to
    events.jsonl, so a resume or a retry leaves no count smaller and the events' larger. Equal
    counts with another hash, or a count that shrank, is a log rewritten in place (re-chained,
    perhaps, so that `verify` alone passes)."""
    was, cur = TOKEN.fullmatch(recorded), TOKEN.fullmatch(now)
    if was is None or cur is None or recorded == now:
        return None
    names = ("attempts", "decisions", "events")
    before, after = [int(was[i]) for i in (1, 2, 3)], [int(cur[i]) for i in (1, 2, 3)]
    shrank = [f"{n} {b} -> {a}" for n, b, a in zip(names, before, after) if a < b]
    if shrank:
        return f"fingerprint {recorded} then, {now} now: the log is shorter ({', '.join(shrank)}); cut or rewritten"
    if after[2] == before[2]:
        return (f"fingerprint {recorded} then, {now} now, with no session since (events {before[2]} both times): "
                "the log was rewritten in place, not resumed")
    return None


def parse_token(text: str) -> str:
    """A fingerprint as given on the command line (surrounding space and a `fingerprint `
    prefix forgiven); InputError when it is not one."""
    t = text.strip().removeprefix("fingerprint").strip().lower()
    if not TOKEN.fullmatch(t) and not LEGACY_TOKEN.fullmatch(t):
        raise InputError("--expect: not a run fingerprint (expected ATTEMPTS.DECISIONS.EVENTS.24-HEX, as `guardeval "
                         "status` prints it)")
    return t


def run_fingerprint(folder: RunFolder, manifest: Mapping[str, object]) -> Fingerprint:
    """The fingerprint of the run as it is on disk: complete lines only (a torn last line,
    which `resume` moves aside, is not part of the log)."""
    n_raw, head = _raw_head(folder)
    n_dec, dec_sha = _complete_lines_sha256(folder, DECISIONS)
    n_ev, ev_sha = _complete_lines_sha256(folder, EVENTS)
    return Fingerprint(str(manifest.get("sha256")), n_raw, head, n_dec, dec_sha, n_ev, ev_sha)


def _complete_lines_sha256(folder: RunFolder, name: str) -> tuple[int, str]:
    """(number of complete lines, SHA-256 of their bytes) of a JSONL file of the run; (0, sha
    of nothing) when it does not exist."""
    h, n, pending = hashlib.sha256(), 0, b""
    fh = folder.reader(name)
    if fh is None:
        return 0, h.hexdigest()
    with fh:
        while chunk := fh.read(1 << 20):
            chunk = pending + chunk
            cut = chunk.rfind(b"\n") + 1
            h.update(chunk[:cut])
            n += chunk.count(b"\n", 0, cut)
            pending = chunk[cut:]
    return n, h.hexdigest()


def _raw_head(folder: RunFolder) -> tuple[int, str]:
    """(seq, SHA-256) of the last complete raw line, read from the end; (0, genesis) when the
    log is empty. The seq is the line's own field: the chain `verify` walks ties it to its place."""
    line = last_line(folder, RAW)
    if line is None:
        return 0, GENESIS
    return _seq(line, folder.file(RAW)), hashlib.sha256(line).hexdigest()


def last_line(folder: RunFolder, name: str) -> bytes | None:
    """The last complete line of a file of the run (without its newline), found by reading
    backwards from the end a block at a time: a torn tail after it is not a line. None when
    there is none (or no file). Neither the tail nor the line is read past the run's line cap."""
    nl = _last_newline(folder, name, folder.size(name))
    if nl < 0:
        return None
    before = _last_newline(folder, name, nl)
    return folder.pread(name, nl - before - 1, before + 1)


def _last_newline(folder: RunFolder, name: str, end: int) -> int:
    """The offset of the last newline before byte `end` (-1: none), at most `line_cap` back."""
    pos = end
    while pos > 0:
        if end - pos > folder.line_cap:
            raise CheckFailed(f"{folder.file(name)}: the last line is longer than {folder.line_cap} bytes "
                              "(damaged); `guardeval verify` names the problem")
        start = max(0, pos - _TAIL)
        at = folder.pread(name, pos - start, start).rfind(b"\n")
        if at >= 0:
            return start + at
        pos = start
    return -1


def _seq(line: bytes, path: Path) -> int:
    try:
        rec = orjson.loads(line)
    except orjson.JSONDecodeError:
        rec = None
    if isinstance(rec, dict) and type(rec.get("seq")) is int:
        return int(rec["seq"])
    raise CheckFailed(f"{path}: the last line has no seq (damaged); `guardeval verify` names the problem")
