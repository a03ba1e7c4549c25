"""Room to record answers, checked before a call is sent (docs/design.md §7).

An answer that cannot be logged has been paid for and is lost, so no attempt is sent unless
the run folder can take its raw line: the free space of its disk (`fstatvfs` of the folder's
descriptor, what this user may write: a folder renamed meanwhile, or a guard's `os.chdir`, does
not change which disk is asked) and, under a file-size limit (`ulimit -f`, `RLIMIT_FSIZE`), what `raw.jsonl` may
still grow by. An attempt's line is its request body plus room for the answer: twice the
largest answer this session has seen, at least 16 KiB, at most the config's
`max_response_bytes`.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass
from pathlib import Path

from guardeval.run.folder.folder import RunFolder
from guardeval.run.folder.layout import RAW

MIN_ANSWER_ROOM = 16 << 10
LINE_OVERHEAD = 2 << 10         # the raw line's other fields, its decision line, an event now and then


@dataclass
class Space:
    """What the run folder can take now, in bytes, and which bound binds."""

    disk: int                   # free on the disk, for this user
    file: int | None            # left under the file-size limit for raw.jsonl; None: no limit

    @property
    def room(self) -> int:
        return self.disk if self.file is None else min(self.disk, self.file)

    def describe(self, raw: Path, need: int) -> str:
        if self.file is not None and self.file <= self.disk:
            why = (f"{raw} may grow by {max(0, self.file):,} more bytes under the file-size limit "
                   "(ulimit -f)")
        else:
            why = f"{max(0, self.disk):,} bytes are free on the disk of {raw}: the disk is full"
        return (f"no room to record another answer: {why}, and a call needs about {need:,}; nothing was sent "
                "that could not be logged")


class Room:
    """Whether `n` more attempts of about `request_bytes` each fit in the run folder."""

    def __init__(self, folder: RunFolder, max_response_bytes: int) -> None:
        self.folder, self.raw = folder, folder.file(RAW)
        self.max_response_bytes = max_response_bytes
        self.largest_answer = 0

    def saw_answer(self, size: int) -> None:
        self.largest_answer = max(self.largest_answer, size)

    def per_attempt(self, request_bytes: int) -> int:
        answer = min(self.max_response_bytes, max(MIN_ANSWER_ROOM, 2 * self.largest_answer))
        return request_bytes + answer + LINE_OVERHEAD

    def space(self) -> Space:
        disk = self.folder.free_space()
        soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
        if soft == resource.RLIM_INFINITY:
            return Space(disk, None)
        return Space(disk, soft - self.folder.size(RAW))

    def shortfall(self, n: int, request_bytes: int) -> str | None:
        """None when `n` attempts fit; else why not, for the stop message."""
        need = n * self.per_attempt(request_bytes)
        space = self.space()
        if space.room >= need:
            return None
        return space.describe(self.raw, self.per_attempt(request_bytes))
