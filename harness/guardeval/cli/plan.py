"""CLI: plan (variance components of a pilot; predicted standard error, MDE and cost per design)."""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from guardeval.cli.args import row_limit_options, row_limits, say_verified
from guardeval.errors import InputError
from guardeval.terminal import safe, safe_json

if TYPE_CHECKING:
    from guardeval.run.run import Run

RULES = ("drop", "fail-closed", "fail-open")
MISSING_MODES = ("exclude", "as-failure")


def _sizes(text: str) -> list[int]:
    """`--bases 64,128`: whole numbers >= 1, comma-separated (a bad one is a usage error, exit 2)."""
    out = []
    for item in text.split(","):
        item = item.strip()
        try:
            v = int(item)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected whole numbers separated by commas, got {item!r}") from None
        if v < 1:
            raise argparse.ArgumentTypeError(f"a design size must be >= 1, got {v}")
        out.append(v)
    return out


def _proportion(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (0 < v < 1):
        raise argparse.ArgumentTypeError(f"must lie in (0, 1) (a proportion: 0.05 is 5 points), got {text!r}")
    return v


def register(sub: Any) -> None:
    p = sub.add_parser("plan", help="plan a design from a pilot: variance components, predicted SE, MDE and cost",
                       description="From a pilot's decisions, the variance components of each effect (between "
                                   "interactions, between bases within one, between repetitions of a base) and, "
                                   "for each design of bases x repetitions, the predicted standard error, minimum "
                                   "detectable effect (80% power, two-sided 0.05 and the Holm first-step level), "
                                   "calls and projected cost (docs/estimators.md, plan).")
    p.add_argument("run", nargs="?", metavar="RUN", help="pilot run folder (the one holding manifest.json)")
    p.add_argument("--table", metavar="FILE", help="a JSONL decision table instead of a run (no cost: a table "
                                                   "carries no guard config)")
    p.add_argument("--bases", type=_sizes, metavar="N,...",
                   help="numbers of bases to consider (default: half the pilot's up to eight times as many)")
    p.add_argument("--reps", type=_sizes, metavar="R,...",
                   help="repetitions per base to consider (default: 1, 2, 3, 5, the pilot's and twice it)")
    p.add_argument("--target-mde", type=_proportion, metavar="X",
                   help="also name the cheapest design whose MDE is at most X for every corrected effect")
    p.add_argument("--target-level", choices=("nominal", "holm"), default="nominal",
                   help="MDE the target is checked against: at alpha 0.05, or at the Holm first step 0.05/m")
    p.add_argument("--baseline", metavar="CONDITION",
                   help="baseline condition (default: the cohort's baseline, else original)")
    p.add_argument("--placebo", metavar="CONDITION",
                   help="placebo condition (default: the condition whose role is placebo, else format_placebo)")
    p.add_argument("--failures", choices=RULES, default="drop", help="failure rule of the pilot's rates")
    p.add_argument("--missing", choices=MISSING_MODES, default="exclude",
                   help="a pilot call without a decision counts nowhere (exclude) or as a failed call")
    p.add_argument("--no-verify", action="store_true",
                   help="plan without first checking the run as `guardeval verify` does; the result says so")
    p.add_argument("--allow-skipped", action="store_true",
                   help="plan even when that check had to skip a step")
    p.add_argument("--json", action="store_true", help="print the plan as JSON on stdout")
    row_limit_options(p)
    p.set_defaults(func=cmd_plan)


def cmd_plan(args: argparse.Namespace) -> int:
    from guardeval.canon import file_sha256
    from guardeval.estimators.planning.plan import plan_rows
    from guardeval.estimators.report.report import dumps_json
    from guardeval.estimators.table import load_table

    if (args.run is None) == (args.table is None):
        raise InputError("give either a pilot run folder or --table FILE (not both)")
    common = dict(placebo=args.placebo, failure_rule=args.failures, missing=args.missing,
                  bases=args.bases, reps=args.reps, target_mde=args.target_mde, target_level=args.target_level)
    if args.table is not None:
        path = Path(args.table)
        result = plan_rows(load_table(path, row_limits(args)), baseline=args.baseline or "original", source=path,
                           **common)
        result["source"] = {"table": str(path), "sha256": file_sha256(path)}
    else:
        result = _plan_run(args, common)
    for note in [*result.get("cannot_decide", []), *result["notes"]]:
        print(safe(f"guardeval: note: {note}"), file=sys.stderr)
    print(safe_json(dumps_json(result)) if args.json else safe(plan_text(result), newlines=True))
    return 0


def _plan_run(args: argparse.Namespace, common: Mapping[str, Any]) -> dict[str, Any]:
    from guardeval.run.run import Run

    with Run.using(args.run) as run:
        return _plan_from(run, args, common)


def _plan_from(run: Run, args: argparse.Namespace, common: Mapping[str, Any]) -> dict[str, Any]:
    from guardeval.estimators.planning.plan import plan_rows
    from guardeval.estimators.runs import load_run, verified
    from guardeval.run.folder.layout import SCHEDULE
    from guardeval.run.planning import run_prompt_tokens

    # A pilot that does not verify is refused as `estimate` refuses it (exit 1): nothing is planned from it.
    check = verified(run, verify=not args.no_verify, allow_skipped=args.allow_skipped,
                     row_limits=row_limits(args), doing="plan from")
    say_verified(run.path, check, "planning")
    _, table, rows = load_run(run, row_limits(args))
    config, tokens, n_bases = run_prompt_tokens(run.folder, row_limits(args))
    prices = {"price_in_per_mtok": config.price_in_per_mtok, "price_out_per_mtok": config.price_out_per_mtok,
              "max_tokens": config.max_tokens}
    try:
        result = plan_rows(rows, baseline=args.baseline or table.baseline or "original", roles=table.roles,
                           prompt_tokens=(tokens, n_bases), prices=prices, source=run.folder.file(SCHEDULE),
                           cohort_bases=n_bases, **common)
    except InputError as exc:
        # A pilot stopped inside its first round has later rounds scheduled but not decided:
        # it needs its own calls finished, not a new launch.
        waiting = sum(1 for r in rows if r["status"] == "missing")
        if exc.field == "reps" and not table.complete and any(r["repetition"] >= 1 for r in rows):
            raise InputError(f"the pilot stopped before its second repetition round ({waiting} of {len(rows)} "
                             f"scheduled calls have no decision): finish the pilot first with `guardeval resume "
                             f"{run.path}` (or a larger --max-calls), then plan", path=run.path, field="reps") from None
        raise
    if config.is_simulated and result["cost_known"]:
        result["notes"].append("the simulated provider does not bill: a design's cost_usd_upper_est is at the guard "
                               "config's prices (the terminal's grid shows no cost)")
    if not table.complete:
        result["notes"].append("the pilot is incomplete: its calls without a decision are "
                               + ("counted as failures" if args.missing == "as-failure" else "left out"))
    m = table.manifest
    result["source"] = {"run": str(run.path), "run_id": m.get("run_id"), "schedule_sha256": m.get("schedule_sha256"),
                        "verified": check["checked"], "verify_skipped": check["skipped"],
                        "guard": {"name": config.name, "model": config.model, "simulated": config.is_simulated}}
    return result


def _table(title: str | None = None) -> Any:
    from rich import box
    from rich.table import Table

    return Table(box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1), show_edge=False, title=title)


