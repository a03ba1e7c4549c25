"""guardeval.api: typed records, the CLI's JSON from the same functions, frames only when their
library is installed (issue 23)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path

import pytest

from guardeval import api
from guardeval.view.calls import EXPORT_COLUMNS

from conftest import run_cli

pytestmark = pytest.mark.fast


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("api") / "run"
    result = api.launch("demo", "python-example", reps=1, run_dir=folder)
    assert result.complete and result.statuses == {"ok": 320} and result.stop_reason is None
    result.raise_if_stopped()   # nothing stopped it
    return folder


def test_public_names_are_documented() -> None:
    assert sorted(api.__all__) == sorted(set(api.__all__))
    for name in api.__all__:
        assert getattr(api, name).__doc__, name
    page = (Path(__file__).resolve().parent.parent / "docs" / "reference" / "api.md").read_text()
    section = page[:page.index("## The functions and records")]
    functions = [n for n in api.__all__ if n[0].islower()]
    assert [n for n in functions if f"`{n}(" not in section] == []


def test_plan_writes_nothing_and_is_typed(tmp_path: Path) -> None:
    p = api.plan_launch("demo", "python-example", reps=3, run_dir=tmp_path / "x")
    assert isinstance(p, api.LaunchPlan) and p.n_calls == 960 and p.bases == 64 and len(p.conditions) == 5
    assert p.backend == "python" and len(p.schedule_sha256) == 64 and p.projection.calls == 960
    assert not (tmp_path / "x").exists()
    assert json.loads(json.dumps(p.to_dict()))["run_dir"] == str(tmp_path / "x")


@pytest.mark.slow
def test_status_and_verify_are_what_the_cli_prints(run: Path) -> None:
    st = api.status(run)
    assert isinstance(st, api.RunStatus) and st.state == "complete" and st.decided == 320
    cli = run_cli("status", str(run), "--json")
    assert cli.code == 0 and json.loads(cli.out) == st.to_dict()
    rep = api.verify(run)
    assert rep.ok and rep.problems == [] and rep.n_decisions == 320
    cli = run_cli("verify", str(run), "--json")
    assert cli.code == 0 and json.loads(cli.out) == rep.to_dict()


def test_estimate_and_calls_are_records(run: Path) -> None:
    est = api.estimate(run, n_boot=300, write=False)
    assert isinstance(est, api.Estimate) and est.verified and est.n_calls == 320 and est.publishable
    alias = est.effect("tool_alias")
    assert isinstance(alias, api.Effect) and alias.delta is not None and alias.delta < 0 and alias.ci is not None
    assert est.effect("format_placebo").delta == 0
    with pytest.raises(KeyError):
        est.effect("nope")
    rows = api.calls(run)
    assert [f.name for f in dataclasses.fields(api.CallRecord)] == list(EXPORT_COLUMNS)
    assert len(rows) == 320 and all(isinstance(r, api.CallRecord) and r.status == "ok" for r in rows)
    blocked = sum(r.decision == 1 for r in rows)
    assert blocked == round(est.report["block_rate"]["original"] * 64 + sum(
        est.report["block_rate"][c] * 64 for c in ("format_placebo", "marker_rewrite", "tool_alias", "combined")))


@pytest.mark.parametrize("library", ["pandas", "polars"])
def test_calls_frame(run: Path, library: str) -> None:
    if importlib.util.find_spec(library) is None:
        with pytest.raises(api.InputError, match=f"needs {library}, which guardeval does not install: "
                                                 f"pip install {library}"):
            api.calls_frame(run, library)
        return
    frame = api.calls_frame(run, library)
    assert list(frame.columns) == list(EXPORT_COLUMNS) and len(frame) == 320


def test_guard_configs_in_code_are_checked_like_files() -> None:
    with pytest.raises(api.InputError, match="guard.timeout_s"):
        api.python_guard("g", "keyword_guard:guard", timeout_s=-1)
    with pytest.raises(api.InputError, match="guard.callable.*dunder"):
        api.python_guard("g", "os:__dict__")
    with pytest.raises(api.InputError, match="field 'callable'.*cannot import module 'no_such_mod_q'"):
        api.plan_launch("demo", api.python_guard("g", "no_such_mod_q:guard"))
    cfg = api.python_guard("g", "keyword_guard:guard", concurrency=2)
    assert cfg.backend == "python" and cfg.concurrency == 2 and cfg.model == "keyword_guard:guard"


def test_a_stopped_run_raises_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pg_api_fatal.py").write_text(
        "from guardeval.backends.errors import FatalError\n"
        "def guard(inp):\n    raise FatalError('quota', 'no more quota today')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    result = api.launch("demo", api.python_guard("f", "pg_api_fatal:guard"), reps=1, run_dir=tmp_path / "r")
    assert result.stop_reason == "fatal" and "no more quota today" in (result.fatal_message or "")
    with pytest.raises(api.RunStopped, match="no more quota today"):
        result.raise_if_stopped()
    assert api.status(tmp_path / "r").state == "stopped"


@pytest.mark.slow
def test_compare_takes_two_or_more_runs(run: Path, tmp_path: Path) -> None:
    other = api.replicate(run, api.python_guard("other", "keyword_guard:guard"), run_dir=tmp_path / "b")
    third = api.replicate(run, "python-example", run_dir=tmp_path / "c")
    with pytest.raises(api.InputError, match="at least two runs"):
        api.compare(run)
    cmp = api.compare(run, other.run_dir, third.run_dir, labels=["a", "b", "c"], n_boot=200, write=False)
    assert isinstance(cmp, api.Comparison) and cmp.labels == ["a", "b", "c"] and len(cmp.runs) == 3
    assert cmp.written == [] and cmp.complete and all(c["checked"] for c in cmp.checks)
    # The same function of the same code: every paired difference is zero.
    assert {d.condition for d in cmp.conditions} >= {"tool_alias"} and all(d.difference == 0 for d in cmp.conditions)
    assert len(cmp.result["pairs"]) == 3
