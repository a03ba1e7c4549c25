"""Seeded, shuffled schedule of base x condition x repetition calls (docs/design.md §5).

The schedule is guard-independent: it names instances by `instance_sha256`, so a replicate
on another guard (even with another prompt) carries it byte-identical.
"""

from __future__ import annotations

import random
from array import array
from collections.abc import Iterator
from typing import TYPE_CHECKING, NotRequired, TypedDict

from guardeval.canon import canonical_sha256
from guardeval.cohorts.model import Cohort

if TYPE_CHECKING:
    from guardeval.run.folder.supersede import Live



class ScheduledCall(TypedDict):
    """Which call: the fields every record of one scheduled call carries (the schedule's line, the
    run table's row, the call browser's row), declared once here."""

    call_id: str
    base_id: str
    interaction_id: str
    domain: str
    condition: str
    repetition: int


class ScheduleRow(ScheduledCall):
    """One line of schedule.jsonl: a call, in dispatch order. As the runner hands it to the
    dispatcher it also carries the call's request hash (stimuli.jsonl's) and, in a retry, the live
    decision its new one supersedes."""

    index: int
    instance_sha256: str
    request_sha256: NotRequired[str]
    supersedes: NotRequired[Live]


ORDERS = ("rounds", "shuffled")
# Recorded in the manifest; Python's random.shuffle on a Mersenne Twister seeded with the int.
ALGORITHM = {"rounds": "rounds-v1/python-random-mt19937-shuffle",
             "shuffled": "shuffled-v1/python-random-mt19937-shuffle"}


def call_id_for(seed: int, base_id: str, condition: str, repetition: int, instance_sha256: str) -> str:
    """Deterministic call id: independent of time, counters and the guard."""
    return canonical_sha256(["guardeval-call-v1", seed, base_id, condition, repetition, instance_sha256])[:32]


def iter_schedule(cohort: Cohort, *, reps: int, seed: int, order: str = "rounds") -> Iterator[ScheduleRow]:
    """The schedule, one row at a time, in dispatch order (nothing of size n_calls is held).

    The random draws are exactly those of the list-building version (`ALGORITHM` names them),
    so a schedule is byte-identical however it is produced.
    """
    cells = iter_cells(cohort.base_ids, cohort.condition_names, reps=reps, seed=seed, order=order)
    for index, (b, c, rep) in enumerate(cells):
        key = cohort.key_fields(b, c)
        yield {
            "index": index,
            "call_id": call_id_for(seed, b, c, rep, key.instance_sha256),
            "base_id": b, "interaction_id": key.interaction_id, "domain": key.domain,
            "condition": c, "repetition": rep, "instance_sha256": key.instance_sha256,
        }


def iter_cells(bases: list[str], conds: list[str], *, reps: int, seed: int,
               order: str = "rounds") -> Iterator[tuple[str, str, int]]:
    """(base, condition, repetition) of each call, in dispatch order."""
    if order not in ORDERS:
        raise ValueError(f"unknown order {order!r}")
    rng = random.Random(seed)
    return (_rounds if order == "rounds" else _shuffled)(rng, bases, conds, reps)


def _rounds(rng: random.Random, bases: list[str], conds: list[str], reps: int) -> Iterator[tuple[str, str, int]]:
    """For each round, shuffle the bases, and the conditions inside each base."""
    for rep in range(reps):
        round_bases = list(bases)
        rng.shuffle(round_bases)
        for b in round_bases:
            round_conds = list(conds)
            rng.shuffle(round_conds)
            for c in round_conds:
                yield b, c, rep


def _shuffled(rng: random.Random, bases: list[str], conds: list[str], reps: int) -> Iterator[tuple[str, str, int]]:
    """All calls shuffled together. The permutation is drawn on cell numbers (8 bytes a call in
    an array, not a list of tuples): `shuffle` makes the same draws whatever it permutes, so
    the order is that of shuffling the list `[(b, c, rep) for rep for b for c]`."""
    nb, nc = len(bases), len(conds)
    perm = array("q", range(reps * nb * nc))
    rng.shuffle(perm)
    for k in perm:
        rep, rest = divmod(k, nb * nc)
        b, c = divmod(rest, nc)
        yield bases[b], conds[c], rep
