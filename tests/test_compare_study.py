"""`compare` of two or more guards (issue 20): the placebo-corrected difference as the headline,
equivalence and MDE, the leaderboard and the ranking stability, on synthetic tables built to
give known effects, and the CLI's refusals (exit 2, nothing written)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import kendalltau

from guardeval.cli import main
from guardeval.estimators import estimate
from guardeval.estimators.compare.compare import CompareInput, compare_inputs
from guardeval.estimators.compare.ranking import kendall_tau_b
from guardeval.estimators.verdicts.decisions import verdict_text
from guardeval.estimators.verdicts.power import mde

pytestmark = pytest.mark.slow

CONDITIONS = ("original", "alias", "marker", "format_placebo")


def synthetic(rates: dict[str, float], seed: int, n_inter: int = 24, reps: int = 2,
              labelled: bool = True) -> list[dict]:
    """Complete table (no failed or quarantined call): n_inter interactions in two domains, two
    bases each; every call of condition c blocks with probability rates[c]."""
    rng = np.random.default_rng(seed)
    rows = []
    for g in range(n_inter):
        for j in range(2):
            base = f"b{g:02d}-{j}"
            for c in CONDITIONS:
                for r in range(reps):
                    rows.append({"base_id": base, "interaction_id": f"g{g:02d}", "domain": "D" + str(g % 2),
                                 "condition": c, "repetition": r, "status": "ok",
                                 "decision": int(rng.random() < rates[c]),
                                 "label": (g + j) % 2 if labelled else None})
    return rows


A_RATES = {"original": 0.3, "alias": 0.5, "marker": 0.3, "format_placebo": 0.35}
B_RATES = {"original": 0.3, "alias": 0.35, "marker": 0.6, "format_placebo": 0.3}
C_RATES = {"original": 0.5, "alias": 0.5, "marker": 0.5, "format_placebo": 0.5}


def _row(pair: dict, condition: str) -> dict:
    return next(r for r in pair["conditions"] if r["condition"] == condition)


def test_corrected_difference_is_the_difference_of_the_estimates():
    a, b = synthetic(A_RATES, 1), synthetic(B_RATES, 2)
    ea, eb = estimate(a, n_boot=200), estimate(b, n_boot=200)
    out = compare_inputs([CompareInput("A", a), CompareInput("B", b)], n_boot=500, seed=3)
    assert out["placebo"] == "format_placebo" and out["headline"] == "difference_minus_placebo"
    pair = out["pairs"][0]
    for ca in ea["contrasts"]:
        cb = next(x for x in eb["contrasts"] if x["condition"] == ca["condition"])
        r = _row(pair, ca["condition"])
        assert r["difference"] == pytest.approx(cb["delta"] - ca["delta"], abs=1e-9)
        if ca["condition"] == "format_placebo":
            assert r["difference_minus_placebo"] is None and not r["in_family_minus_placebo"]
        else:
            assert r["difference_minus_placebo"] == pytest.approx(
                cb["delta_minus_placebo"] - ca["delta_minus_placebo"], abs=1e-9)
    # The corrected family is the interventions: Holm over two, not three.
    ps = [_row(pair, c)["p_difference_minus_placebo"] for c in ("alias", "marker")]
    adj = [_row(pair, c)["p_holm_minus_placebo"] for c in ("alias", "marker")]
    assert max(adj) == pytest.approx(max(min(1, 2 * min(ps)), max(ps)))
    assert out["family_minus_placebo"] == ["alias", "marker"]


def test_a_table_compared_with_itself_is_within_the_margin():
    a = synthetic(A_RATES, 1)
    out = compare_inputs([CompareInput("A", a), CompareInput("A again", a)], n_boot=300)
    # No variation in 24 interactions is not certainty (issue 35): the interval is the exact
    # binomial bound on the share of interactions that could differ, ±(1 − 0.05^(1/24)), and at
    # that size "within ±0.05" cannot be shown (the 90% bound is ±0.091).
    u = 1 - 0.05 ** (1 / 24)
    for r in out["pairs"][0]["conditions"]:
        assert r["difference"] == 0 and r["ci_difference"] == pytest.approx([-u, u])
        assert "no variation observed in 24 interactions" in r["equivalence"]["ci_note"]
        assert r["equivalence"]["verdict"] == "inconclusive" and r["p_difference"] == 1.0
    big = synthetic(A_RATES, 1, n_inter=96)     # 0.5·0.95^96 per side, Holm over 3: 0.011
    out = compare_inputs([CompareInput("A", big), CompareInput("A again", big)], n_boot=300)
    assert all(r["equivalence"]["verdict"] == "within ±0.05" for r in out["pairs"][0]["conditions"])


def test_equivalence_verdicts_and_mde():
    assert verdict_text(True, False, 0.05) == "differs from 0"
    assert verdict_text(False, True, 0.05) == "within ±0.05"
    assert verdict_text(True, True, 0.05) == "differs from 0, within ±0.05"
    assert verdict_text(False, False, 0.05) == "inconclusive"
    assert verdict_text(None, None, 0.05) == "not tested (outside the family)"
    report = estimate(synthetic(A_RATES, 1), n_boot=400, margin=0.1)
    assert report["margin"] == 0.1
    for c in report["contrasts"]:
        eq = c["equivalence"]
        assert eq["margin"] == 0.1 and eq["holm_m"] == 3
        # t-based at the quantity's degrees of freedom (interactions minus domains)
        assert eq["mde"] == pytest.approx(mde(eq["se"], df=eq["df"]))
        assert eq["mde_holm"] == pytest.approx(mde(eq["se"], 0.05 / 3, df=eq["df"]))
        # The verdict is the Holm decision in the family, and never contradicts the interval.
        assert eq["differs"] == (c["p_holm"] < 0.05)
        if eq["differs"]:
            assert c["ci"][0] > 0 or c["ci"][1] < 0
        assert eq["ci90"][0] >= c["ci"][0] and eq["ci90"][1] <= c["ci"][1]
        if c["condition"] == "format_placebo":
            assert c["equivalence_minus_placebo"] is None
        else:
            assert c["equivalence_minus_placebo"]["holm_m"] == 2


def test_three_guards_leaderboard_and_ranking_stability():
    tables = [synthetic(A_RATES, 1), synthetic(B_RATES, 2), synthetic(C_RATES, 3)]
    out = compare_inputs([CompareInput(x, t) for x, t in zip("ABC", tables)], n_boot=1000, seed=1)
    assert [(p["a"], p["b"]) for p in out["pairs"]] == [("A", "B"), ("A", "C"), ("B", "C")]
    # One Holm family per condition over the three pairs' corrected differences.
    rows = [_row(p, "marker") for p in out["pairs"]]
    ps = sorted(r["p_difference_minus_placebo"] for r in rows)
    assert min(r["p_holm_across_pairs_minus_placebo"] for r in rows) == pytest.approx(min(1, 3 * ps[0]))
    board = out["leaderboard"]
    assert set(board) == set(CONDITIONS)
    for entries in board.values():
        assert [e["label"] for e in entries] == ["A", "B", "C"]
        rates = [e["block_rate"] for e in entries]
        assert sorted(e["rank"]["block_rate"] for e in entries) == sorted(1 + sum(o > r for o in rates) for r in rates)
        assert all(e["accuracy"] is not None and e["row_f1"] is not None for e in entries)
    for c, s in out["ranking_stability"]["by_condition"].items():
        xs = [e["block_rate"] for e in board["original"]]
        ys = [e["block_rate"] for e in board[c]]
        expected = kendalltau(xs, ys).statistic
        assert (s["kendall_tau"] is None) == bool(np.isnan(expected))
        if s["kendall_tau"] is not None:
            assert s["kendall_tau"] == pytest.approx(expected)
            assert s["kendall_tau_ci"][0] <= s["kendall_tau_ci"][1]
        for r in s["reversed_pairs"]:
            x, y = r["guards"]
            assert ((board["original"][ord(x) - 65]["block_rate"] - board["original"][ord(y) - 65]["block_rate"])
                    * (board[c][ord(x) - 65]["block_rate"] - board[c][ord(y) - 65]["block_rate"])) < 0
            pair = next(p for p in out["pairs"] if (p["a"], p["b"]) == (x, y))
            assert r["difference_of_differences"] == pytest.approx(_row(pair, c)["difference"])
        assert s["ranking_changed"] == any(r["p_holm"] < 0.05 for r in s["reversed_pairs"])


def test_kendall_tau_matches_scipy_with_ties():
    rng = np.random.default_rng(0)
    for _ in range(300):
        n = int(rng.integers(2, 7))
        x, y = rng.integers(0, 3, n).astype(float), rng.integers(0, 3, n).astype(float)
        got, want = kendall_tau_b(x[None], y[None])[0], kendalltau(x, y).statistic
        assert (np.isnan(got) and np.isnan(want)) or got == pytest.approx(want)


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    try:
        code = main(list(args))
    except SystemExit as exc:
        code = int(exc.code or 0)
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_tables_through_the_cli_and_bad_input(tmp_path, capsys):
    ta = _write(tmp_path / "a.jsonl", synthetic(A_RATES, 1))
    tb = _write(tmp_path / "b.jsonl", synthetic(B_RATES, 2))
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    code, out, err = _cli(capsys, "compare", "--table", str(ta), "--table", str(tb), "--json", "--bootstrap", "200",
                          "--out", str(out_dir), "--margin", "0.1")
    assert code == 0, err
    res = json.loads(out)
    assert [i["label"] for i in res["inputs"]] == ["a.jsonl", "b.jsonl"] and res["margin"] == 0.1
    assert sorted(p.name for p in out_dir.iterdir()) == ["compare.html", "compare.md", "compare.png"]
    md = (out_dir / "compare.md").read_text()
    assert "B − A of the placebo-corrected effect" in md and "## Leaderboard" in md and "Kendall τ" in md
    code, out, err = _cli(capsys, "compare", "--table", str(ta), "--table", str(tb), "--bootstrap", "100",
                          "--label", "haiku", "--label", "luna")
    assert code == 0 and "A = haiku, B = luna" in out
    empty = tmp_path / "nothing"
    empty.mkdir()
    bad = [
        (["--table", str(ta)], "at least two inputs"),
        (["--table", str(ta), "--table", str(tb), "--margin", "0"], "margin"),
        (["--table", str(ta), "--table", str(tb), "--margin", "1"], "margin"),
        (["--table", str(ta), "--table", str(tb), "--placebo", "nope"], "placebo"),
        (["--table", str(ta), "--table", str(tb), "--baseline", "nope"], "baseline"),
        (["--table", str(ta), "--table", str(tb), "--label", "x"], "--label"),
    ]
    for args, word in bad:
        code, out, err = _cli(capsys, "compare", *args, "--bootstrap", "50", "--out", str(empty))
        assert code == 2 and out == "" and word in err and "Traceback" not in err, (args, err)
    # A base only one table has: named.
    other = synthetic(B_RATES, 2)
    other = [{**r, "base_id": "zz-extra"} if r["base_id"] == "b23-1" else r for r in other]
    tc = _write(tmp_path / "c.jsonl", other)
    code, out, err = _cli(capsys, "compare", "--table", str(ta), "--table", str(tc), "--bootstrap", "50",
                          "--out", str(empty))
    assert code == 2 and "'b23-1'" in err and "c.jsonl" in err
    # A placebo one input lacks.
    no_pl = _write(tmp_path / "d.jsonl", [r for r in synthetic(B_RATES, 2) if r["condition"] != "format_placebo"])
    code, out, err = _cli(capsys, "compare", "--table", str(ta), "--table", str(no_pl), "--bootstrap", "50",
                          "--placebo", "format_placebo", "--out", str(empty))
    assert code == 2 and "format_placebo" in err and "d.jsonl" in err
    assert list(empty.iterdir()) == []


# ---------------------------------------------------------------- three simulated guards, real runs

@pytest.fixture(scope="module")
def three_runs(tmp_path_factory, small_cohort) -> dict[str, Path]:
    """One schedule answered by three simulated guards (three sim servers with their own seeds):
    a launch and two replicates."""
    from guardeval.backends.sim import SimServerProcess

    from conftest import cli_env, run_cli, write_guard

    root = tmp_path_factory.mktemp("three")
    servers = [SimServerProcess(["--seed", str(s)], env=cli_env()).start() for s in (7, 8, 9)]
    try:
        guards = [write_guard(root / f"{n}.toml", s.base_url, name=f"sim-{n}") for n, s in zip("abc", servers)]
        runs = {n: root / n for n in "abc"}
        r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guards[0]), "--reps", "2", "--seed", "3",
                    "--run-dir", str(runs["a"]), "--no-progress")
        assert r.code == 0, r.err
        for n, g in zip("bc", guards[1:]):
            r = run_cli("replicate", str(runs["a"]), "--guard", str(g), "--run-dir", str(runs[n]), "--no-progress")
            assert r.code == 0, r.err
    finally:
        for s in servers:
            s.stop()
    return runs


def test_three_simulated_guards_leaderboard_and_ranking(three_runs, tmp_path):
    from conftest import run_cli

    out_dir = tmp_path / "cmp"
    out_dir.mkdir()
    r = run_cli("compare", *(str(three_runs[n]) for n in "abc"), "--json", "--bootstrap", "400", "--out", str(out_dir))
    assert r.code == 0, r.err
    assert r.err.count("verified before comparing") == 3
    res = json.loads(r.out)
    assert [i["label"] for i in res["inputs"]] == ["sim-a", "sim-b", "sim-c"]
    assert [(p["a"], p["b"]) for p in res["pairs"]] == [("sim-a", "sim-b"), ("sim-a", "sim-c"), ("sim-b", "sim-c")]
    assert res["placebo"] == "format_placebo"
    conds = ["original", "format_placebo", "marker_rewrite", "tool_alias", "combined"]
    assert list(res["leaderboard"]) == conds
    assert all(len(v) == 3 and all("row_f1" in e for e in v) for v in res["leaderboard"].values())
    assert list(res["ranking_stability"]["by_condition"]) == conds[1:]
    for pair in res["pairs"]:
        for row in pair["conditions"]:
            if row["condition"] != "format_placebo":
                assert row["difference_minus_placebo"] == pytest.approx(
                    row["delta_minus_placebo_b"] - row["delta_minus_placebo_a"], abs=1e-9)
                assert row["equivalence_minus_placebo"]["verdict"] is not None
    # The sim servers' seeds differ, so the guards' decisions differ.
    assert len({json.dumps(p["conditions"][0]["difference"]) for p in res["pairs"]}) > 1
    assert sorted(p.name for p in out_dir.iterdir()) == ["compare.html", "compare.md", "compare.png", "leaderboard.png"]
    html = (out_dir / "compare.html").read_text()
    assert "<h2>Leaderboard</h2>" in html and "<h2>Ranking stability</h2>" in html and "Kendall τ" in html
    assert html.count("data:image/svg+xml;base64,") == 4   # three pairs and the dot plot
    assert "<script" not in html
    for name in ("compare.png", "leaderboard.png"):
        assert (out_dir / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # A run's table given as --table gives the run's numbers (item 5); its label is its file name.
    from guardeval.run.runtable import load_run_table

    rows = load_run_table(three_runs["c"]).rows
    table = _write(tmp_path / "c.jsonl", rows)
    r2 = run_cli("compare", str(three_runs["a"]), str(three_runs["b"]), "--table", str(table), "--json",
                 "--bootstrap", "400")
    assert r2.code == 0, r2.err
    mixed = json.loads(r2.out)
    assert [i["label"] for i in mixed["inputs"]] == ["sim-a", "sim-b", "c.jsonl"]
    for c in conds:
        assert ([e["block_rate"] for e in mixed["leaderboard"][c]] == [e["block_rate"] for e in res["leaderboard"][c]])
        if c != "original":
            got, want = mixed["ranking_stability"]["by_condition"][c], res["ranking_stability"]["by_condition"][c]
            assert (got["kendall_tau"], got["kendall_tau_ci"]) == (want["kendall_tau"], want["kendall_tau_ci"])
            assert ([r["difference_of_differences"] for r in got["reversed_pairs"]]
                    == [r["difference_of_differences"] for r in want["reversed_pairs"]])


def _overlaps(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def check_compare_figure(fig) -> None:
    """The title is inside the figure, and no p_Holm label lies on a data panel (issue 19, 5.9)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    box = fig.bbox
    title = fig._suptitle.get_window_extent(renderer)
    assert box.x0 <= title.x0 and title.x1 <= box.x1, (title, box)
    data_axes = [ax for ax in fig.axes if ax.axison]
    texts = [t for ax in fig.axes for t in ax.texts if "p_Holm" in t.get_text()]
    assert texts
    for t in texts:
        for ax in data_axes:
            assert not _overlaps(t.get_window_extent(renderer), ax.bbox), t.get_text()


