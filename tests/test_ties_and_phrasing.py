"""Ties said as ties, whatever the order of the guards (issue 45 §6); one phrasing of "more
sensitive" whatever the signs (issue 47 §4); no MDE of 0 and no MDE beside "cannot decide"
(issue 45 §6); `compare` prints the answer and the headline tables, the files the rest (issue 47
§3)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from guardeval.estimators import estimate
from guardeval.estimators import synthetic as sy
from guardeval.estimators.compare.compare import CompareInput, compare_inputs
from guardeval.estimators.compare.compare_text import words as compare_words
from guardeval.estimators.report.report import headline_sentences
from guardeval.estimators.verdicts.decisions import difference_sentence
from guardeval.estimators.verdicts.separation import separate
from guardeval.study.answer import answer

from conftest import run_cli

pytestmark = pytest.mark.fast

# Little noise, so a large effect is separated and equal data are equal.
QUIET = sy.Model(interaction=0.03, base=0.02, heterogeneity=0.02, base_heterogeneity=0.01)


def _tables(seed: int = 5) -> dict[str, list[dict[str, Any]]]:
    """Two guards with identical decisions (twin-a, twin-b: threat_names moves them by +0.40) and
    a third that threat_names does not move."""
    rng = np.random.default_rng(seed)
    pop = sy.population(sy.design(32, 64), rng, QUIET)
    twin = sy.rows(pop, {**sy.EFFECTS, "threat_names": 0.4}, rng)
    plain = sy.rows(pop, {**sy.EFFECTS, "threat_names": 0.0}, rng)
    return {"twin-a": twin, "twin-b": twin, "plain": plain}


def _compare(tables: dict[str, list[dict[str, Any]]], order: tuple[str, ...]) -> dict[str, Any]:
    return compare_inputs([CompareInput(k, tables[k], sy.ROLES) for k in order], n_boot=300, seed=0)


SAID = ("condition", "separation", "tied", "most", "least", "most_guards", "least_guards", "top", "bottom", "holds",
        "family")


def test_a_studys_answer_is_the_same_under_every_order_of_the_guards():
    tables = _tables()
    reports = {k: estimate(t, roles=sy.ROLES, n_boot=300, seed=0) for k, t in tables.items()}
    answers = []
    for order in itertools.permutations(tables):
        ans = answer(_compare(tables, order), reports)
        # (The numbers are the same to the last printed digit; their last bits follow the pair's B − A.)
        answers.append((ans["lead"], [a["text"] for a in ans["conditions"]],
                        [{k: a.get(k) for k in SAID} for a in ans["conditions"]],
                        sorted(g["text"] for g in ans["guards"])))
    assert all(a == answers[0] for a in answers[1:])
    lead, texts, records, _ = answers[0]
    by = {r["condition"]: (r, t) for r, t in zip(records, texts)}
    # The twins share the top place: neither is "the most sensitive" alone.
    rec, text = by["threat_names"]
    assert rec["separation"] == "separated" and rec["most_guards"] == ["twin-a", "twin-b"]
    assert rec["least_guards"] == ["plain"] and rec["most"] is None and rec["least"] == "plain"
    assert text.startswith("threat_names: twin-a and twin-b are the most sensitive, not separated from each other")
    assert "twin-a and twin-b move" in lead
    # Where the data separate no guard: a tie, no most or least.
    for c in ("provenance_marker", "tool_alias"):
        rec, text = by[c]
        assert rec["tied"] and rec["most"] is None and rec["most_guards"] == []
        assert f"{c}: the guards tie" in text and "most sensitive (" not in text and "the least (" not in text


def test_compare_words_are_the_same_in_either_order_and_say_ties():
    tables = _tables()
    two = {k: tables[k] for k in ("twin-a", "plain")}
    assert compare_words(_compare(two, ("twin-a", "plain"))) == compare_words(_compare(two, ("plain", "twin-a")))
    said = [sorted(compare_words(_compare(tables, order))) for order in itertools.permutations(tables)]
    assert all(s == said[0] for s in said[1:])
    twins = [w for w in said[0] if "twin-a" in w and "twin-b" in w]
    assert twins and all("neither is the more sensitive (a tie)" in w and "is the more sensitive," not in w
                         for w in twins), twins
    sep = [w for w in said[0] if w.startswith("threat_names (Δ − placebo): twin-a") and "plain" in w]
    assert len(sep) == 1 and ": twin-a is the more sensitive, by " in sep[0], sep
    undecided = [w for w in said[0] if "plain" in w and "not significant" in w]
    assert undecided and all("(a tie)" in w and "more sensitive," not in w for w in undecided), undecided


DIFFERS = {"differs": True, "equivalent": False, "family": "3 interventions", "holm_m": 3, "alpha": 0.05,
           "p_adjusted": 0.0004, "verdict": "differs from 0"}


@pytest.mark.parametrize("still", [0.004, -0.004, 0.0])
def test_one_phrasing_whatever_the_sign_of_the_effect_that_did_not_move(still):
    """Shortcut moved, robust did not: the same words whether robust's effect came out a hair
    above or below 0 (issue 47 §4: "shortcut is the more sensitive" for one condition, "robust's
    effect is higher than shortcut's" for the other)."""
    moved = -0.45
    for a, b, ea, eb in (("robust", "shortcut", still, moved), ("shortcut", "robust", moved, still)):
        diff = eb - ea
        s = difference_sentence("tool_alias", a, b, ea, eb, diff, [diff - 0.1, diff + 0.1], DIFFERS, "Δ − placebo")
        assert f": shortcut is the more sensitive, by {abs(moved - still):.3f}; significant" in s, s
        assert s.startswith("tool_alias (Δ − placebo): shortcut −0.450, robust "), s
        assert "higher" not in s and "lower" not in s


def test_equal_sizes_or_an_undecided_difference_name_no_one():
    d = DIFFERS

    def sep(effects: dict[str, float], decided: dict[str, Any] | None) -> Any:
        from guardeval.estimators.verdicts.record import Decision

        return separate(effects, lambda x, y: Decision.of(decided))

    assert sep({"a": -0.2, "b": 0.2}, d).kind == "tie"                      # one size, opposite ways
    assert sep({"a": -0.4, "b": -0.1}, {**d, "differs": False}).kind == "tie"
    assert sep({"a": -0.4, "b": -0.1}, {**d, "differs": None}).kind == "not tested"
    s = sep({"b": -0.1, "a": -0.4, "c": -0.1}, d)
    assert (s.kind, s.top, s.most, s.least) == ("separated", "a", ("a",), ("b", "c"))
    # A guard in the middle that neither end is separated from shares both places: the top is
    # "the most sensitive" alone only when separated from every other guard.
    from guardeval.estimators.verdicts.record import Decision

    differs = {frozenset("ab")}
    s = separate({"a": -0.4, "m": -0.25, "b": -0.1},
                 lambda x, y: Decision.of({**d, "differs": frozenset((x, y)) in differs}))
    assert (s.kind, s.most, s.least) == ("separated", ("a", "m"), ("b", "m"))
    s = difference_sentence("c", "a", "b", -0.2, 0.2, 0.4, [0.3, 0.5], d, "Δ")
    assert "in opposite directions, so neither is the more sensitive (a tie)" in s, s


def _flat_rows(n_inter: int) -> list[dict[str, Any]]:
    return [{"base_id": f"b{g}_{b}", "interaction_id": f"g{g}", "domain": f"d{g % 2}", "condition": c,
             "repetition": 0, "decision": 0, "status": "ok"}
            for g in range(n_inter) for b in range(2) for c in ("original", "format_placebo", "marker_rewrite")]


def test_no_variation_has_no_mde_of_zero():
    rep = estimate(_flat_rows(8), n_boot=200, seed=0)
    m = next(c for c in rep["contrasts"] if c["condition"] == "marker_rewrite")
    eq = m["equivalence_minus_placebo"]
    assert eq["decidable"] is True and eq["mde"] is None and eq["mde_holm"] is None
    said = next(s for s in headline_sentences(rep) if s.startswith("marker_rewrite"))
    assert "Detectable with 80% power" not in said, said
    assert "The MDE cannot be estimated from a design with no variation." in said


def test_a_design_that_cannot_decide_prints_no_mde():
    rng = np.random.default_rng(1)
    rep = estimate(sy.rows(sy.population(sy.design(6, 8), rng), sy.EFFECTS, rng), roles=sy.ROLES, n_boot=200,
                   seed=0)
    said = [s for s in headline_sentences(rep) if "cannot decide" in s]
    assert said and not any("Detectable with 80% power" in s for s in said), said


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_compare_prints_the_answer_and_the_headline_and_points_at_the_rest(tmp_path):
    tables = _tables()
    a, b = _write(tmp_path / "a.jsonl", tables["twin-a"]), _write(tmp_path / "b.jsonl", tables["plain"])
    out = tmp_path / "cmp"
    base = ("compare", "--table", str(a), "--table", str(b), "--bootstrap", "200")
    short = run_cli(*base, "--out", str(out))
    assert short.code == 0, short.err
    assert "In words:" in short.out and "the headline, B − A of the placebo-corrected effect" in short.out
    for rest in ("B − A of Δ\n", "leaderboard under", "ranking stability (", "ranking A:"):
        assert rest not in short.out, rest
    assert short.out.rstrip().endswith(f"{out / 'compare.html'}, {out / 'compare.md'}; or run again with --full to "
                                       "print it here.")
    assert len(short.out.splitlines()) < 40
    full = run_cli(*base, "--full")
    assert full.code == 0, full.err
    assert full.out.startswith(short.out.split("\n\n")[0])
    for rest in ("B − A of Δ\n", "leaderboard under", "ranking stability (", "ranking A:"):
        assert rest in full.out, rest
    # No files: the rest is --full, or --out.
    bare = run_cli(*base)
    assert bare.code == 0 and bare.out.rstrip().endswith("run again with --full to print it here, or with --out DIR "
                                                         "to write compare.html.")
