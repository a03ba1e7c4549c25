"""`guardeval demo`: the whole path, no network, the estimate JSON on stdout."""

from __future__ import annotations

import json

from conftest import run_cli


def test_demo_json(demo_run):
    run, r = demo_run.run, demo_run.result
    assert r.code == 0, r.err
    est = json.loads(r.out)  # stdout carries only the JSON
    assert est["n_calls"] == 960 and est["n_bases"] == 64
    assert est["baseline"] == "original" and est["placebo"] == "format_placebo"
    by = {c["condition"]: c for c in est["contrasts"]}
    assert set(by) == {"format_placebo", "marker_rewrite", "tool_alias", "combined"}
    for c in by.values():
        lo, hi = c["ci"]
        assert lo <= c["delta"] <= hi and -1 <= lo and hi <= 1
    # The simulated guard leans on threat-worded tool names; the placebo changes nothing that matters.
    assert by["tool_alias"]["ci"][1] < 0
    assert by["format_placebo"]["ci"][0] < 0 < by["format_placebo"]["ci"][1]
    assert by["format_placebo"]["delta_minus_placebo"] is None
    assert by["tool_alias"]["delta_minus_placebo"] is not None
    assert est["quarantine"]["count"] == 0
    for name in ("report.json", "report.md", "effects.png", "report.html", "raw.jsonl", "decisions.jsonl"):
        assert (run / name).is_file()
    # The demo ends by saying where report.html is.
    assert r.err.rstrip().splitlines()[-1] == f"demo: report: {(run / 'report.html').resolve()} (one self-contained " \
                                               "file: open it in a browser)"
    assert run_cli("verify", str(run)).code == 0