def test_compare_png_keeps_its_title_and_p_values_clear():
    from guardeval.estimators.compare.compare_plot import paired_figure

    a = synthetic(A_RATES, 1)
    long = "a-guard-with-a-rather-long-name-for-a-plot-title"
    out = compare_inputs([CompareInput(long, a), CompareInput(long + "-replicate", a)], n_boot=100)
    title = (f"guardeval compare · A {long} (vendor/model-name-v1), run 20261201T194101Z-{long}-61bf9a · "
             f"B {long}-replicate (vendor/model-name-v2), run 20261201T194105Z-{long}-655c8d")
    fig = paired_figure(out, out["pairs"][0], title)
    check_compare_figure(fig)
    assert fig._suptitle.get_text().replace("\n", " ").endswith("655c8d")   # run B's id is all there


def test_one_pass_summary_equals_the_separate_functions():
    from guardeval.estimators.bootstrap import bootstrap_p, bootstrap_se, percentile_ci, summarise, tost_p

    rng = np.random.default_rng(5)
    for _ in range(20):
        s = rng.normal(rng.normal(0, 0.05), 0.04, int(rng.integers(2, 3000)))
        s[rng.random(len(s)) < 0.05] = np.nan
        for df in (None, float(rng.integers(1, 300))):
            got = summarise(s, 0.05, df)
            assert got == {"ci": percentile_ci(s, df=df), "ci90": percentile_ci(s, 0.90, df), "p": bootstrap_p(s, df),
                           "se": bootstrap_se(s), "p_tost": tost_p(s, 0.05, df), "df": df}


