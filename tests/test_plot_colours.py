"""compare.html's and study.html's plots (issue 37, item 7): a guard keeps one colour in every plot
of a page (the pair plots and the leaderboard's dot plot), the paired difference takes none of
the guards' colours, and a long title wraps at spaces, never inside a hyphenated name."""

from __future__ import annotations

import pytest
from matplotlib.colors import to_hex

from guardeval.estimators.compare.compare import CompareInput, compare_inputs
from guardeval.estimators.compare.compare_plot import COLOURS, leaderboard_figure, paired_figure
from test_compare_study import A_RATES, synthetic

pytestmark = pytest.mark.fast


def _colours(fig, label: str) -> set[str]:
    """The colours of the markers a figure draws under `label` (its legend's entries)."""
    return {to_hex(line.get_color()) for ax in fig.axes for line in ax.get_lines() if line.get_label() == label}


@pytest.fixture(scope="module")
def three():
    rates_b = {**A_RATES, "alias": 0.7}
    rates_c = {**A_RATES, "marker": 0.5}
    inputs = [CompareInput("shortcut", synthetic(A_RATES, 1)), CompareInput("robust", synthetic(rates_b, 2)),
              CompareInput("alias-sensitive", synthetic(rates_c, 3))]
    return compare_inputs(inputs, n_boot=100)


def test_a_guard_has_one_colour_in_every_plot_of_a_page(three):
    board = leaderboard_figure(three, "t")
    seen: dict[str, set[str]] = {label: _colours(board, label) for label in ("shortcut", "robust", "alias-sensitive")}
    for pair in three["pairs"]:
        fig = paired_figure(three, pair, "t")
        for key in ("a", "b"):
            seen[pair[key]] |= _colours(fig, pair[key])
        difference = _colours(fig, "B − A (paired)")
        assert difference and not difference & set(COLOURS), difference
    assert all(len(c) == 1 for c in seen.values()), seen
    assert len({next(iter(c)) for c in seen.values()}) == 3, seen     # and the guards' colours differ


def test_a_long_plot_title_wraps_at_spaces_only(three):
    title = "x" * 85 + " alias-sensitive: answered by alias-sensitive; run 2026"
    fig = paired_figure(three, three["pairs"][0], title)
    lines = fig._suptitle.get_text().split("\n")
    assert len(lines) > 1
    assert not any(line.endswith("-") for line in lines), lines
    assert lines[1].startswith("alias-sensitive:"), lines


def _page_colours(result) -> dict[str, set[str]]:
    """Each guard's colours over every plot of a page built from `result` (compare.html and
    study.html draw the same two kinds of figure from a `compare_inputs` result)."""
    labels = [i["label"] for i in result["inputs"]]
    figs = [leaderboard_figure(result, "t")] + [paired_figure(result, pair, "t") for pair in result["pairs"]]
    return {label: set().union(*(_colours(f, label) for f in figs)) for label in labels}


def test_a_guard_keeps_its_colour_whatever_the_order_of_the_inputs():
    """compare's inputs (and a study's --guard flags, which become its comparison's inputs and the
    A/B sides of its pairs) in two orders: every guard keeps its colour, and the guards' differ."""
    rates = {"shortcut": A_RATES, "robust": {**A_RATES, "alias": 0.7}, "alias-sensitive": {**A_RATES, "marker": 0.5}}
    tables = {label: synthetic(r, seed) for seed, (label, r) in enumerate(rates.items(), 1)}
    seen = []
    for order in (("shortcut", "robust", "alias-sensitive"), ("alias-sensitive", "shortcut", "robust")):
        seen.append(_page_colours(compare_inputs([CompareInput(x, tables[x]) for x in order], n_boot=50)))
    # A study of two guards: its one pair, with A and B swapped when the --guard flags are.
    for order in (("shortcut", "robust"), ("robust", "shortcut")):
        seen.append(_page_colours(compare_inputs([CompareInput(x, tables[x]) for x in order], n_boot=50)))
    for page in seen:
        assert all(len(c) == 1 for c in page.values()), page
        assert len({next(iter(c)) for c in page.values()}) == len(page), page
    assert seen[0] == seen[1], seen[:2]
    assert seen[2] == seen[3], seen[2:]
    assert seen[2] == {k: seen[0][k] for k in seen[2]}, (seen[0], seen[2])   # and across pages


def test_guards_whose_hashes_collide_still_differ_and_in_any_order():
    from itertools import permutations

    from guardeval.estimators.compare.compare_plot import _slot, guard_colours

    names = [f"guard-{i}" for i in range(40)]
    first = names[0]
    clash = [n for n in names[1:] if _slot(n) == _slot(first)][:2]
    assert clash, "no two of 40 labels share a slot of 8"
    page = [first, *clash, "other"]
    colours = {tuple(p): guard_colours(p) for p in permutations(page)}
    assert len({tuple(sorted(c.items())) for c in colours.values()}) == 1, colours
    one = next(iter(colours.values()))
    assert len(set(one.values())) == len(page), one
    eight = guard_colours(names[:8])
    assert sorted(eight.values()) == sorted(COLOURS), eight     # eight guards: all eight colours
