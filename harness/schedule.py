"""Seeded, shuffled schedule of base x condition x repetition calls (DESIGN §5).

The schedule is guard-independent: it names instances by `instance_sha256`, so a replicate
on another guard (even with another prompt) carries it byte-identical.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Iterator

from harness.canon import canonical_sha256, dumps_line, sha256_hex
from harness.cohort import Cohort

ORDERS = ("rounds", "shuffled")
# Recorded in the manifest; Python's random.shuffle on a Mersenne Twister seeded with the int.
ALGORITHM = {"rounds": "rounds-v1/python-random-mt19937-shuffle",
             "shuffled": "shuffled-v1/python-random-mt19937-shuffle"}
SCHEDULE_FIELDS = ("index", "call_id", "base_id", "interaction_id", "domain", "condition", "repetition",
                   "instance_sha256")


def call_id_for(seed: int, base_id: str, condition: str, repetition: int, instance_sha256: str) -> str:
    """Deterministic call id: independent of time, counters and the guard."""
    return canonical_sha256(["guardeval-call-v1", seed, base_id, condition, repetition, instance_sha256])[:32]


def build_schedule(cohort: Cohort, *, reps: int, seed: int, order: str = "rounds") -> list[dict[str, Any]]:
    if order not in ORDERS:
        raise ValueError(f"unknown order {order!r}")
    rng = random.Random(seed)
    bases = cohort.base_ids
    conds = cohort.condition_names
    cells: list[tuple[str, str, int]] = []
    if order == "rounds":
        for rep in range(reps):
            round_bases = list(bases)
            rng.shuffle(round_bases)
            for b in round_bases:
                round_conds = list(conds)
                rng.shuffle(round_conds)
                cells.extend((b, c, rep) for c in round_conds)
    else:
        cells = [(b, c, rep) for rep in range(reps) for b in bases for c in conds]
        rng.shuffle(cells)
    rows = []
    for index, (b, c, rep) in enumerate(cells):
        inst = cohort.instance(b, c)
        rows.append({
            "index": index,
            "call_id": call_id_for(seed, b, c, rep, inst["instance_sha256"]),
            "base_id": b, "interaction_id": inst["interaction_id"], "domain": inst["domain"],
            "condition": c, "repetition": rep, "instance_sha256": inst["instance_sha256"],
        })
    return rows


def schedule_bytes(rows: list[dict[str, Any]]) -> bytes:
    return b"".join(dumps_line(r) for r in rows)


def write_schedule(path: Path, rows: list[dict[str, Any]]) -> str:
    data = schedule_bytes(rows)
    path.write_bytes(data)
    return sha256_hex(data)


def read_schedule(path: Path) -> Iterator[dict[str, Any]]:
    from harness.store import iter_jsonl  # the store owns line-level checks

    for _, _, row in iter_jsonl(path):
        yield row
