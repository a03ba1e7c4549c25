"""study.md and study.html: a study's report (`guardeval.study.report`) for people, in the order a
reader needs it: the answer in words first, then the leaderboard, the paired differences, the
ranking stability, each guard's one line (linking to its run's report.html), the question as
fixed at launch and its edits, the study fingerprint, and how the report was made.

study.html is one self-contained file like compare.html: no script, no external resource (a
Content-Security-Policy forbids any), the figures inline; links to the runs' report.html are
relative, inside the study folder. Every text from the study is escaped.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from guardeval.estimators.compare import compare_text as CT
from guardeval.estimators.compare.compare_plot import leaderboard_figure, paired_figure
from guardeval.estimators.report.formats import md_table
from guardeval.estimators.report.plot import figure_bytes
from guardeval.view import tables as T

QUESTION_ROWS = (("baseline", "baseline"), ("placebo", "placebo"), ("family", "Holm family"),
                 ("margin", "equivalence margin"), ("failure_rule", "failure rule"))


def title(report: Mapping[str, Any]) -> str:
    s = report["study"]
    return f"guardeval study · {s['study_id']} · {len(report['runs'])} guards on {s['cohort']['name']}"


def _question_value(key: str, value: Any) -> str:
    if value is None:
        return "none"
    return ", ".join(value) if isinstance(value, list) else f"{value:g}" if isinstance(value, float) else str(value)


def question_rows(report: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    launch, now = report["question_at_launch"], report["question"]
    rows = [[label, _question_value(k, launch[k]), _question_value(k, now[k])] for k, label in QUESTION_ROWS]
    return ["", "fixed at launch", "used by this report"], rows


def edit_lines(report: Mapping[str, Any]) -> list[str]:
    return [f"{e['at']}: " + "; ".join(f"{k} {_question_value(k, v['from'])} → {_question_value(k, v['to'])}"
                                       for k, v in e["changes"].items()) + f" (reason: {e['reason']})"
            for e in report["edits"]]


def made_lines(report: Mapping[str, Any]) -> list[str]:
    v = report["made"]["versions"]
    o = report["made"]["options"]
    s = report["study"]
    return [f"guardeval {v['guardeval']}, Python {v['python']}, numpy {v['numpy']}, scipy {v['scipy']}, "
            f"{v['platform']}",
            f"cohort {s['cohort']['name']} (sha256 {s['cohort']['sha256']}); schedule sha256 {s['schedule']['sha256']}: "
            f"{s['schedule']['n_calls']} calls per guard, {s['schedule']['reps']} repetitions, order "
            f"{s['schedule']['order']}, seed {s['schedule']['seed']}; prompt {s['prompt']['id']} "
            f"(sha256 {s['prompt']['sha256']})",
            f"bootstrap {o['n_boot']} paired replicates, seed {o['seed']}; missing calls: {o['missing']}"
            + ("; incomplete runs allowed (--allow-partial)" if o["allow_partial"] else ""),
            *(f"{c['at']}: {' '.join(c['command'])}" for c in report["made"]["commands"])]


def fingerprint_lines(report: Mapping[str, Any]) -> list[str]:
    fp = report["fingerprint"]
    s = report["study"]
    return [f"study fingerprint {fp['token']} (check it later with: guardeval study verify {s['study_dir']} "
            f"--expect {fp['token']})",
            *(f"{label}: run fingerprint {token}" for label, token in fp["runs"].items())]


def markdown(report: Mapping[str, Any]) -> str:
    ans, result = report["answer"], report["compare"]
    failed = CT.excluded_lines(result)   # failed calls are said before the answer (issue 45)
    out = [f"# {title(report)}", "", *(["## Failed calls", "", *(f"- {x}" for x in failed), ""] if failed else []),
           "## The answer", "", ans["lead"], "",
           *(f"- {a['text']}" for a in ans["conditions"]), "", *(f"- {g['text']}" for g in ans["guards"]), "",
           f"_{ans['rule']}._", "", "## Leaderboard", ""]
    for c in result["leaderboard"]:
        out += [f"### {c}", "", md_table(*CT.leaderboard_table(result, c)), ""]
    out += ["## Paired differences", ""]
    for pair in result["pairs"]:
        out += [f"### {CT.pair_title(pair)}", "", "B − A of the placebo-corrected effect:", "",
                md_table(*CT.corrected_table(pair)), "", "B − A of Δ:", "", md_table(*CT.delta_table(pair)), ""]
    out += ["## Ranking stability", "", *(f"- {line.strip()}" for line in CT.stability_lines(result)), "",
            f"- {result['ranking_stability']['rule']}", "", "## The guards", ""]
    out += [f"- [{r['label']}]({r['report']}): {r['summary']} (run {r['run_id']}, fingerprint {r['fingerprint']})"
            for r in report["runs"]]
    out += ["", "## The question", "", md_table(*question_rows(report)), ""]
    edits = edit_lines(report)
    out += ["Edits since launch:", "", *(f"- {e}" for e in edits), ""] if edits else ["No edit since launch.", ""]
    out += ["## Study fingerprint", "", *(f"- {line}" for line in fingerprint_lines(report)), "",
            "## How it was made", "", *(f"- {line}" for line in made_lines(report)), ""]
    return "\n".join(out)


def _svg(fig: Any) -> str:
    return base64.b64encode(figure_bytes(fig, "svg")).decode()


def _ul(lines: list[str], cls: str = "") -> str:
    return f'<ul class="{T.esc(cls)}">' + "".join(f"<li>{T.esc(x)}</li>" for x in lines) + "</ul>"


def html(report: Mapping[str, Any]) -> str:
    ans, result = report["answer"], report["compare"]
    head = title(report)
    state = "complete" if report["complete"] else "INCOMPLETE runs compared (--allow-partial)"
    parts = [f"<header><h1>{T.esc(head)}</h1><p class=\"lead\">{T.esc(state)}; study fingerprint "
             f"{T.esc(report['fingerprint']['token'])}</p></header><main>",
             *([f'<section id="failed"><h2>Failed calls</h2>{_ul(CT.excluded_lines(result))}</section>']
               if CT.excluded_lines(result) else []),
             '<section id="answer"><h2>The answer</h2>', f'<p class="answer-lead">{T.esc(ans["lead"])}</p>',
             "<h3>By intervention</h3>", _ul([a["text"] for a in ans["conditions"]], "answer-conditions"),
             "<h3>By guard</h3>", _ul([g["text"] for g in ans["guards"]], "answer-guards"),
             f'<p class="note">{T.esc(ans["rule"])}.</p></section>']
    parts += ['<section id="leaderboard"><h2>Leaderboard</h2>',
              f'<img class="plot" alt="each guard\'s corrected effect per condition" '
              f'src="data:image/svg+xml;base64,{_svg(leaderboard_figure(result, head))}">']
    for c in result["leaderboard"]:
        parts += [f"<h3>{T.esc(c)}</h3>", T.table(*CT.leaderboard_table(result, c), cls="leaderboard")]
    parts.append("</section>")
    parts.append('<section id="pairs"><h2>Paired differences</h2>')
    for pair in result["pairs"]:
        fig = paired_figure(result, pair, f"{head} · {CT.pair_title(pair)}")
        parts += [f"<h3>{T.esc(CT.pair_title(pair))}</h3>",
                  f'<img class="plot" alt="paired effects of {T.esc(pair["a"])} and {T.esc(pair["b"])}" '
                  f'src="data:image/svg+xml;base64,{_svg(fig)}">',
                  "<p class=\"lead\">B − A of the placebo-corrected effect</p>", T.pair_table(*CT.corrected_table(pair)),
                  "<p class=\"lead\">B − A of Δ</p>", T.pair_table(*CT.delta_table(pair)), _ul(CT.ranking_lines(pair))]
    parts.append("</section>")
    parts += ['<section id="stability"><h2>Ranking stability</h2>',
              _ul([line.strip() for line in CT.stability_lines(result)]),
              f'<p class="note">{T.esc(result["ranking_stability"]["rule"])}</p>',
              f'<p class="note">{T.esc(result["power"]["rule"])}</p></section>']
    guards = "".join(f'<li><a class="run-report" href="{T.esc(r["report"])}">{T.esc(r["label"])}</a>: '
                     f"{T.esc(r['summary'])} <span class=\"tag\">run {T.esc(r['run_id'])} · fingerprint "
                     f"{T.esc(r['fingerprint'])}</span></li>" for r in report["runs"])
    parts += [f'<section id="guards"><h2>The guards</h2><ul class="guards">{guards}</ul></section>']
    edits = edit_lines(report)
    parts += ['<section id="question"><h2>The question</h2>', T.table(*question_rows(report)),
              (_ul(edits, "edits") if edits else '<p class="note">No edit since launch.</p>'), "</section>"]
    parts += ['<section id="fingerprint"><h2>Study fingerprint</h2>', _ul(fingerprint_lines(report)), "</section>",
              '<section id="made"><h2>How it was made</h2>', _ul(made_lines(report)), "</section></main>"]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; img-src data:; "
            "style-src 'unsafe-inline'\">"
            f"<title>{T.esc(head)}</title><style>{_css()}</style></head>"
            f"<body>{''.join(parts)}</body></html>\n")


def _css() -> str:
    from guardeval.view.html import asset

    return asset("report.css")


study_markdown, study_html = markdown, html