def _numbers(table: Any, names: list[str], cells: list[list[str]]) -> None:
    """Right-aligned columns as wide as their widest cell (numbers never wrap; headers fold)."""
    for j, name in enumerate(names):
        w = max([len(name), *(len(r[j]) for r in cells)])
        table.add_column(name, justify="right", no_wrap=True, min_width=w, max_width=max(w, 1))


def _components_tables(result: Mapping[str, Any], quantity: str, width: int) -> list[Any]:
    """One table of components per kind of effect; split by columns when it is wider than `width`."""
    from rich.text import Text

    comps = [c for c in result["components"] if c["quantity"] == quantity]
    rows = []
    for c in comps:
        between = c["cluster_factor"] * c["between_interactions"] + (c["between_bases"] or 0.0)
        noise = c["within_base"] / result["pilot"]["reps"]
        share = noise / (between + noise) if between + noise > 0 else None
        rows.append([f"{c['estimate']:+.3f}", f"{c['pilot_se']:.3f}", f"{c['between_interactions']:.4f}",
                     "—" if c["between_bases"] is None else f"{c['between_bases']:.4f}", f"{c['within_base']:.4f}",
                     f"{c['cluster_factor']:.2f}", "—" if share is None else f"{share:.0%}"])
    names = [safe(c["condition"]) for c in comps]
    numbers = ["est.", "SE", "σ²_G", "σ²_B", "σ²_W", "κ", "reps"]
    widths = [max([len(h), *(len(r[j]) for r in rows)]) + 2 for j, h in enumerate(numbers)]
    name_w = min(max(map(len, names), default=9), max(9, width // 4))
    chunks: list[list[int]] = [[]]
    used = name_w + 2
    for j, w in enumerate(widths):
        if chunks[-1] and used + w > width:
            chunks.append([])
            used = name_w + 2
        chunks[-1].append(j)
        used += w
    ref = "placebo" if quantity == "corrected" else "baseline"
    title = f"{'corrected effects' if quantity == 'corrected' else 'Δ'} (vs the {ref}): variance components"
    tables = []
    for k, cols in enumerate(chunks):
        table = _table(title if k == 0 else None)
        table.add_column("condition", overflow="fold", width=name_w)
        _numbers(table, [numbers[j] for j in cols], [[r[j] for j in cols] for r in rows])
        for name, r in zip(names, rows):
            table.add_row(Text(name), *(Text(r[j]) for j in cols))
        tables.append(table)
    return tables


def _design_tables(result: Mapping[str, Any], width: int, priced: bool = True) -> list[Any]:
    """The grid; with many effects, several tables of as many effect columns as fit; without
    `priced` (a simulated provider, which bills nothing), no cost column."""
    from rich.text import Text

    head = result["headline"]
    chosen = (result.get("target") or {}).get("design")
    base_rows, effect_cells = [], []
    for d in result["designs"]:
        mark = ""
        if chosen and (d["bases"], d["reps"]) == (chosen["bases"], chosen["reps"]):
            mark = "←"
        elif d["pilot"]:
            mark = "*"
        if d.get("beyond_cohort"):
            mark += "!"
        cost = d["cost_usd_upper_est"]
        base_rows.append([str(d["bases"]), str(d["reps"]), str(d["calls"]), "—" if cost is None else f"${cost:.2f}",
                          mark])
        effect_cells.append([f"{e['mde']:.3f}/{e['mde_holm']:.3f}" for e in d["effects"] if e["quantity"] == head])
    names = [safe(e["condition"]) for e in (result["designs"][0]["effects"] if result["designs"] else [])
             if e["quantity"] == head]
    heads = ["bases", "reps", "calls", "cost"][:4 if priced else 3]
    base_rows = [r[:len(heads)] + r[-1:] for r in base_rows]
    fixed = sum(max([len(h), *(len(r[j]) for r in base_rows)]) + 2 for j, h in enumerate(heads)) + 3
    per = 13   # "0.232/0.268" and its padding
    fit = max(1, (width - fixed) // per)
    tables = []
    for start in range(0, max(1, len(names)), fit):
        table = _table()
        _numbers(table, heads, [r[:len(heads)] for r in base_rows])
        table.add_column("", no_wrap=True, width=2)
        for name in names[start:start + fit]:
            table.add_column(name, justify="right", overflow="fold", min_width=11)
        for r, cells in zip(base_rows, effect_cells):
            table.add_row(*(Text(x) for x in r), *(Text(x) for x in cells[start:start + fit]))
        tables.append(table)
    return tables


def plan_text(result: Mapping[str, Any], width: int | None = None) -> str:
    """The components and the design grid for a terminal, fitted to `width` columns (as the
    effects table of `estimate` is); `--json` has every number."""
    from rich.console import Console
    from rich.text import Text

    from guardeval.estimators.report.report import terminal_width

    width = width or terminal_width()
    pilot = result["pilot"]
    head = result["headline"]
    m = result["holm_m"][head]
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None, force_terminal=False, highlight=False,
                      emoji=False, markup=False)
    for line in result.get("cannot_decide") or []:     # said first (issue 35)
        console.print(Text(line[0].upper() + line[1:] + "."))
    console.print(Text(f"pilot: {pilot['bases']} bases in {pilot['interactions']} interactions, {pilot['domains']} "
                       f"domains; {len(result['conditions'])} conditions; {pilot['reps']} repetitions; baseline "
                       f"{safe(result['baseline'])}, placebo {safe(result['placebo'] or 'none')}; failure rule "
                       f"{result['failure_rule']}"))
    for quantity in ("corrected", "delta"):
        if any(c["quantity"] == quantity for c in result["components"]):
            for table in _components_tables(result, quantity, width):
                console.print(table)
    console.print(Text("est.: the pilot's estimate; SE: the pilot's cluster standard error; σ²_G between "
                       "interactions, σ²_B between bases within one, σ²_W between repetitions (per call; "
                       "proportions squared); κ: bases per "
                       "interaction, weighted; reps: the share of the pilot design's predicted variance that "
                       "repetitions average away"))
    what = "corrected effect" if head == "corrected" else "Δ"
    console.print(Text(f"\ndesigns: MDE of each {what} at 80% power, two-sided α = 0.05 / Holm first step "
                       f"α/{m}; * the pilot's design, ← the target"
                       + (f", ! more bases than the cohort has ({result['cohort_bases']})"
                          if any(d.get("beyond_cohort") for d in result["designs"]) else "")))
    # A simulated provider bills nothing: no dollars on the screen (--json keeps the cost at the
    # config's prices, with its note).
    simulated = bool(((result.get("source") or {}).get("guard") or {}).get("simulated"))
    for table in _design_tables(result, width, priced=not simulated):
        console.print(table)
    foot = ["predicted SE² = (κ·σ²_G + σ²_B + σ²_W/reps)/bases; --json has each effect's SE; "
            "method: docs/estimators.md (plan)"]
    if simulated:
        foot.append("cost: none, the simulated provider does not bill (--json has the cost at the guard config's "
                    "prices)")
    elif not result["cost_known"]:
        foot.append("cost: " + next((n.split(": ", 1)[1] for n in result["notes"] if n.startswith("cost omitted")),
                                    "unknown"))
    target = result.get("target")
    if target is not None:
        level = "α = 0.05" if target["level"] == "nominal" else f"the Holm first step α/{m}"
        if target["reached"]:
            d = target["design"]
            cost = "" if d["cost_usd_upper_est"] is None or simulated else f", ${d['cost_usd_upper_est']:.2f}"
            foot.append(f"target MDE {target['mde']:.3f} at {level}: cheapest design {d['bases']} bases x "
                        f"{d['reps']} repetitions ({d['calls']} calls{cost})")
        else:
            foot.append(f"target MDE {target['mde']:.3f} at {level}: no design in the grid reaches it for every "
                        "effect; try more --bases or --reps")
    for line in foot:
        console.print(Text(line))
    return "\n".join(line.rstrip() for line in buf.getvalue().rstrip("\n").splitlines())
