"""compare.md, compare.html and compare.png: two runs of one schedule side by side (the
result of `harness.estimators.compare.compare`), with a paired plot of their effects."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.estimators.compare import ranking_lines
from harness.estimators.formats import interval, md_table, num, pval
from harness.estimators.plot import figure_bytes, paired_figure, save
from harness.view import tables as T
from harness.view.files import write_atomically

HEAD = ["condition", "A Δ", "A 95% CI", "B Δ", "B 95% CI", "B − A", "95% CI", "p", "p_Holm"]


def _rows(result: Mapping[str, Any]) -> list[list[str]]:
    return [[str(r["condition"]), num(r["delta_a"]), interval(r["ci_a"]), num(r["delta_b"]), interval(r["ci_b"]),
             num(r["difference"]), interval(r["ci_difference"]), pval(r["p_difference"]), pval(r["p_holm"])]
            for r in result["conditions"]]


def _who(run: Mapping[str, Any]) -> str:
    g = run.get("guard") or {}
    return f"{g.get('name')} ({g.get('model')}), run {run.get('run_id')}"


def _ranking(result: Mapping[str, Any]) -> list[str]:
    return ranking_lines(result)


def _title(result: Mapping[str, Any]) -> str:
    return f"guardeval compare · A {_who(result['run_a'])} · B {_who(result['run_b'])}"


def markdown(result: Mapping[str, Any]) -> str:
    bs = result["bootstrap"]
    return "\n".join([
        "# guardeval compare", "",
        f"- A: {_who(result['run_a'])}", f"- B: {_who(result['run_b'])}",
        f"- baseline {result['baseline']}; failure rule {result['failure_rule']}; {bs['n']} paired replicates, "
        f"seed {bs['seed']}", "",
        "![paired effects](compare.png)", "",
        md_table(HEAD, _rows(result)), "",
        *(f"- {line}" for line in _ranking(result)), ""])


def html(result: Mapping[str, Any]) -> str:
    svg = base64.b64encode(figure_bytes(paired_figure(result, _title(result)), "svg")).decode()
    body = "".join([
        f"<h1>{T.esc(_title(result))}</h1>",
        f'<dl class="facts"><dt>A</dt><dd>{T.esc(_who(result["run_a"]))}</dd><dt>B</dt>'
        f'<dd>{T.esc(_who(result["run_b"]))}</dd><dt>baseline</dt><dd>{T.esc(result["baseline"])}</dd>'
        f'<dt>failure rule</dt><dd>{T.esc(result["failure_rule"])}</dd></dl>',
        f'<img class="plot" alt="paired effects of the two runs" src="data:image/svg+xml;base64,{svg}">',
        T.table(HEAD, _rows(result)),
        "<ul>" + "".join(f"<li>{T.esc(line)}</li>" for line in _ranking(result)) + "</ul>",
    ])
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; img-src data:; "
            "style-src 'unsafe-inline'\">"
            f"<title>{T.esc(_title(result))}</title><style>{_css()}</style></head>"
            f"<body><main>{body}</main></body></html>\n")


def _css() -> str:
    from harness.view.html import asset

    return asset("report.css")


def write_compare(result: Mapping[str, Any], out_dir: str | Path) -> list[Path]:
    out = Path(out_dir)
    md, page = markdown(result), html(result)
    return [write_atomically(out / "compare.md", lambda tmp: tmp.write_text(md, encoding="utf-8")),
            write_atomically(out / "compare.html", lambda tmp: tmp.write_text(page, encoding="utf-8")),
            write_atomically(out / "compare.png", lambda tmp: save(paired_figure(result, _title(result)), tmp, "png"))]
