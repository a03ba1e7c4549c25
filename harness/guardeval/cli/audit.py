"""CLI: `guardeval audit ...` — label-predictability and evaluation-unit audits (no guard calls), and the
provider audit of a run from OpenRouter's generation stats."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from guardeval.cli.args import positive_int, row_limit_options, row_limits


def _seed_list(text: str) -> list[int]:
    try:
        seeds = [int(t) for t in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if any(s < 0 for s in seeds):  # numpy's generator takes no negative seed
        raise argparse.ArgumentTypeError("seeds must be >= 0")
    return seeds


def register(sub: Any) -> None:
    p = sub.add_parser("audit", help="label-predictability, evaluation-unit and provider audits")
    asub = p.add_subparsers(dest="audit_command", metavar="AUDIT", parser_class=type(p))
    asub.required = True
    a = asub.add_parser("lookup", help="tool-name majority-label lookup: LODO and grouped k-fold F1")
    a.add_argument("rows", metavar="ROWS", help="JSONL rows: interaction_id, domain, tool, label "
                                                "(`guardeval cohort rows` writes them)")
    a.add_argument("--seeds", type=_seed_list, default=[42, 43, 44], metavar="N,N,...",
                   help="k-fold seeds (default: 42,43,44)")
    a.add_argument("--folds", type=positive_int, default=5, metavar="K",
                   help="folds of the interaction-grouped cross-validation")
    row_limit_options(a)
    a.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    a.set_defaults(func=cmd_audit_lookup)
    a = asub.add_parser("units", help="row-level vs equal-interaction F1 / balanced accuracy")
    a.add_argument("preds", metavar="PREDS", help="JSONL rows in source order: interaction_id, label_score, "
                                                  "pred_score (`audit import-toolsafe` writes them)")
    row_limit_options(a)
    a.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    a.set_defaults(func=cmd_audit_units)
    a = asub.add_parser("import-toolsafe", help="TS-Guard published logs -> rows for `audit units`")
    a.add_argument("--logs", required=True, metavar="DIR",
                   help="folder holding guardian_test_logs/<bench>/TS-Guard/*.json")
    a.add_argument("--out", required=True, metavar="FILE", help="rows file (JSONL) to write")
    a.add_argument("--pins", metavar="FILE",
                   help="pin file of 'BYTES SHA256 PATH' lines (default: ToolSafe 92a9540e's, shipped with guardeval)")
    a.add_argument("--tsbench", metavar="DIR",
                   help="TS-Bench folder: check AgentHarm labels follow harmful_steps then benign_steps")
    a.set_defaults(func=cmd_import_toolsafe)
    a = asub.add_parser("providers", help="confirm which provider served each answer of an OpenRouter run, "
                                          "from its generation stats (needs the run's key)")
    a.add_argument("run", metavar="RUN", help="run folder (the one holding manifest.json)")
    a.add_argument("--base-url", metavar="URL", help="ask this URL instead of the run's base URL (e.g. a simulated "
                                                     "provider)")
    a.add_argument("--concurrency", type=positive_int, default=8, metavar="N", help="stats requests in flight")
    a.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    a.set_defaults(func=cmd_audit_providers)


def _emit(obj: Mapping[str, object], as_json: bool, text: str) -> None:
    """The result on stdout: domains, tools and provider names are the input's text, shown escaped."""
    from guardeval.estimators.report.report import dumps_json
    from guardeval.terminal import safe, safe_json

    print(safe_json(dumps_json(obj)) if as_json else safe(text, newlines=True))


def cmd_audit_lookup(args: argparse.Namespace) -> int:
    from guardeval.estimators.audits import lookup_audit_file
    from guardeval.estimators.report.formats import num

    res = lookup_audit_file(args.rows, seeds=args.seeds, folds=args.folds, limits=row_limits(args))
    lines = [f"{res['n_rows']} rows, {res['n_domains']} domains, {res['n_interactions']} interactions "
             "(unsafe = positive)",
             f"leave-one-domain-out F1: {num(res['lodo_f1'], sign=False)}; held-out tools seen in other domains: "
             f"{num(res['lodo_seen_fraction'], sign=False)}"]
    lines += [f"  {d}: F1 {num(v['f1'], sign=False)}, {v['n_rows']} rows, seen {num(v['seen_fraction'], sign=False)}"
              for d, v in res["lodo_by_domain"].items()]
    lines += [f"interaction-grouped {res['folds']}-fold F1, seed {s}: {num(f, sign=False)}"
              for s, f in res["cv_f1"].items()]
    _emit(res, args.json, "\n".join(lines))
    return 0


def cmd_audit_units(args: argparse.Namespace) -> int:
    from guardeval.estimators.audits import units_audit_file
    from guardeval.estimators.report.formats import num

    res = units_audit_file(args.preds, row_limits(args))
    text = "\n".join([
        f"{res['n_rows']} rows, {res['n_interactions']} interactions ({res['mapping']})",
        f"row-level:          F1 {num(res['row_f1'], sign=False)}, balanced accuracy "
        f"{num(res['row_balanced_accuracy'], sign=False)}",
        f"equal-interaction:  F1 {num(res['interaction_f1'], sign=False)}, balanced accuracy "
        f"{num(res['interaction_balanced_accuracy'], sign=False)}"])
    _emit(res, args.json, text)
    return 0


def cmd_import_toolsafe(args: argparse.Namespace) -> int:
    from guardeval.cohorts.builders.toolsafe_logs import import_toolsafe
    from guardeval.terminal import safe_json

    summary = import_toolsafe(args.logs, args.out, args.pins, args.tsbench)
    print(safe_json(json.dumps(summary, indent=2)))   # the --out path is shown escaped
    return 0


def cmd_audit_providers(args: argparse.Namespace) -> int:

    from guardeval.backends.http_get import shown
    from guardeval.run.provider_audit import audit_providers
    from guardeval.run.run import Run

    with Run.using(args.run) as run:
        res = audit_providers(run.folder, base_url=args.base_url, concurrency=args.concurrency)
    lines = [f"run {res['run_id']}: {res['answers']} answered calls; allowed providers: "
             f"{', '.join(res['allowed_providers']) or '(none pinned)'}",
             f"confirmed from generation stats: {res['confirmed']}",
             "served by: " + ", ".join(f"{shown(k)} {v}" for k, v in res["served_by"].items())]
    findings: list[tuple[str, int, Sequence[Mapping[str, Any]], Callable[[Mapping[str, Any]], str]]] = [
        ("answered by a provider that is not allowed (drift)", res["drift"], res["drift_calls"],
         lambda c: shown(c["provider_name"])),
        ("not confirmed", res["unconfirmed"], res["unconfirmed_calls"], lambda c: shown(c["why"])),
        ("completion's `provider` field disagrees with the stats", res["reported_differs"],
         res["reported_differs_calls"], lambda c: f"{shown(c['reported'])} vs {shown(c['provider_name'])}")]
    for what, n, calls, fmt in findings:
        if n:
            lines.append(f"{what}: {n}")
            lines += [f"  {c['call_id']}: {fmt(c)}" for c in calls]
    lines.append(f"spend logged ${res['spend_logged_usd']:.6f}; OpenRouter total_cost ${res['total_cost_usd']:.6f}"
                 + (f" ({res['cost_differs']} calls differ)" if res["cost_differs"] else ""))
    if res["generation_replays"]:
        lines.append(f"calls answered under a generation id another call also got: {res['generation_replays']}")
    lines.append(f"audit providers: {'OK' if res['ok'] else 'FAILED'}")
    _emit(res, args.json, "\n".join(lines))
    return 0 if res["ok"] else 1
