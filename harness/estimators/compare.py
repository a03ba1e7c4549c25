"""Two runs of one schedule (a replicate on another guard): effects side by side, the
difference of effects under a paired cluster bootstrap (one resampled set of interactions
per replicate, applied to both runs), and whether the ordering of conditions changes.

A pair of conditions whose order by effect is opposite in the two runs is tested through its
difference of differences, (Δx − Δy)_B − (Δx − Δy)_A = diff_x − diff_y, in the same replicates;
the ranking counts as changed only when a reversal survives Holm across the reversed pairs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import combinations
from typing import Any

import numpy as np

from harness.errors import CheckFailed, InputError
from harness.estimators import effects as fx
from harness.estimators.core import resolve_conditions, validated
from harness.estimators.formats import interval, num, pval
from harness.estimators.holm import holm
from harness.estimators.quantities import Quantities
from harness.estimators.quarantine import quarantine_summary
from harness.estimators.table import MISSING

ALPHA = 0.05


def _same_structure(a: fx.Design, b: fx.Design) -> None:
    same = (a.base_ids == b.base_ids and a.cluster_ids == b.cluster_ids and a.domains == b.domains
            and set(a.conditions) == set(b.conditions) and np.array_equal(a.base_cluster, b.base_cluster))
    if not same:
        raise InputError("the two runs do not have the same bases, interactions, domains and conditions")


def ranking(deltas: Mapping[str, float | None]) -> list[str]:
    """Conditions by effect, largest first (undefined last, ties by name)."""
    return sorted(deltas, key=lambda c: (deltas[c] is None, -(deltas[c] or 0.0), c))


def reversed_pairs(a: Mapping[str, float | None], b: Mapping[str, float | None]) -> list[tuple[str, str]]:
    """Pairs of conditions whose strict order by effect is opposite in the two runs."""
    out = []
    for x, y in combinations(sorted(a), 2):
        if None in (a[x], a[y], b[x], b[y]):
            continue
        if (a[x] - a[y]) * (b[x] - b[y]) < 0:  # type: ignore[operator]
            out.append((x, y))
    return out


def compare(rows_a: Iterable[Any], rows_b: Iterable[Any], *, baseline: str = "original",
            family: Sequence[str] | None = None, n_boot: int = 10000, seed: int = 0,
            failure_rule: str = "drop", missing: str = "exclude", roles: Mapping[str, str] | None = None,
            complete: tuple[bool, bool] = (True, True), allow_partial: bool = False,
            allow_unpublishable: bool = False) -> dict[str, Any]:
    ra, rb = validated(rows_a), validated(rows_b)
    fx.check_rule(failure_rule)
    if n_boot < 1:
        raise InputError("the number of bootstrap replicates must be >= 1", field="bootstrap")
    flags = []
    for name, rows, comp in (("A", ra, complete[0]), ("B", rb, complete[1])):
        n_missing = sum(1 for r in rows if r["status"] == MISSING)
        ok = comp and n_missing == 0
        flags.append(ok)
        if not ok and not allow_partial:
            raise CheckFailed(f"run {name} is incomplete ({n_missing} calls without a decision); "
                              "use --allow-partial to compare anyway")
    order = list(roles or ())
    da, db = fx.build_design(ra, order, missing), fx.build_design(rb, order, missing)
    _same_structure(da, db)
    baseline, _, contrasts, fam = resolve_conditions(da, baseline, None, family, roles)
    # Index B's columns by A's condition order.
    remap = [db.cond_index(c) for c in da.conditions]
    sa, na = fx.base_counts(da, failure_rule)
    sb, nb = fx.base_counts(db, failure_rule)
    sb, nb = sb[:, remap], nb[:, remap]
    pa, pb = fx.base_rates(sa, na), fx.base_rates(sb, nb)
    b = da.cond_index(baseline)
    qs = Quantities()
    for c in contrasts:
        ci = da.cond_index(c)
        pair_a = (na[:, ci] > 0) & (na[:, b] > 0)
        pair_b = (nb[:, ci] > 0) & (nb[:, b] > 0)
        eff_a, eff_b = pa[:, ci] - pa[:, b], pb[:, ci] - pb[:, b]
        qs.add(("a", c), eff_a, pair_a)
        qs.add(("b", c), eff_b, pair_b)
        # Same bases on both sides: paired in both runs.
        qs.add(("diff", c), eff_b - eff_a, pair_a & pair_b)
    for x, y in combinations(contrasts, 2):
        qs.add_combination(("dd", x, y), {("diff", x): 1.0, ("diff", y): -1.0})
    est = qs.run(da.base_cluster, da.cluster_domain, n_boot, seed)
    deltas_a = {c: est[("a", c)]["estimate"] for c in contrasts}
    deltas_b = {c: est[("b", c)]["estimate"] for c in contrasts}
    # Only a pair whose order reversed is tested (Holm across those pairs).
    rev = [(x, y) if ("dd", x, y) in est else (y, x) for x, y in reversed_pairs(deltas_a, deltas_b)]
    rows_out = []
    for c in contrasts:
        a, bb, d = est[("a", c)], est[("b", c)], est[("diff", c)]
        rows_out.append({
            "condition": c, "in_family": c in fam,
            "delta_a": a["estimate"], "ci_a": a["ci"], "n_bases_a": a["n_bases"],
            "delta_b": bb["estimate"], "ci_b": bb["ci"], "n_bases_b": bb["n_bases"],
            "difference": d["estimate"], "ci_difference": d["ci"], "p_difference": d["p"], "p_holm": None,
            "n_bases_difference": d["n_bases"], "n_clusters_difference": d["n_clusters"],
        })
    for c, adj in zip(fam, holm([next(r["p_difference"] for r in rows_out if r["condition"] == c) for c in fam])):
        next(r for r in rows_out if r["condition"] == c)["p_holm"] = adj
    pairs = [{"conditions": [x, y], "difference_of_differences": est[("dd", x, y)]["estimate"],
              "ci": est[("dd", x, y)]["ci"], "p": est[("dd", x, y)]["p"], "p_holm": adj}
             for (x, y), adj in zip(rev, holm([est[("dd", x, y)]["p"] for x, y in rev]))]
    changed = any(pr["p_holm"] is not None and pr["p_holm"] < ALPHA for pr in pairs)
    qa, qb = quarantine_summary(ra, len(ra)), quarantine_summary(rb, len(rb))
    return {
        "baseline": baseline, "failure_rule": failure_rule, "family": fam,
        "n_bases": da.n_bases, "n_interactions": da.n_clusters,
        "difference": "run B effect minus run A effect, on bases paired in both runs",
        "conditions": rows_out,
        "ranking_a": ranking(deltas_a), "ranking_b": ranking(deltas_b),
        "ranking_changed": changed, "reversed_pairs": pairs,
        "ranking_rule": (f"changed when a reversed pair's difference of differences has a Holm-adjusted p < {ALPHA} "
                         "(Holm across the reversed pairs)"),
        "missing": missing,
        "complete": {"a": flags[0], "b": flags[1]},
        "quarantine": {"a": qa, "b": qb},
        "publishable": qa["publishable"] and qb["publishable"],
        "allow_unpublishable": allow_unpublishable,
        "bootstrap": {"n": n_boot, "seed": seed, "paired": "the same resampled interactions for both runs"},
    }


def ranking_lines(result: Mapping[str, Any]) -> list[str]:
    """The two rankings, each reversed pair with the test of its difference of differences,
    and the verdict (for the terminal, compare.md and compare.html)."""
    pairs = result["reversed_pairs"]
    lines = [f"ranking A: {' > '.join(result['ranking_a'])}", f"ranking B: {' > '.join(result['ranking_b'])}"]
    lines += [f"reversed: {x} vs {y}: difference of differences {num(pr['difference_of_differences'])} "
              f"{interval(pr['ci'])}, p {pval(pr['p'])}, Holm {pval(pr['p_holm'])}"
              for pr in pairs for x, y in [pr["conditions"]]]
    if result["ranking_changed"]:
        verdict = "yes (a reversal survives Holm across the reversed pairs)"
    elif pairs:
        verdict = "no (no reversal survives Holm across the reversed pairs)"
    else:
        verdict = "no (no pair of conditions reversed)"
    return [*lines, f"ranking changed: {verdict}"]
