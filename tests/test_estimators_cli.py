"""`guardeval estimate` / `compare` through real subprocesses: exit codes, `--json` purity,
report files, and real runs against the simulated provider on 127.0.0.1."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from guardeval.backends.sim import SimServerProcess
from guardeval.cli import main
from test_estimators_effects import hand_rows

from conftest import cli_env, run_cli, write_guard

pytestmark = pytest.mark.fast

CONTRAST_KEYS = {"condition", "delta", "ci", "p", "p_holm", "delta_minus_placebo", "ci_minus_placebo",
                 "increase", "decrease", "tie", "n_bases", "n_clusters", "by_rule"}
TOP_KEYS = {"n_bases", "n_calls", "baseline", "placebo", "failure_rule", "block_rate", "repeat_disagreement",
            "coverage", "quarantine", "contrasts", "accuracy", "strata", "flip_rate", "components", "bootstrap"}


def cli(capsys, *args: str) -> tuple[int, str, str]:
    """In-process `guardeval ...` (the subprocess path is exercised by the tests that use run_cli)."""
    try:
        code = main(list(args))
    except SystemExit as exc:  # argparse usage errors
        code = int(exc.code or 0)
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def write_table(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def table(tmp_path) -> Path:
    return write_table(tmp_path / "decisions.jsonl", hand_rows())


@pytest.mark.slow
def test_table_json_is_pure_and_complete(table, tmp_path):
    r = run_cli("estimate", "--table", str(table), "--json", "--bootstrap", "300", "--seed", "4",
                "--allow-unpublishable", cwd=tmp_path)
    assert r.code == 0, r.err
    out = json.loads(r.out)  # the whole of stdout is one JSON object
    assert TOP_KEYS <= set(out)
    assert {"count", "fraction", "publishable", "by_reason"} <= set(out["quarantine"])
    for c in out["contrasts"]:
        assert CONTRAST_KEYS <= set(c)
        assert set(c["by_rule"]) == {"drop", "fail-closed", "fail-open"}
    assert {c["condition"] for c in out["contrasts"]} == {"alias", "format_placebo"}
    alias = next(c for c in out["contrasts"] if c["condition"] == "alias")
    assert alias["delta"] == pytest.approx(1 / 24)  # a proportion, not percentage points
    assert out["bootstrap"]["n"] == 300 and out["bootstrap"]["seed"] == 4
    assert set(out["coverage"]["alias"]) >= {"expected", "valid", "failed"}
    assert set(out["accuracy"]["alias"]) >= {"row_f1", "interaction_f1", "row_balanced_accuracy",
                                             "interaction_balanced_accuracy"}
    # For a table, report files go only where --out says: nothing next to the table or in cwd.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["decisions.jsonl"]


def test_unpublishable_exits_1_unless_allowed(table, tmp_path, capsys):
    code, out, err = cli(capsys, "estimate", "--table", str(table), "--json", "--bootstrap", "50")
    assert code == 1
    assert json.loads(out)["quarantine"]["publishable"] is False
    assert "not publishable" in err
    # Failed calls count against the same limit (issue 45): a table with neither is publishable.
    clean = [{**r, "status": "ok", "decision": 0 if r["decision"] is None else r["decision"]}
             for r in hand_rows(with_quarantine=False)]
    ok = write_table(tmp_path / "ok.jsonl", clean)
    assert cli(capsys, "estimate", "--table", str(ok), "--bootstrap", "50")[0] == 0
    failing = write_table(tmp_path / "failing.jsonl", hand_rows(with_quarantine=False))
    code, out, err = cli(capsys, "estimate", "--table", str(failing), "--json", "--bootstrap", "50")
    assert code == 1 and json.loads(out)["excluded"]["quarantined"] == 0 and "failed and 0 quarantined" in err


def test_out_dir_gets_three_files_and_human_table(table, tmp_path, capsys):
    out_dir = tmp_path / "rep"
    code, out, err = cli(capsys, "estimate", "--table", str(table), "--out", str(out_dir), "--bootstrap", "200",
                         "--allow-unpublishable", "--failures", "fail-open")
    assert code == 0, err
    assert "condition" in out and "alias" in out and "fail-closed" in out
    assert "+0.083" in out  # the fail-open headline delta of alias, 1/12 (three decimals in the terminal)
    report = json.loads((out_dir / "report.json").read_text())
    assert report["failure_rule"] == "fail-open"
    assert "| alias |" in (out_dir / "report.md").read_text()
    assert (out_dir / "effects.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_partial_table_refused_unless_allowed(tmp_path, capsys):
    rows = hand_rows(with_quarantine=False)
    rows.append({**rows[0], "repetition": 9, "decision": None, "status": "missing"})
    t = write_table(tmp_path / "partial.jsonl", rows)
    code, out, err = cli(capsys, "estimate", "--table", str(t), "--json", "--bootstrap", "50")
    assert code == 1 and out == "" and "incomplete" in err
    code, out, err = cli(capsys, "estimate", "--table", str(t), "--json", "--bootstrap", "50", "--allow-partial",
                         "--allow-unpublishable")   # its failed calls are past the 2% limit
    assert code == 0 and json.loads(out)["complete"] is False


@pytest.mark.parametrize("args, needle", [
    (["--family", "alias,nope"], "family"),
    (["--baseline", "nope"], "baseline"),
    (["--placebo", "nope"], "placebo"),
    (["--bootstrap", "0"], "bootstrap"),
    (["--failures", "maybe"], "failures"),
])
def test_bad_options_exit_2(table, args, needle, capsys):
    code, out, err = cli(capsys, "estimate", "--table", str(table), "--json", *args)
    assert code == 2 and out == "" and needle in err


def test_bad_row_exit_2_names_file_line_field(tmp_path, capsys):
    rows = hand_rows()
    rows[4]["decision"] = 7
    t = write_table(tmp_path / "bad.jsonl", rows)
    r = run_cli("estimate", "--table", str(t), "--json")
    assert r.code == 2 and r.out == ""
    assert str(t) in r.err and "line 5" in r.err and "'decision'" in r.err and "Traceback" not in r.err
    assert cli(capsys, "estimate", str(tmp_path), "--table", str(t))[0] == 2  # both a run and a table
    assert cli(capsys, "estimate", str(tmp_path / "nowhere"))[0] == 2


# ---------------------------------------------------------------- real runs

@pytest.fixture(scope="module")
def runs(tmp_path_factory, small_cohort) -> dict[str, Path]:
    """A (clean), B (a replicate on a drifting provider: >2% quarantined), C (another schedule)."""
    root = tmp_path_factory.mktemp("runs")
    clean = SimServerProcess(["--seed", "7"], env=cli_env()).start()
    drift = SimServerProcess(["--seed", "8", "--faults", "drift=0.1"], env=cli_env()).start()
    try:
        g = write_guard(root / "g.toml", clean.base_url)
        g2 = write_guard(root / "g2.toml", drift.base_url)
        runs = {k: root / k for k in "ABC"}
        r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(g), "--reps", "2", "--seed", "3",
                    "--run-dir", str(runs["A"]), "--no-progress")
        assert r.code == 0, r.err
        r = run_cli("replicate", str(runs["A"]), "--guard", str(g2), "--run-dir", str(runs["B"]), "--no-progress")
        assert r.code == 0, r.err
        r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(g), "--reps", "2", "--seed", "4",
                    "--run-dir", str(runs["C"]), "--no-progress")
        assert r.code == 0, r.err
    finally:
        clean.stop()
        drift.stop()
    return runs


@pytest.mark.slow
def test_estimate_run_writes_reports_into_run_folder(runs, capsys, tmp_path):
    r = run_cli("estimate", str(runs["A"]), "--json", "--bootstrap", "500")
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert out["n_calls"] == 16 * 5 * 2 and out["n_bases"] == 16
    assert out["baseline"] == "original" and out["placebo"] == "format_placebo"
    assert [c["condition"] for c in out["contrasts"]] == ["format_placebo", "marker_rewrite", "tool_alias", "combined"]
    assert out["source"]["run_id"]
    for name in ("report.json", "report.md", "effects.png"):
        assert (runs["A"] / name).is_file()
    assert json.loads((runs["A"] / "report.json").read_text()) == out
    # --out DIR: the same reports in a folder of the user's (a read-only run's way out), the run untouched.
    before = (runs["A"] / "report.json").read_bytes()
    code, out, err = cli(capsys, "estimate", str(runs["A"]), "--out", str(tmp_path / "elsewhere"), "--bootstrap", "500",
                         "--json")
    assert code == 0, err
    assert json.loads((tmp_path / "elsewhere" / "report.json").read_text()) == json.loads(out)
    assert (runs["A"] / "report.json").read_bytes() == before


@pytest.mark.slow
def test_run_carries_start_times_tools_and_scores(runs):
    from guardeval.run.folder.folder import RunFolder
    from guardeval.run.folder.lines import iter_jsonl
    from guardeval.run.runtable import load_run_table

    table = load_run_table(runs["A"])
    folder = RunFolder(runs["A"])
    raw = {rec["seq"]: rec for _, _, rec in iter_jsonl(folder, "raw.jsonl")}
    decisions = {rec["call_id"]: rec for _, _, rec in iter_jsonl(folder, "decisions.jsonl")}
    for row in table.rows:
        final = raw[decisions[row["call_id"]]["raw_seq"]]
        assert row["started"] == final["started"] and final["call_id"] == row["call_id"]
        assert row["score"] == decisions[row["call_id"]]["score"]
    cohort = {(r["base_id"], r["condition"]): r for r in
              (json.loads(x) for x in (runs["A"] / "cohort" / "instances.jsonl").read_text().splitlines())}
    # the base's tool is its tool under the baseline, also on the rows of the tool_alias condition
    assert all(r["tool"] == cohort[(r["base_id"], "original")]["tool"] for r in table.rows)
    r = run_cli("estimate", str(runs["A"]), "--json", "--bootstrap", "300")
    out = json.loads(r.out)
    assert out["order"]["n_calls"] == 160 and sum(t["n_calls"] for t in out["order"]["thirds"]) == 160
    assert set(out["order"]["by_dispatch_third"]) == {"format_placebo", "marker_rewrite", "tool_alias", "combined"}
    alias = next(c for c in out["contrasts"] if c["condition"] == "tool_alias")
    assert alias["leave_one_tool_out"]["n_tools"] > 1
    assert out["accuracy"]["original"]["auc"]["row"] is not None   # the sim guard reports a score
    assert out["notes"] == []   # the cohort names its placebo by role
    md = (runs["A"] / "report.md").read_text()
    for heading in ("## Stability", "## Order", "## Accuracy", "## Worst case over representations",
                    "## Contrast diagnostics", "## Block rates"):
        assert heading in md


@pytest.mark.slow
def test_quarantined_run_is_unpublishable(runs, capsys):
    r = run_cli("estimate", str(runs["B"]), "--json", "--bootstrap", "200")
    out = json.loads(r.out)
    assert out["quarantine"]["by_reason"]["provider_drift"] > 0
    assert out["quarantine"]["fraction"] > 0.02 and out["quarantine"]["publishable"] is False
    assert r.code == 1
    assert cli(capsys, "estimate", str(runs["B"]), "--bootstrap", "200", "--allow-unpublishable")[0] == 0


@pytest.mark.slow
def test_compare_replicate_and_refuse_other_schedule(runs, capsys):
    r = run_cli("compare", str(runs["A"]), str(runs["B"]), "--json", "--bootstrap", "500",
                "--allow-unpublishable")
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert len(out["conditions"]) == 4
    for row in out["conditions"]:
        assert {"delta_a", "ci_a", "delta_b", "ci_b", "difference", "ci_difference", "p_difference"} <= set(row)
    assert isinstance(out["ranking_changed"], bool) and len(out["ranking_a"]) == 4
    for pair in out["reversed_pairs"]:
        assert {"conditions", "difference_of_differences", "ci", "p", "p_holm"} <= set(pair)
    assert out["ranking_changed"] == any(p["p_holm"] < 0.05 for p in out["reversed_pairs"])
    code, text, _ = cli(capsys, "compare", str(runs["A"]), str(runs["B"]), "--bootstrap", "200",
                        "--allow-unpublishable", "--full")
    assert code == 0 and "ranking changed: " in text
    # The rankings' reversals (the guards' order under each condition has its own, "order under …").
    ranking_reversals = [ln for ln in text.splitlines() if "reversed in the estimates: " in ln and "order in A p" in ln]
    assert len(ranking_reversals) == len(out["reversed_pairs"])
    assert cli(capsys, "compare", str(runs["A"]), str(runs["B"]), "--bootstrap", "50")[0] == 1  # B quarantined
    code, out, err = cli(capsys, "compare", str(runs["A"]), str(runs["C"]), "--json")
    assert code == 2 and out == "" and "schedule.jsonl" in err and "differ from line 1" in err
    # A run compared with an exact copy of itself: every difference is exactly 0 in every replicate.
    # (The same folder twice is refused: tests/test_first_hour.py.)
    copy = runs["A"].parent / "A-copy"
    if not copy.exists():
        shutil.copytree(runs["A"], copy)
    code, out, err = cli(capsys, "compare", str(runs["A"]), str(copy), "--json", "--bootstrap", "100")
    same = json.loads(out)
    # no variation is bounded, never a zero-width interval (issue 35)
    assert all(row["difference"] == 0 and row["ci_difference"][0] < 0 < row["ci_difference"][1]
               for row in same["conditions"])
    assert same["ranking_changed"] is False
    # --out that is a file is refused before the runs are read: no result on stdout.
    code, out, err = cli(capsys, "compare", str(runs["A"]), str(copy), "--json", "--bootstrap", "50",
                         "--out", str(runs["A"] / "manifest.json"))
    assert code == 2 and out == "" and "not a folder" in err and "verified" not in err
    # --out that does not exist yet is made, once the comparison holds (issue 30).
    code, out, err = cli(capsys, "compare", str(runs["A"]), str(copy), "--json", "--bootstrap", "50",
                         "--out", str(runs["A"].parent / "new" / "cmp"))
    assert code == 0 and (runs["A"].parent / "new" / "cmp" / "compare.html").is_file()
    # Both runs are checked before comparing, and the message says so.
    code, out, err = cli(capsys, "compare", str(runs["A"]), str(copy), "--json", "--bootstrap", "50")
    assert code == 0 and err.count("verified before comparing") == 2


def test_missing_option_and_placebo_note(tmp_path, capsys):
    from test_estimators_diagnostics import missing_rows

    t = write_table(tmp_path / "m.jsonl", missing_rows())
    args = ["estimate", "--table", str(t), "--json", "--bootstrap", "50", "--allow-partial", "--failures", "fail-closed",
            "--allow-unpublishable"]
    code, out, err = cli(capsys, *args)
    assert code == 0 and json.loads(out)["contrasts"][0]["delta"] == pytest.approx(1 / 12)
    # no placebo: said once, on stderr (stdout stays pure JSON)
    assert err.count("note: no placebo") == 1
    code, out, err = cli(capsys, *args, "--missing", "as-failure")
    assert code == 0 and json.loads(out)["contrasts"][0]["delta"] == pytest.approx(1 / 6)
    assert json.loads(out)["missing"] == "as-failure"
    assert cli(capsys, *args, "--missing", "maybe")[0] == 2
