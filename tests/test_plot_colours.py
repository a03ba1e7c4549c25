"""compare.html's and study.html's plots (issue 37, item 7): a guard keeps one colour in every plot
of a page (the pair plots and the leaderboard's dot plot), the paired difference takes none of
the guards' colours, and a long title wraps at spaces, never inside a hyphenated name."""

from __future__ import annotations

import pytest
from matplotlib.colors import to_hex
from test_compare_study import A_RATES, synthetic

from guardeval.estimators.compare.compare import CompareInput, compare_inputs
from guardeval.estimators.compare.compare_plot import COLOURS, leaderboard_figure, paired_figure

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
