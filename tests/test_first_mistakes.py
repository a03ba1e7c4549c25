"""The first mistakes a user makes, and the answers they get: a missing key, a server that is
not there, a mistyped flag; what `status`, `--help`, `--json`, `--dry-run` and the progress line say."""

from __future__ import annotations

import argparse
import io
import json
import re
import socket
from pathlib import Path

import pytest

from guardeval.cli import main
from guardeval.cli.app import build_parser

from conftest import run_cli, write_guard

pytestmark = pytest.mark.fast

REMOTE = "https://guard.example.invalid/api/v1"   # never contacted: the refusal comes first


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# -- a missing API key ---------------------------------------------------------------------------

@pytest.mark.slow
def test_missing_key_is_refused_before_anything_is_written(tmp_path, small_cohort):
    guard = write_guard(tmp_path / "g.toml", REMOTE, api_key_env="GUARDEVAL_UNSET_TEST_KEY")
    run = tmp_path / "run"
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--run-dir", str(run))
    assert r.code == 2 and "Traceback" not in r.err
    assert "GUARDEVAL_UNSET_TEST_KEY is not set" in r.err and str(guard) in r.err
    assert not run.exists()
    # --dry-run says so, and writes nothing either.
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--run-dir", str(run), "--dry-run",
                "--no-preflight")
    assert r.code == 0 and "key: GUARDEVAL_UNSET_TEST_KEY is NOT SET" in r.out
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--dry-run", "--json",
                "--no-preflight", env={"GUARDEVAL_UNSET_TEST_KEY": "sk-test-value"})
    plan = json.loads(r.out)
    assert r.code == 0 and plan["key"] == {"variable": "GUARDEVAL_UNSET_TEST_KEY", "set": True, "needed": True}
    assert "sk-test-value" not in r.out + r.err
    assert not run.exists()


@pytest.mark.slow
def test_a_local_server_needs_no_key_and_resume_elsewhere_does(tmp_path, small_cohort, sim):
    guard = write_guard(tmp_path / "g.toml", sim.base_url, api_key_env="GUARDEVAL_UNSET_TEST_KEY")
    run = tmp_path / "run"
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--reps", "1", "--run-dir", str(run),
                "--max-calls", "5", "--no-progress")
    assert r.code == 0, r.err
    events = (run / "events.jsonl").read_bytes()
    # Resumed against a remote address, the same run needs the key: refused, nothing appended.
    r = run_cli("resume", str(run), "--base-url", REMOTE)
    assert r.code == 2 and "GUARDEVAL_UNSET_TEST_KEY is not set" in r.err
    assert (run / "events.jsonl").read_bytes() == events


# -- a server that is not there --------------------------------------------------------------------

def test_connection_refused_names_the_url(tmp_path, small_cohort):
    with socket.socket() as s:   # a port nothing listens on once this socket is closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    guard = write_guard(tmp_path / "g.toml", url, max_attempts=1)
    run = tmp_path / "run"
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--reps", "1", "--run-dir", str(run),
                "--max-calls", "2", "--no-progress", "--no-preflight")   # the dispatcher's own answer
    assert r.code == 0, r.err
    raw = _jsonl(run / "raw.jsonl")
    assert {(rec["error_class"], rec["error"]) for rec in raw} == {
        ("connection", f"connection refused at {url}/chat/completions")}


# -- status, the final line, --json ------------------------------------------------------------------

@pytest.mark.slow
def test_status_resume_and_json_speak_for_the_whole_run(tmp_path, small_cohort, sim):
    guard = write_guard(tmp_path / "g.toml", sim.base_url)
    run = tmp_path / "run"
    r = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--reps", "1", "--run-dir", str(run),
                "--max-calls", "20", "--no-progress", "--json")
    assert r.code == 0, r.err
    first = json.loads(r.out)   # stdout carries only the JSON
    assert (first["decided"], first["total"], first["complete"]) == (20, 80, False)
    st = run_cli("status", str(run))
    assert st.code == 0 and "{" not in st.out and "20/80 calls decided, 60 pending" in st.out
    assert "state: stopped" in st.out and "(simulated provider: not billed)" in st.out
    r = run_cli("resume", str(run), "--no-progress")
    assert r.code == 0, r.err
    # The final line counts the whole run, and says what this session added.
    m = re.fullmatch(r"(\S+): 80/80 calls decided: (.+) \(60 in this session\)\nanswered by: shortcut\n", r.out)
    assert m and m[1] == str(run), r.out
    counts = dict(item.rsplit(" ", 1) for item in m[2].split(", "))
    assert sum(int(v) for v in counts.values()) == 80
    st = json.loads(run_cli("status", str(run), "--json").out)
    assert st["state"] == "complete" and st["running"] is False and st["spend_simulated"] is True
    assert {k: str(v) for k, v in st["statuses"].items()} == counts
    # replicate --json: the outcome of the new run.
    r = run_cli("replicate", str(run), "--guard", str(guard), "--run-dir", str(tmp_path / "rep"), "--no-progress",
                "--json")
    assert r.code == 0, r.err
    rep = json.loads(r.out)
    assert rep["run_dir"] == str(tmp_path / "rep") and rep["complete"] and rep["session"]["decided"] == 80