def test_reports_carry_the_verdict_column_and_sentences(tmp_path, capsys):
    from guardeval.estimators.report.presentation import presentation
    from guardeval.estimators.report.report import headline_sentences, markdown
    from guardeval.view.tables import contrasts_table, in_words

    report = estimate(synthetic(A_RATES, 1), n_boot=300)
    md, html = markdown(report), contrasts_table(presentation(report)) + in_words(presentation(report))
    for c in report["contrasts"]:
        eq = c["equivalence_minus_placebo"] or c["equivalence"]
        assert f"{eq['verdict']}; MDE {eq['mde']:.4f}" in md
    said = headline_sentences(report)
    assert len(said) == len(report["contrasts"]) and all("Detectable with 80% power" in x for x in said)
    assert md.count("Detectable with 80% power") == len(report["contrasts"])
    assert html.count("Detectable with 80% power") == len(report["contrasts"]) and "verdict; MDE" in html
    # Labels are outside text: escaped in compare.html.
    ta = _write(tmp_path / "a.jsonl", synthetic(A_RATES, 1))
    tb = _write(tmp_path / "b.jsonl", synthetic(B_RATES, 2))
    code, out, err = _cli(capsys, "compare", "--table", str(ta), "--table", str(tb), "--bootstrap", "50",
                          "--label", "<b>x</b>", "--label", "\x1b[2Jy", "--out", str(tmp_path))
    assert code == 0, err
    page = (tmp_path / "compare.html").read_text()
    assert "<b>x</b>" not in page and "&lt;b&gt;x&lt;/b&gt;" in page
    assert "\x1b" not in out


