"""The decision record (issue 38 §3): one frozen value per (quantity, member), built from the
family's decision, that the star, the verdict cell and the words read."""

from __future__ import annotations

import dataclasses

import pytest

from guardeval.api.results import estimate_record
from guardeval.estimators.verdicts.decisions import decide_family, effect_sentence, significant
from guardeval.estimators.verdicts.equivalence import equivalence
from guardeval.estimators.verdicts.record import Decision, headline_decision, headline_significant, short

pytestmark = pytest.mark.fast


def _family() -> list:
    # Three members: one far from 0, one at 0, one undefined (it still counts in m).
    far = {"estimate": -0.4, "p": 0.0001, "p_tost": 0.9, "se": 0.04, "df": 60, "p_min": 0.0}
    null = {"estimate": 0.0, "p": 0.9, "p_tost": 0.001, "se": 0.01, "df": 60, "p_min": 0.0}
    recs = [equivalence(far, 0.05, 3), equivalence(null, 0.05, 3), None]
    decide_family(recs, "3 interventions")
    return recs


def test_a_decision_is_read_once_from_its_family() -> None:
    far, null, _ = _family()
    d = Decision.of(far)
    assert d is not None and dataclasses.is_dataclass(d)
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.starred = False  # type: ignore[misc]
    assert (d.family, d.size, d.alpha, d.outcome, d.differs, d.starred) == ("3 interventions", 3, 0.05, "differs", True, True)
    assert d.p_adjusted == far["p_adjusted"] and d.verdict == far["verdict"] == "differs from 0"
    e = Decision.of(null)
    assert e is not None and e.outcome == "equivalent" and not e.starred and e.verdict == "within ±0.05"
    # The surfaces' helpers are reads of the record.
    assert significant(far) is d.starred and short(Decision.of(far)) == d.short and short(None) == "—"
    assert d.words in effect_sentence("tool_alias", "g", -0.4, [-0.5, -0.3], far, "against the baseline original")
    assert Decision.of(None) is None


def test_the_placebo_row_is_decided_but_never_starred() -> None:
    far, _, _ = _family()
    row = {"condition": "format_placebo", "headline": "placebo", "equivalence": far, "equivalence_minus_placebo": None}
    d = headline_decision(row)
    assert d is not None and d.differs and not d.starred and not headline_significant(row)
    other = {**row, "condition": "tool_alias", "headline": "delta"}
    assert headline_significant(other) and headline_decision(other).starred  # type: ignore[union-attr]
    # The API's star is the same record's.
    base = {"role": "placebo", "in_family": True, "delta": -0.4, "ci": [-0.5, -0.3], "p": 0.0001, "p_holm": 0.0003,
            "delta_minus_placebo": None, "ci_minus_placebo": None, "p_minus_placebo": None, "increase": 0,
            "decrease": 9, "tie": 1, "n_bases": 10, "block_rate": 0.1}
    report = {"contrasts": [{**base, **row}, {**base, **other, "role": "intervention"}], "baseline": "original",
              "placebo": "format_placebo", "failure_rule": "drop", "n_calls": 30, "n_bases": 10, "complete": True,
              "publishable": True, "quarantine": {"count": 0}, "block_rate": {}, "notes": []}
    effects = estimate_record(report).effects
    stars = {e.condition: (e.starred, e.significant) for e in effects}
    assert stars == {"format_placebo": (False, False), "tool_alias": (True, True)}
    # Each of a row's decisions carries the star only where the table puts it: the placebo's Δ
    # differs from 0 and is not starred; an intervention's headline (here Δ: no corrected effect) is.
    by = {e.condition: e for e in effects}
    assert by["format_placebo"].verdict.differs and not by["format_placebo"].verdict.starred  # type: ignore[union-attr]
    assert by["tool_alias"].verdict.starred  # type: ignore[union-attr]


def test_the_apis_decision_is_the_estimators_record() -> None:
    # One type, not a hand-mapped copy: what `guardeval.api` returns is the record every surface reads.
    import orjson

    from guardeval import api

    assert api.Decision is Decision
    far, _, _ = _family()
    d = api.Decision.of(far)
    assert d is not None and d.to_dict()["p_adjusted"] == far["p_adjusted"]
    # Nested in an API record, it comes out as plain data too.
    c = {"condition": "tool_alias", "role": "intervention", "in_family": True, "delta": -0.4, "ci": [-0.5, -0.3],
         "p": 0.0001, "p_holm": 0.0003, "delta_minus_placebo": None, "ci_minus_placebo": None,
         "p_minus_placebo": None, "increase": 0, "decrease": 30, "tie": 34, "n_bases": 64, "block_rate": 0.2,
         "equivalence": far, "equivalence_minus_placebo": None, "headline": "delta"}
    effect = api.Effect(**{k: v for k, v in c.items() if k not in ("equivalence", "equivalence_minus_placebo",
                                                                     "headline", "ci")},
                        ci=None, verdict=api.Decision.of(far), verdict_minus_placebo=None, starred=True)
    data = effect.to_dict()
    assert data["verdict"]["verdict"] == far["verdict"] and orjson.loads(orjson.dumps(data)) == data


def test_the_record_costs_the_commands_that_only_read_it_no_numpy() -> None:
    # The API's types name the record; `guardeval status` and `verify` import them, and must not
    # load numpy and scipy with it (their memory bound: tests/test_run_folder.py's 300 MB line).
    import subprocess
    import sys

    from conftest import cli_env

    code = "import sys, guardeval.api.types; print(sorted({'numpy', 'scipy'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], env=cli_env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr
