"""Seeded stratified sampling of bases."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guardeval.cohorts.builders.sampling import stratified_sample

pytestmark = pytest.mark.fast


def _bases(sizes: dict[tuple[str, int], int]):
    out = []
    for (d, lab), n in sorted(sizes.items()):
        out += [{"base_id": f"{d}-{lab}-{i}", "domain": d, "label": lab} for i in range(n)]
    return out


def test_proportional_and_deterministic():
    bases = _bases({("a", 0): 60, ("a", 1): 20, ("b", 0): 15, ("b", 1): 5})
    s1 = stratified_sample(bases, 20, seed=3)
    assert s1 == stratified_sample(bases, 20, seed=3)
    assert Counter((b["domain"], b["label"]) for b in s1) == {("a", 0): 12, ("a", 1): 4, ("b", 0): 3, ("b", 1): 1}
    assert s1 != stratified_sample(bases, 20, seed=4)
    assert [b["base_id"] for b in s1] == [b["base_id"] for b in bases if b in s1]  # input order kept


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.tuples(st.sampled_from("abcd"), st.sampled_from([0, 1])), st.integers(1, 30), min_size=1),
       st.integers(1, 80), st.integers(0, 5))
def test_exact_size_no_duplicates_every_stratum(sizes, n, seed):
    bases = _bases(sizes)
    s = stratified_sample(bases, n, seed)
    assert len(s) == min(n, len(bases))
    assert len({b["base_id"] for b in s}) == len(s)
    if n >= len(sizes) and n < len(bases):
        assert {(b["domain"], b["label"]) for b in s} == set(sizes)
