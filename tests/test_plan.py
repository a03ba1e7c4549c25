"""`guardeval plan`: variance components from a pilot, predicted SE and MDE per design, cost as
`launch --dry-run` projects it, the target, bad input (docs/estimators.md, Planning a design)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from guardeval.estimators import estimate
from guardeval.estimators.bootstrap import bootstrap_ratios, cluster_sums
from guardeval.estimators.planning.plan import decompose, plan_rows
from guardeval.estimators.planning.plan_sim import TwoPoint, simulate, structure
from guardeval.estimators.verdicts.power import mde

from conftest import DEMO_COHORT, cli_env, run_cli, write_guard

pytestmark = pytest.mark.fast

MODEL = TwoPoint(q=0.4, theta=0.1, a=0.1, b=0.15)
WIDE = TwoPoint(q=0.4, theta=0.1, a=0.15, b=0.2)   # between-base variance half the pilot's total


def _sizes(per_domain: int, pattern: tuple[int, ...] = (1, 2, 3, 2), domains: int = 4) -> list[list[int]]:
    return [[pattern[i % len(pattern)] for i in range(per_domain)] for _ in range(domains)]


def synthetic_rows(model: TwoPoint, sizes: list[list[int]], reps: int, seed: int) -> list[dict]:
    """A decision table with known structure: the baseline and the placebo block at q, the
    condition `alias` at q + θ + u_g + v_i (plan_sim.TwoPoint); every call decided."""
    cluster, domain = structure(sizes)
    rng = np.random.default_rng(seed)
    sim = simulate(model, cluster, domain, reps, rng)
    base_s = rng.binomial(reps, model.q, size=len(cluster))
    rows = []
    for i, g in enumerate(cluster):
        for cond, blocks in (("original", base_s[i]), ("format_placebo", sim.s_k[i]), ("alias", sim.s_c[i])):
            decisions = [1] * int(blocks) + [0] * (reps - int(blocks))
            rng.shuffle(decisions)
            for r, dec in enumerate(decisions):
                rows.append({"base_id": f"b{i:05d}", "interaction_id": f"g{g:05d}", "domain": f"d{domain[g]}",
                             "condition": cond, "repetition": r, "decision": int(dec), "status": "ok",
                             "label": None})
    return rows


def _write_table(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# ----------------------------------------------------------------------------- the decomposition

def test_decomposition_recovers_known_components() -> None:
    """200 data sets of 1,200 bases (600 interactions, 3 repetitions) from a model with known
    components: each component's mean estimate lies within 4 Monte-Carlo standard errors
    (sd/√200, measured from the same data sets) of the truth, and so does the predicted SE."""
    sizes = _sizes(150, pattern=(1, 2, 3))
    cluster, domain = structure(sizes)
    flat = [s for d in sizes for s in d]
    rng = np.random.default_rng(11)
    est = []
    for _ in range(200):
        c = decompose(simulate(MODEL, cluster, domain, 3, rng))
        est.append((c.between_interactions, c.between_bases, c.within_base, c.se(c.n_bases, 3), c.se(4 * c.n_bases, 1)))
    arr = np.array(est)
    kappa = sum(s * s for s in flat) / sum(flat)
    truth = [MODEL.a ** 2, MODEL.b ** 2, MODEL.within, MODEL.se(flat, 3),
             math.sqrt((kappa * MODEL.a ** 2 + MODEL.b ** 2 + MODEL.within) / (4 * sum(flat)))]
    mcse = arr.std(axis=0, ddof=1) / math.sqrt(len(arr))
    for name, m, t, s in zip(("sigma2_G", "sigma2_B", "sigma2_W", "SE pilot", "SE 4x bases 1 rep"),
                             arr.mean(axis=0), truth, mcse):
        assert abs(m - t) < 4 * s, f"{name}: mean estimate {m:.5f}, truth {t:.5f}, Monte-Carlo s.e. {s:.5f}"


def test_decomposition_through_a_table_matches_arrays() -> None:
    """plan_rows on a validated table gives the components of the arrays it was built from, and
    one large table lands near the truth (within 4 of its own sampling SDs, from the test above's
    design scaled: SD of each component measured on 100 simulated tables)."""
    sizes = _sizes(200, pattern=(1, 2, 3))
    rows = synthetic_rows(MODEL, sizes, 4, seed=5)
    plan = plan_rows(rows, bases=[100], reps=[1])
    comp = {(c["quantity"], c["condition"]): c for c in plan["components"]}
    alias = comp[("corrected", "alias")]
    cluster, domain = structure(sizes)
    rng = np.random.default_rng(99)
    sims = np.array([[getattr(decompose(simulate(MODEL, cluster, domain, 4, rng)), f)
                      for f in ("between_interactions", "between_bases", "within_base")] for _ in range(100)])
    sd = sims.std(axis=0, ddof=1)
    for f, t, s in zip(("between_interactions", "between_bases", "within_base"),
                       (MODEL.a ** 2, MODEL.b ** 2, MODEL.within), sd):
        assert abs(alias[f] - t) < 4 * s, (f, alias[f], t, s)
    # the placebo and the baseline share one rate: Δ of the placebo has no between-base component
    assert comp[("delta", "format_placebo")]["estimate"] == pytest.approx(0, abs=0.05)
    assert plan["holm_m"] == {"corrected": 1, "delta": 2}


def test_predicted_se_of_the_pilot_design_is_the_bootstrap_se_of_estimate() -> None:
    """The pilot's own design: the predicted SE equals the standard deviation of the corrected
    effect over estimate's bootstrap replicates (20,000: Monte-Carlo error of an SD ≈ 0.5%)
    within 3%, and the half-width of estimate's 95% interval / 1.96 within 10% (a percentile
    interval of a near-normal replicate distribution)."""
    sizes = _sizes(12)   # 12 interactions per domain, about the demo's 11: the rescaling matters (√(12/11))
    rows = synthetic_rows(WIDE, sizes, 3, seed=2)
    plan = plan_rows(rows, bases=[sum(sum(s) for s in sizes)], reps=[3])
    comp = next(c for c in plan["components"] if c["quantity"] == "corrected")
    assert "between" not in comp["truncated"]   # (a cap on the split would not change the sum)
    predicted = plan["designs"][0]["effects"][0]["se"]
    assert plan["designs"][0]["pilot"]
    report = estimate(rows, n_boot=20000, seed=1)
    contrast = next(c for c in report["contrasts"] if c["condition"] == "alias")
    lo, hi = contrast["ci_minus_placebo"]
    assert (hi - lo) / (2 * 1.96) == pytest.approx(predicted, rel=0.10)
    cluster, domain = structure(sizes)
    x = np.zeros(len(cluster))
    by = {(r["base_id"], r["condition"]): 0.0 for r in rows}
    for r in rows:
        by[(r["base_id"], r["condition"])] += r["decision"] / 3
    for i in range(len(cluster)):
        x[i] = by[(f"b{i:05d}", "alias")] - by[(f"b{i:05d}", "format_placebo")]
    assert float(x.mean()) == pytest.approx(contrast["delta_minus_placebo"], abs=1e-12)
    reps = bootstrap_ratios(cluster_sums(x, cluster, len(domain)), cluster_sums(np.ones_like(x), cluster, len(domain)),
                            domain, 20000, 1)
    assert float(np.nanstd(reps, ddof=1)) == pytest.approx(predicted, rel=0.03)
    # the MDE is t-based at the design's degrees of freedom (its interactions minus its domains)
    effect = plan["designs"][0]["effects"][0]
    assert effect["df"] == len(cluster_sizes := [x for s in sizes for x in s]) - len(sizes)
    assert effect["mde"] == pytest.approx(mde(predicted, df=effect["df"])) and len(cluster_sizes) == 48


def test_se_scales_with_bases_and_repetitions() -> None:
    rows = synthetic_rows(MODEL, _sizes(20), 3, seed=3)
    plan = plan_rows(rows, bases=[40, 160], reps=[1, 4])
    comp = next(c for c in plan["components"] if c["quantity"] == "corrected")
    between = comp["cluster_factor"] * comp["between_interactions"] + (comp["between_bases"] or 0)
    for d in plan["designs"]:
        e = next(e for e in d["effects"] if e["quantity"] == "corrected")
        assert e["se"] ** 2 == pytest.approx((between + comp["within_base"] / d["reps"]) / d["bases"])
        assert e["mde_holm"] == pytest.approx(mde(e["se"], 0.05 / plan["holm_m"]["corrected"], df=e["df"]))
        # the design's interactions scale with its bases (the pilot's bases per interaction kept)
        assert e["df"] == max(1, round(comp["n_interactions"] * d["bases"] / comp["n_bases"]) - comp["n_domains"])
        assert d["calls"] == d["bases"] * 3 * d["reps"] and d["cost_usd_upper_est"] is None


# ----------------------------------------------------------------------------- the target

def test_target_picks_the_cheapest_design_that_reaches_it() -> None:
    rows = synthetic_rows(MODEL, _sizes(20), 3, seed=4)
    plan = plan_rows(rows, bases=[40, 80, 160, 320], reps=[1, 2, 3, 5], target_mde=0.15)
    ok = [d for d in plan["designs"] if all(e["mde"] <= 0.15 for e in d["effects"] if e["quantity"] == "corrected")]
    assert ok and len(ok) < len(plan["designs"])
    best = min(ok, key=lambda d: d["calls"])
    assert plan["target"]["reached"] and plan["target"]["by"] == "calls"
    assert (plan["target"]["design"]["bases"], plan["target"]["design"]["reps"]) == (best["bases"], best["reps"])
    holm = plan_rows(rows, bases=[40, 80, 160, 320], reps=[1, 2, 3, 5], target_mde=0.15, target_level="holm")
    assert holm["target"]["design"]["calls"] >= plan["target"]["design"]["calls"]
    none = plan_rows(rows, bases=[40], reps=[1], target_mde=0.01)
    assert none["target"] == {"mde": 0.01, "level": "nominal", "quantity": "corrected", "by": "calls",
                              "design": None, "reached": False}


# ----------------------------------------------------------------------------- the CLI

@pytest.fixture(scope="module")
def pilot_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A finished two-repetition run of the demo cohort (64 bases, 44 interactions, 4 domains)
    against the simulated provider (640 calls), and its guard config."""
    from guardeval.backends.sim import SimServerProcess

    base = tmp_path_factory.mktemp("pilot")
    with SimServerProcess(["--seed", "5"], env=cli_env()) as sim:
        guard = write_guard(base / "g.toml", sim.base_url)
        run = base / "run"
        r = run_cli("launch", "--cohort", str(DEMO_COHORT), "--guard", str(guard), "--reps", "2",
                    "--run-dir", str(run), "--no-progress", "--no-preflight")
        assert r.code == 0, r.err
    return run, guard


