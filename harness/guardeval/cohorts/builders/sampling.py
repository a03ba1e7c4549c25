"""Seeded stratified sampling of bases (`--max-bases N --seed S`)."""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, TypeVar

B = TypeVar("B", bound=Mapping[str, Any])   # a builder's base (cohorts/model.Base)


def stratified_sample(bases: Sequence[B], n: int, seed: int,
                      key: Callable[[B], Hashable] = lambda b: (b["domain"], b["label"])
                      ) -> list[B]:
    """`n` bases drawn without replacement, allocated to strata in proportion to their size.

    Allocation is largest-remainder (ties broken by stratum order, deterministic), each stratum
    gets at least one base while n allows, and the result keeps the input order, so the same
    (bases, n, seed) always yields the same cohort.
    """
    if n >= len(bases):
        return list(bases)
    strata: dict[Hashable, list[int]] = defaultdict(list)
    for idx, b in enumerate(bases):
        strata[key(b)].append(idx)
    keys = sorted(strata, key=repr)
    total = len(bases)
    quota = {k: n * len(strata[k]) / total for k in keys}
    alloc = {k: int(quota[k]) for k in keys}
    floor = 1 if n >= len(keys) else 0  # every stratum represented while n allows
    for k in keys:
        alloc[k] = max(alloc[k], floor)
    # Hand out what is left by largest remainder; trim any excess from the largest strata.
    for k in sorted(keys, key=lambda k: (-(quota[k] - int(quota[k])), repr(k))):
        if sum(alloc.values()) >= n:
            break
        if alloc[k] < len(strata[k]):
            alloc[k] += 1
    while sum(alloc.values()) > n:
        k = max((k for k in keys if alloc[k] > floor), key=lambda k: (alloc[k] - quota[k], repr(k)))
        alloc[k] -= 1
    while sum(alloc.values()) < n:
        k = max((k for k in keys if alloc[k] < len(strata[k])), key=lambda k: (quota[k] - alloc[k], repr(k)))
        alloc[k] += 1
    rng = random.Random(seed)
    chosen: list[int] = []
    for k in keys:
        chosen.extend(rng.sample(strata[k], alloc[k]))
    return [bases[i] for i in sorted(chosen)]
