"""The retry part of a session (`resume --retry-failed`; docs/design.md §6, "Retries").

On every open of a run that has been retried (or is about to be), the retries' final raw lines
whose decisions a crash lost are decided from the log (`supersede.recover`), before anything is
sent: an answer logged is never paid for twice. Then, with `--retry-failed`, the calls whose live
decision has one of the given statuses become this session's targets; their attempt numbers go
on from their last logged attempt.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from guardeval.errors import WriteFailed
from guardeval.run.folder import supersede
from guardeval.run.folder.folder import RunFolder
from guardeval.run.folder.layout import EVENTS
from guardeval.run.folder.records import Decision
from guardeval.run.folder.writer import RunWriter
from guardeval.run.schedule import ScheduleRow


@dataclass
class RetrySession:
    recovered: int = 0                                   # retry decisions re-derived from the log
    targets: supersede.Targets | None = None             # None: no --retry-failed
    rounds: dict[int, int] = field(default_factory=dict)  # this session's targets by retry round

    @property
    def n_targets(self) -> int:
        return len(self.targets.calls) if self.targets is not None else 0


def prepare(folder: RunFolder, writer: RunWriter, statuses: tuple[str, ...] | None,
            derive: Callable[[dict[str, Any], str, dict[str, str]], Decision],
            stimuli_for: Callable[[set[str]], dict[str, str]]) -> RetrySession:
    """Recover lost retry decisions and, when `statuses` is given, choose the targets.
    `derive(raw record, line sha256, expected request hashes)` is `decide` with the run's parser."""
    session = RetrySession()
    if statuses is None and not supersede.retried_before(folder):
        return session   # never retried: no retry's answer can be waiting for its decision
    writer.flush()       # decisions recovered just before are in the file the ledger reads
    led = supersede.read_ledger(folder)
    hist = supersede.histories(folder, led.failed)
    expected: dict[str, str] | None = None

    def derive_one(rec: dict[str, Any], line_sha: str) -> Decision:
        nonlocal expected
        if expected is None:
            expected = stimuli_for(set(led.failed))
        return derive(rec, line_sha, expected)

    session.recovered = supersede.recover(folder, led, hist, derive_one, writer.append_decision)
    if statuses is not None:
        session.targets = supersede.targets(led, statuses)
        session.rounds = session.targets.by_round()
        for cid in session.targets.calls:
            writer.state.attempts[cid] = hist[cid].attempts if cid in hist else 0
    return session


def record_start(folder: RunFolder, writer: RunWriter, session: RetrySession) -> None:
    """The `retry` event, synced before any retry is sent: a later plain `resume` looks for
    lost retry decisions only in a run that has one (`supersede.retried_before`), so it must
    outlast a power loss that the retries' synced raw lines outlast."""
    assert session.targets is not None
    writer.event("retry", statuses=list(session.targets.statuses), calls=session.n_targets,
                 rounds={str(k): v for k, v in session.rounds.items()})
    try:
        fd = folder.open_update(EVENTS)
        if fd is not None:
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    except OSError as exc:
        raise WriteFailed(folder.file(EVENTS), exc, "No retry was sent.") from None


def with_targets(rows: Iterable[ScheduleRow], targets: supersede.Targets) -> Iterator[ScheduleRow]:
    """The targets' schedule rows, each carrying the live decision its new one will supersede."""
    for row in rows:
        live = targets.calls.get(row["call_id"])
        if live is not None:
            row["supersedes"] = live
            yield row