def test_without_a_placebo_only_delta_is_compared():
    strip = lambda rows: [r for r in rows if r["condition"] != "format_placebo"]  # noqa: E731
    out = compare_inputs([CompareInput("A", strip(synthetic(A_RATES, 1))), CompareInput("B", strip(synthetic(B_RATES, 2)))],
                         n_boot=100)
    assert out["placebo"] is None and out["family_minus_placebo"] == []
    for r in out["pairs"][0]["conditions"]:
        assert r["difference"] is not None and r["difference_minus_placebo"] is None
        assert r["p_holm"] is not None and r["p_holm_minus_placebo"] is None and r["equivalence_minus_placebo"] is None


def test_report_rechecks_an_estimate_made_with_another_margin(three_runs, tmp_path):
    """report.json records --margin with its other options, so `guardeval report` makes the same
    estimate again (without it, the re-check used 0.05 and called a 0.2-margin report forged)."""
    import shutil

    from conftest import run_cli

    run = tmp_path / "a"
    shutil.copytree(three_runs["a"], run)
    est = run_cli("estimate", str(run), "--bootstrap", "200", "--margin", "0.2")
    assert est.code == 0, est.err
    report = json.loads((run / "report.json").read_text())
    assert report["margin"] == 0.2 and report["source"]["options"]["margin"] == 0.2
    r = run_cli("report", str(run))
    assert r.code == 0, r.err