def _listing(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_cli_plans_a_simulated_run_with_the_dry_run_cost(pilot_run: tuple[Path, Path]) -> None:
    run, guard = pilot_run
    before = _listing(run)
    r = run_cli("plan", str(run), "--bases", "64,128", "--reps", "1,2", "--json")
    assert r.code == 0, r.err
    assert "verified before planning" in r.err
    plan = json.loads(r.out)
    assert plan["pilot"] == {"bases": 64, "interactions": 44, "domains": 4, "reps": 2, "calls": 640}
    assert plan["placebo"] == "format_placebo" and plan["headline"] == "corrected"
    assert [(d["bases"], d["reps"], d["calls"]) for d in plan["designs"]] == [
        (64, 1, 320), (64, 2, 640), (128, 1, 640), (128, 2, 1280)]
    assert plan["source"]["verified"] and plan["cost_known"]
    # the pilot's own design costs what `launch --dry-run` projects for it
    dry = run_cli("launch", "--cohort", str(DEMO_COHORT), "--guard", str(guard), "--reps", "2", "--dry-run",
                  "--json", "--no-preflight")
    assert dry.code == 0, dry.err
    projected = json.loads(dry.out)["projection"]["cost_usd_upper_est"]
    pilot = next(d for d in plan["designs"] if d["pilot"])
    assert (pilot["bases"], pilot["reps"]) == (64, 2)
    assert pilot["cost_usd_upper_est"] == pytest.approx(projected, rel=1e-12)
    doubled = next(d for d in plan["designs"] if (d["bases"], d["reps"]) == (128, 2))
    assert doubled["cost_usd_upper_est"] == pytest.approx(2 * projected, rel=1e-6)
    corrected = {c["condition"] for c in plan["components"] if c["quantity"] == "corrected"}
    assert corrected == set(plan["interventions"]) and "format_placebo" not in corrected
    assert _listing(run) == before   # nothing written into the run
    # the pilot's own design: `pilot_se` (the cluster variance the planner reads) is the
    # bootstrap SE of estimate's corrected effect (its 95% interval / 3.92), and the predicted SE
    # is that, or the repetition-noise floor when the pilot's cluster variance falls below it
    from guardeval.estimators.runs import estimate_run
    from guardeval.run.run import Run

    with Run.using(run) as opened:
        report = estimate_run(opened, write=False)
    for c in report["contrasts"]:
        if c["ci_minus_placebo"] is None:
            continue
        lo, hi = c["ci_minus_placebo"]
        comp = next(x for x in plan["components"] if x["quantity"] == "corrected" and x["condition"] == c["condition"])
        se = next(e["se"] for e in pilot["effects"] if e["quantity"] == "corrected" and e["condition"] == c["condition"])
        assert comp["pilot_se"] == pytest.approx((hi - lo) / 3.92, rel=0.10), c["condition"]
        floor = math.sqrt(comp["within_base"] / 2 / comp["n_bases"])
        assert se == pytest.approx(floor if "between" in comp["truncated"] else comp["pilot_se"], rel=1e-12)
    for width in (100, 80, 50):   # fitted to the terminal, every column kept (split, not dropped)
        text = run_cli("plan", str(run), "--target-mde", "0.3", env={"COLUMNS": str(width)})
        assert text.code == 0, text.err
        assert all(len(line) <= width for line in text.out.splitlines()), text.out
        assert "variance components" in text.out and "target MDE 0.300" in text.out and "←" in text.out
        for column in ("est.", "SE", "σ²_G", "σ²_B", "σ²_W", "κ", "reps", "bases", "calls"):
            assert column in text.out, (width, column)
        assert "$" not in text.out   # the simulated provider bills nothing: no cost column (issue 47)
        assert all(c[:8] in text.out for c in plan["interventions"]), (width, text.out)


def test_cli_plans_a_table_without_cost(tmp_path: Path) -> None:
    table = _write_table(tmp_path / "t.jsonl", synthetic_rows(MODEL, _sizes(10), 2, seed=8))
    r = run_cli("plan", "--table", str(table), "--json", "--target-mde", "0.2")
    assert r.code == 0, r.err
    plan = json.loads(r.out)
    assert not plan["cost_known"] and all(d["cost_usd_upper_est"] is None for d in plan["designs"])
    assert "cost omitted: a table carries no guard config" in r.err
    assert plan["target"]["by"] == "calls" and plan["source"]["table"] == str(table)
    text = run_cli("plan", "--table", str(table))
    assert text.code == 0 and "cost: a table carries no guard config" in text.out


@pytest.mark.parametrize("args, needle", [
    (["--bases", "0"], "must be >= 1"),
    (["--bases", "2.5"], "whole numbers"),
    (["--reps", "3,x"], "whole numbers"),
    (["--reps", "-1"], "must be >= 1"),
    (["--target-mde", "1"], "(0, 1)"),
    (["--target-mde", "0"], "(0, 1)"),
    (["--target-mde", "nan"], "(0, 1)"),
    (["--placebo", "nosuch"], "placebo condition 'nosuch' has no rows"),
    (["--bases", ",".join(map(str, range(1, 202))), "--reps", ",".join(map(str, range(1, 51)))], "at most 10000"),
])
def test_cli_bad_options_exit_2(tmp_path: Path, args: list[str], needle: str,
                                capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process (`app.main`, the same entry point as `python -m guardeval`): the parser's and the
    planner's refusals, each exit 2 with the reason, no traceback, nothing on stdout or disk."""
    from guardeval.cli.app import main

    table = _write_table(tmp_path / "t.jsonl", synthetic_rows(MODEL, _sizes(6), 2, seed=1))
    monkeypatch.chdir(tmp_path)
    before = _listing(tmp_path)
    try:
        code = main(["plan", "--table", str(table), *args])
    except SystemExit as exc:   # a usage error, from argparse
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    assert code == 2 and needle in err and "Traceback" not in err, err
    assert out == "" and _listing(tmp_path) == before


@pytest.mark.slow
def test_cli_too_few_repetitions_or_interactions_exit_2(tmp_path: Path, finished_run: Path) -> None:
    one_rep = _write_table(tmp_path / "one.jsonl", synthetic_rows(MODEL, _sizes(6), 1, seed=1))
    r = run_cli("plan", "--table", str(one_rep))
    assert r.code == 2 and "too few repetitions" in r.err and "between-repetition component" in r.err, r.err
    # a real run of one repetition: the same, naming the condition
    r = run_cli("plan", str(finished_run))
    assert r.code == 2 and "too few repetitions" in r.err and "no base has two counted repetitions" in r.err, r.err
    lonely = _write_table(tmp_path / "lonely.jsonl", synthetic_rows(MODEL, [[3]] * 3, 2, seed=1))
    r = run_cli("plan", "--table", str(lonely))
    assert r.code == 2 and "too few interactions" in r.err and "between-interaction component" in r.err, r.err
    assert "Traceback" not in r.err


@pytest.mark.slow
def test_cli_run_that_does_not_verify_exit_1(pilot_run: tuple[Path, Path], tmp_path: Path) -> None:
    import shutil

    run = tmp_path / "broken"
    shutil.copytree(pilot_run[0], run)
    raw = run / "raw.jsonl"
    data = bytearray(raw.read_bytes())
    at = data.index(b'"attempt"')   # a byte inside the first raw line: its hash no longer chains
    data[at + 1] = ord("A")   # "attempt" -> "Attempt"
    raw.write_bytes(bytes(data))
    before = _listing(run)
    r = run_cli("plan", str(run))
    assert r.code == 1 and "does not verify" in r.err and "--no-verify" in r.err and "Traceback" not in r.err, r.err
    assert r.out == "" and _listing(run) == before
    skipped = run_cli("plan", str(run), "--no-verify", "--json")
    assert skipped.code == 0 and "without verification" in skipped.err, skipped.err
    assert json.loads(skipped.out)["source"]["verified"] is False


def test_cli_needs_exactly_one_input(tmp_path: Path) -> None:
    r = run_cli("plan")
    assert r.code == 2 and "either a pilot run folder or --table" in r.err


def test_without_a_placebo_the_target_uses_delta() -> None:
    rows = [r for r in synthetic_rows(MODEL, _sizes(10), 2, seed=6) if r["condition"] != "format_placebo"]
    plan = plan_rows(rows, bases=[40], reps=[2], target_mde=0.5)
    assert plan["placebo"] is None and plan["headline"] == "delta"
    assert {c["quantity"] for c in plan["components"]} == {"delta"}
    assert plan["target"]["quantity"] == "delta" and plan["target"]["reached"]
    assert any("no placebo" in n for n in plan["notes"])


def test_cli_escapes_names_from_the_table(tmp_path: Path) -> None:
    hostile = "alias\x1b]0;pwned\x07"
    rows = [{**r, "condition": hostile} if r["condition"] == "alias" else r
            for r in synthetic_rows(MODEL, _sizes(6), 2, seed=9)]
    table = _write_table(tmp_path / "t.jsonl", rows)
    for extra in ([], ["--json"]):
        r = run_cli("plan", "--table", str(table), *extra)
        assert r.code == 0, r.err
        assert "\x1b" not in r.out + r.err and "\x07" not in r.out + r.err and "pwned" in r.out


@pytest.mark.slow
def test_plan_knows_the_cohort_and_a_pilot_cut_inside_round_one(pilot_run: tuple[Path, Path], tmp_path: Path) -> None:
    """Issue 26 §8: a design larger than the cohort is marked as needing a larger cohort, and a
    pilot stopped inside its first round is told to finish, not to launch with more repetitions."""
    from guardeval.backends.sim import SimServerProcess

    run, _ = pilot_run
    r = run_cli("plan", str(run), "--bases", "32,64,512", "--reps", "2", "--json", "--target-mde", "0.09")
    assert r.code == 0, r.err
    plan = json.loads(r.out)
    assert plan["cohort_bases"] == 64
    assert [(d["bases"], d["beyond_cohort"]) for d in plan["designs"]] == [(32, False), (64, False), (512, True)]
    assert "designs of 512 bases need more bases than the cohort has (64)" in r.err
    assert "the target design needs 512 bases; the cohort has 64" in r.err
    text = run_cli("plan", str(run), "--bases", "64,512", "--reps", "2", env={"COLUMNS": "100"})
    assert text.code == 0 and "! more bases than the cohort has (64)" in text.out
    assert any(line.lstrip().startswith("512") and "!" in line for line in text.out.splitlines()), text.out
    with SimServerProcess(["--seed", "5"], env=cli_env()) as sim:
        guard = write_guard(tmp_path / "g.toml", sim.base_url)
        cut = tmp_path / "cut"
        r = run_cli("launch", "--cohort", str(DEMO_COHORT), "--guard", str(guard), "--reps", "2", "--order", "rounds",
                    "--max-calls", "100", "--run-dir", str(cut), "--no-progress", "--no-preflight")
        assert r.code == 0, r.err
    r = run_cli("plan", str(cut), "--allow-skipped")
    assert r.code == 2 and f"guardeval resume {cut}" in r.err and "before its second repetition round" in r.err, r.err
    assert "--reps 2 or more" not in r.err and "Traceback" not in r.err