@pytest.mark.slow
def test_dry_run_projects_a_pilot(tmp_path, small_cohort):
    guard = write_guard(tmp_path / "g.toml", "http://127.0.0.1:9")
    whole = json.loads(run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--dry-run",
                               "--json", "--no-preflight").out)
    pilot = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--dry-run", "--json",
                    "--max-calls", "20", "--no-preflight")
    proj = json.loads(pilot.out)["projection"]
    assert whole["n_calls"] == 240 and whole["projection"]["calls"] == 240 and proj["calls"] == 20
    share = whole["projection"]["prompt_tokens_est"] * 20 / 240   # the first 20 calls: about their share
    assert share / 2 < proj["prompt_tokens_est"] < share * 2
    assert proj["max_output_tokens"] == 20 * 256
    text = run_cli("launch", "--cohort", str(small_cohort), "--guard", str(guard), "--dry-run", "--max-calls", "20",
                   "--no-preflight")
    assert "projection for 20 calls (the first 20, --max-calls)" in text.out
    assert "(simulated provider: not billed)" in text.out


# -- the command line ----------------------------------------------------------------------------------

def _actions(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _actions(sub, (*path, name))
        elif not isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            yield path, action


def test_every_option_and_argument_has_help():
    missing = [(" ".join(path), action.dest) for path, action in _actions(build_parser()) if not action.help]
    assert missing == []


def test_help_says_defaults_and_json_one_way():
    # One wording across commands: "(default: X)", and `--json` as "print ... as JSON on stdout";
    # an option that takes a value and has a default says it.
    from guardeval.cli.app import _HelpFormatter

    odd, silent, json_help = [], [], []
    for path, action in _actions(build_parser()):
        where = f"{' '.join(path)} {'/'.join(action.option_strings) or action.dest}"
        text = _HelpFormatter("guardeval")._expand_help(action)     # the help as printed
        if re.search(r"\(default [^:]|; default |default \d", text):
            odd.append((where, text))
        if (action.option_strings and action.nargs != 0 and action.default not in (None, False, "")
                and "default" not in text):
            silent.append(where)
        if "--json" in action.option_strings and not re.fullmatch(r"print .* as JSON on stdout.*", text):
            json_help.append((where, text))
    assert (odd, silent, json_help) == ([], [], [])


@pytest.mark.parametrize("argv,needles", [
    (["launch"], ["--reps REPS", "(default: 3)", "(default: 0)", "(default: rounds)"]),
    (["demo"], ["--run-dir", "default: runs/<run-id>/", "--json", "--no-progress"]),
    (["resume"], ["RUN ", "run folder"]),
])
def test_help_shows_defaults(argv, needles, capsys):
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert exc.value.code == 0 and all(n in out for n in needles), out


def test_a_mistyped_flag_prints_that_subcommands_usage(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["launch", "--cohort", "c", "--guard", "g", "--reeps", "3"])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert err.startswith("usage: guardeval launch ") and "guardeval launch: error: unrecognized arguments: --reeps 3" in err
    with pytest.raises(SystemExit):
        main(["cohort", "build", "demo", "--out", "x", "--conditons", "a"])
    assert capsys.readouterr().err.startswith("usage: guardeval cohort build demo ")
    # A prefix of a real option is refused too (argparse would take `--rep` for `--reps`).
    with pytest.raises(SystemExit) as exc:
        main(["launch", "--cohort", "c", "--guard", "g", "--rep", "3"])
    assert exc.value.code == 2 and "unrecognized arguments: --rep 3" in capsys.readouterr().err


def test_cohort_build_prints_its_summary_on_stdout(tmp_path, capsys):
    assert main(["cohort", "build", "demo", "--out", str(tmp_path / "demo")]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["cohort"] == str(tmp_path / "demo") and "wrote demo cohort" in err


# -- progress ------------------------------------------------------------------------------------------

class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("total,done,retries,spend", [(960, 450, 12, 0.4312), (1_000_000, 500_123, 123_456, 1234.5678)])
def test_progress_fits_80_columns(monkeypatch, total, done, retries, spend):
    from guardeval.run.dispatch.progress import RunProgress

    monkeypatch.setenv("COLUMNS", "80")
    term = _Terminal()
    with RunProgress(total, done - 100, stream=term, simulated_spend=True) as progress:
        for _ in range(100):
            progress.call_done(failed=False, quarantined=False)
        progress.retries, progress.spend = retries, spend
    lines = [ln for ln in re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "\n", term.getvalue()).replace("\r", "\n").split("\n")
             if ln.strip()]
    last = lines[-1]
    assert all(len(ln) <= 80 for ln in lines), lines
    assert f"{done}/{total} calls" in last and "ETA" in last and f"${spend:.4f} simulated" in last
    plain = io.StringIO()
    with RunProgress(total, done, stream=plain) as progress:
        progress.retries, progress.spend = retries, spend
    [line] = plain.getvalue().splitlines()
    assert len(line) <= 80 and line.startswith(f"progress: {done}/{total} calls") and "ETA" in line
