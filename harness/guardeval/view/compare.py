"""compare.md, compare.html, compare.png (and leaderboard.png with three or more inputs): guards
on one schedule side by side (the result of `guardeval.estimators.compare.compare.compare_inputs`)."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from guardeval.estimators.compare import compare_text as CT
from guardeval.estimators.compare.compare_plot import leaderboard_figure, paired_figure
from guardeval.estimators.report.formats import level, md_table
from guardeval.estimators.report.plot import figure_bytes, save
from guardeval.run.folder.folder import RunFolder, write_into
from guardeval.run.folder.layout import COMPARE_HTML, COMPARE_MD, COMPARE_PNG, LEADERBOARD_PNG
from guardeval.view import tables as T


def _title(result: Mapping[str, Any]) -> str:
    return "guardeval compare · " + " · ".join(CT.input_lines(result))


def _pair_title(result: Mapping[str, Any], pair: Mapping[str, Any]) -> str:
    who = {i["label"]: i for i in result["inputs"]}
    return f"guardeval compare · A {CT.who(who[pair['a']])} · B {CT.who(who[pair['b']])}"


def markdown(result: Mapping[str, Any]) -> str:
    said, lv = CT.words(result), level(result)
    first = CT.up_front(result)
    out = ["# guardeval compare", "", *(f"> {line}" for line in first), *([""] if first else []),
           *(f"- {line}" for line in CT.input_lines(result)),
           f"- {CT.method_line(result)}", *(f"- {line}" for line in CT.decision_lines(result)), ""]
    if said:
        out += ["## In words", "", *(f"- {x}" for x in said), ""]
    out += ["![paired effects](compare.png)", ""]
    for pair in result["pairs"]:
        out += [f"## {CT.pair_title(pair)}", "", "Headline: B − A of the placebo-corrected effect.", "",
                md_table(*CT.corrected_table(pair, lv)), "", "B − A of Δ:", "", md_table(*CT.delta_table(pair, lv)), "",
                CT.TABLE_TERMS + ".", "", *(f"- {line}" for line in CT.ranking_lines(pair, result)), ""]
    out += ["## Leaderboard", ""]
    if len(result["inputs"]) > 2:
        out += ["![each guard's corrected effect per condition](leaderboard.png)", ""]
    for c in result["leaderboard"]:
        out += [f"### {c}", "", md_table(*CT.leaderboard_table(result, c)), ""]
    out += [CT.LEADERBOARD_TERMS + ".", "", "## Ranking stability", "",
            *(f"- {line.strip()}" for line in CT.stability_lines(result)), "",
            f"- {result['ranking_stability']['rule']}", f"- {result['power']['rule']}", ""]
    return "\n".join(out)


def _svg(fig: Any) -> str:
    return base64.b64encode(figure_bytes(fig, "svg")).decode()


def _heading(result: Mapping[str, Any]) -> str:
    """A short page title (the inputs are listed under it, one per line)."""
    labels = [str(i["label"]) for i in result["inputs"]]
    return "guardeval compare · " + (" vs ".join(labels) if len(labels) <= 3 else f"{len(labels)} guards")


def html(result: Mapping[str, Any]) -> str:
    said, lv = CT.words(result), level(result)
    parts = [f"<h1>{T.esc(_heading(result))}</h1>",
             *(f'<p class="note"><strong>{T.esc(x)}</strong></p>' for x in CT.up_front(result)),
             "<ul>" + "".join(f"<li>{T.esc(x)}</li>" for x in [*CT.input_lines(result), CT.method_line(result)])
             + "</ul>"]
    if said:
        parts += ["<h2>In words</h2><ul class=\"words\">" + "".join(f"<li>{T.esc(x)}</li>" for x in said) + "</ul>"]
    parts += [f'<p class="note">{T.esc(x)}</p>' for x in CT.decision_lines(result)]
    for pair in result["pairs"]:
        # The page lists the inputs above; its figures say only which guard is A and which B
        # (compare.png, a file of its own, keeps the inputs in its title).
        fig = paired_figure(result, pair, CT.pair_title(pair))
        parts += [f"<h2>{T.esc(CT.pair_title(pair))}</h2>",
                  f'<img class="plot" alt="paired effects of {T.esc(pair["a"])} and {T.esc(pair["b"])}" '
                  f'src="data:image/svg+xml;base64,{_svg(fig)}">',
                  "<p class=\"lead\">Headline: B − A of the placebo-corrected effect.</p>",
                  T.pair_table(*CT.corrected_table(pair, lv)), "<p>B − A of Δ</p>", T.pair_table(*CT.delta_table(pair, lv)),
                  f'<p class="note">{T.esc(CT.TABLE_TERMS)}.</p>',
                  "<ul>" + "".join(f"<li>{T.esc(line)}</li>" for line in CT.ranking_lines(pair, result)) + "</ul>"]
    parts += ["<h2>Leaderboard</h2>",
              f'<img class="plot" alt="each guard\'s corrected effect per condition" '
              f'src="data:image/svg+xml;base64,{_svg(leaderboard_figure(result, _heading(result)))}">']
    for c in result["leaderboard"]:
        parts += [f"<h3>{T.esc(c)}</h3>", T.table(*CT.leaderboard_table(result, c), cls="leaderboard")]
    parts += [f'<p class="note">{T.esc(CT.LEADERBOARD_TERMS)}.</p>', "<h2>Ranking stability</h2>",
              "<ul>" + "".join(f"<li>{T.esc(line.strip())}</li>" for line in CT.stability_lines(result)) + "</ul>",
              f'<p class="note">{T.esc(result["ranking_stability"]["rule"])}</p>',
              f'<p class="note">{T.esc(result["power"]["rule"])}</p>']
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; img-src data:; "
            "style-src 'unsafe-inline'\">"
            f"<title>{T.esc(_heading(result))}</title><style>{_css()}</style></head>"
            f"<body><main>{''.join(parts)}</main></body></html>\n")


def _css() -> str:
    from guardeval.view.html import asset

    return asset("report.css")


def write_compare(result: Mapping[str, Any], out: Path | RunFolder) -> list[Path]:
    """compare.md, compare.html, compare.png (and leaderboard.png for three inputs or more) into
    `out`: the second run's folder (replaced, never through a link) or the `--out` folder."""
    md, page = markdown(result).encode("utf-8"), html(result).encode("utf-8")
    first = result["pairs"][0]
    written = [write_into(out, COMPARE_MD, lambda fh: fh.write(md)),
               write_into(out, COMPARE_HTML, lambda fh: fh.write(page)),
               write_into(out, COMPARE_PNG,
                          lambda fh: save(paired_figure(result, first, _pair_title(result, first)), fh, "png"))]
    if len(result["inputs"]) > 2:
        written.append(write_into(out, LEADERBOARD_PNG,
                                  lambda fh: save(leaderboard_figure(result, _title(result)), fh, "png")))
    return written
